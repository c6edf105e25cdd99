"""The build driver: a build or incremental insert as a list of stage calls, resumable after a kill at any point.

Stages, one module each: ingest -> chunk -> decompose -> assemble (+ name linking) -> embed T/S ->
attributes (A) -> communities (H/O) -> tables -> vectors (+ semantic kNN) -> finalize. This module
is the list of them (:func:`_execute`, by the run's kind); the run's plan (:mod:`.plan`, resolved
once by :mod:`.run`) and working data hold what they share, the journal (:mod:`.journal`) their
states and times. Around them: the writer lock, closing backends
(also on failure), the manifest and the commit.

Persistence: everything of an unfinished run lives in ``INDEX/stages/`` (the
chunk table, decomposition and T/S embedding results as Parquet shards, one per
batch, written by the executor, local or Ray; other embedding batches); graph
stages are recomputed from those on a rerun (they are cheap and deterministic).
The finished index is written to ``stages/final/`` and committed as a new
generation (:mod:`noderag.store.generations`: one rename, one pointer switch).
While a run goes, the previous generation stays complete, openable and untouched.
A delete or a replacement re-assembles the surviving documents first
(:mod:`noderag.indexing.update.delete`).

What an insert recomputes: T/S/N/R nodes and decomposed edges are only added
(nodes merged by key); name linking (S-N edges for known names), importance and
A nodes, Leiden communities and H/O nodes, and the semantic kNN layer are
recomputed over the whole graph; vectors of existing T/S nodes are reused, A and
H texts are re-embedded. See ``noderag.indexing.augment`` for retired A/H/O nodes.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from ..store.layout import COMMUNITIES, DELTAS, LLM_CACHE, VECTORS
from ..errors import BuildError
from ..graph.storage import atomic_save_npy, atomic_write_json, load_npy, tree_files
from ..graph.types import NodeType
from ..store.decompositions import DECOMPOSITIONS, write_decompositions
from ..store.folder import check_index_folder
from ..store.generations import collect_garbage, commit_generation
from ..store.lock import BACKGROUND, WriterLock
from ..store.segments import (delta_entry, deltas_of, next_delta_name, scrubbed_overlay, segment_folders,
                              share_generation)
from ..store.manifest import MANIFEST, dir_sizes, index_manifest
from ..store.verify import CHECKSUMS, file_checksums
from . import heap
from .assemble import Assembly, assemble_stage, cat_edges, mention_counts
from .attributes import Attributes, attributes_stage
from .backends import close_llm, open_llm
from .chunk import chunk_stage
from .communities import Communities, communities_stage, stored_labels
from .decompose.base import DecomposeFailure
from .update.delta import delta_counts, link_scope, write_delta_segment
from .decompose.stage import decompose_stage
from .embedding import embed_stage
from .executor.sharded import Executors
from .finalize import finalize_stage, graph_counts, start_vector_stage, tables_stage, vector_stage
from .journal import checkpoint
from .plan import Compaction, DeltaInsert, FreshBuild, Recompute, RunPlan, Scrub
from .update.scrub import write_scrubbed
from .run import BuildReport, BuildRun, documents_without_text, start_run

__all__ = ["BuildError", "build_index", "BuildReport"]

T, S = int(NodeType.T), int(NodeType.S)


def build_index(inputs: Sequence[str | os.PathLike], index_dir: str | os.PathLike, config=None, *,
                llm=None, embedder=None, progress: bool = True, allow_failures: bool = False,
                log=None, wait: float | None = None, delete=None, executor=None, compact: str | None = None,
                background: float | None = None) -> BuildReport:
    """Build a new index in ``index_dir`` or add the new documents of ``inputs`` to the one there.

    A new document whose source id (JSONL ``id`` or file path) is already in the index with
    other content replaces that document. Every run commits a new generation.

    An insert that leaves the deltas over ``update.max_delta_share`` starts a background compaction
    when ``update.compaction`` is "background" (its pid: ``BuildReport.background_compaction``).

    Parameters
    ----------
    inputs : paths of files (.txt, .md, .jsonl) or directories
    index_dir : index directory (created when missing)
    config : NodeRAGConfig, optional (an existing index keeps its own build configuration)
    llm : LLM backend or spec string, optional; given, decomposition and augmentation use it
    embedder : Embedder, optional (default: ``noderag.embed.from_config(config.embed)``)
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
    delete : noderag.indexing.update.delete.Deletion, optional
        Documents to delete in the same run (see :func:`noderag.indexing.update.delete.delete_documents`).
    executor : ExecutorConfig, optional
        Where decomposition and T/S embedding run (default: ``config.executor``, local); it
        does not change the index.
    compact : {"merge", "full"}, optional
        Compact the index instead of adding documents (see :func:`noderag.indexing.update.compact.compact_index`).
    background : float, optional
        This is a background compaction (:mod:`noderag.indexing.update.background`) for this ``update.max_delta_share``:
        any other writer stops it, and it does nothing unless the deltas hold more than that share of the base.
    """
    root = Path(index_dir)
    if root.exists() and not root.is_dir():
        raise BuildError(f"{root}: exists and is not a directory")
    check_index_folder(root)  # not a folder of other files, nor one inside an index: refused before the lock file
    created = not root.exists()
    # the lock comes first: the existing index and the pending stages are read under it
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    with WriterLock(root, wait=wait, role=None if background is None else BACKGROUND), _arrow_memory_returned(), \
            heap.large_blocks_mapped(), heap.collector_paused():
        try:
            def started():
                return start_run(inputs, root, config, llm=llm, embedder=embedder, progress=progress,
                                 allow_failures=allow_failures, log=log, delete=delete, executor=executor,
                                 compact=compact, background=background)

            run = started()
            report = run if isinstance(run, BuildReport) else _execute(run)
            if isinstance(run, BuildRun) and isinstance(run.plan.kind, Scrub) and run.plan.kind.then_insert:
                # the replaced documents are tombstones now: the new versions go in as a second run
                from dataclasses import replace

                scrubbed = report.deleted_documents
                run = started()
                report = replace(run if isinstance(run, BuildReport) else _execute(run), deleted_documents=scrubbed)
        except BaseException:
            if created:  # a failed first build leaves no empty index folder behind
                from .cleanup import remove_if_nothing_built

                try:
                    remove_if_nothing_built(root)
                except OSError:  # never mask the build's own error
                    pass
            raise
    if isinstance(run, BuildRun) and isinstance(run.plan.kind, (FreshBuild, Recompute, DeltaInsert)) \
            and report.generation is not None:  # a write of documents (not a compaction, not a scrub)
        report = _maybe_compact_in_background(run, report, llm, log or (lambda msg: None))
    return report


def _maybe_compact_in_background(run: BuildRun, report: BuildReport, llm, say) -> BuildReport:
    """Start a background compaction when this write left the deltas over ``update.max_delta_share``."""
    from dataclasses import replace

    from ..store.generations import generation_path
    from .update.background import LOG, start_background_compaction
    from .update.delta import background_compaction_due

    plan = run.plan
    if not background_compaction_due(report.manifest, generation_path(plan.root, report.generation), plan.config):
        return report
    if llm is not None and not isinstance(llm, str):
        say("update.compaction = background: an LLM object cannot be handed to another process; the deltas are "
            "compacted by the insert that takes them past twice update.max_delta_share")
        return report
    pid = start_background_compaction(plan.root, max_delta_share=plan.config.update.max_delta_share, llm_spec=llm)
    say(f"the deltas are over update.max_delta_share: compacting in the background (pid {pid}, "
        f"log {plan.root / LOG})")
    return replace(report, background_compaction=pid)


def _execute(run: BuildRun) -> BuildReport:
    """The run's stages by its kind, then the manifest and the commit."""
    plan = run.plan
    if isinstance(plan.kind, Scrub):  # a delete of base documents in place
        manifest, known, written = write_scrubbed(plan)
        return _commit(plan, manifest, known=known, durable=written)
    if isinstance(plan.kind, DeltaInsert):
        return _execute_delta(run)
    with _new_documents(run) as new:
        vbuild = start_vector_stage(run.table, new.vec, plan.config, plan.stages / "vectors")
        try:
            attrs = _attributes(run, new)
            comm = _communities(run, new, attrs)
            edges = _tables(run, new.link, attrs, comm)
            saved, semantic = _vectors(run, new.vec, vbuild)
            new.vec = None  # the vectors live in the index now: the finalize peak need not hold them twice
            graph = _finalize(run, edges, semantic, new.link, vbuild, saved)
        except BaseException:  # a failed run: stop building vector shards nobody will use
            vbuild.cancel()
            raise
    if plan.drop:  # before the commit, so that a kill cannot leave unused entries behind a finished delete
        from .update.survivors import prune_llm_cache

        used = getattr(new.backend, "used_keys", None)
        prune_llm_cache(plan.root / LLM_CACHE, set(used) if used is not None else set())
    return _commit(plan, _manifest(run, new, graph, edges, attrs, comm))


