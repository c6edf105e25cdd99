"""Ray executor: the stage batch functions as Ray Data ``map_batches`` stages on a Ray cluster.

The driver turns the pending shards into a dataset (one block per shard, or per piece of a
shard when the stage's rows are independent), Ray Data applies the stage's batch function and
the driver writes each shard as soon as all its pieces are back. CPU stages run as tasks on
Ray's reused worker processes, each of which opens a stage (loads its model) once and keeps it
for the following batches and datasets; GPU stages run on an actor pool, one model per GPU.
A killed worker's batch is re-run by Ray; shards written before a driver failure are reused
by the rerun. Imported only for ``--executor ray``.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import socket
import time
from collections import OrderedDict
from typing import Any, Callable

import ray

from .stages import ExecutorError

__all__ = ["RayExecutor", "connect"]

_SHARD = "__shard"
_PIECE = "__piece"
_ROWS = "__rows"
_META = "__meta"
_CONNECTED: str | None = None  # the address this process's ray.init used
# how a Ray Client head says it failed to start the per-client server: the start itself failed, or the new
# process exited while the head was still reading its command line (psutil raises ZombieProcess there)
_CLIENT_SERVER_START_FAILED = ("Starting Ray client server failed", "ZombieProcess")
_CLIENT_ATTEMPTS = 3  # tries of a ray:// connection whose head failed to start the client's server


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
    attempt = 0
    while True:
        attempt += 1
        try:
            ray.init(address=None if address == "local" else address, **kw)
            break
        except ConnectionError as exc:
            # a Ray Client head starts one server process per client; on a loaded head that start can fail
            # once and work on the next try (a failed try itself can take a minute there, so the count, not
            # a deadline, bounds the retries)
            transient = str(address).startswith("ray://") and any(m in str(exc) for m in _CLIENT_SERVER_START_FAILED)
            if not transient or attempt >= _CLIENT_ATTEMPTS:
                raise ExecutorError(f"cannot connect to the Ray cluster at {address} "
                                    f"(attempt {attempt}): {exc}") from None
            ray.shutdown()
            time.sleep(2.0 * attempt)
    _CONNECTED = address


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class _CacheServer:
    """The index's LLM cache (SQLite on the driver's node), shared by every worker."""

    def __init__(self, path: str) -> None:
        from ...llm.cache import LLMCache

        self.cache = LLMCache(path)

    def get_many(self, keys):
        return self.cache.get_many(keys)

    def put(self, key, model_id, result) -> None:
        self.cache.put(key, model_id, result)


_OPENED: "OrderedDict[str, Any]" = OrderedDict()  # this worker process's opened stages (spec digest -> fn)
_KEEP_OPENED = 4


def _opened(stage):
    """``stage.open()`` once per worker process and stage spec: Ray reuses its task workers across
    datasets and stages, so a model loads once per worker, as in an actor pool, without the pool's start-up."""
    key = hashlib.blake2b(repr(stage).encode(), digest_size=16).hexdigest()
    fn = _OPENED.get(key)
    if fn is None:
        fn = stage.open()
        _OPENED[key] = fn
        while len(_OPENED) > _KEEP_OPENED:
            _OPENED.popitem(last=False)
    else:
        _OPENED.move_to_end(key)
    return fn


def _apply(fn, batch):
    """Run ``fn`` on every whole piece of ``batch`` (tagged ``__shard``/``__piece``/``__rows``), re-tag its output."""
    import pyarrow as pa
    import pyarrow.compute as pc

    outs = []
    shard_col, piece_col = batch.column(_SHARD), batch.column(_PIECE)
    for s, k in sorted({(a, b) for a, b in zip(shard_col.to_pylist(), piece_col.to_pylist())}):
        part = batch.filter(pc.and_(pc.equal(shard_col, s), pc.equal(piece_col, k)))
        expected = part.column(_ROWS)[0].as_py()
        if part.num_rows != expected:  # never hand a partial piece to the batch function
            raise RuntimeError(f"shard {s} piece {k}: got {part.num_rows} of {expected} rows in one batch")
        out, meta = fn(part.drop_columns([_SHARD, _PIECE, _ROWS]))
        n = out.num_rows
        out = out.append_column(_SHARD, pa.array([s] * n, pa.int64()))
        out = out.append_column(_PIECE, pa.array([k] * n, pa.int64()))
        out = out.append_column(_ROWS, pa.array([n] * n, pa.int64()))
        out = out.append_column(_META, pa.array([json.dumps(meta)] + [None] * (n - 1), pa.string()))
        outs.append(out)
    return pa.concat_tables(outs)


