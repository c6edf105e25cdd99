"""Delete of base documents in place of a recompute: the deleted documents' nodes scrubbed, every id kept.

A delete whose documents are all in the base does not re-assemble the survivors and recompute every
global stage (minutes at 10^5 passages). It writes a new generation in which the nodes that hold the
deleted text are *scrubbed*: their text, name and source are gone, they are inactive, their edges are
left out of the graph and their keys are replaced by tombstones that no text hashes to (a later insert
of the same text makes a new node). Which nodes hold deleted text (:func:`scrubbed_nodes`):

- the T and S nodes of the deleted documents;
- the N and R nodes first named in them: a node's text is its first mention, so these nodes' texts
  are the deleted documents' words. Node ids follow assembly order, so a node was first named in the
  chunk of the last T node before it; an R node naming a scrubbed N goes too;
- the A nodes that quote a scrubbed unit or relationship of their entity, the H nodes that quote a
  scrubbed unit or attribute of their community, and the O nodes of those H or naming a scrubbed entity.

What is approximated until the next compaction (``noderag compact``; ``--full`` gives the fresh
build of the survivors byte for byte): an entity or relationship first named in a deleted document
leaves the graph even when a surviving document names it too; mention counts, importance,
communities and BM25 statistics are those of the index before the delete; the vectors of the
scrubbed T/S/A/H nodes stay in the HNSW shards (never returned: a search skips inactive nodes).

What is written: the text is gone from every file of the new generation, and only what held it is
written again. The node texts' pages that held scrubbed texts get zeros in new copies (the other pages
and the offsets are shared: :func:`noderag.search.query_index.scrub_query_tables`, whose hash and posting
arrays are shared too); the parts of ``decompositions/`` that held the deleted chunks' rows are written
without them (:func:`noderag.store.decompositions.filter_decompositions`); ``nodes.parquet``, the
smaller query blobs, the keys and ``documents.parquet`` (where a deleted document keeps its row and id as
a tombstone with no source, title, content hash or chunks) are written whole. The graph, the node types
and ``communities.npy`` are shared: ``scrubbed.npy`` lists the scrubbed nodes, whose edges every opened
graph leaves out (:func:`noderag.store.segments.base_graph`) and whose labels a merging compaction does
not start from. Delta segments are shared as they are; where the segments are joined, their edges and
name links to scrubbed nodes are left out (:func:`noderag.store.segments.scrubbed_mask`).

A replacement (a document given again with its id and new text) of base documents scrubs the old
versions and commits, then inserts the new ones as a delta segment (``noderag.indexing.plan.Scrub.then_insert``; the
driver runs the insert once the scrub is committed).

Taken when :func:`scrub_reason` finds nothing against it: no document of a delta segment is deleted
with them (a delete inside the deltas rewrites those; base and delta documents together recompute the
index), segments are on, the semantic layer is off and there is no LLM cache (whose replies may quote
the documents: the full delete prunes it).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from ...graph.storage import tree_files
from ...graph.types import A, H, N, O, R, S, T, NodeType
from ...store.layout import DELTAS

if TYPE_CHECKING:
    from ..plan import RunPlan

__all__ = ["scrub_reason", "scrubbed_nodes", "tombstone_keys", "is_tombstone", "write_scrubbed"]


def is_tombstone(row: dict) -> bool:
    """True for the ``documents.parquet`` row of a document a scrub deleted (no source, no content hash)."""
    return not row.get("source") and not row.get("content_hash")


def scrub_reason(previous, config, drop) -> str | None:
    """Why deleting the documents ``drop`` of ``previous`` must recompute the index (None: it scrubs them)."""
    from ...store.layout import LLM_CACHE
    from ...store.segments import deltas_of

    if not drop:
        return "nothing is deleted"
    if not config.update.segments:
        return "update.segments = false"
    if config.semantic.enabled:
        return "the semantic kNN layer is on"
    deltas = deltas_of(previous.manifest, previous.path)
    if deltas and max(drop) >= deltas[0].first_document:
        return "documents of the base and of the delta segments are deleted together"
    if (previous.path.parent.parent / LLM_CACHE).is_file():
        return "the index has an LLM cache, whose replies may quote the documents"
    return None


def _neighbours(indptr: np.ndarray, indices: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Every structural neighbour of the nodes ``ids`` (with repeats), one gather."""
    ids = np.asarray(ids, dtype=np.int64)
    starts = np.asarray(indptr[ids], dtype=np.int64)
    lens = np.asarray(indptr[ids + 1], dtype=np.int64) - starts
    if not lens.size or not lens.sum():
        return np.zeros(0, np.int64)
    at = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()), dtype=np.int64)
    return np.asarray(indices[at], dtype=np.int64)