def _execute_delta(run: BuildRun) -> BuildReport:
    """An insert as a delta segment (:mod:`noderag.indexing.update.delta`): the new documents' stages (the same as a
    build's), then the segment instead of the global stages, the manifest and the commit."""
    plan = run.plan
    with _new_documents(run, link_scope(plan.kind.segments, plan.kind.delta_from)) as new:
        pass  # a delta recomputes no global stage: nothing more needs the LLM
    deltas, segment, replaced, shared = _segment(run, new)
    manifest = _delta_manifest(run, new, deltas, segment, [plan.previous.path / DELTAS / d.name for d in replaced])
    known = (plan.previous.manifest.get(CHECKSUMS) or {}).get("files") or {}
    # every file of the new generation is on disk already: shared ones are committed files, the delta's own
    # were written atomically (fsynced); the commit syncs the folders
    written = frozenset(tree_files(plan.final))
    return _commit(plan, manifest, known={rel: known[rel] for rel in shared if rel in known}, durable=written)


def _segment(run: BuildRun, new: "_NewDocuments"):
    """The segment stage of a delta run: the new generation shares the previous one's files and adds the delta.
    Returns (the new generation's deltas, the new delta's name or None, the deltas it replaces, shared files)."""
    plan = run.plan
    with run.journal.stage("segment") as info, run.bars.spinner("delta segment"):
        traces = plan.stages / "delta_traces"  # the new chunks' traces go to the segment, not the base
        if traces.exists():  # left by a killed run
            shutil.rmtree(traces)
        os.replace(plan.final / DECOMPOSITIONS, traces)
        deltas = deltas_of(plan.previous.manifest, plan.previous.path)
        rewrites = plan.kind.rewrites
        replaced = deltas[rewrites:] if rewrites is not None else []  # a delete's: rewritten as one
        shared, copied = share_generation(plan.previous.path, plan.final,
                                          skip=tuple(f"{DELTAS}/{d.name}/" for d in replaced))
        name = next_delta_name(deltas)
        deltas = deltas[:len(deltas) - len(replaced)]
        wrote = len(run.table) > run.segment_start  # a delete of every document of the deltas leaves none
        if wrote:
            deltas.append(write_delta_segment(plan.final / DELTAS / name, run.table, run.segment_start,
                                              run.docs_rows, plan.first_document, run.base, new.link, traces,
                                              new.vec, plan.config, list(plan.kind.segments), name))
        info.update(nodes=len(run.table) - run.segment_start, documents=len(run.docs_rows) - plan.first_document,
                    shared_files=len(shared), copied_bytes=copied)
    return deltas, name if wrote else None, replaced, shared


