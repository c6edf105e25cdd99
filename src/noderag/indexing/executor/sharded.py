"""The per-chunk build stages as sharded runs: plan the shards, reuse those on disk, run the rest on the executor."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from ...store.layout import LLM_CACHE
from ..assembly_plan import PlannedChunks, plan_chunks, planned_from_table
from ..decompose.base import ChunkDecomposition
from ..journal import checkpoint  # the resume tests' fault injection

__all__ = ["Executors", "DecomposedRecords", "decompose_sharded", "embed_sharded"]


def _plan_digest(plan) -> str:
    """Identity of a decompose pass: its chunk ids, shard by shard."""
    return hashlib.blake2b(json.dumps([[c[0] for c in p] for p in plan]).encode(), digest_size=16).hexdigest()


class Executors:
    """The run's executor (``config.executor``), connected on first use and closed after the embed stage."""

    def __init__(self, config, say) -> None:
        self.config, self.say, self._ex = config, say, None

    def get(self):
        if self._ex is None:
            from . import make_executor

            self._ex = make_executor(self.config.executor, log=self.say)
        return self._ex

    def close(self) -> None:
        if self._ex is not None:
            self._ex.close()
            self._ex = None


class DecomposedRecords:
    """Every chunk's decomposition record, left in its Parquet shard and read back one shard at a time.

    Parsed records of a whole corpus held ~8 KB per chunk (0.8 GB at 10^5 passages); this keeps
    only where each chunk's latest record lives and the failed chunks' errors. Reading chunks in
    id order (as assemble does) reads each shard once.
    """

    def __init__(self) -> None:
        self._stores: list = []  # ShardStore per pass
        self._where: dict[int, tuple[int, int]] = {}  # chunk id -> (pass, shard) of its latest record
        self.errors: dict[int, str] = {}  # chunk id -> error of its latest record
        self._open: dict[int, _OpenShard] = {}  # pass -> the shard of its records read last

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, chunk_id: int) -> bool:
        return chunk_id in self._where

    def add_pass(self, store) -> int:
        self._stores.append(store)
        return len(self._stores) - 1

    def note(self, k: int, i: int, table) -> int:
        """Record that shard ``i`` of pass ``k`` (its result ``table``) holds the latest records of its chunks."""
        ids = table.column("chunk_id").to_pylist()
        recs = table.column("record").to_pylist()
        for cid, rec in zip(ids, recs):
            self._where[cid] = (k, i)
            err = None if rec.endswith(_NO_ERROR) else json.loads(rec).get("error")
            if err is None:
                self.errors.pop(cid, None)
            else:
                self.errors[cid] = str(err)
        # an assembly fed as shards arrive reads this one next
        self._open[k] = _OpenShard(i, ids, recs, planned_from_table(table))
        return len(ids)

    def _shard(self, chunk_id: int) -> "_OpenShard":
        k, i = self._where[chunk_id]
        got = self._open.get(k)
        if got is None or got.shard != i:
            tab = self._stores[k].read(i)[0]
            got = self._open[k] = _OpenShard(i, tab.column("chunk_id").to_pylist(), tab.column("record").to_pylist(),
                                             None)
        return got

    def get(self, chunk_id: int) -> ChunkDecomposition:
        """The latest record of ``chunk_id`` (reads its shard unless it is the one open for that pass)."""
        return ChunkDecomposition.from_obj(json.loads(self._shard(chunk_id).records[chunk_id]))

    def plan(self, chunk_id: int, source: str, text: str) -> tuple[PlannedChunks, int]:
        """(plans, position of ``chunk_id``'s) of the chunk's latest record: the decompose worker's, or made here
        from the record when its shard was read back from disk. A failed chunk's plan has no units."""
        if chunk_id in self.errors:
            return plan_chunks([source], [text], [ChunkDecomposition(chunk_id, [], None)]), 0
        got = self._shard(chunk_id)
        if got.planned is not None:
            return got.planned, got.row[chunk_id]
        return plan_chunks([source], [text], [self.get(chunk_id)]), 0


class _OpenShard:
    """One shard's records by chunk id, and its chunks' assembly plans when the worker sent them."""

    def __init__(self, shard: int, ids: list[int], records: list[str], planned: PlannedChunks | None) -> None:
        self.shard, self.planned = shard, planned
        self.records = dict(zip(ids, records))
        self.row = {cid: r for r, cid in enumerate(ids)} if planned is not None else {}


#: How a record without an error ends (``ChunkDecomposition.to_json``: compact separators, ``error`` last).
_NO_ERROR = '"error":null}'


