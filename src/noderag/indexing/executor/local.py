"""The default executor: every shard on this machine, in this process or in a pool of worker processes.

A stage whose batch function is pure CPU work on a spec the workers can rebuild (``nlp``
decomposition, the ``hash`` embedder) runs in up to ``workers`` forked processes when there
is enough of it to repay them (``stage.process_copy()``, ``stage.process_min_rows``).
Each shard's result is the same wherever it ran, and ``sink`` receives the shards in index
order either way, so the index never depends on the worker count. Other stages (an LLM or
an embedder object of the caller, a multi-threaded model) run in-process.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterator

__all__ = ["LocalExecutor", "fork_map"]

#: The batch function of this worker process's stage, opened once by ``_open_in_worker``.
_worker_fn: list = []


def _die_with_parent(parent: int) -> None:
    """Ask Linux to kill this forked worker when the build process dies (a build killed by SIGKILL or
    SIGTERM otherwise leaves its idle workers behind, each waiting forever on a pipe its siblings hold)."""
    import ctypes
    import signal
    import sys

    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the build died before the request took effect
            os._exit(1)


def _open_in_worker(stage, parent: int) -> None:
    _die_with_parent(parent)
    _worker_fn[:] = [stage.open()]


def _run_in_worker(table):
    return _worker_fn[0](table)


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def _keep_shared(shared, parent: int) -> None:
    _die_with_parent(parent)
    _worker_shared[:] = [shared]


def _call_with_shared(fn, *args):
    return fn(_worker_shared[0], *args)


#: What ``fork_map``'s workers inherit (never pickled: fork copies the parent's memory).
_worker_shared: list = []


def fork_map(fn: Callable, batches: list, workers: int | None = None, *, shared: Any = None) -> Iterator:
    """Yield ``fn(*args)`` (``fn(shared, *args)`` when ``shared`` is given) for each of ``batches``, in order,
    computed by up to ``workers`` forked processes (``None``: one per CPU).

    For a driver-side stage that is pure CPU work over independent batches: ``fn`` must be a
    module-level function; ``shared`` (a large read-only structure) reaches the workers by
    fork, not by pickling. With one batch, one worker or no ``fork`` on the platform, it runs
    in-process.
    """
    n = min(int(workers) if workers else (os.cpu_count() or 1), len(batches))
    if n <= 1 or not can_fork():
        for args in batches:
            yield fn(shared, *args) if shared is not None else fn(*args)
        return
    with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("fork"),
                             initializer=_keep_shared, initargs=(shared, os.getpid())) as pool:
        if shared is None:
            yield from pool.map(fn, *zip(*batches))
        else:
            yield from pool.map(_call_with_shared, [fn] * len(batches), *zip(*batches))


class LocalExecutor:
    """Run a stage's batch function over the shards on this machine, handing each result to ``sink`` in order.

    Parameters
    ----------
    workers : int or None
        Worker processes for the stages that can use them (``None``: one per CPU; 1: in-process only).
    """

    name = "local"
    remote = False

    def __init__(self, workers: int | None = None) -> None:
        self.workers = int(workers) if workers else (os.cpu_count() or 1)

    def run_stage(self, stage, shards: dict[int, Any], sink: Callable[[int, Any, dict], None]) -> None:
        """``shards``: shard index -> input table; ``sink(i, table, meta)`` persists shard ``i``."""
        if not shards:
            return
        copy = stage.process_copy() if hasattr(stage, "process_copy") else None
        rows = sum(int(getattr(t, "num_rows", 0)) for t in shards.values())
        n = min(self.workers, len(shards))
        if (copy is not None and n > 1 and rows >= getattr(stage, "process_min_rows", 0)
                and can_fork()):
            self._run_in_processes(copy, shards, sink, n)
            return
        fn = stage.open()
        for i in sorted(shards):
            out, meta = fn(shards[i])
            sink(i, out, meta)

    @staticmethod
    def _run_in_processes(stage, shards: dict[int, Any], sink, n: int) -> None:
        """Shards on ``n`` forked workers.

        Fork, not spawn: a spawned worker re-imports the caller's ``__main__``, which breaks a
        plain script that calls ``build_index`` without an ``if __name__ == "__main__"`` guard.
        A forked worker only runs the stage's pure-Python batch function, and touches no lock
        that another thread of this process could hold.
        """
        order = sorted(shards)
        ahead = 2 * n  # shards in flight: bounds the results waiting in memory
        with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("fork"),
                                 initializer=_open_in_worker, initargs=(stage, os.getpid())) as pool:
            pending = {}
            nxt = 0
            try:
                for i in order:
                    while nxt < len(order) and len(pending) < ahead:
                        pending[order[nxt]] = pool.submit(_run_in_worker, shards[order[nxt]])
                        nxt += 1
                    out, meta = pending.pop(i).result()
                    sink(i, out, meta)
            except BaseException:
                for f in pending.values():
                    f.cancel()
                raise

    def close(self) -> None:
        pass
