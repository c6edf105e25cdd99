"""The stages of a build as functions from their inputs to their artifacts.

chunk -> decompose -> assemble (+ name links) -> embed T/S -> attributes (A) ->
communities (H/O) -> vector index (+ semantic kNN layer) -> files. The driver,
:func:`noderag.build.driver.build_index`, owns what is around them: the writer
lock, journalling and resume (``stages/``), timing, progress, closing backends,
the manifest and the commit. Each function here only computes; the ones whose
work is per chunk (decompose, embed) run on the executor and keep resumable
shards under ``stages/``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..graph.types import NodeType

from .assemble import ChunkRecord, EdgeList, NodeTable, assemble_planned, link_known_names
from ..store.decompositions import traces_columns, traces_table
from .node_vectors import NodeVectors

__all__ = ["chunk_stage", "decompose_stage", "Assembly", "assemble_stage", "embed_stage", "attributes_stage",
           "communities_stage", "tables_stage", "start_vector_stage", "vector_stage", "files_stage", "Attributes",
           "Communities"]

T, S, N, R, A, H, O = (int(t) for t in NodeType)


def cat_edges(*lists: EdgeList) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, w) of several edge lists, concatenated."""
    e = EdgeList()
    for x in lists:
        e.extend(x)
    return e.arrays()


