"""The build driver: a build or incremental insert as a list of stage calls, resumable after a kill at any point.

Stages (the functions of :mod:`noderag.build.stages`): ingest -> chunk ->
decompose -> assemble (+ name linking) -> embed T/S -> attributes (A) -> communities (H/O) ->
vector index (+ semantic kNN) -> finalize. This module owns what is around them: the writer
lock, the existing generation, journalling and resume, timing, progress, closing backends
(also on failure), the manifest and the commit.

Persistence: everything of an unfinished run lives in ``INDEX/stages/`` (the
chunk table, decomposition and T/S embedding results as Parquet shards, one per
batch, written by the executor, local or Ray; other embedding batches); graph
stages are recomputed from those on a rerun (they are cheap and deterministic).
The finished index is written to ``stages/final/`` and committed as a new
generation (:mod:`noderag.store.generations`: one rename, one pointer switch).
While a run goes, the previous generation stays complete, openable and untouched.
A delete or a replacement re-assembles the surviving documents first
(:mod:`noderag.build.delete`).

What an insert recomputes: T/S/N/R nodes and decomposed edges are only added
(nodes merged by key); name linking (S-N edges for known names), importance and
A nodes, Leiden communities and H/O nodes, and the semantic kNN layer are
recomputed over the whole graph; vectors of existing T/S nodes are reused, A and
H texts are re-embedded. See ``noderag.build.augment`` for retired A/H/O nodes.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..graph.storage import FORMAT_VERSION, atomic_write_json
from ..graph.types import TYPE_NAMES, NodeType

from .assemble import EdgeList, NodeTable
from .decompose.base import DecomposeFailure
from .ingest import Document, IngestError, ingest
from ..store.lock import WriterLock
from ..store.decompositions import DECOMPOSITIONS, read_decompositions
from ..store.generations import (collect_garbage, commit_generation, current_generation, finish_pending_switch,
                          generation_path)
from ..store.manifest import MANIFEST, StageLog, dir_sizes, read_manifest

__all__ = ["BuildError", "build_index", "BuildReport"]

T, S, N, R, A, H, O = (int(t) for t in NodeType)
# name-link S-N edges of the last run; the decomposed base edges are derived from the graph with them
LINKED = "linked.parquet"
_BUILD_SECTIONS = ("chunk", "decompose", "importance", "attributes", "communities", "embed", "semantic", "seed")


class BuildError(RuntimeError):
    """A build cannot proceed; the message says why and what to do."""


@dataclass
class BuildReport:
    """What a build or insert did: new documents, duplicates skipped, the manifest written."""

    added_documents: int
    duplicates: int
    manifest: dict[str, Any]
    deleted_documents: int = 0
    generation: int | None = None


def _checkpoint(name: str) -> None:
    """Fault injection for the resume tests: SIGKILL this process at checkpoint ``name``.

    Active only when the environment variable ``NODERAG_TEST_KILL_AT`` equals ``name``.
    """
    if os.environ.get("NODERAG_TEST_KILL_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


_SPIN = "|/-\\"  # the spinner's frames


class _Progress:
    """tqdm bars on stderr (or nothing): a bar where a stage counts items, a spinner where it cannot."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def bar(self, total: int, desc: str):
        if not self.enabled:
            return _NullBar()
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=f"{desc:<12}", unit="it", file=sys.stderr, leave=True, dynamic_ncols=True)

    @contextmanager
    def spinner(self, desc: str, interval_s: float = 0.2):
        """A named spinner with the elapsed time while the block runs (stages without an item count:
        attributes, communities, tables, vectors, finalize), so that no long stage is silent."""
        if not self.enabled:
            yield
            return
        from tqdm.auto import tqdm

        label = f"{desc:<12}:"
        bar = tqdm(total=None, desc=f"{label} |", file=sys.stderr, leave=True, dynamic_ncols=True,
                   bar_format="{desc} {elapsed}")
        stop = threading.Event()

        def spin() -> None:
            k = 0
            while not stop.wait(interval_s):
                k += 1
                bar.set_description_str(f"{label} {_SPIN[k % len(_SPIN)]}", refresh=True)

        thread = threading.Thread(target=spin, name=f"noderag-progress-{desc}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            bar.set_description_str(f"{label} done", refresh=False)
            bar.close()


class _NullBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


# ----------------------------------------------------------------------------- existing index state

def _load_existing(root: Path):
    """(NodeTable, docs list, chunk traces) of the finished generation folder ``root``."""
    import pyarrow.parquet as pq

    from ..graph.storage import load_npy

    from ..store.tables import read_nodes_file

    tab = read_nodes_file(root / "nodes.parquet")
    cols = {c: tab.column(c).to_pylist() for c in ("type", "name", "text", "doc_id", "chunk_id",
                                                   "source_id", "active")}
    cols["key"] = load_npy(root / "node_keys.npy", mmap=False, shape=(tab.num_rows,)).tolist()
    table = NodeTable(types=cols["type"], keys=cols["key"], names=cols["name"], texts=cols["text"],
                      doc_ids=cols["doc_id"], chunk_ids=cols["chunk_id"], source_ids=cols["source_id"],
                      active=cols["active"])
    table.index = {k: i for i, k in enumerate(table.keys)}
    dtab = pq.read_table(root / "documents.parquet").to_pylist()
    return table, dtab, read_decompositions(root / DECOMPOSITIONS)


def _load_base(root: Path) -> EdgeList:
    """The decomposed T/S/N/R edges of the generation folder ``root`` (its graph minus ``linked.parquet``)."""
    import pyarrow.parquet as pq

    from ..graph.hetero import HeteroGraph

    ltab = pq.read_table(root / LINKED)
    base = EdgeList()
    base.add(*derive_base(HeteroGraph.load(root, mmap=True), ltab.column("src").to_numpy(),
                          ltab.column("dst").to_numpy(), ltab.column("w").to_numpy()))
    return base


def derive_base(graph, link_src: np.ndarray, link_dst: np.ndarray,
                link_w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The decomposed T/S/N/R edges (src, dst, w) of a saved graph: its T/S/N/R structural edges minus the name links.

    Every structural edge between two T/S/N/R nodes is a decomposed edge or a
    name link (A/H/O edges always touch an A, H or O node), summed. Each edge is
    returned once, the lower type code first (S->N, N->R, T->S), pairs summed.
    """
    c = graph.structural
    types = np.asarray(graph.types)
    indptr = np.asarray(c.indptr)
    rows = np.repeat(np.arange(c.n, dtype=np.int64), np.diff(indptr))
    cols = np.asarray(c.indices, dtype=np.int64)
    w = np.asarray(c.weights, dtype=np.float32)
    m = (rows < cols) & (types[rows] <= R) & (types[cols] <= R)
    rows, cols, w = rows[m], cols[m], w[m].copy()
    ls = np.asarray(link_src, dtype=np.int64)
    ld = np.asarray(link_dst, dtype=np.int64)
    if ls.size:
        code = rows * (1 << 31) + cols
        if code.size > 1 and not np.all(code[1:] > code[:-1]):  # columns unsorted within a row
            o = np.argsort(code, kind="stable")
            rows, cols, w, code = rows[o], cols[o], w[o], code[o]
        lcode = np.minimum(ls, ld) * (1 << 31) + np.maximum(ls, ld)
        pos = np.searchsorted(code, lcode)
        ok = (pos < code.size) & (code[np.minimum(pos, code.size - 1)] == lcode)
        if not ok.all():
            raise ValueError(f"{LINKED}: a name link is not an edge of the structural layer (corrupt index)")
        np.subtract.at(w, pos, np.asarray(link_w, dtype=np.float32))
        keep = w > 0
        rows, cols, w = rows[keep], cols[keep], w[keep]
    swap = types[rows] > types[cols]
    src = np.where(swap, cols, rows).astype(np.int32)
    dst = np.where(swap, rows, cols).astype(np.int32)
    return src, dst, w


# ----------------------------------------------------------------------------- helpers

def _digest(obj: Any) -> str:
    return hashlib.blake2b(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode("utf-8"),
                           digest_size=16).hexdigest()


def _resolve_config(config, existing_manifest):
    from ..config import ConfigError, NodeRAGConfig

    if existing_manifest is None:
        return (config or NodeRAGConfig()).validate()
    stored = NodeRAGConfig.from_dict({k: v for k, v in (existing_manifest.get("config") or {}).items()
                                      if k != "executor"})
    if config is not None:
        a, b = config.to_dict(), stored.to_dict()
        if a["embed"]["spec"] == "auto":  # the index resolved "auto" when it was built
            a["embed"]["spec"] = b["embed"]["spec"]
        diff = [k for k in _BUILD_SECTIONS if a.get(k) != b.get(k)]
        if diff:
            raise ConfigError(
                f"the index was built with a different configuration ({', '.join(diff)} differ); "
                "an insert uses the index's own configuration — pass no config or the same one")
        # llm/search/executor sections may change between runs
        stored.llm = config.llm
        stored.search = config.search
        stored.executor = config.executor
    else:  # where the last run executed is no setting of the index
        stored.executor = type(stored.executor)()
    return stored.validate()


def _make_llm(llm, config, root: Path, executor=None):
    if llm is None and config.llm.spec is None:
        return None
    if llm is None or isinstance(llm, str):
        from ..llm import make_llm

        spec = llm if isinstance(llm, str) else config.llm.spec
        if config.executor.kind == "ray" and spec.strip().lower().startswith("vllm:") and executor is not None:
            from .executor.ray_llm import make_ray_vllm  # every LLM stage on the cluster's GPUs (ray.data.llm)

            return make_ray_vllm(spec, executor.get(),
                                 cache_path=(root / "llm_cache.sqlite") if config.llm.cache else None,
                                 **config.llm.backend_options())
        return make_llm(spec, cache_path=(root / "llm_cache.sqlite") if config.llm.cache else None,
                        **config.llm.backend_options())
    from ..llm import CachedBackend, LLMCache

    if config.llm.cache and not isinstance(llm, CachedBackend) and hasattr(llm, "generate"):
        # every call goes through the index's cache, so a rerun after a kill reuses finished calls
        return CachedBackend(llm, LLMCache(root / "llm_cache.sqlite"))
    return llm


# ----------------------------------------------------------------------------- the build

def build_index(inputs: Sequence[str | os.PathLike], index_dir: str | os.PathLike, config=None, *,
                llm=None, embedder=None, progress: bool = True, allow_failures: bool = False,
                log=None, wait: float | None = None, delete=None, executor=None) -> BuildReport:
    """Build a new index in ``index_dir`` or add the new documents of ``inputs`` to the one there.

    A new document whose source id (JSONL ``id`` or file path) is already in the index with
    other content replaces that document. Every run commits a new generation.

    Parameters
    ----------
    inputs : paths of files (.txt, .md, .jsonl) or directories
    index_dir : index directory (created when missing)
    config : NodeRAGConfig, optional (an existing index keeps its own build configuration)
    llm : LLM backend or spec string, optional; given, decomposition and augmentation use it
    embedder : Embedder, optional (default: ``make_embedder(config.embed.spec, **config.embed.backend_options())``)
    progress : bool, default=True
        Progress bars per stage on stderr.
    allow_failures : bool, default=False
        Finish the index even when some chunks failed to decompose (recorded in the manifest);
        by default such failures raise :class:`DecomposeFailure` after everything else is saved.
    log : callable(str), optional
        Receives one-line status messages.
    wait : float, optional
        Seconds to wait for another writer of the same index to finish; by default a
        running writer makes this call raise :class:`~noderag.store.lock.IndexLockedError` at once.
    delete : noderag.build.delete.Deletion, optional
        Documents to delete in the same run (see :func:`noderag.build.delete.delete_documents`).
    executor : ExecutorConfig, optional
        Where decomposition and T/S embedding run (default: ``config.executor``, local); it
        does not change the index.
    """
    root = Path(index_dir)
    if root.exists() and not root.is_dir():
        raise BuildError(f"{root}: exists and is not a directory")
    created = not root.exists()
    # the lock comes first: the existing index and the pending stages are read under it
    from . import heap

    with WriterLock(root, wait=wait), _arrow_memory_returned(), heap.large_blocks_mapped(), heap.collector_paused():
        try:
            return _build_locked(inputs, root, config, llm=llm, embedder=embedder, progress=progress,
                                 allow_failures=allow_failures, log=log, delete=delete, executor=executor)
        except BaseException:
            if created:  # a failed first build leaves no empty index folder behind
                from .cleanup import remove_if_nothing_built

                try:
                    remove_if_nothing_built(root)
                except OSError:  # never mask the build's own error
                    pass
            raise


@contextmanager
def _arrow_memory_returned():
    """Arrow allocates from the system allocator while a build runs (then the previous default again).

    The default mimalloc pool keeps the pages of freed Arrow tables (read shards, written Parquet
    tables) for itself, so NumPy arrays allocated later could not reuse them: at 10^5 passages the
    build's peak held ~0.4 GB of such pages. A buffer remembers its pool, so switching is safe.
    """
    import pyarrow as pa

    before = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(before)


def _build_locked(inputs, root: Path, config, *, llm, embedder, progress: bool, allow_failures: bool,
                  log, delete=None, executor=None) -> BuildReport:
    """:func:`build_index` with the writer lock held."""
    from ..store.tables import check_layout

    say = log or (lambda msg: None)
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    check_layout(root)
    if finish_pending_switch(root) is not None:  # a first build killed right before its pointer switch
        say("completed the pointer switch of the build killed before it")
    if collect_garbage(root):  # raises IndexPointerError (touching nothing) when CURRENT is damaged
        say("removed generations no reader holds any more")
    stages = root / "stages"
    gen_old = current_generation(root)
    gen_path = generation_path(root, gen_old) if gen_old is not None else None
    manifest_old = read_manifest(gen_path) if gen_path is not None else None
    existing = manifest_old is not None
    if existing:
        from ..graph.storage import check_format_version

        check_format_version(manifest_old.get("format_version"), where=gen_path / MANIFEST)
        if manifest_old.get("state") != "complete":
            raise BuildError(f"{gen_path / MANIFEST}: unknown state {manifest_old.get('state')!r}")
        run_path = stages / "run.json"
        if run_path.is_file() and json.loads(run_path.read_text("utf-8")).get("run_id") == manifest_old.get("run_id"):
            import shutil  # killed after its commit, before removing its stages: nothing is pending

            shutil.rmtree(stages)
    elif delete is not None:
        from ..store.tables import IndexNotFoundError

        raise IndexNotFoundError(f"{root}: no finished index to delete from")
    if config is not None and llm is not None and config.decompose.method != "llm":
        from dataclasses import replace

        config = replace(config, decompose=replace(config.decompose, method="llm"))
    config = _resolve_config(config, manifest_old if existing else None)
    if llm is not None and config.decompose.method != "llm":
        from dataclasses import replace

        config.decompose = replace(config.decompose, method="llm")
    if executor is not None:
        from dataclasses import replace

        config = replace(config, executor=executor)
    if config.search.semantic_weight > 0 and not config.semantic.enabled:
        if existing:
            from ..config import ConfigError

            raise ConfigError(f"search.semantic_weight = {config.search.semantic_weight} needs the semantic kNN "
                              "layer, which this index was built without (semantic.enabled = false): rebuild it "
                              "with semantic.enabled = true, or search with search.semantic_weight = 0")
        from dataclasses import replace  # a new index: the search settings ask for the layer, so build it

        config = replace(config, semantic=replace(config.semantic, enabled=True))
        say("semantic.enabled: building the semantic kNN layer, which search.semantic_weight > 0 uses")
    bars = _Progress(progress)

    # ---- existing state
    if existing:
        from ..store.verify import verify_index

        verify_index(gen_path, "full", manifest=manifest_old)  # an insert must not build on damaged files
        table, docs_rows, traces = _load_existing(gen_path)
    else:
        table, docs_rows, traces = NodeTable(), [], []
    drop = delete.resolve(docs_rows) if delete is not None else []

    # ---- ingest
    t0 = time.perf_counter()
    new_docs, dupes = (ingest(inputs, known_hashes=[d["content_hash"] for d in docs_rows]) if inputs or delete is None
                       else ([], 0))
    t_ingest = time.perf_counter() - t0
    # a new document with the source id of an indexed one (other content) replaces it
    new_sources = {d.source for d in new_docs}
    replaced = [int(d["doc_id"]) for d in docs_rows if d["source"] in new_sources]
    drop = sorted(set(drop) | set(replaced))
    vec_src = np.arange(len(table), dtype=np.int64)  # old id of each node whose vector is reused
    if drop:
        from .delete import reassemble_survivors

        table, docs_rows, base, traces, vec_src = reassemble_survivors(table, docs_rows, traces, set(drop))
    else:
        base = _load_base(gen_path) if existing else EdgeList()
    old_n = len(table)
    if not new_docs and not drop and not stages.exists():
        if existing:
            say("nothing new to add: every input document is already in the index")
            return BuildReport(0, dupes, manifest_old, generation=gen_old)
        raise IngestError(f"no documents found in {', '.join(str(p) for p in inputs)} "
                          "(expected non-empty .txt, .md or .jsonl files)")
    language = (manifest_old or {}).get("embedder", {}).get("auto") if existing else None
    if config.embed.spec == "auto":  # a new index: choose the embedder from the corpus (noderag.lang)
        from ..embed import resolve_auto_spec

        spec, language = resolve_auto_spec(d.text for d in new_docs)
        config = config.with_overrides({"embed.spec": spec})
        say(f"embed.spec auto: {spec} ({language['chinese_documents']} of {language['documents']} documents Chinese)")
    run_id = _digest({"config": {k: config.to_dict()[k] for k in _BUILD_SECTIONS},
                      "docs": [d.content_hash for d in new_docs], "base_nodes": old_n,
                      "generation": gen_old, "drop": drop})
    stages.mkdir(exist_ok=True)
    run_path = stages / "run.json"
    if run_path.is_file():
        prev = json.loads(run_path.read_text("utf-8"))
        if prev.get("run_id") != run_id:
            raise BuildError(
                f"{root}: an unfinished build with different inputs or configuration is pending; "
                f"rerun it with the same inputs to resume, or delete {stages} to discard it")
        say("resuming the unfinished build")
    else:
        atomic_write_json(run_path, {"run_id": run_id, "n_docs": len(new_docs), "drop": len(drop)})
    from .heap import release

    slog = StageLog(stages / "state.json", log=log, on_finish=release)  # each stage's freed memory goes back
    if not slog.done("ingest"):
        slog.start("ingest", already_s=t_ingest)
        slog.finish("ingest", documents=len(new_docs), duplicates=dupes)
    _checkpoint("ingest")

    # ---- chunk
    from .stages import (Assembly, assemble_stage, attributes_stage, cat_edges, chunk_stage, communities_stage,
                               decompose_stage, embed_stage, files_stage, mention_counts, start_vector_stage,
                               tables_stage, vector_stage)

    first_doc = len(docs_rows)
    chunks_path = stages / "chunks.json"
    if slog.done("chunk") and chunks_path.is_file():
        chunk_rows = json.loads(chunks_path.read_text("utf-8"))
    else:
        slog.start("chunk")
        chunk_rows = chunk_stage(new_docs, first_doc, config, bars)
        atomic_write_json(chunks_path, chunk_rows)
        slog.finish("chunk", chunks=len(chunk_rows))
    _checkpoint("chunk")
    from dataclasses import replace as _replace

    n_new = len(new_docs)
    # the documents' texts live on in their chunks: keep the rest of each document only
    doc_of = {first_doc + i: _replace(d, text="") for i, d in enumerate(new_docs)}
    del new_docs

    from .executor.sharded import Executors

    executor = Executors(config, say)
    backend = _make_llm(llm, config, root, executor)
    vbuild = None
    try:
        # ---- decompose (one Parquet shard per batch, by the executor)
        if config.decompose.method == "llm" and backend is None:
            from ..config import ConfigError

            raise ConfigError("decompose.method = 'llm' needs an LLM: pass llm=..., set llm.spec or use --llm SPEC")
        slog.start("decompose")
        # chunks are assembled in the main process as their records arrive, while the workers decompose
        assembly = Assembly(table, base, traces, chunk_rows, doc_of, docs_rows, config)
        del traces
        records, failures = decompose_stage(executor, config, backend, llm, root, chunk_rows, doc_of, bars,
                                            assembly=assembly)
        slog.finish("decompose", chunks=len(chunk_rows), failures=len(failures),
                    assembled_meanwhile=assembly.pos, assemble_s=round(assembly.busy_s, 2))
        if failures and not allow_failures:
            raise DecomposeFailure(failures)

        # ---- assemble + link
        final = stages / "final"  # the finished files; each is written as soon as it is final
        if final.exists():
            import shutil

            shutil.rmtree(final)
        final.mkdir(parents=True)
        slog.start("assemble")
        with bars.spinner("assemble"):
            traces, link = assemble_stage(assembly, records)
        del assembly
        del records  # the shards on disk keep them; the graph needs only the table now
        n_chunks = len(chunk_rows)
        del chunk_rows  # the table holds the chunk texts now
        from ..store.decompositions import write_decompositions

        write_decompositions(final / DECOMPOSITIONS, traces)
        del traces
        slog.finish("assemble")
        _checkpoint("assemble")

        # ---- embed T/S
        from ..embed import make_embedder

        emb = embedder if embedder is not None else make_embedder(config.embed.spec, **config.embed.backend_options())
        dim = int(emb.dim)
        slog.start("embed")
        vec = embed_stage(table, old_n, emb, executor, config, stages, bars, doc_of, embedder is not None,
                          old_vectors=(gen_path / "vectors.usearch", vec_src) if existing else None,
                          vectors_file=stages / "vectors" / "build_vectors.npy")
        executor.close()
        slog.finish("embed", embedded=int(np.isin(table.types_array()[old_n:], (T, S)).sum()))
        _checkpoint("embed")
        vbuild = start_vector_stage(table, vec, config, stages / "vectors")

        # ---- attributes
        slog.start("attributes")
        with bars.spinner("attributes"):
            attrs = attributes_stage(table, base, link, vec, emb, backend, config, stages, bars)
        slog.finish("attributes", important=int(attrs.important.size), failures=len(attrs.failures))
        _checkpoint("attributes")

        # ---- communities
        slog.start("communities")
        with bars.spinner("communities"):
            comm = communities_stage(table, base, link, attrs, vec, emb, backend, config, stages, bars)
        slog.finish("communities", communities=comm.count, high_level=len(comm.h_ids), failures=len(comm.failures),
                    leiden_s=round(comm.leiden_s, 2))
        _checkpoint("communities")

        # ---- node tables: final now; written before the vector stage so that the texts can go
        slog.start("tables")
        n = len(table)
        types = table.types_array()
        active = table.active_array()
        s3, d3, w3 = cat_edges(base, link, attrs.edges, comm.edges)
        with bars.spinner("tables"):
            tables_stage(final, table, mention_counts(n, types, s3, d3, w3), docs_rows)
        slog.finish("tables")
        _checkpoint("tables")

        # ---- vector index (+ semantic layer)
        slog.start("semantic")
        with bars.spinner("vectors"):
            saved, sem = vector_stage(table, vec, config, vbuild, final / "vectors.usearch")
        del vec  # the vectors live in the index now: the finalize peak need not hold them twice
        slog.finish("semantic", edges=int(sem.nnz // 2))
        _checkpoint("semantic")

        # ---- finalize
        slog.start("finalize")
        from ..graph.hetero import HeteroGraph

        from ..search.query_index import write_query_index  # what a query would otherwise prepare in O(n) at open

        t0 = time.perf_counter()
        # after the vector stage and before the graph: its copy of the texts overlaps neither
        with bars.spinner("query tables"):
            write_query_index(final)
        t1 = time.perf_counter()
        with bars.spinner("finalize"):
            graph = HeteroGraph.from_coo(types, table.keys_array(), s3, d3, w3)
            graph.set_layer("semantic", sem)
            files_stage(final, graph, link, lambda *edges: _write_linked(final / LINKED, *edges))
            t2 = time.perf_counter()
            parts = {"query_index_s": round(t1 - t0, 2), "graph_files_s": round(t2 - t1, 2)}  # in the stage report
            if not saved:  # the vector shards finished while the files above were written
                vbuild.finish(final / "vectors.usearch")
                parts["vector_wait_s"] = round(time.perf_counter() - t2, 2)
        vbuild = None
        _checkpoint("finalize-files")
        slog.finish("finalize", **parts)
    except BaseException:
        if vbuild is not None:  # a failed run: stop building vector shards nobody will use
            vbuild.cancel()
        raise
    finally:
        # every LLM call is done (or the run failed): close what we opened, never the caller's backend
        executor.close()
        if backend is not None and backend is not llm:
            if isinstance(llm, str) or llm is None:
                backend.close()
            else:  # we only wrapped the caller's backend in a cache: close the cache, not their backend
                backend.cache.close()
    # after a delete, drop the cache entries this run did not use (before the commit, so a kill cannot
    # leave them behind a finished delete)
    a_fail, c_fail, n_comm, retired, important = (attrs.failures, comm.failures, comm.count, comm.retired,
                                                  attrs.important)
    if drop:
        from .delete import prune_llm_cache

        used = getattr(backend, "used_keys", None)
        prune_llm_cache(root / "llm_cache.sqlite", set(used) if used is not None else set())

    counts = {TYPE_NAMES[NodeType(t)]: int(np.sum(types == t)) for t in range(7)}
    edges_by_kind = _edge_kinds(types, s3, d3)
    ledger = getattr(backend, "ledger", None)
    tokens = ledger.to_dict() if ledger is not None else {}
    prev_tokens = (manifest_old or {}).get("tokens_total", {}) if existing else {}
    sizes = dir_sizes(final)
    if (root / "llm_cache.sqlite").is_file():
        sizes["llm_cache.sqlite"] = (root / "llm_cache.sqlite").stat().st_size
    failures_rec = {"decompose": {str(k): v for k, v in failures.items()},
                    "attributes": {str(k): v for k, v in a_fail.items()},
                    "communities": c_fail}
    manifest = {
        "format_version": FORMAT_VERSION,
        "state": "complete",
        "config": config.to_index_dict(),
        "embedder": {"name": getattr(emb, "name", config.embed.spec), "dim": dim,
                     **({"auto": language} if language is not None else {})},
        "counts": {
            "documents": len(docs_rows),
            "chunks": counts["text"],
            "nodes": counts,
            "active_nodes": {TYPE_NAMES[NodeType(t)]: int(np.sum((types == t) & active)) for t in range(7)},
            "retired_nodes": int(n - active.sum()),
            "retired_this_run": retired,
            "edges": {"structural": int(graph.structural.nnz // 2), "semantic": int(graph.semantic.nnz // 2),
                      **{f"structural.{k}": v for k, v in edges_by_kind.items()}},
            "communities": n_comm,
            "important_entities": int(important.size),
        },
        "stages": slog.stages,
        "tokens": tokens,
        "tokens_total": _add_tokens(prev_tokens, tokens),
        "failures": failures_rec,
        "bytes": sizes,
        "bytes_total": int(sum(sizes.values())),
        "runs": list((manifest_old or {}).get("runs", [])) + [
            {"documents_added": n_new, "duplicates": dupes, "chunks": n_chunks,
             "documents_deleted": len(drop)}],
        "run_id": run_id,
    }
    from ..store.verify import CHECKSUMS, file_checksums

    manifest[CHECKSUMS] = file_checksums(final, manifest)  # last: its manifest digest covers every entry above
    atomic_write_json(final / MANIFEST, manifest)
    _checkpoint("commit")
    gen_new = commit_generation(root, final, before_switch=lambda: _checkpoint("switch"))
    _checkpoint("committed")  # a kill here leaves stages/ behind: the next writer sees its run_id committed
    import shutil

    shutil.rmtree(stages, ignore_errors=True)
    collect_garbage(root)
    return BuildReport(n_new, dupes, manifest, deleted_documents=len(drop), generation=gen_new)


def _write_linked(path: Path, src: np.ndarray, dst: np.ndarray, w: np.ndarray) -> None:
    """The name-link S-N edges as a zstd Parquet table (structural T/S/N/R edges minus these = base)."""
    import pyarrow as pa

    from ..graph.storage import atomic_write_parquet

    from ..store.tables import PARQUET_OPTIONS

    tab = pa.Table.from_arrays([pa.array(src, pa.int32()), pa.array(dst, pa.int32()), pa.array(w, pa.float32())],
                               names=["src", "dst", "w"])
    atomic_write_parquet(path, tab, **PARQUET_OPTIONS)


def _edge_kinds(types: np.ndarray, src: np.ndarray, dst: np.ndarray) -> dict[str, int]:
    """Distinct undirected structural edges per pair of node types ("S-N": count)."""
    if src.size == 0:
        return {}
    a = np.minimum(types[src], types[dst]).astype(np.int64)
    b = np.maximum(types[src], types[dst]).astype(np.int64)
    lo = np.minimum(src, dst).astype(np.int64)
    hi = np.maximum(src, dst).astype(np.int64)
    keep = lo != hi
    from ..graph.arrays import distinct

    code = distinct(lo[keep] * (1 << 31) + hi[keep])
    lo_u = code >> 31
    hi_u = code & ((1 << 31) - 1)
    ta = np.minimum(types[lo_u], types[hi_u])
    tb = np.maximum(types[lo_u], types[hi_u])
    pair = ta.astype(np.int64) * 7 + tb
    out = {}
    letters = "TSNRAHO"
    for p, c in zip(*np.unique(pair, return_counts=True)):
        out[f"{letters[p // 7]}-{letters[p % 7]}"] = int(c)
    del a, b
    return out


def _add_tokens(prev: dict, cur: dict) -> dict:
    out: dict[str, Any] = {}
    for src in (prev, cur):
        for stage, st in (src or {}).items():
            if not isinstance(st, dict):
                continue
            o = out.setdefault(stage, {})
            for k, v in st.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    o[k] = o.get(k, 0) + v
    return out