def decompose_sharded(executor: Executors, config, backend, llm, root: Path, chunk_rows, doc_of,
                       bars, on_records=None) -> DecomposedRecords:
    """Decomposition records of every chunk, in Parquet shards under ``stages/decompose/pass-NNN``.

    Pass 0 covers every chunk in shards of ``decompose.batch_size``; a rerun resumes an
    unfinished pass (finished shards are reused) or runs one new pass over the chunks that
    failed. Later passes override earlier ones.

    ``on_records(records)``: called whenever more shards of pass 0 are noted (in shard order, so
    the chunks noted form a growing prefix of ``chunk_rows``) while this run computes pass 0. Its
    records are then final for the run; a later pass would override some, so it is never called
    for one.
    """
    from .shards import ShardStore
    from .stages import DecomposeStage, chunk_table

    base = root / "stages" / "decompose"
    bs = config.decompose.batch_size
    if config.decompose.method != "llm":  # rule-based: no call to resume, so at most ~256 shards
        bs = max(bs, -(-len(chunk_rows) // 256))
    records = DecomposedRecords()
    k = 0
    while True:
        todo = [c for c in chunk_rows if c[0] not in records or c[0] in records.errors]
        if not todo:
            break
        plan = [todo[b:b + bs] for b in range(0, len(todo), bs)]
        pdir = base / f"pass-{k:03d}"
        existed = pdir.is_dir()
        store = ShardStore(pdir, _plan_digest(plan), len(plan))
        assert records.add_pass(store) == k
        done = store.done()
        for i in sorted(done):
            records.note(k, i, store.read(i)[0])
        if existed and len(done) == len(plan):  # a finished earlier pass
            k += 1
            continue
        streaming = on_records is not None and k == 0
        if streaming and done:
            on_records(records)
        ex = executor.get()
        if _distributed(backend):  # the backend itself runs on the cluster (ray.data.llm): drive it from here
            from .local import LocalExecutor

            ex = LocalExecutor()
        stage = DecomposeStage(config.decompose, config.seed, llm_spec=llm if isinstance(llm, str) else
                               (config.llm.spec if llm is None else None), backend=backend)
        if ex.remote:
            stage = _remote_decompose_stage(ex, stage, config, root)
        ledger = getattr(backend, "ledger", None)
        with bars.bar(len(chunk_rows), "decompose") as bar:
            bar.update(len(chunk_rows) - sum(len(plan[i]) for i in range(len(plan)) if i not in done))

            def sink(i: int, out, meta: dict) -> None:
                store.write(i, out.select(["chunk_id", "record"]), meta)  # the plans are for this run only
                records.note(k, i, out)
                if streaming:
                    on_records(records)
                if ex.remote and ledger is not None and meta.get("ledger"):
                    from ...llm.accounting import TokenLedger

                    ledger.merge(TokenLedger.from_dict(meta["ledger"]))
                bar.update(out.num_rows)
                checkpoint("decompose-batch")

            ex.run_stage(stage, {i: chunk_table([(cid, text, doc_of[did].title, doc_of[did].source)
                                             for cid, did, text in plan[i]])
                                 for i in range(len(plan)) if i not in done}, sink)
        break
    return records


def _distributed(backend) -> bool:
    """True when ``backend`` (or one it wraps) sends its batches to the cluster itself."""
    while backend is not None:
        if getattr(backend, "distributed", False):
            return True
        backend = getattr(backend, "backend", None)
    return False


def _remote_decompose_stage(ex, stage, config, root: Path):
    """The decompose stage for Ray workers: LLM built from its spec, the index's cache shared, concurrency split."""
    if not stage.uses_llm:
        return stage.remote()
    opts = dict(config.llm.backend_options())
    if stage.llm_spec and stage.llm_spec.split(":", 1)[0].lower() == "openai":
        # bounded per worker and in total: executor.llm_concurrency requests in flight across the pool
        n = ex.workers(stage.num_gpus)
        opts["max_concurrency"] = max(1, int(config.executor.llm_concurrency) // n)
    cache = ex.cache_actor(root / LLM_CACHE) if config.llm.cache else None
    return stage.remote(cache=cache, llm_options=opts)


def embed_sharded(executor: Executors, embed, emb, embedder_given: bool, texts: list[str], stage_dir: Path,
                   bar, out: np.ndarray | None = None) -> np.ndarray:
    """Vectors of ``texts`` in shards of ``embed.batch_size`` (``embed``: the ``[embed]`` section; Parquet under
    ``stage_dir``, reused on a rerun).

    ``out``: a ``(len(texts), dim)`` array to fill (float16 rounds the vectors); by default a new float32 one.
    """
    from ...graph.arrays import drop_resident

    from ...embed.base import texts_digest
    from .shards import ShardStore
    from .stages import EmbedStage, text_table, vectors_of

    dim = int(emb.dim)
    bs = embed.batch_size
    if out is None:
        out = np.zeros((len(texts), dim), dtype=np.float32)
    elif out.shape != (len(texts), dim):
        raise ValueError(f"out has shape {out.shape}, expected ({len(texts)}, {dim})")
    if not texts:
        return out
    starts = list(range(0, len(texts), bs))
    kept = "float16" if out.dtype == np.float16 else "float32"  # shards hold what ``out`` keeps
    store = ShardStore(stage_dir, texts_digest(getattr(emb, "name", type(emb).__name__), texts, bs,
                                                "" if kept == "float32" else kept), len(starts))
    done = store.done()

    mapped = drop_resident(out)  # a file-backed ``out`` (the build's vectors) keeps only the file's copy

    def put(rows: np.ndarray, v: np.ndarray) -> None:
        out[rows] = v
        if mapped and rows.size:
            drop_resident(out[int(rows.min()):int(rows.max()) + 1])
        bar.update(len(rows))

    def sink(i: int, tab, meta: dict) -> None:
        store.write(i, tab, meta)
        put(*vectors_of(tab, dim))

    for i in sorted(done):
        put(*vectors_of(store.read(i)[0], dim))
    todo = {i: text_table(np.arange(starts[i], min(starts[i] + bs, len(texts))), texts[starts[i]:starts[i] + bs])
            for i in range(len(starts)) if i not in done}
    if todo:
        ex = executor.get()
        stage = EmbedStage(embed.spec, dict(embed.backend_options()), embedder=emb,
                           embedder_given=embedder_given, dtype=kept)
        if ex.remote:
            stage = stage.remote(embedder_given)
        ex.run_stage(stage, todo, sink)
    return out
