"""Executors of the per-chunk build stages (decompose, embed T/S): in-process or on a Ray cluster.

Both run the same batch functions (:mod:`.stages`) over the same shards and write the same
Parquet shards, so the index does not depend on where the stages ran. Ray is imported only
by :mod:`.ray_exec`, which the ``ray`` executor loads on demand.
"""

from __future__ import annotations

from .shards import ShardStore
from .stages import ExecutorError

__all__ = ["make_executor", "ExecutorError", "ShardStore", "RAY_INSTALL"]

#: The install command named by the error when Ray is asked for but missing.
RAY_INSTALL = "pip install 'noderag[ray]'"


def make_executor(config, *, log=None):
    """The executor named by ``config.kind`` (an ``ExecutorConfig``); ``ray`` connects to the cluster."""
    if config.kind == "local":
        from .local import LocalExecutor

        return LocalExecutor(config.workers)
    if config.kind == "ray":
        try:
            import ray  # noqa: F401
            import ray.data  # noqa: F401
        except ImportError as exc:
            raise ExecutorError(f"executor 'ray' needs Ray Data, which is not installed ({exc}); "
                                f"install it with: {RAY_INSTALL}") from None
        from .ray_exec import RayExecutor

        return RayExecutor(config, log=log)
    raise ExecutorError(f"executor.kind must be 'local' or 'ray', got {config.kind!r}")
