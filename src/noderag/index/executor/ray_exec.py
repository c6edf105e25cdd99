"""Ray executor: the stage batch functions as Ray Data ``map_batches`` over actor pools.

The driver turns the pending shards into a dataset (one block per shard, tagged with its
index), an actor pool applies the stage's batch function (the model loads once per actor;
GPUs are requested when the backend needs one) and the driver writes each shard as soon as
all its rows are back. A killed worker is restarted by Ray and its shard re-run; shards
written before a driver failure are reused by the rerun. Imported only for ``--executor ray``.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any, Callable

import ray

from .stages import ExecutorError

__all__ = ["RayExecutor", "connect"]

_SHARD = "__shard"
_ROWS = "__rows"
_META = "__meta"
_CONNECTED: str | None = None  # the address this process's ray.init used


def _check_reachable(address: str, timeout_s: float) -> None:
    """Fail fast (within ``timeout_s``) when ``HOST:PORT`` / ``ray://HOST:PORT`` accepts no connection."""
    hostport = address[len("ray://"):] if address.startswith("ray://") else address
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ExecutorError(f"--ray-address {address!r}: expected auto, HOST:PORT or ray://HOST:PORT")
    t0 = time.monotonic()
    err: Exception | None = None
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=min(2.0, timeout_s)):
                return
        except OSError as exc:
            err = exc
        waited = time.monotonic() - t0
        # a refused connection is retried briefly (a head that is starting), a silent host until the timeout
        if waited >= timeout_s or (isinstance(err, ConnectionRefusedError) and waited >= min(5.0, timeout_s)):
            break
        time.sleep(0.5)
    raise ExecutorError(f"cannot reach the Ray cluster at {address} after {time.monotonic() - t0:.0f} s "
                        f"({err}); start one with `ray start --head` or check --ray-address")


def connect(address: str | None, timeout_s: float = 20.0, env_vars: dict[str, str] | None = None) -> None:
    """``ray.init`` on ``address`` (``None``: a local instance) after a reachability check."""
    global _CONNECTED
    if ray.is_initialized():
        if address == _CONNECTED:
            return
        ray.shutdown()  # another cluster than the one this process is connected to
    if address not in (None, "auto", "local"):
        _check_reachable(address, timeout_s)
    kw: dict[str, Any] = {"ignore_reinit_error": True, "logging_level": "WARNING", "log_to_driver": False,
                          "configure_logging": False}
    if env_vars:
        kw["runtime_env"] = {"env_vars": env_vars}
    try:
        ray.init(address=None if address == "local" else address, **kw)
    except ConnectionError as exc:
        raise ExecutorError(f"cannot connect to the Ray cluster at {address}: {exc}") from None
    _CONNECTED = address


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class _CacheServer:
    """The index's LLM cache (SQLite on the driver's node), shared by every worker."""

    def __init__(self, path: str) -> None:
        from noderag.llm.cache import LLMCache

        self.cache = LLMCache(path)

    def get_many(self, keys):
        return self.cache.get_many(keys)

    def put(self, key, model_id, result) -> None:
        self.cache.put(key, model_id, result)


class _StageWorker:
    """One actor of the pool: opens the stage once, then runs it shard by shard."""

    def __init__(self, stage) -> None:
        self.fn = stage.open()

    def __call__(self, batch):
        import pyarrow as pa
        import pyarrow.compute as pc

        outs = []
        shard_col = batch.column(_SHARD)
        for s in pc.unique(shard_col).to_pylist():
            part = batch.filter(pc.equal(shard_col, s))
            expected = part.column(_ROWS)[0].as_py()
            if part.num_rows != expected:  # never hand a partial shard to the batch function
                raise RuntimeError(f"shard {s}: got {part.num_rows} of {expected} rows in one batch")
            out, meta = self.fn(part.drop_columns([_SHARD, _ROWS]))
            n = out.num_rows
            out = out.append_column(_SHARD, pa.array([s] * n, pa.int64()))
            out = out.append_column(_ROWS, pa.array([n] * n, pa.int64()))
            out = out.append_column(_META, pa.array([json.dumps(meta)] + [None] * (n - 1), pa.string()))
            outs.append(out)
        return pa.concat_tables(outs)