def scrubbed_nodes(types: np.ndarray, doc: np.ndarray, indptr: np.ndarray, indices: np.ndarray,
                   communities: np.ndarray | None, drop, text_of: Callable[[int], str]) -> np.ndarray:
    """The nodes that hold text of the documents ``drop`` (bool mask, see the module docstring).

    ``doc``: each node's document id (-1 for N/R/A/H/O); ``indptr``/``indices``: the structural layer;
    ``communities``: each node's Leiden label (-1: none) or None; ``text_of(id)``: a node's text (the
    A, H and O nodes near the scrubbed ones are checked for the scrubbed texts they quote).
    """
    types = np.asarray(types)
    n = types.shape[0]
    dead = np.isin(types, (T, S)) & np.isin(np.asarray(doc), np.asarray(list(drop), dtype=np.int64))
    t_ids = np.flatnonzero(types == T)
    named = np.flatnonzero((types == N) | (types == R))
    if t_ids.size and named.size:  # first named in the chunk of the last T node before them
        pos = np.searchsorted(t_ids, named, side="right") - 1
        ok = pos >= 0
        dead[named[ok]] = dead[t_ids[pos[ok]]]

    def touching(ids: np.ndarray, kind: int) -> np.ndarray:
        nb = _neighbours(indptr, indices, ids)
        return np.unique(nb[types[nb] == kind])

    dead[touching(np.flatnonzero(dead & (types == N)), R)] = True
    # an A node quotes its entity's units and relationships, and names the entity
    for e in touching(np.flatnonzero(dead & np.isin(types, (S, R))), N).tolist() + \
            np.flatnonzero(dead & (types == N)).tolist():
        nb = _neighbours(indptr, indices, np.asarray([e]))
        quoted = [text_of(i) for i in nb[dead[nb] & np.isin(types[nb], (S, R))].tolist()]
        for a in nb[types[nb] == A].tolist():
            if dead[e] or any(q and q in text_of(a) for q in quoted):
                dead[a] = True
    # an H node quotes units of its community (found through its links to members), an O node names entities
    if communities is not None and communities.shape[0] == n:
        units = np.flatnonzero(dead & np.isin(types, (S, A)))
        by_label: dict[int, list[str]] = {}
        for i, lab in zip(units.tolist(), communities[units].tolist()):
            by_label.setdefault(lab, []).append(text_of(i))
        h_cand = touching(np.flatnonzero(np.isin(types, (S, A)) & np.isin(communities, list(by_label))), H)
        for h in h_cand.tolist():
            nb = _neighbours(indptr, indices, np.asarray([h]))
            labels = set(communities[nb[np.isin(types[nb], (S, A))]].tolist())
            text = text_of(h)
            if any(q and q in text for lab in labels for q in by_label.get(lab, ())):
                dead[h] = True
    gone_names = {text_of(i) for i in np.flatnonzero(dead & (types == N)).tolist()}
    for o in np.flatnonzero(types == O).tolist() if gone_names else []:
        if any(part in gone_names for part in text_of(o).split(", ")):
            dead[o] = True
    dead[touching(np.flatnonzero(dead & (types == H)), O)] = True
    return dead