@dataclass
class _NewDocuments:
    """What the stages every run kind shares leave: the new documents ingested, chunked, decomposed,
    assembled and embedded (T/S vectors), and the LLM backend they used."""

    failures: dict
    n_chunks: int
    link: Any  # the name-link edges
    emb: Any  # the embedder
    vec: Any  # the T/S vectors (NodeVectors)
    backend: Any


@contextmanager
def _new_documents(run: BuildRun, scope=None) -> Iterator[_NewDocuments]:
    """Ingest, chunk, decompose + assemble and embed the run's new documents; the executor and the LLM backend
    stay open for the caller's later stages and are closed when it leaves (also on failure; never the caller's
    backend). ``scope``: a delta's name-linking scope (:func:`~noderag.indexing.update.delta.link_scope`)."""
    plan = run.plan
    _ingest(run)
    _chunk(run)
    executor = Executors(plan.config, plan.say)
    backend = open_llm(plan.llm, plan.config, plan.root, executor)
    try:
        failures, n_chunks, link = _decompose_and_assemble(run, executor, backend, scope)
        emb, vec = _embed(run, executor)
        yield _NewDocuments(failures, n_chunks, link, emb, vec, backend)
    finally:  # every LLM call is done (or the run failed)
        executor.close()
        close_llm(backend, plan.llm)


