"""Place a part's finished index into a segmented generation: the base at the top, every other part as a segment.

A part is built as a complete index of its own (node, document and chunk ids from 0). Its node and document
ids are written into many of its files (the node table, the documents' chunk lists, the traces, the name-link
and structural edges, the HNSW keys, every query table), so placing it at a generation's id ranges rewrites
those files with the ranges' offsets; the arrays that hold no id (node types and keys, node texts) are
shared as hard links. Its query tables are written again with BM25 statistics over every part (the
``background``: the other parts' passage counts and document frequencies). The result is the delta segment
layout of :mod:`noderag.store.segments`: the edges of the segment's structural layer, each once, as
``edges/{src,dst,w}.npy`` in global ids.

Placing reads only the part and the other parts' term tables, and its output is a function of them and the
offsets: any worker gives the same bytes.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...store.layout import (DECOMPOSITIONS, DELTA_EDGES, DOCUMENTS, LINKED, NODE_KEYS, NODE_TEXT_OFF,
                             NODE_TEXT_PAGES, NODE_TYPES, NODES, QUERY_DIR, VECTORS)

__all__ = ["Offsets", "Background", "place_base", "place_segment", "part_counts"]


@dataclass(frozen=True)
class Offsets:
    """Where a part's ids start in the generation: its first node id and its first document id."""

    node: int
    document: int


@dataclass(frozen=True)
class Background:
    """What a part's BM25 impacts count besides its own passages: the other parts' generation folders."""

    others: tuple[str, ...]

    def stats(self):
        """(passages of the other parts, term hashes -> their document frequencies there), as
        :func:`~noderag.search.lexical.lexical_arrays` takes them."""
        from ...search.query_index import open_query_index

        lexicals = [open_query_index(Path(f), checked=False).lexical for f in self.others]
        passages = sum(_passages(f) for f in self.others)
        return passages, lambda h: sum((x.document_frequencies(h) for x in lexicals), np.zeros(len(h), np.int64))


def _passages(folder: str) -> int:
    """The T nodes of a part (every one its BM25 postings may hold)."""
    from ...graph.storage import load_npy
    from ...graph.types import NodeType

    types = np.asarray(load_npy(Path(folder) / NODE_TYPES, True, dtype=np.uint8, ndim=1, shape=None))
    return int(np.sum(types == int(NodeType.T)))


def part_counts(folder: Path) -> tuple[int, int]:
    """(nodes, documents) of a part's generation folder (from its arrays' and tables' headers)."""
    import pyarrow.parquet as pq

    from ...graph.storage import load_npy

    nodes = int(np.asarray(load_npy(folder / NODE_TYPES, True, dtype=np.uint8, ndim=1, shape=None)).shape[0])
    return nodes, int(pq.ParquetFile(folder / DOCUMENTS).metadata.num_rows)


def _link(src: Path, dst: Path) -> None:
    """Hard-link ``src`` (a file or a folder's files) to ``dst``; a copy where links are refused."""
    if src.is_dir():
        dst.mkdir(parents=True, exist_ok=True)
        for child in sorted(src.iterdir()):
            _link(child, dst / child.name)
        return
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def place_base(part: Path, out: Path, background: Background) -> None:
    """The first part as the generation's base: its files shared into ``out``, its query tables written again on
    the BM25 scale of every part."""
    from ...search.query_index import write_query_index
    from ...store.layout import MANIFEST, READERS

    out.mkdir(parents=True, exist_ok=True)
    for child in sorted(part.iterdir()):
        if child.name not in (MANIFEST, READERS) and (child.name != QUERY_DIR or not background.others):
            _link(child, out / child.name)
    if background.others:  # one part alone: its query tables are already on the scale of the whole index
        write_query_index(out, lexical_background=background.stats())


def place_segment(part: Path, out: Path, at: Offsets, background: Background) -> None:
    """A later part as the segment ``out`` (``deltas/<name>`` of the generation) at the id offsets ``at``."""
    from ...search.query_index import write_query_index

    out.mkdir(parents=True)
    for name in (NODE_TYPES, NODE_KEYS, NODE_TEXT_OFF, NODE_TEXT_PAGES):
        _link(part / name, out / name)
    _nodes(part / NODES, out / NODES, at)
    _documents(part / DOCUMENTS, out / DOCUMENTS, at)
    _traces(part / DECOMPOSITIONS, out / DECOMPOSITIONS, at)
    _edges(part, out / DELTA_EDGES, at.node)
    _linked(part / LINKED, out / LINKED, at.node)
    _vectors(part / VECTORS, out / VECTORS, at.node)
    write_query_index(out, first_node=at.node, lexical_background=background.stats())


