"""The per-chunk build stages as sharded runs: plan the shards, reuse those on disk, run the rest on the executor."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from ..decompose.base import ChunkDecomposition

__all__ = ["Executors", "decompose_sharded", "embed_sharded"]


def _plan_digest(plan) -> str:
    """Identity of a decompose pass: its chunk ids, shard by shard."""
    return hashlib.blake2b(json.dumps([[c[0] for c in p] for p in plan]).encode(), digest_size=16).hexdigest()


def _checkpoint(name: str) -> None:
    from ..pipeline import _checkpoint as checkpoint  # the resume tests' fault injection

    checkpoint(name)


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


def decompose_sharded(executor: Executors, config, backend, llm, root: Path, chunk_rows, doc_of,
                       bars) -> dict[int, ChunkDecomposition]:
    """Decomposition records of every chunk, from Parquet shards under ``stages/decompose/pass-NNN``.

    Pass 0 covers every chunk in shards of ``decompose.batch_size``; a rerun resumes an
    unfinished pass (finished shards are reused) or runs one new pass over the chunks that
    failed. Later passes override earlier ones.
    """
    from .shards import ShardStore
    from .stages import DecomposeStage, chunk_table, records_of

    base = root / "stages" / "decompose"
    bs = config.decompose.batch_size
    if config.decompose.method != "llm":  # rule-based: no call to resume, so at most ~256 shards
        bs = max(bs, -(-len(chunk_rows) // 256))
    records: dict[int, ChunkDecomposition] = {}
    k = 0
    while True:
        todo = [c for c in chunk_rows if c[0] not in records or records[c[0]].error is not None]
        if not todo:
            break
        plan = [todo[b:b + bs] for b in range(0, len(todo), bs)]
        pdir = base / f"pass-{k:03d}"
        existed = pdir.is_dir()
        store = ShardStore(pdir, _plan_digest(plan), len(plan))
        done = store.done()
        for i in sorted(done):
            for rec in records_of(store.read(i)[0]):
                records[rec.chunk_id] = rec
        if existed and len(done) == len(plan):  # a finished earlier pass
            k += 1
            continue
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
                store.write(i, out, meta)
                for rec in records_of(out):
                    records[rec.chunk_id] = rec
                if ex.remote and ledger is not None and meta.get("ledger"):
                    from noderag.llm.accounting import TokenLedger

                    ledger.merge(TokenLedger.from_dict(meta["ledger"]))
                bar.update(out.num_rows)
                _checkpoint("decompose-batch")

            ex.run_stage(stage, {i: chunk_table([(cid, text, doc_of[did].title) for cid, did, text in plan[i]])
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
    cache = ex.cache_actor(root / "llm_cache.sqlite") if config.llm.cache else None
    return stage.remote(cache=cache, llm_options=opts)


def embed_sharded(executor: Executors, config, emb, embedder_given: bool, texts: list[str], stage_dir: Path,
                   bar) -> np.ndarray:
    """Vectors of ``texts`` in shards of ``embed.batch_size`` (Parquet under ``stage_dir``, reused on a rerun)."""
    from ..enrich import _texts_digest
    from .shards import ShardStore
    from .stages import EmbedStage, text_table, vectors_of

    dim = int(emb.dim)
    bs = config.embed.batch_size
    out = np.zeros((len(texts), dim), dtype=np.float32)
    if not texts:
        return out
    starts = list(range(0, len(texts), bs))
    store = ShardStore(stage_dir, _texts_digest(getattr(emb, "name", type(emb).__name__), texts, bs), len(starts))
    done = store.done()

    def sink(i: int, tab, meta: dict) -> None:
        store.write(i, tab, meta)
        rows, v = vectors_of(tab, dim)
        out[rows] = v
        bar.update(len(rows))

    for i in sorted(done):
        rows, v = vectors_of(store.read(i)[0], dim)
        out[rows] = v
        bar.update(len(rows))
    todo = {i: text_table(np.arange(starts[i], min(starts[i] + bs, len(texts))), texts[starts[i]:starts[i] + bs])
            for i in range(len(starts)) if i not in done}
    if todo:
        ex = executor.get()
        stage = EmbedStage(config.embed.spec, dict(config.embed.backend_options()), embedder=emb,
                           embedder_given=embedder_given)
        if ex.remote:
            stage = stage.remote(embedder_given)
        ex.run_stage(stage, todo, sink)
    return out
