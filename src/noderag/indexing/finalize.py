"""The finalize stages: node tables, the vector index (+ semantic kNN layer), query tables, graph files.

The HNSW index of the T/S nodes starts right after the embed stage in a worker process
(:func:`start_vector_stage`) and is finished on every core before the other files are written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..store.layout import DOCUMENTS, NODES, VECTORS
from ..graph.types import A, H, NodeType, S, T

from .assemble import EdgeList, NodeTable
from .node_vectors import NodeVectors

__all__ = ["start_vector_stage", "vector_stage", "tables_stage", "files_stage", "finalize_stage", "write_linked",
           "edge_kinds", "graph_counts"]



def start_vector_stage(table: NodeTable, vec: NodeVectors, config, work: Path):
    """Start the HNSW vector index of the T/S nodes right after the embed stage, on one core.

    It builds in a worker process (:mod:`noderag.indexing.vector_process`, its files under ``work``)
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
    the shards finish at the start of :func:`finalize_stage` (``build.finish(path)``).
    Vector order: T/S, then A/H, each by id.
    """
    n = len(table)
    types = table.types_array()
    active = table.active_array()
    ah_ids = np.flatnonzero(np.isin(types, (A, H)) & active)
    build.add(ah_ids, vec.view(ah_ids))
    if config.semantic.enabled:
        from ..graph.vectors import VectorIndex

        from .embedding import semantic_layer

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

    write_nodes(final / NODES, table, mentions)
    write_documents(final / DOCUMENTS, docs_rows)
    table.release_strings()


def files_stage(final: Path, graph, link: EdgeList, write_linked: Callable) -> None:
    """Write the graph and name-link files of the finished index into ``final`` (the node tables, chunk
    traces, vector index and query index were written before)."""
    graph.save(final)
    write_linked(*link.arrays())


def finalize_stage(final: Path, table: NodeTable, edges: tuple[np.ndarray, np.ndarray, np.ndarray], semantic,
                   link: EdgeList, vbuild, saved: bool, bars) -> tuple[Any, dict]:
    """Write the query tables, the graph and the name links into ``final`` and finish the vector index.

    Returns (the graph, the stage report's timings). The vector index is finished first (its shards had the
    spare core since the embed stage; what is left gets every core now), so the worker process and its
    shards are gone before the query tables' peak, the build's largest; then the query tables, which overlap
    neither the vector stage nor the graph: a forked child (:class:`~noderag.indexing.query_early.EarlyTables`)
    makes the BM25 postings and half the line token counts while this process makes the rest, the second core
    being free again once the vector index is (where no child can be forked, this process makes them all).
    """
    import time

    from ..graph.hetero import HeteroGraph
    from ..search.query_index import write_query_index  # what a query would otherwise prepare in O(n) at open
    from .previous import LINKED
    from .query_early import EarlyTables

    parts = {}
    t0 = time.perf_counter()
    if not saved:  # first, so that the worker's memory (the HNSW shards) is gone before the query tables' peak
        vbuild.finish(final / VECTORS)  # widens the shards to every core: this process only waits
        parts["vector_wait_s"] = round(time.perf_counter() - t0, 2)
    if getattr(vbuild, "cpu_s", None) is not None:
        parts["vector_cpu_s"] = vbuild.cpu_s  # the HNSW worker's CPU over the whole build
    t1 = time.perf_counter()
    early = EarlyTables.start(final, final.parent / "query_early")  # before the spinner's thread
    try:
        with bars.spinner("query tables"):
            write_query_index(final, early=early)
    except BaseException:
        if early is not None:
            early.cancel()
        raise
    t2 = time.perf_counter()
    if early is not None:  # the child's CPU, its peak memory (shared pages included) and how long this one waited
        parts.update(query_early_cpu_s=early.cpu_s, query_early_wait_s=early.wait_s,
                     query_early_maxrss_mb=early.maxrss_mb)
    with bars.spinner("finalize"):
        graph = HeteroGraph.from_coo(table.types_array(), table.keys_array(), *edges)
        graph.set_layer("semantic", semantic)
        files_stage(final, graph, link, lambda *e: write_linked(final / LINKED, *e))
    parts.update(query_index_s=round(t2 - t1, 2), graph_files_s=round(time.perf_counter() - t2, 2))
    return graph, parts


def write_linked(path: Path, src: np.ndarray, dst: np.ndarray, w: np.ndarray) -> None:
    """The name-link S-N edges as a zstd Parquet table (structural T/S/N/R edges minus these = base)."""
    import pyarrow as pa

    from ..graph.storage import atomic_write_parquet
    from ..store.tables import PARQUET_OPTIONS

    tab = pa.Table.from_arrays([pa.array(src, pa.int32()), pa.array(dst, pa.int32()), pa.array(w, pa.float32())],
                               names=["src", "dst", "w"])
    atomic_write_parquet(path, tab, **PARQUET_OPTIONS)


def edge_kinds(types: np.ndarray, src: np.ndarray, dst: np.ndarray) -> dict[str, int]:
    """Distinct undirected structural edges per pair of node types ("S-N": count)."""
    if src.size == 0:
        return {}
    from ..graph.arrays import distinct

    lo = np.minimum(src, dst).astype(np.int64)
    hi = np.maximum(src, dst).astype(np.int64)
    keep = lo != hi
    code = distinct(lo[keep] * (1 << 31) + hi[keep])
    lo_u = code >> 31
    hi_u = code & ((1 << 31) - 1)
    ta = np.minimum(types[lo_u], types[hi_u])
    tb = np.maximum(types[lo_u], types[hi_u])
    pair = ta.astype(np.int64) * 7 + tb
    letters = "TSNRAHO"
    return {f"{letters[p // 7]}-{letters[p % 7]}": int(c) for p, c in zip(*np.unique(pair, return_counts=True))}


def graph_counts(table: NodeTable, graph, edges: tuple[np.ndarray, np.ndarray, np.ndarray], *, documents: int,
                 communities: int, important: int, retired: int) -> dict[str, Any]:
    """The manifest's ``counts``: documents, chunks, nodes (all and active) per type, edges per layer and kind."""
    from ..graph.types import TYPE_NAMES

    types, active = table.types_array(), table.active_array()
    nodes = {TYPE_NAMES[NodeType(t)]: int(np.sum(types == t)) for t in range(7)}
    return {
        "documents": documents,
        "chunks": nodes["text"],
        "nodes": nodes,
        "active_nodes": {TYPE_NAMES[NodeType(t)]: int(np.sum((types == t) & active)) for t in range(7)},
        "retired_nodes": int(len(table) - active.sum()),
        "retired_this_run": retired,
        "edges": {"structural": int(graph.structural.nnz // 2), "semantic": int(graph.semantic.nnz // 2),
                  **{f"structural.{k}": v for k, v in edge_kinds(types, edges[0], edges[1]).items()}},
        "communities": communities,
        "important_entities": important,
    }