def tombstone_keys(node_ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Keys for the scrubbed nodes ``node_ids``: derived from the id alone (nothing of the text), distinct,
    and none equal to a key in ``keys`` (splitmix64 of the id, salted again in the unlikely event of a clash)."""
    ids = np.asarray(node_ids, dtype=np.uint64)
    taken = np.asarray(keys, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for salt in range(1, 64):
            z = ids + np.uint64(0x9E3779B97F4A7C15) * np.uint64(salt)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
            zs = np.sort(z)
            pos = np.minimum(np.searchsorted(zs, taken), max(zs.size - 1, 0))
            if not zs.size or not np.any(zs[pos] == taken):
                return z
    raise RuntimeError("no tombstone keys without a clash")  # 63 clashes of 64-bit hashes: not reachable


#: The Parquet options of the tables a scrub rewrites: zstd level 1 instead of a build's 6 (at 10^5 passages
#: ``nodes.parquet`` writes in about 1 s instead of 3 s, for more bytes); the next compaction writes level 6 again.
SCRUB_PARQUET = {"compression": "zstd", "compression_level": 1, "use_dictionary": False}


def _nodes_without(path: Path, out: Path, dead: np.ndarray) -> None:
    """``nodes.parquet`` with the scrubbed rows' text, name and source emptied and their flag cleared."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ...graph.storage import atomic_write_parquet

    tab = pq.ParquetFile(path).read()  # the texts of a current index are beside it (erased by write_scrubbed)
    mask = pa.array(dead)
    cols = {}
    for name in tab.column_names:
        col = tab.column(name)
        if name == "text":
            col = pc.if_else(mask, pa.scalar("", pa.string()), col)
        elif name in ("name", "source_id"):
            col = pc.if_else(mask, pa.scalar(None, pa.string()), col)
        elif name == "active":
            col = pc.and_(col, pc.invert(mask))
        elif name == "mentions":
            col = pc.if_else(mask, pa.scalar(0, col.type), col)
        cols[name] = col
    out_tab = pa.Table.from_arrays(list(cols.values()), schema=tab.schema)
    atomic_write_parquet(out, out_tab, **SCRUB_PARQUET, column_encoding={"id": "DELTA_BINARY_PACKED"})


def _documents_without(path: Path, out: Path, drop: list[int]) -> None:
    """``documents.parquet`` with the deleted rows made tombstones."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ...graph.storage import atomic_write_parquet

    tab = pq.ParquetFile(path).read()
    gone = np.zeros(tab.num_rows, dtype=bool)
    gone[np.asarray(drop, dtype=np.int64)] = True
    mask = pa.array(gone)
    cols = []
    for name in tab.column_names:
        col = tab.column(name)
        if name in ("source", "title", "content_hash"):
            col = pc.if_else(mask, pa.scalar(None, col.type), col)
        elif name == "chunk_ids":
            col = pc.if_else(mask, pa.scalar([], col.type), col)
        cols.append(col)
    atomic_write_parquet(out, pa.Table.from_arrays(cols, schema=tab.schema), **SCRUB_PARQUET)


def _filtered_parquet(path: Path, out: Path, keep) -> None:
    """The Parquet table at ``path`` with the rows ``keep(table)`` (a bool array) selects, written to ``out``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ...graph.storage import atomic_write_parquet

    tab = pq.ParquetFile(path).read()
    atomic_write_parquet(out, tab.filter(pa.array(keep(tab))).combine_chunks(), **SCRUB_PARQUET)


def _removed_edges(csr, dead: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of every structural edge at a scrubbed node, each undirected edge once."""
    indptr, indices = np.asarray(csr.indptr, dtype=np.int64), np.asarray(csr.indices)
    ids = np.flatnonzero(dead)
    nb = _neighbours(indptr, indices, ids)
    src = np.repeat(ids, (indptr[ids + 1] - indptr[ids]))
    once = ~dead[nb] | (src < nb)  # an edge between two scrubbed nodes is listed by both: keep one
    return src[once], nb[once]


def write_scrubbed(run: RunPlan) -> tuple[dict, dict[str, str], frozenset[str]]:
    """Write the scrubbed generation into ``run.final`` (the unchanged files shared). Returns what the commit
    needs: its manifest, the checksums of the files shared with the previous generation, every file's path."""
    import shutil

    from ...graph.storage import atomic_save_npy, load_npy
    from ...search.query_index import open_query_index, scrub_query_tables
    from ...store.decompositions import DECOMPOSITIONS, filter_decompositions
    from ...store.layout import (COMMUNITIES, DOCUMENTS, LINKED, NODE_TEXT_PAGES, NODES,
                                QUERY_DIR, SCRUBBED, SCRUBBED_KEYS)
    from ...store.paged_blob import erase_strings, page_name, pages_holding
    from ...store.node_texts import node_texts
    from ...store.segments import base_graph, scrubbed_overlay, share_generation
    from ...store.verify import CHECKSUMS, check_files
    from ..finalize import edge_kinds

    t0 = time.perf_counter()
    prev = run.previous.path
    if run.final.exists():
        shutil.rmtree(run.final)
    run.final.mkdir(parents=True)
    graph = base_graph(prev)  # without the edges of the nodes earlier deletes scrubbed
    types = np.asarray(graph.types)
    comm = (np.asarray(load_npy(prev / COMMUNITIES, True, dtype=np.int32, shape=types.shape))
            if (prev / COMMUNITIES).is_file() else None)
    st = graph.structural
    texts = open_query_index(prev, checked=False)
    dead = scrubbed_nodes(types, np.asarray(texts.doc), np.asarray(st.indptr), np.asarray(st.indices), comm,
                          run.drop, lambda i: texts.texts([i])[0])
    was_active = np.asarray(texts.active, dtype=bool)
    # the graph, node types and communities are shared: scrubbed.npy lists the nodes whose edges and labels
    # they still hold, left out where the graph is opened (noderag.store.segments.base_graph)
    rewritten = (NODES, DOCUMENTS, DECOMPOSITIONS, LINKED, SCRUBBED, SCRUBBED_KEYS,
                 f"{NODE_TEXT_PAGES}/", f"{QUERY_DIR}/")
    shared, copied = share_generation(prev, run.final, skip=rewritten)
    run.say(f"deleting {len(run.drop)} document(s) in place: {int(dead.sum())} nodes held their text (scrubbed)")
    dead_ids = np.flatnonzero(dead)
    keys = np.array(graph.keys, dtype=np.uint64)  # earlier deletes' tombstones in
    keys[dead_ids] = tombstone_keys(dead_ids, keys)
    earlier = scrubbed_overlay(prev, types.shape[0])
    ids = dead_ids if earlier is None else np.union1d(earlier, dead_ids)
    atomic_save_npy(run.final / SCRUBBED, ids)  # node_keys.npy is shared: the tombstones are kept beside it
    atomic_save_npy(run.final / SCRUBBED_KEYS, keys[ids])
    _nodes_without(prev / NODES, run.final / NODES, dead)
    # the pages that held scrubbed texts get zeros in new copies; the others and the offsets are shared
    pages = node_texts(prev / NODES, types.shape[0])
    held = pages_holding(pages.offsets, pages.pages.page, dead)  # checked byte for byte before they are rewritten
    check_files(prev, run.previous.manifest, tuple(f"{NODE_TEXT_PAGES}/{page_name(p)}" for p in held))
    erase_strings(prev / NODE_TEXT_PAGES, run.final / NODE_TEXT_PAGES, pages.offsets, pages.pages.page, dead)
    _documents_without(prev / DOCUMENTS, run.final / DOCUMENTS, run.drop)
    gone = np.asarray(run.drop, dtype=np.int64)
    filter_decompositions(prev / DECOMPOSITIONS, run.final / DECOMPOSITIONS, gone, **SCRUB_PARQUET)
    if (prev / LINKED).is_file():
        _filtered_parquet(prev / LINKED, run.final / LINKED,
                          lambda t: ~(dead[t.column("src").to_numpy()] | dead[t.column("dst").to_numpy()]))
    scrub_query_tables(prev, run.final, dead, gone)
    manifest = _scrub_manifest(run, types, dead, was_active, _removed_edges(st, dead), edge_kinds,
                               time.perf_counter() - t0, len(shared), copied)
    sums = (run.previous.manifest.get(CHECKSUMS) or {}).get("files") or {}
    files = tree_files(run.final)
    linked = [rel for rel in files if rel in sums and os.stat(run.final / rel).st_ino == os.stat(prev / rel).st_ino]
    return manifest, {rel: sums[rel] for rel in linked}, frozenset(files)


def _scrub_manifest(run: RunPlan, types, dead, was_active, removed, edge_kinds, seconds: float, shared: int,
                    copied: int) -> dict:
    """The previous manifest with its counts less what was scrubbed (base edges removed, and the delta segments'
    edges that ended at scrubbed nodes), this run and its stage report."""
    from ...graph.types import TYPE_NAMES
    from ...store.manifest import dir_sizes, index_manifest
    from ...graph.types import TYPE_DTYPE
    from ...store.layout import NODE_TYPES
    from ...store.segments import concat_npy, delta_edges, deltas_of, segment_folders

    prev = run.previous.manifest
    counts = dict(prev.get("counts") or {})
    newly = dead & was_active
    src, dst = removed
    for d in deltas_of(prev, run.previous.path):
        a, b, _ = delta_edges(run.previous.path / DELTAS / d.name)
        hit = ((a < dead.shape[0]) & dead[np.minimum(a, dead.shape[0] - 1)]) | \
              ((b < dead.shape[0]) & dead[np.minimum(b, dead.shape[0] - 1)])
        src, dst = np.concatenate([src, a[hit]]), np.concatenate([dst, b[hit]])
    full_types = concat_npy(segment_folders(run.previous.path, prev), NODE_TYPES, TYPE_DTYPE)
    edges = dict(counts.get("edges") or {})
    for k, v in edge_kinds(full_types, src, dst).items():  # the removed edges' kinds, off the previous counts
        edges[f"structural.{k}"] = int(edges.get(f"structural.{k}", 0)) - v
    edges["structural"] = int(edges.get("structural", 0)) - int(src.shape[0])
    active = dict(counts.get("active_nodes") or {})
    for t in range(7):
        name = TYPE_NAMES[NodeType(t)]
        active[name] = int(active.get(name, 0)) - int(np.sum(newly & (types == t)))
    counts.update({
        "documents": int(counts.get("documents", 0)) - len(run.drop),
        "active_nodes": active,
        "retired_nodes": int(counts.get("retired_nodes", 0)) + int(newly.sum()),
        "retired_this_run": int(newly.sum()),
        "scrubbed_nodes": int(counts.get("scrubbed_nodes", 0)) + int(dead.sum()),
        # the vectors of the scrubbed T/S/A/H nodes stay in the shards until a compaction (never returned)
        "scrubbed_vectors": int(counts.get("scrubbed_vectors", 0)) + int(np.sum(newly & np.isin(types, (T, S, A, H)))),
        "edges": {k: v for k, v in edges.items() if not k.startswith("structural.") or v > 0},
    })
    stages = {"scrub": {"state": "done", "time_s": round(seconds, 3), "documents": len(run.drop), "nodes": int(dead.sum()),
                        "shared_files": shared, "copied_bytes": copied}}
    manifest = index_manifest(
        config=run.config.to_index_dict(), embedder=prev.get("embedder") or {}, counts=counts, stages=stages,
        tokens={}, failures=prev.get("failures") or {}, sizes=dir_sizes(run.final),
        run={"documents_added": 0, "duplicates": 0, "chunks": 0, "documents_deleted": len(run.drop),
             "scrubbed": True},
        run_id=run.run_id, previous=prev)
    if prev.get(DELTAS):  # shared as they are
        manifest[DELTAS] = prev[DELTAS]
    return manifest