def mention_counts(n: int, types: np.ndarray, src: np.ndarray, dst: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Mention count per entity: the sum of its S-N edge weights."""
    sn = (types[src] == S) & (types[dst] == N)
    ns = (types[src] == N) & (types[dst] == S)
    out = np.bincount(dst[sn], weights=w[sn], minlength=n) + np.bincount(src[ns], weights=w[ns], minlength=n)
    return np.rint(out).astype(np.int32)


# ----------------------------------------------------------------------------- chunk

def chunk_stage(docs: list, first_doc: int, config, bars, *, min_docs_for_workers: int = 8192) -> list[list]:
    """``[chunk id, doc id, text]`` rows of the documents ``docs`` (doc ids from ``first_doc``).

    Large corpora are chunked by forked worker processes (``executor.workers``); rows come
    back in document order either way.
    """
    from .chunk import chunk_texts
    from .executor.local import fork_map

    rows: list[list] = []
    texts = [d.text for d in docs]
    step = 2048  # documents per batch
    batches = [(texts[b:b + step], config.chunk.max_tokens, config.chunk.min_tokens)
               for b in range(0, len(texts), step)]
    workers = config.executor.workers if len(texts) >= min_docs_for_workers else 1
    with bars.bar(len(docs), "chunk") as bar:
        i = 0
        for pieces in fork_map(chunk_texts, batches, workers):
            for doc_pieces in pieces:
                for piece in doc_pieces:
                    rows.append([len(rows), first_doc + i, piece])
                i += 1
            bar.update(len(pieces))
    return rows


# ----------------------------------------------------------------------------- decompose

def decompose_stage(executor, config, backend, llm, root: Path, chunk_rows, doc_of, bars, assembly=None):
    """(records of every chunk, left in their shards on disk; failures ``{chunk id: "source: error"}``).

    ``assembly``: an :class:`Assembly` to feed as records arrive, so that the main process assembles
    while the workers decompose (on 2 cores at 10^5 passages: both stages in ~50 s instead of ~75 s).
    """
    from .executor.sharded import decompose_sharded

    records = decompose_sharded(executor, config, backend, llm, root, chunk_rows, doc_of, bars,
                                on_records=assembly.advance if assembly is not None else None)
    src_of = {cid: doc_of[did].source for cid, did, _ in chunk_rows if cid in records.errors}
    failures = {cid: f"{src_of.get(cid, '?')}: {err}" for cid, err in sorted(records.errors.items())}
    return records, failures


# ----------------------------------------------------------------------------- assemble

#: Chunks assembled per group: their records and traces are the only per-chunk objects alive at once.
ASSEMBLE_GROUP = 4096


class Assembly:
    """The assemble stage, run incrementally: chunks are added to the table in chunk order as soon as
    their decomposition records are noted (:meth:`advance`), the rest and the name links at the end
    (:func:`assemble_stage`).

    Where the cut between the calls falls never changes the result: chunks are assembled one by one
    in the same order, and the groups only bound how many records are parsed at once.
    """

    def __init__(self, table: NodeTable, base: EdgeList, traces, chunk_rows, doc_of, docs_rows: list, config):
        self.table, self.base, self.chunk_rows, self.doc_of = table, base, chunk_rows, doc_of
        self.docs_rows, self.config = docs_rows, config
        self.old_n = len(table)
        self.parts = [traces_table(traces)]
        self.pos = 0  # chunk rows assembled so far
        self.busy_s = 0.0  # seconds spent assembling inside advance()

    def advance(self, records) -> None:
        """Assemble the chunks from the next one on whose records are noted in ``records``."""
        t0 = time.perf_counter()
        rows = self.chunk_rows
        end = self.pos
        while end < len(rows) and rows[end][0] in records:
            end += 1
        for g in range(self.pos, end, ASSEMBLE_GROUP):
            self._assemble(rows[g:min(end, g + ASSEMBLE_GROUP)], records)
        self.pos = end
        self.busy_s += time.perf_counter() - t0

    def _assemble(self, rows, records) -> None:
        crecs, plans = [], []
        for cid, did, text in rows:
            d = self.doc_of[did]
            crecs.append(ChunkRecord(cid, did, text, d.source, d.title))
            plans.append(records.plan(cid, d.source, text))
        made: list = []
        self.base.extend(assemble_planned(self.table, crecs, plans, trace=made))
        units = ["[" + ",".join(f"[{sid},{p.u_trace[u]}" for sid, u in created) + "]"
                 for (p, _), (_, created) in zip(plans, made)]
        self.parts.append(traces_columns([c.doc_id for c in crecs], [t for t, _ in made], units))


def assemble_stage(assembly: Assembly, records):
    """Finish ``assembly``: add the chunks not assembled yet, append the documents' rows, link known names.

    ``records``: the decompose stage's :class:`~noderag.build.executor.sharded.DecomposedRecords`
    (every chunk noted), read in chunk order one group at a time. Returns (chunk traces as an
    Arrow table, name-link edges). A failed chunk becomes its T node alone. Afterwards the table
    keeps only A/H/O keys in its key map (the only nodes still added).
    """
    import pyarrow as pa

    assembly.advance(records)
    if assembly.pos != len(assembly.chunk_rows):
        cid = assembly.chunk_rows[assembly.pos][0]
        raise RuntimeError(f"assemble: no decomposition record of chunk {cid}")
    table, config = assembly.table, assembly.config
    old_n = assembly.old_n
    traces = pa.concat_tables(assembly.parts)
    assembly.parts = []
    doc_chunks: dict[int, list[int]] = {}  # chunk ids are T node ids
    types = table.types_array()
    for i in (old_n + np.flatnonzero(types[old_n:] == T)).tolist():
        doc_chunks.setdefault(table.doc_ids[i], []).append(i)
    for did, d in assembly.doc_of.items():
        assembly.docs_rows.append({"doc_id": did, "source": d.source, "title": d.title,
                                   "content_hash": d.content_hash, "chunk_ids": doc_chunks.get(did, [])})
    bsrc, bdst, bw = assembly.base.arrays()
    link = (link_known_names(table, bsrc, bdst, bw, workers=config.executor.workers)
            if config.decompose.link_known_names else EdgeList())
    table.keep_index_for((A, H, O))
    return traces, link


# ----------------------------------------------------------------------------- embed T/S

def embed_stage(table: NodeTable, old_n: int, emb, executor, config, stages: Path, bars, doc_of,
                embedder_given: bool, old_vectors: tuple[Path, np.ndarray] | None = None,
                vectors_file: Path | None = None) -> NodeVectors:
    """Vectors of every T/S node: the new ones embedded (resumable shards), the old ones read from
    ``old_vectors`` = (the previous generation's vectors.usearch, old id of each node).

    ``vectors_file``: keep them in this ``.npy`` file (room for the A and H vectors included), which
    the vector index worker maps too; the build then holds only the rows it is using in memory."""
    from .decompose.nlp import unit_prefix
    from .embed import embed_late_resumable, embed_texts_resumable, load_vectors
    from .executor.sharded import embed_sharded

    dim = int(emb.dim)
    n_ts = len(table)
    types = table.types_array()
    # rows for the embedded nodes only; float16 unless the index keeps float32 vectors
    vec = NodeVectors(dim, np.float32 if config.embed.vector_dtype == "f32" else np.float16)
    n_vec = int(np.isin(types, (T, S)).sum())
    vec.reserve(n_vec + 1024 + n_vec // 20)  # untouched pages until written; room for the A and H vectors
    if vectors_file is not None:
        vectors_file.parent.mkdir(parents=True, exist_ok=True)
        vec.share_file(vectors_file)
    if old_vectors is not None:
        path, vec_src = old_vectors
        old_ids = np.flatnonzero(np.isin(types[:old_n], (T, S)))
        vec[old_ids] = load_vectors(path, vec_src[old_ids], dim)
    new_ids = np.flatnonzero(np.isin(types, (T, S)) & (np.arange(n_ts) >= old_n))
    with bars.bar(int(new_ids.size), "embed T/S") as bar:
        if config.embed.late_units and callable(getattr(emb, "embed_with_spans", None)):
            new_t = new_ids[types[new_ids] == T]
            new_s = new_ids[types[new_ids] == S]
            pos_of_t = {int(t): k for k, t in enumerate(new_t.tolist())}
            in_new_chunk = np.array([table.chunk_ids[s] in pos_of_t for s in new_s.tolist()], dtype=bool)
            if not in_new_chunk.all():  # a new unit of an existing chunk: no forward pass of its chunk to reuse
                rest = new_s[~in_new_chunk]
                vec[rest] = embed_texts_resumable(emb, [table.texts[i] for i in rest.tolist()], stages / "emb_s",
                                                  batch_size=config.embed.batch_size, progress=bar)
                new_s = new_s[in_new_chunk]
            unit_chunk = np.array([pos_of_t[table.chunk_ids[s]] for s in new_s.tolist()], dtype=np.int64)
            titles = [getattr(doc_of.get(table.doc_ids[t]), "title", None) for t in new_t.tolist()]
            vec[new_t], vec[new_s], _ = embed_late_resumable(
                emb, [table.texts[i] for i in new_t.tolist()], [table.texts[i] for i in new_s.tolist()],
                unit_chunk, [unit_prefix(t) if t else None for t in titles], stages / "emb_ts",
                batch_size=config.embed.batch_size, progress=bar)
        else:
            embed_sharded(executor, config, emb, embedder_given, table.texts.take(new_ids),
                          stages / "emb_ts", bar, out=vec.slots(new_ids))
    return vec


# ----------------------------------------------------------------------------- attributes

@dataclass
class Attributes:
    """What the attributes stage made: A node ids and edges, failures, the important entities."""

    ids: list[int]
    edges: EdgeList
    failures: dict
    important: np.ndarray


def attributes_stage(table: NodeTable, base: EdgeList, link: EdgeList, vec: NodeVectors, emb, backend, config,
                     stages: Path, bars) -> Attributes:
    """Important entities (k-core, betweenness, mentions) and their A nodes, with A vectors in ``vec``."""
    from ..graph.importance import important_entities

    from .augment import add_attributes, mean_vectors, subgraph_csr
    from .embed import embed_texts_resumable

    n0 = len(table)
    types = table.types_array()
    s1, d1, w1 = cat_edges(base, link)
    mentions = mention_counts(n0, types, s1, d1, w1)
    snr = subgraph_csr(n0, types, s1, d1, w1, (S, N, R))
    del s1, d1, w1
    important = important_entities(snr, types, mentions, config.importance,
                                   nodes=np.flatnonzero(np.isin(types, (S, N, R))))
    a_ids, a_edges, a_fail, a_sources = add_attributes(table, snr, mentions, important, config.attributes,
                                                       llm=backend, seed=config.seed)
    a_arr = np.asarray(a_ids, dtype=np.int64)
    if config.embed.extractive_mean and a_ids and all(a in a_sources for a in a_ids):
        vec[a_arr] = mean_vectors([a_sources[a] for a in a_ids], lambda ids: vec[ids])
    else:
        with bars.bar(int(a_arr.size), "embed A") as bar:
            vec[a_arr] = embed_texts_resumable(emb, [table.texts[i] for i in a_ids], stages / "emb_a",
                                               batch_size=config.embed.batch_size, progress=bar)
    vec.drop_resident()  # the unit vectors read for the means
    return Attributes(a_ids, a_edges, a_fail, important)


# ----------------------------------------------------------------------------- communities

@dataclass
class Communities:
    """What the communities stage made: H and O node ids, their edges, failures, community count."""

    h_ids: list[int] = field(default_factory=list)
    o_ids: list[int] = field(default_factory=list)
    edges: EdgeList = field(default_factory=EdgeList)
    failures: dict = field(default_factory=dict)
    count: int = 0
    retired: int = 0
    leiden_s: float = 0.0  # wall seconds of the Leiden call alone (the stage report shows it)


def communities_stage(table: NodeTable, base: EdgeList, link: EdgeList, attrs: Attributes, vec: NodeVectors,
                      emb, backend, config, stages: Path, bars) -> Communities:
    """Leiden communities of the S/N/R/A graph and their H/O nodes (H vectors in ``vec``); then every
    A/H/O node this run did not produce is retired."""
    from .augment import add_communities, retire_unproduced, subgraph_csr

    out = Communities()
    if config.communities.enabled:
        from ..graph.communities import leiden

        from .embed import embed_texts_resumable

        types = table.types_array()
        n1 = len(table)
        snra = subgraph_csr(n1, types, *cat_edges(base, link, attrs.edges), (S, N, R, A))
        t0 = time.perf_counter()
        membership = np.asarray(leiden(snra, resolution=config.communities.resolution,
                                       objective=config.communities.objective, seed=config.seed,
                                       n_iterations=config.communities.iterations,
                                       engine=config.communities.engine))
        out.leiden_s = time.perf_counter() - t0
        out.count = int(membership.max()) + 1 if membership.size else 0
        sn = subgraph_csr(n1, types, *cat_edges(base, link), (S, N))  # after Leiden: not held at its peak
        counter = {"n": 0}

        def vectors_of(ids: np.ndarray) -> np.ndarray:
            return vec[np.asarray(ids, dtype=np.int64)]

        def embed_h(texts: list[str]) -> np.ndarray:
            counter["n"] += 1
            with bars.bar(len(texts), "embed H") as bar:
                return embed_texts_resumable(emb, texts, stages / f"emb_h{counter['n']}",
                                             batch_size=config.embed.batch_size, progress=bar)

        out.h_ids, out.o_ids, out.edges, out.failures, hv = add_communities(
            table, snra, membership, sn, config.communities, vectors_of=vectors_of, embed_texts=embed_h,
            llm=backend, seed=config.seed, mean_of_units=config.embed.extractive_mean)
        if out.h_ids:
            vec[np.asarray(out.h_ids, dtype=np.int64)] = hv
        vec.drop_resident()  # the member vectors read for the H nodes
    out.retired = retire_unproduced(table, set(attrs.ids) | set(out.h_ids) | set(out.o_ids))
    return out


# ----------------------------------------------------------------------------- vectors

def start_vector_stage(table: NodeTable, vec: NodeVectors, config, work: Path):
    """Start the HNSW vector index of the T/S nodes right after the embed stage, on one core.

    It builds in a worker process (:mod:`noderag.build.vector_process`, its files under ``work``)
    that maps the vectors from ``vec``'s file (``embed_stage``'s ``vectors_file``) while the
    attributes, communities and finalize stages run single-threaded in Python here, the shards
    taking turns block by block; ``build.finish`` widens it to every core once this process only
    waits. Each shard is built by one thread in a fixed order, so when it runs never changes the index.
    """
    from .vector_process import VectorBuild

    types = table.types_array()
    ts_ids = np.flatnonzero(np.isin(types, (T, S)) & table.active_array())
    return VectorBuild(ts_ids, vec.rows_of(ts_ids), vec.file, vec.dim, config.embed, work,
                       parallel=1)


def vector_stage(table: NodeTable, vec: NodeVectors, config, build, path: Path) -> tuple[bool, Any]:
    """Queue the A/H vectors on the index ``build`` (:func:`start_vector_stage`).

    Returns (whether the index is saved at ``path`` already, semantic kNN layer CSR). The layer is
    empty unless enabled; it needs the finished index, so then the index is saved here. Otherwise
    the shards finish while the driver writes the other files (``build.finish(path)`` afterwards).
    Vector order: T/S, then A/H, each by id.
    """
    n = len(table)
    types = table.types_array()
    active = table.active_array()
    ah_ids = np.flatnonzero(np.isin(types, (A, H)) & active)
    build.add(ah_ids, vec.view(ah_ids))
    if config.semantic.enabled:
        from ..graph.vectors import VectorIndex

        from .embed import semantic_layer

        build.finish(path)
        emb_ids = np.flatnonzero(np.isin(types, (T, S, A, H)) & active)
        return True, semantic_layer(n, emb_ids, vec[emb_ids], config.semantic.k,
                                    index=VectorIndex.load(path, view=True, threads=os.cpu_count() or 1))
    from ..graph.csr import CSR

    return False, CSR.empty(n)


def tables_stage(final: Path, table: NodeTable, mentions: np.ndarray, docs_rows: list) -> None:
    """Write ``nodes.parquet`` and ``documents.parquet`` into ``final``, then release the table's texts,
    names and source ids (the file holds them; the later stages need only its typed columns).

    Runs once every node exists (after the communities stage), before the vector stage: the peak of
    the vector and graph stages no longer holds millions of Python strings.
    """
    from ..store.tables import write_documents, write_nodes

    write_nodes(final / "nodes.parquet", table, mentions)
    write_documents(final / "documents.parquet", docs_rows)
    table.release_strings()


def files_stage(final: Path, graph, link: EdgeList, write_linked: Callable) -> None:
    """Write the graph and name-link files of the finished index into ``final`` (the node tables, chunk
    traces, vector index and query index were written before)."""
    graph.save(final)
    write_linked(*link.arrays())