def _ingest(run: BuildRun) -> None:
    if not run.journal.done("ingest"):
        with run.journal.stage("ingest", already_s=run.plan.ingest_s) as info:
            info.update(documents=run.plan.n_new, duplicates=run.plan.duplicates)


def _chunk(run: BuildRun) -> None:
    """``run.chunk_rows`` (resumed from ``stages/chunks.json``) and ``run.doc_of``; the documents' texts go."""
    import json

    path = run.plan.stages / "chunks.json"
    if run.journal.done("chunk") and path.is_file():
        run.chunk_rows = json.loads(path.read_text("utf-8"))
    else:
        with run.journal.stage("chunk") as info:
            config = run.plan.config
            run.chunk_rows = chunk_stage(run.new_docs, len(run.docs_rows), config.chunk, run.bars,
                                         workers=config.executor.workers)
            atomic_write_json(path, run.chunk_rows)
            info.update(chunks=len(run.chunk_rows))
    run.doc_of = documents_without_text(run)  # the documents' texts live on in their chunks
    run.new_docs = []


def _decompose_and_assemble(run: BuildRun, executor, backend, link_scope=None):
    """(decompose failures, chunk count, name-link edges); the decomposed nodes and edges are in the run's
    table and base, the chunk traces in ``final/``. Chunks are assembled as their records arrive.
    ``link_scope``: narrows the name linking (a delta run's, see :func:`assemble_stage`)."""
    plan, journal = run.plan, run.journal
    if plan.config.decompose.method == "llm" and backend is None:
        from ..config import ConfigError

        raise ConfigError("decompose.method = 'llm' needs an LLM: pass llm=..., set llm.spec or use --llm SPEC")
    with journal.stage("decompose", checkpoint_as="decompose-done") as info:
        assembly = Assembly(run.table, run.base, run.traces, run.chunk_rows, run.doc_of, run.docs_rows, plan.config)
        run.traces = None
        records, failures = decompose_stage(executor, plan, backend, run.chunk_rows, run.doc_of, run.bars,
                                            assembly=assembly)
        info.update(chunks=len(run.chunk_rows), failures=len(failures), assembled_meanwhile=assembly.pos,
                    assemble_s=round(assembly.busy_s, 2))
    if failures and not plan.allow_failures:
        raise DecomposeFailure(failures)
    if plan.final.exists():
        shutil.rmtree(plan.final)
    plan.final.mkdir(parents=True)  # the finished files; each is written as soon as it is final
    with journal.stage("assemble") as info:
        with run.bars.spinner("assemble"):
            traces, link = assemble_stage(assembly, records, link_scope)
        del assembly, records  # the shards on disk keep the records; the graph needs only the table now
        n_chunks = len(run.chunk_rows)
        run.chunk_rows = None  # the table holds the chunk texts now
        write_decompositions(plan.final / DECOMPOSITIONS, traces)
        del traces
    return failures, n_chunks, link