def _run_pieces(batch, stage):
    """Ray Data task function of a CPU stage: the worker process's opened stage over the batch's pieces."""
    return _apply(_opened(stage), batch)


class _StageWorker:
    """One actor of a GPU stage's pool: opens the stage once (the model stays on its GPU), then runs pieces."""

    def __init__(self, stage) -> None:
        self.fn = stage.open()

    def __call__(self, batch):
        return _apply(self.fn, batch)


def _dataset(stage, tables: list, n: int):
    """The stage over ``tables`` (one block each) as a Ray Data dataset on ``n`` workers."""
    import ray.data

    ds = ray.data.from_arrow(tables)
    if stage.num_gpus:
        return ds.map_batches(_StageWorker, fn_constructor_args=(stage,), batch_size=None, batch_format="pyarrow",
                              zero_copy_batch=True, compute=ray.data.ActorPoolStrategy(size=n),
                              num_gpus=stage.num_gpus, num_cpus=0)  # Ray Data restarts killed actors
    return ds.map_batches(_run_pieces, fn_kwargs={"stage": stage}, batch_size=None, batch_format="pyarrow",
                          zero_copy_batch=True, compute=ray.data.TaskPoolStrategy(size=n),
                          num_cpus=1)  # Ray Data retries the task of a worker that died


@ray.remote(num_cpus=0, scheduling_strategy="SPREAD")
def _warm() -> int:
    """Start one of the job's worker processes and import what the stages need; Ray Data's tasks reuse it."""
    import pyarrow.compute  # noqa: F401

    import noderag.embed  # noqa: F401
    import noderag.indexing.decompose.factory  # noqa: F401
    import noderag.indexing.executor.stages  # noqa: F401

    return os.getpid()


@ray.remote(num_cpus=0, max_restarts=0)
class _DatasetRunner:
    """Runs a stage's dataset on the cluster for a Ray Client (``ray://``) driver, which cannot run Ray Data
    itself (its streaming executor needs a core worker); the driver pulls the result batches one by one."""

    def __init__(self, stage, tables: list, n: int) -> None:
        self.it = iter(_dataset(stage, tables, n).iter_batches(batch_size=None, batch_format="pyarrow"))

    def next(self):
        return next(self.it, None)


def _client_batches(stage, tables: list, n: int):
    """Result batches of the stage run by a :class:`_DatasetRunner` (Ray Client drivers)."""
    runner = _DatasetRunner.remote(stage, tables, n)
    try:
        while (batch := ray.get(runner.next.remote())) is not None:
            yield batch
    finally:
        ray.kill(runner)


def _split(table, parts: int) -> list:
    """``table`` in ``parts`` contiguous slices of near-equal size (the first ones one row longer)."""
    n = table.num_rows
    parts = max(1, min(parts, n))
    q, r = divmod(n, parts)
    out, at = [], 0
    for k in range(parts):
        size = q + (1 if k < r else 0)
        out.append(table.slice(at, size))
        at += size
    return out


