"""The per-chunk stage batch functions (Arrow record batch in, Arrow table out) and their stage specs.

A stage spec is a plain dataclass that a worker turns into a batch function once (``open``):
that is where a model loads, once per worker. The local executor passes live objects (the
caller's LLM backend or embedder); a Ray worker builds its own from the spec strings.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from ..decompose.base import ChunkDecomposition, ChunkInput
from ...errors import BuildError

__all__ = ["ExecutorError", "DecomposeStage", "EmbedStage", "decompose_batch", "embed_batch",
           "chunk_table", "text_table", "records_of", "vectors_of"]

#: A worker's batch function: shard table -> (result table, metadata such as a token-ledger delta).
BatchFn = Callable[[Any], "tuple[Any, dict[str, Any]]"]


class ExecutorError(BuildError):
    """The executor cannot run the stage (missing extra, unreachable cluster, unsupported backend)."""


# ----------------------------------------------------------------------------- tables

def chunk_table(rows: list[tuple]):
    """The chunk table of a decompose shard: ``chunk_id`` int64, ``text``, ``title`` (nullable) and, when the
    rows carry a fourth item, ``source`` (the passage id; the workers then plan the chunks' assembly)."""
    import pyarrow as pa

    cols = {"chunk_id": pa.array([r[0] for r in rows], pa.int64()),
            "text": pa.array([r[1] for r in rows], pa.string()),
            "title": pa.array([r[2] for r in rows], pa.string())}
    if rows and len(rows[0]) > 3:
        cols["source"] = pa.array([r[3] for r in rows], pa.string())
    return pa.table(cols)


def text_table(rows: np.ndarray, texts: list[str]):
    """The input of an embed shard: ``row`` (position in the stage's text list) and ``text``."""
    import pyarrow as pa

    return pa.table({"row": pa.array(np.asarray(rows, dtype=np.int64)), "text": pa.array(texts, pa.string())})


def decompose_batch(batch, decomposer):
    """Decompose one shard of the chunk table; returns ``chunk_id`` + ``record`` (journal JSON) per chunk and,
    when the shard names each chunk's ``source``, the chunks' assembly plans (``assembly_plan.PLAN_COLUMNS``;
    the records as the main process reads them back, a failed chunk's without units)."""
    import pyarrow as pa

    ids = batch.column("chunk_id").to_pylist()
    texts = batch.column("text").to_pylist()
    inp = [ChunkInput(int(c), t, ti) for c, t, ti in zip(ids, texts, batch.column("title").to_pylist())]
    out = decomposer.decompose(inp)
    if [r.chunk_id for r in out] != ids:
        raise RuntimeError(f"decomposer {getattr(decomposer, 'name', decomposer)!r} returned records out of order")
    cols = {"chunk_id": pa.array(ids, pa.int64()), "record": pa.array([r.to_json() for r in out])}
    if "source" in batch.column_names:
        from ..assembly_plan import plan_chunks, plan_columns

        recorded = [ChunkDecomposition(r.chunk_id, [] if r.error is not None else r.recorded_units()) for r in out]
        cols.update(plan_columns(plan_chunks(batch.column("source").to_pylist(), texts, recorded)))
    return pa.table(cols)


def embed_batch(batch, embedder, dtype: str = "float32"):
    """Embed one shard of texts in one ``embed`` call (the batch is the local build's batch: same vectors).

    ``dtype``: the vectors' type in the result (``float16`` where the build keeps float16 vectors: the
    same rounding the build would do, on half the bytes to send, write and read back)."""
    import pyarrow as pa

    texts = batch.column("text").to_pylist()
    dim = int(embedder.dim)
    vec = np.ascontiguousarray(np.asarray(embedder.embed(texts), dtype=np.float32))
    if vec.shape != (len(texts), dim):
        raise ValueError(f"embedder {getattr(embedder, 'name', embedder)!r} returned shape {vec.shape}, "
                         f"expected ({len(texts)}, {dim})")
    flat = pa.array(vec.reshape(-1).astype(np.dtype(dtype), copy=False))
    return pa.table({"row": batch.column("row"), "vector": pa.FixedSizeListArray.from_arrays(flat, dim)})


def records_of(table) -> list[ChunkDecomposition]:
    """Decomposition records of a decompose result table."""
    return [ChunkDecomposition.from_obj(json.loads(s)) for s in table.column("record").to_pylist()]


def vectors_of(table, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, vectors: float32 or float16 as stored) of an embed result table."""
    col = table.column("vector").combine_chunks()
    vec = np.asarray(col.values.to_numpy(zero_copy_only=False)).reshape(-1, dim)
    return table.column("row").to_numpy(), vec


def _test_delay() -> None:
    """Fault-injection hook of the Ray tests: sleep ``NODERAG_TEST_SHARD_DELAY_S`` seconds per shard."""
    d = os.environ.get("NODERAG_TEST_SHARD_DELAY_S")
    if d:
        time.sleep(float(d))


# ----------------------------------------------------------------------------- stage specs

@dataclass
class DecomposeStage:
    """Decompose shards with ``config`` (a DecomposeConfig); an LLM from ``backend`` or ``llm_spec``."""

    config: Any
    seed: int = 0
    llm_spec: str | None = None
    llm_options: dict[str, Any] = field(default_factory=dict)
    backend: Any = None  # live backend (local executor only)
    cache: Any = None  # Ray actor handle serving the index's LLM cache (Ray only)
    name: str = "decompose"

    @property
    def uses_llm(self) -> bool:
        return self.config.method == "llm"

    @property
    def num_gpus(self) -> float:
        """GPUs per worker: an in-process GPU backend (vllm) needs one."""
        if not self.uses_llm or not self.llm_spec:
            return 0.0
        return 1.0 if self.llm_spec.split(":", 1)[0].lower() == "vllm" else 0.0

    def remote(self, cache=None, llm_options: dict[str, Any] | None = None) -> "DecomposeStage":
        """A copy for Ray workers: no live objects, the LLM built from its spec behind ``cache``."""
        if self.uses_llm and not self.llm_spec:
            raise ExecutorError("LLM decomposition on Ray needs an LLM spec string (workers build their own "
                                "backend): pass --llm SPEC / llm='openai:...', not a backend object")
        return replace(self, backend=None, cache=cache,
                       llm_options=dict(self.llm_options if llm_options is None else llm_options))

    #: Chunks below which worker processes cost more than they save.
    process_min_rows = 2048

    def process_copy(self) -> "DecomposeStage | None":
        """A copy for the local executor's worker processes: rule-based decomposition only (an LLM stays here)."""
        return None if self.uses_llm else replace(self, backend=None, cache=None)

    def open(self) -> BatchFn:
        from ..decompose.factory import make_decomposer

        backend = self.backend
        if self.uses_llm and backend is None:
            from ...llm import CachedBackend, make_llm

            backend = make_llm(self.llm_spec, **self.llm_options)
            if self.cache is not None:
                backend = CachedBackend(backend, RemoteCache(self.cache))
        decomposer = make_decomposer(self.config, backend, self.seed)
        ledger = getattr(backend, "ledger", None)
        remote = self.backend is None

        def run(batch):
            _test_delay()
            before = ledger.to_dict() if (ledger is not None and remote) else None
            out = decompose_batch(batch, decomposer)
            meta = {"ledger": _ledger_delta(before, ledger.to_dict())} if before is not None else {}
            return out, meta

        return run


@dataclass
class EmbedStage:
    """Embed shards of texts with the embedder ``spec`` (or the live ``embedder`` locally)."""

    spec: str
    options: dict[str, Any] = field(default_factory=dict)
    embedder: Any = None  # live embedder (local executor only)
    name: str = "embed"
    embedder_given: bool = False  # the caller passed the embedder object: workers cannot rebuild it
    dtype: str = "float32"  # of the vectors sent back (float16: the build's vectors are float16)

    #: Texts below which worker processes cost more than they save.
    process_min_rows = 16384

    def process_copy(self) -> "EmbedStage | None":
        """A copy for the local executor's worker processes: the single-threaded ``hash`` embedder only
        (a model embedder already uses every core, and would load once per worker)."""
        if self.embedder_given or self.spec.split(":", 1)[0].lower() != "hash":
            return None
        return replace(self, embedder=None)

    @property
    def row_independent(self) -> bool:
        """True when a text's vector does not depend on the other texts of its call, so an executor may
        split a shard: the hashing embedder, and the ONNX embedders at their default batch size of 1."""
        kind = self.spec.split(":", 1)[0].lower()
        return kind == "hash" or (kind in ("default", "minilm", "onnx") and int(self.options.get("batch_size", 1)) == 1)

    @property
    def num_gpus(self) -> float:
        """GPUs per worker: the in-process vllm embedder, or a model placed on ``device = cuda...``."""
        kind = self.spec.split(":", 1)[0].lower()
        return 1.0 if kind == "vllm" or str(self.options.get("device", "")).startswith("cuda") else 0.0

    def remote(self, embedder_given: bool = False, cpus: int = 1) -> "EmbedStage":
        """A copy for Ray workers; an ONNX embedder runs ``cpus`` threads (the CPUs Ray gave the worker)."""
        if embedder_given:
            raise ExecutorError("embedding on Ray needs an embedder spec (embed.spec / --embed SPEC): workers "
                                "build their own embedder; a live embedder object cannot be shipped")
        opts = dict(self.options)
        if self.spec.split(":", 1)[0].lower() in ("default", "onnx") and "n_threads" not in opts:
            opts["n_threads"] = int(cpus)  # thread count never changes the vectors, only the speed
        return replace(self, embedder=None, options=opts)

    def open(self) -> BatchFn:
        emb = self.embedder
        if emb is None:
            from ...embed import make_embedder

            emb = make_embedder(self.spec, **self.options)

        def run(batch):
            _test_delay()
            return embed_batch(batch, emb, self.dtype), {}

        return run


def _ledger_delta(before: dict, after: dict) -> dict:
    """Counters of ``after`` minus ``before`` (stage -> counter -> value), the stages that changed."""
    out = {}
    for stage, st in after.items():
        b = before.get(stage, {})
        d = {k: (v or b.get(k, False)) if isinstance(v, bool) else v - b.get(k, 0) for k, v in st.items()}
        if any(v for k, v in d.items() if not isinstance(v, bool)):
            out[stage] = d
    return out


class RemoteCache:
    """``LLMCache`` interface over a Ray actor that serves the index's cache from the driver's node.

    Every put is committed by the actor before it returns, so a worker killed mid-shard loses
    no finished call, and the retried shard finds it.
    """

    def __init__(self, actor) -> None:
        self.actor = actor

    def get(self, key: str):
        return self.get_many([key]).get(key)

    def get_many(self, keys):
        import ray

        return ray.get(self.actor.get_many.remote(list(keys)))

    def put(self, key, model_id, result) -> None:
        import ray

        ray.get(self.actor.put.remote(key, model_id, result))

    def close(self) -> None:
        pass