def _embed(run: BuildRun, executor):
    """(the embedder, the T/S vectors: new ones embedded, old ones read from the previous generation)."""
    from .. import embed

    plan = run.plan
    emb = plan.embedder if plan.embedder is not None else embed.from_config(plan.config.embed)
    with run.journal.stage("embed") as info:
        old = (([f / VECTORS for f in segment_folders(plan.previous.path, plan.previous.manifest)], run.vec_src)
               if plan.previous is not None and plan.kind.reads_old_vectors else None)
        doc_of = run.doc_of
        if isinstance(plan.kind, Compaction) and plan.kind.reassembles:  # every document's title, for late units
            from types import SimpleNamespace

            doc_of = {int(d["doc_id"]): SimpleNamespace(title=d["title"]) for d in run.docs_rows}
        vec = embed_stage(run.table, run.old_n, emb, executor, plan.config.embed, plan.stages, run.bars, doc_of,
                          plan.embedder is not None, old_vectors=old,
                          vectors_file=plan.stages / "vectors" / "build_vectors.npy")
        executor.close()
        info.update(embedded=int(np.isin(run.table.types_array(run.old_n), (T, S)).sum()))
    return emb, vec


def _attributes(run: BuildRun, new: _NewDocuments) -> Attributes:
    with run.journal.stage("attributes") as info, run.bars.spinner("attributes"):
        attrs = attributes_stage(run.table, run.base, new.link, new.vec, new.emb, new.backend, run.plan.config,
                                 run.plan.stages, run.bars)
        info.update(important=int(attrs.important.size), failures=len(attrs.failures))
    return attrs


def _communities(run: BuildRun, new: _NewDocuments, attrs: Attributes) -> Communities:
    plan = run.plan
    with run.journal.stage("communities") as info, run.bars.spinner("communities"):
        comm = communities_stage(run.table, run.base, new.link, attrs, new.vec, new.emb, new.backend, plan.config,
                                 plan.stages, run.bars, initial=_stored_communities(plan, len(run.table)))
        info.update(communities=comm.count, high_level=len(comm.h_ids), failures=len(comm.failures),
                    leiden_s=round(comm.leiden_s, 2), **({"warm_start": True} if comm.warm else {}))
    return comm


def _stored_communities(plan: RunPlan, n_nodes: int) -> np.ndarray | None:
    """The base's stored Leiden labels when this run recomputes the index keeping every node id (a merging
    compaction, an insert without segments) and ``communities.warm_start`` is on; else None (a cold start)."""
    previous = plan.previous
    if (previous is None or plan.kind.reassembles or not plan.config.communities.warm_start
            or not (previous.path / COMMUNITIES).is_file()):
        return None
    labels = load_npy(previous.path / COMMUNITIES, mmap=False, dtype=np.int32, ndim=1)
    if labels.shape[0] > n_nodes:
        raise BuildError(f"{previous.path / COMMUNITIES}: labels for {labels.shape[0]} nodes, the index "
                         f"has {n_nodes}")
    gone = scrubbed_overlay(previous.path, labels.shape[0])
    if gone is not None:  # deleted in place: in no community
        labels = np.array(labels)
        labels[gone] = -1
    return labels


def _tables(run: BuildRun, link, attrs: Attributes, comm: Communities):
    """Every edge of the structural layer (src, dst, w); the node and document tables written to ``final/``
    (final now; before the vector stage, so that the texts can go)."""
    final = run.plan.final
    with run.journal.stage("tables"):
        edges = cat_edges(run.base, link, attrs.edges, comm.edges)
        with run.bars.spinner("tables"):
            tables_stage(final, run.table, mention_counts(len(run.table), run.table.types_array(), *edges),
                         run.docs_rows)
        if comm.membership is not None:  # the next merging compaction starts Leiden from these
            atomic_save_npy(final / COMMUNITIES, stored_labels(comm.membership, len(run.table)))
    return edges