class RayExecutor:
    """Run stages on the Ray cluster at ``config.address`` (``None``: start a local instance)."""

    name = "ray"
    remote = True

    def __init__(self, config, *, log=None) -> None:
        self.config = config
        self.say = log or (lambda msg: None)
        env = {k: v for k, v in os.environ.items() if k.startswith("NODERAG_TEST_")}
        connect(config.address, config.connect_timeout_s, env)
        import ray.data

        import logging
        import warnings

        logging.getLogger("ray.data").setLevel(logging.WARNING)
        with warnings.catch_warnings():  # Ray's own deprecation notices about its own defaults
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx = ray.data.DataContext.get_current()
            ctx.enable_progress_bars = False
            ctx.print_on_execution_start = False
        res = ray.cluster_resources()
        self.cpus = int(res.get("CPU", 1))
        self.gpus = int(res.get("GPU", 0))
        self._cache_actor = None
        self.say(f"ray: connected ({self.cpus} CPUs, {self.gpus} GPUs)")

    def workers(self, num_gpus: float) -> int:
        """Actor-pool size: ``executor.workers`` or one per CPU (per GPU for GPU stages)."""
        if self.config.workers:
            return int(self.config.workers)
        if num_gpus:
            if not self.gpus:
                raise ExecutorError("this stage needs a GPU per worker and the Ray cluster has none")
            return max(1, int(self.gpus // num_gpus))
        return max(1, self.cpus)

    def cache_actor(self, path) -> Any:
        """The actor serving the LLM cache at ``path``, placed on this (the driver's) node."""
        if self._cache_actor is None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            if ray.util.client.ray.is_connected():
                raise ExecutorError("LLM decomposition on Ray needs the driver on a cluster node "
                                    "(--ray-address auto or HOST:PORT, not ray://): the LLM cache is "
                                    "served from the driver's disk")
            node = ray.get_runtime_context().get_node_id()
            self._cache_actor = _CacheServer.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False)).remote(str(path))
        return self._cache_actor

    def run_stage(self, stage, shards: dict[int, Any], sink: Callable[[int, Any, dict], None]) -> None:
        """Apply ``stage`` to ``shards`` (index -> table) on the cluster; ``sink`` each shard as it lands."""
        if not shards:
            return
        import pyarrow as pa
        import ray.data

        tables = []
        for i in sorted(shards):
            t = shards[i]
            tables.append(t.append_column(_SHARD, pa.array([i] * t.num_rows, pa.int64()))
                          .append_column(_ROWS, pa.array([t.num_rows] * t.num_rows, pa.int64())))
        n = min(self.workers(stage.num_gpus), len(tables))
        ds = ray.data.from_arrow(tables)
        ds = ds.map_batches(_StageWorker, fn_constructor_args=(stage,), batch_size=None, batch_format="pyarrow",
                            zero_copy_batch=True, compute=ray.data.ActorPoolStrategy(size=n),  # Ray Data restarts killed actors
                            num_cpus=0 if stage.num_gpus else 1, num_gpus=stage.num_gpus or None)
        got: dict[int, list] = {}
        for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            import pyarrow.compute as pc

            col = batch.column(_SHARD)
            for s in pc.unique(col).to_pylist():
                part = batch.filter(pc.equal(col, s))
                got.setdefault(s, []).append(part)
                have = sum(p.num_rows for p in got[s])
                if have == got[s][0].column(_ROWS)[0].as_py():
                    whole = pa.concat_tables(got.pop(s))
                    metas = [m for m in whole.column(_META).to_pylist() if m is not None]
                    sink(s, whole.drop_columns([_SHARD, _ROWS, _META]), json.loads(metas[0]) if metas else {})
        if got:
            raise ExecutorError(f"Ray returned incomplete shards {sorted(got)}")

    def close(self) -> None:
        if self._cache_actor is not None:
            ray.kill(self._cache_actor)
            self._cache_actor = None