class RayExecutor:
    """Run stages on the Ray cluster at ``config.address`` (``None``: start a local instance)."""

    name = "ray"
    remote = True

    def __init__(self, config, *, log=None) -> None:
        self.config = config
        self.say = log or (lambda msg: None)
        env = {k: v for k, v in os.environ.items() if k.startswith("NODERAG_TEST_")}
        t0 = time.perf_counter()
        connect(config.address, config.connect_timeout_s, env)
        self.connect_s = time.perf_counter() - t0  # ray.init (0 when this process was already connected)
        res = ray.cluster_resources()
        self.cpus = int(res.get("CPU", 1))
        self.gpus = int(res.get("GPU", 0))
        # start this job's worker processes now, while the driver sets up Ray Data and plans the stage
        self._warm = [_warm.remote() for _ in range(min(self.cpus, int(config.workers or self.cpus)))]
        importlib.import_module("ray.data")  # (an `import ray.data` here would make `ray` local to __init__)

        import logging
        import warnings

        logging.getLogger("ray.data").setLevel(logging.WARNING)
        with warnings.catch_warnings():  # Ray's own deprecation notices about its own defaults
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx = ray.data.DataContext.get_current()
            ctx.enable_progress_bars = False
            ctx.print_on_execution_start = False
        self._cache_actor = None
        self.say(f"ray: connected ({self.cpus} CPUs, {self.gpus} GPUs) in {self.connect_s:.2f} s")

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

    def pieces(self, stage, shards: dict[int, Any], n_workers: int) -> dict[int, list]:
        """Shard index -> its input in pieces. A row-independent stage (``stage.row_independent``) is cut into
        about ``PIECES_PER_WORKER`` pieces per worker over the whole run, so unequal shards (a 1024-row
        shard next to a 343-row one) still keep every worker busy; the driver reassembles each shard in
        order before writing it, so the shards on disk are the local build's."""
        if not getattr(stage, "row_independent", False):
            return {i: [t] for i, t in shards.items()}
        total = sum(t.num_rows for t in shards.values())
        size = max(self.MIN_PIECE_ROWS, math.ceil(total / (n_workers * self.PIECES_PER_WORKER)))
        return {i: _split(t, math.ceil(t.num_rows / size)) for i, t in shards.items()}

    #: pieces per worker when a stage may be split, and the smallest piece worth a task
    PIECES_PER_WORKER = 4
    MIN_PIECE_ROWS = 32

    def run_stage(self, stage, shards: dict[int, Any], sink: Callable[[int, Any, dict], None]) -> None:
        """Apply ``stage`` to ``shards`` (index -> table) on the cluster; ``sink`` each shard as it lands.

        CPU stages run as Ray Data tasks on the cluster's reused worker processes, each holding the
        stages it opened (:func:`_opened`); GPU stages run on an actor pool (one model per GPU). A
        killed worker's task is retried by Ray Data; the driver writes each shard as soon as all its
        pieces are back, so shards finished before a failure stay on disk.
        """
        if not shards:
            return
        import pyarrow as pa
        import ray.data

        n = min(self.workers(stage.num_gpus), sum(t.num_rows > 0 for t in shards.values()) or 1)
        split = self.pieces(stage, shards, n)
        tables = []
        for i in sorted(split):
            for k, t in enumerate(split[i]):
                m = t.num_rows
                tables.append(t.append_column(_SHARD, pa.array([i] * m, pa.int64()))
                              .append_column(_PIECE, pa.array([k] * m, pa.int64()))
                              .append_column(_ROWS, pa.array([m] * m, pa.int64())))
        if ray.util.client.ray.is_connected():  # ray://: Ray Data runs in a cluster-side actor, batches come back
            batches = _client_batches(stage, tables, n)
        else:
            batches = _dataset(stage, tables, n).iter_batches(batch_size=None, batch_format="pyarrow")
        import pyarrow.compute as pc

        got: dict[int, dict[int, list]] = {}  # shard -> piece -> its output tables so far
        done: dict[int, set[int]] = {}  # shard -> its complete pieces
        for batch in batches:
            shard_col, piece_col = batch.column(_SHARD), batch.column(_PIECE)
            for s, k in sorted({(a, b) for a, b in zip(shard_col.to_pylist(), piece_col.to_pylist())}):
                part = batch.filter(pc.and_(pc.equal(shard_col, s), pc.equal(piece_col, k)))
                have = got.setdefault(s, {}).setdefault(k, [])
                have.append(part)
                if sum(p.num_rows for p in have) == part.column(_ROWS)[0].as_py():
                    done.setdefault(s, set()).add(k)
                if len(done.get(s, ())) == len(split[s]):
                    parts = got.pop(s)
                    done.pop(s)
                    whole = pa.concat_tables([t for k in range(len(split[s])) for t in parts[k]])
                    metas = [json.loads(m) for m in whole.column(_META).to_pylist() if m is not None]
                    metas = [m for m in metas if m]
                    if len(metas) > 1:
                        raise ExecutorError(f"shard {s}: {len(metas)} pieces returned metadata; "
                                            "only a stage without metadata may be split")
                    sink(s, whole.drop_columns([_SHARD, _PIECE, _ROWS, _META]).combine_chunks(), metas[0] if metas else {})
        if got:
            raise ExecutorError(f"Ray returned incomplete shards {sorted(got)}")

    def close(self) -> None:
        if self._cache_actor is not None:
            ray.kill(self._cache_actor)
            self._cache_actor = None