def _vectors(run: BuildRun, vec, vbuild):
    with run.journal.stage("semantic") as info, run.bars.spinner("vectors"):
        saved, semantic = vector_stage(run.table, vec, run.plan.config, vbuild, run.plan.final / VECTORS)
        info.update(edges=int(semantic.nnz // 2))
    return saved, semantic


def _finalize(run: BuildRun, edges, semantic, link, vbuild, saved: bool):
    with run.journal.stage("finalize", checkpoint_as="finalize-files") as info:
        graph, parts = finalize_stage(run.plan.final, run.table, edges, semantic, link, vbuild, saved, run.bars)
        info.update(parts)
    return graph


def _run_record(run: BuildRun, new: _NewDocuments, **extra) -> dict:
    """The manifest's record of this run: documents added, skipped and deleted, chunks, and what ``extra`` adds."""
    plan = run.plan
    return {"documents_added": plan.n_new, "duplicates": plan.duplicates, "chunks": new.n_chunks,
            "documents_deleted": len(plan.drop), **extra}


def _sizes_and_tokens(plan: RunPlan, backend) -> tuple[dict, dict]:
    """(bytes of each folder of ``final/`` and of the LLM cache, the backend's token ledger)."""
    sizes = dir_sizes(plan.final)
    if (plan.root / LLM_CACHE).is_file():
        sizes[LLM_CACHE] = (plan.root / LLM_CACHE).stat().st_size
    ledger = getattr(backend, "ledger", None)
    return sizes, ledger.to_dict() if ledger is not None else {}


def _manifest(run: BuildRun, new: _NewDocuments, graph, edges, attrs: Attributes, comm: Communities) -> dict:
    plan, emb = run.plan, new.emb
    sizes, tokens = _sizes_and_tokens(plan, new.backend)
    embedder = {"name": getattr(emb, "name", plan.config.embed.spec), "dim": int(emb.dim),
                **({"auto": plan.language} if plan.language is not None else {})}
    counts = graph_counts(run.table, graph, edges, documents=len(run.docs_rows), communities=comm.count,
                          important=int(attrs.important.size), retired=comm.retired)
    compaction = {"compaction": plan.compaction} if plan.compaction else {}
    return index_manifest(
        config=plan.config.to_index_dict(), embedder=embedder, counts=counts, stages=run.journal.stages,
        tokens=tokens,
        failures={"decompose": {str(k): v for k, v in new.failures.items()},
                  "attributes": {str(k): v for k, v in attrs.failures.items()}, "communities": comm.failures},
        sizes=sizes, run=_run_record(run, new, **compaction),
        run_id=plan.run_id, previous=plan.previous.manifest if plan.previous is not None else None)


def _delta_manifest(run: BuildRun, new: _NewDocuments, deltas: list, segment: str | None, replaced: list) -> dict:
    """The previous generation's manifest with the delta's counts, runs, stage report and the segment list."""
    plan = run.plan
    prev = plan.previous.manifest
    sizes, tokens = _sizes_and_tokens(plan, new.backend)
    manifest = index_manifest(
        config=plan.config.to_index_dict(),
        embedder=prev.get("embedder") or {"name": new.emb.name, "dim": int(new.emb.dim)},
        counts=delta_counts(prev.get("counts") or {}, run.table, run.segment_start,
                            len(run.docs_rows) - plan.first_document, run.base, replaced),
        stages=run.journal.stages, tokens=tokens,
        failures={**(prev.get("failures") or {}), "decompose": {str(k): v for k, v in new.failures.items()}},
        sizes=sizes, run=_run_record(run, new, delta_segment=segment),
        run_id=plan.run_id, previous=prev)
    manifest[DELTAS] = [delta_entry(d) for d in deltas]
    return manifest


def _commit(plan: RunPlan, manifest: dict, known: dict | None = None,
            durable: frozenset[str] = frozenset()) -> BuildReport:
    """Checksum and write the manifest, switch ``CURRENT`` to the new generation, drop the stages.
    ``known`` and ``durable``: checksums and paths of files shared with the previous generation (not read again)."""
    from dataclasses import asdict

    from .run import UPDATE_KEY

    manifest[UPDATE_KEY] = asdict(plan.config.update)  # how later writes without a configuration are done
    manifest[CHECKSUMS] = file_checksums(plan.final, manifest, known)  # last: its manifest digest covers every entry
    atomic_write_json(plan.final / MANIFEST, manifest)
    checkpoint("commit")
    gen_new = commit_generation(plan.root, plan.final, before_switch=lambda: checkpoint("switch"), durable=durable)
    checkpoint("committed")  # a kill here leaves stages/ behind: the next writer sees its run_id committed
    shutil.rmtree(plan.stages, ignore_errors=True)
    collect_garbage(plan.root)
    return BuildReport(plan.n_new, plan.duplicates, manifest, deleted_documents=len(plan.drop), generation=gen_new)


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