def _shifted(col, by: int):
    """An int32 Arrow column with ``by`` added to its values that are >= 0 (-1 stays: no id)."""
    import pyarrow as pa

    arr = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64)
    arr = np.where(arr >= 0, arr + by, arr)
    if arr.size and int(arr.max()) >= 2**31:
        raise ValueError(f"ids reach {int(arr.max())}: past the int32 ids of an index")
    return pa.array(arr.astype(np.int32))


def _nodes(src: Path, dst: Path, at: Offsets) -> None:
    import pyarrow.parquet as pq

    from ...graph.storage import atomic_write_parquet
    from ...store.tables import PARQUET_OPTIONS

    tab = pq.read_table(src)
    for name, by in (("id", at.node), ("doc_id", at.document), ("chunk_id", at.node)):
        tab = tab.set_column(tab.schema.get_field_index(name), tab.schema.field(name), _shifted(tab[name], by))
    atomic_write_parquet(dst, tab, **PARQUET_OPTIONS, column_encoding={"id": "DELTA_BINARY_PACKED"})


def _documents(src: Path, dst: Path, at: Offsets) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ...graph.storage import atomic_write_parquet
    from ...store.tables import PARQUET_OPTIONS

    tab = pq.read_table(src)
    tab = tab.set_column(0, tab.schema.field("doc_id"), _shifted(tab["doc_id"], at.document))
    lists = tab["chunk_ids"].combine_chunks()
    chunks = pa.ListArray.from_arrays(lists.offsets, pc.add(lists.flatten(), pa.scalar(at.node, pa.int32())))
    i = tab.schema.get_field_index("chunk_ids")
    tab = tab.set_column(i, tab.schema.field(i), chunks.cast(tab.schema.field(i).type))
    atomic_write_parquet(dst, tab, **PARQUET_OPTIONS)


def _traces(src: Path, dst: Path, at: Offsets) -> None:
    from ...store.decompositions import ChunkTrace, read_decompositions, write_decompositions

    rows = [ChunkTrace(r.doc_id + at.document, r.t + at.node,
                       tuple((s + at.node, e, rel) for s, e, rel in r.units)) for r in read_decompositions(src)]
    write_decompositions(dst, rows)


def _edges(part: Path, dst: Path, first: int) -> None:
    """The part's structural layer as (src, dst, w) in global ids, each undirected edge once (src < dst)."""
    from ...graph.hetero import HeteroGraph
    from ...graph.storage import atomic_save_npy

    g = HeteroGraph.load(part, mmap=True)
    indptr = np.asarray(g.structural.indptr, dtype=np.int64)
    rows = np.repeat(np.arange(indptr.shape[0] - 1, dtype=np.int64), np.diff(indptr))
    cols = np.asarray(g.structural.indices, dtype=np.int64)
    upper = rows < cols
    dst.mkdir()
    for key, arr, dtype in (("src", rows[upper] + first, np.int64), ("dst", cols[upper] + first, np.int64),
                            ("w", np.asarray(g.structural.weights)[upper], np.float32)):
        atomic_save_npy(dst / f"{key}.npy", np.asarray(arr, dtype=dtype))


def _linked(src: Path, dst: Path, first: int) -> None:
    import pyarrow.parquet as pq

    from ..finalize import write_linked

    tab = pq.read_table(src)
    write_linked(dst, np.asarray(tab["src"]).astype(np.int64) + first, np.asarray(tab["dst"]).astype(np.int64) + first,
                 np.asarray(tab["w"]))


def _vectors(src: Path, dst: Path, first: int) -> None:
    """The part's HNSW index (each shard) with its keys (node ids) moved by ``first``: a rename of each key,
    not a new insertion."""
    from ...graph.vectors import VectorIndex

    index = VectorIndex.load(src, view=False)
    index.shift_keys(first)  # slots stay, so the part's keys file (add order) moves along
    index.save(dst)
