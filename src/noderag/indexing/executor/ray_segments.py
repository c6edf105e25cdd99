"""Ray tasks of a segment-parallel build (:mod:`noderag.indexing.segmented`): one task per part, one CPU each.

The parts are spread over the cluster's nodes; each task writes its part's index (or segment) to the shared
folder the driver gave it, and returns only its sizes, so the driver holds no part's data.
"""

from __future__ import annotations

from typing import Callable

import ray

from .ray_exec import connect
from .stages import ExecutorError

__all__ = ["ray_runner"]


def ray_runner(executor, say: Callable[[str], None]):
    """A runner ``run(fn, calls) -> results`` that calls ``fn(*args)`` for each of ``calls`` as a Ray task on the
    cluster of ``executor`` (an ExecutorConfig), results in the order of ``calls``."""
    connect(executor.address, executor.connect_timeout_s)
    cpus = int(ray.cluster_resources().get("CPU", 0))
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    say(f"ray: segments on {nodes} nodes, {cpus} CPUs")

    def run(fn, calls: list[tuple]) -> list:
        remote = ray.remote(num_cpus=1, max_retries=2, scheduling_strategy="SPREAD")(fn)
        refs = [remote.remote(*args) for args in calls]
        try:
            return ray.get(refs)
        except ray.exceptions.RayTaskError as exc:
            raise ExecutorError(f"a segment task failed: {exc}"[:2000]) from None

    return run
