"""Batched, read-only streams of one index generation in the export layout: nodes, edges, documents.

Every exporter reads the index through :class:`ExportSource`, so that the four formats agree on
what a node, an edge and a document are:

- **nodes**: ``id`` (int32), ``type`` (the letter T S N R A H O), ``key`` (uint64 content key),
  ``name`` (entities and overviews: their name; null elsewhere), ``text``, ``doc_id`` and
  ``chunk_id`` (int32, null where the index stores -1), ``source_id``, ``mentions`` (int32),
  ``active`` (bool; false for A/H/O nodes retired by a later insert, which keep their id but have
  no edges and no vector), and with vectors ``vector`` (list<float32>, null for types without one).
- **edges**: each undirected edge once, ``src`` -> ``dst`` from the lower type code to the higher
  (T before S before N ...; the lower id first between equal types), ``type`` its kind in the
  manifest's spelling (``"T-S"``, ``"N-R"``, ...), ``layer`` (``structural`` or ``semantic``),
  ``weight`` (float32).
- **documents**: ``doc_id``, ``source``, ``title``, ``content_hash``, ``chunk_ids`` (list<int32>:
  the T node ids of the document).

Nothing is loaded whole: nodes are read from ``nodes.parquet`` a record batch at a time, edges are
cut from the memory-mapped CSR arrays in slices of about ``edge_batch`` stored entries, so the
memory of an export does not grow with the index.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..store.layout import DOCUMENTS, NODES
from ..store.node_texts import node_texts
from ..graph.types import EMBEDDED_TYPES, N_TYPES, NodeType, parse_type
from ..store.text_column import NAME_IS_TEXT

__all__ = ["ExportSource", "parse_types", "NODE_SCHEMA", "EDGE_SCHEMA", "DOCUMENT_SCHEMA", "LAYERS",
           "edge_kinds"]

LAYERS = ("structural", "semantic")
LETTERS = tuple(t.name for t in NodeType)

NODE_SCHEMA = pa.schema([
    ("id", pa.int32()), ("type", pa.string()), ("key", pa.uint64()), ("name", pa.string()),
    ("text", pa.string()), ("doc_id", pa.int32()), ("chunk_id", pa.int32()), ("source_id", pa.string()),
    ("mentions", pa.int32()), ("active", pa.bool_()),
])
EDGE_SCHEMA = pa.schema([("src", pa.int32()), ("dst", pa.int32()), ("type", pa.string()),
                         ("layer", pa.string()), ("weight", pa.float32())])
DOCUMENT_SCHEMA = pa.schema([("doc_id", pa.int32()), ("source", pa.string()), ("title", pa.string()),
                             ("content_hash", pa.string()), ("chunk_ids", pa.list_(pa.int32()))])

# nodes.parquet leaves its name column out when the names are derived (store.py writes this flag)
_NAME_META = b"noderag.name"
_NAME_META_VALUE = b"text of types 2,6, else null"
_STORED = ("id", "type", "name", "text", "doc_id", "chunk_id", "source_id", "mentions", "active")


def edge_kinds() -> list[str]:
    """The edge kind of every (lower type code, higher type code) pair, indexed ``a * 7 + b``."""
    return [f"{LETTERS[a]}-{LETTERS[b]}" for a in range(N_TYPES) for b in range(N_TYPES)]


def parse_types(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"T,S,N"`` (or a list of letters/names) as sorted, distinct type letters; None: all seven."""
    if value is None:
        return LETTERS
    parts = value.split(",") if isinstance(value, str) else list(value)
    parts = [p.strip() for p in parts if str(p).strip()]
    if not parts:
        raise ValueError("--types: no node type given; expected letters from T S N R A H O, e.g. T,S,N")
    try:
        codes = sorted({int(parse_type(p)) for p in parts})
    except ValueError as exc:
        raise ValueError(f"--types: {exc}") from None
    return tuple(LETTERS[c] for c in codes)


@dataclass
class ExportSource:
    """The nodes, edges, documents and vectors of one opened index, read in batches.

    ``store`` is an opened :class:`~noderag.store.tables.IndexStore` (or ``noderag.Index``);
    ``types`` the letters of the node types to export (edges need both ends among them);
    ``with_vectors`` adds each embedded node's stored vector (float32).
    """

    store: object
    types: tuple[str, ...] = LETTERS
    with_vectors: bool = False
    node_batch: int = 65536
    edge_batch: int = 1 << 20

    def __post_init__(self) -> None:
        self.types = parse_types(self.types)
        self.path = Path(self.store.path)
        self._types = np.asarray(self.store.types, dtype=np.uint8)
        self.n = int(self._types.shape[0])
        self.type_mask = np.zeros(N_TYPES, dtype=bool)
        for letter in self.types:
            self.type_mask[int(NodeType[letter])] = True
        self._kinds = pa.array(edge_kinds(), pa.string())
        if self.node_batch < 1 or self.edge_batch < 1:
            raise ValueError("node_batch and edge_batch must be >= 1")

    def check(self) -> int:
        """Checksum every file the export reads (:func:`~noderag.store.verify.check_files`): a flipped byte in a
        text page would otherwise be exported as it is. Raises ``IndexDamagedError`` naming the file; returns the
        bytes read. The search-only tables (``query/``) and, without vectors, the vector files are not read."""
        from ..store.layout import QUERY_DIR, VECTORS
        from ..store.verify import CHECKSUMS, check_files

        manifest = getattr(self.store, "manifest", None) or {}
        files = ((manifest.get(CHECKSUMS) or {}).get("files")) or {}
        reads = tuple(rel for rel in files
                      if not (rel.startswith(f"{QUERY_DIR}/") or f"/{QUERY_DIR}/" in rel)
                      and (self.with_vectors or not rel.rpartition("/")[2].startswith(VECTORS.split(".")[0] + ".")))
        return check_files(self.path, manifest, reads) if reads else 0

    # ------------------------------------------------------------------ facts

    @property
    def generation(self) -> int:
        return int(self.store.generation)

    @property
    def vector_dim(self) -> int | None:
        """Dimension of the stored vectors (None without ``with_vectors``)."""
        return int(self.store.vectors.ndim) if self.with_vectors else None

    def node_counts(self) -> dict[str, int]:
        """Nodes per exported type letter (all seven letters; 0 for types not exported)."""
        counts = np.bincount(self._types, minlength=N_TYPES)
        return {LETTERS[t]: int(counts[t]) if self.type_mask[t] else 0 for t in range(N_TYPES)}

    def exports_type(self, letter: str) -> bool:
        return bool(self.type_mask[int(NodeType[letter])])

    # ------------------------------------------------------------------ nodes

    @property
    def segment_folders(self) -> list[Path]:
        """The folders of the generation's segments, base first (each holds the rows of its own nodes)."""
        return list(getattr(self.store, "segment_folders", [self.path]))

    def node_batches(self) -> Iterator[pa.RecordBatch]:
        """Record batches of the exported nodes (``NODE_SCHEMA``, plus ``vector`` with vectors), by id."""
        files = [(f / NODES, pq.ParquetFile(f / NODES, memory_map=True)) for f in self.segment_folders]
        rows = sum(pf.metadata.num_rows for _, pf in files)
        keys = np.asarray(self.store.keys)
        if keys.shape[0] != rows or self.n != rows:
            raise ValueError(f"{files[0][0]}: {rows} rows but the graph has {self.n} nodes")
        start = 0
        for path, pf in files:
            for out in self._node_file_batches(path, pf, keys, start):
                yield out
            start += pf.metadata.num_rows

    def _node_file_batches(self, path: Path, pf, keys: np.ndarray, start: int) -> Iterator[pa.RecordBatch]:
        """The exported nodes of one segment's ``nodes.parquet``, whose first row is node ``start``."""
        stored = set(pf.schema_arrow.names)
        derived = "name" not in stored
        if derived and (pf.schema_arrow.metadata or {}).get(_NAME_META) != _NAME_META_VALUE:
            raise ValueError(f"{path}: no name column and no {_NAME_META.decode()} metadata saying how to derive it")
        cols = [c for c in _STORED if c in stored]
        texts = None if "text" in stored else node_texts(path, pf.metadata.num_rows)  # beside the file, in pages
        first = start
        letters = pa.array(LETTERS, pa.string())
        name_types = pa.array(NAME_IS_TEXT, pa.uint8())
        end = start + pf.metadata.num_rows
        for batch in pf.iter_batches(batch_size=self.node_batch, columns=cols, use_threads=False):
            m = batch.num_rows
            ids = np.asarray(batch.column("id").to_numpy(zero_copy_only=False), dtype=np.int32)
            if m and (ids[0] != start or ids[-1] != start + m - 1):
                raise ValueError(f"{path}: node ids are not the row numbers near row {start}")
            tcodes = batch.column("type")
            tnp = np.asarray(tcodes.to_numpy(zero_copy_only=False), dtype=np.uint8)
            keep = self.type_mask[tnp]
            text = batch.column("text") if texts is None else texts.column(start - first, start - first + m)
            if derived:
                name = pc.if_else(pc.is_in(tcodes, value_set=name_types), text, pa.scalar(None, pa.string()))
            else:
                name = batch.column("name")
            doc = batch.column("doc_id")
            chunk = batch.column("chunk_id")
            out = pa.RecordBatch.from_arrays([
                batch.column("id"),
                pc.take(letters, pa.array(tnp.astype(np.int32))),
                pa.array(keys[start:start + m], pa.uint64()),
                name,
                text,
                pc.if_else(pc.less(doc, 0), pa.scalar(None, pa.int32()), doc),
                pc.if_else(pc.less(chunk, 0), pa.scalar(None, pa.int32()), chunk),
                batch.column("source_id"),
                batch.column("mentions"),
                batch.column("active"),
            ], schema=NODE_SCHEMA)
            if self.with_vectors:
                out = out.append_column("vector", self._vectors(ids, tnp, out.column("active")))
            start += m
            if not keep.all():
                out = out.filter(pa.array(keep))
            if out.num_rows:
                yield out
        if start != end:
            raise ValueError(f"{path}: {start - end + pf.metadata.num_rows} rows read of {pf.metadata.num_rows}")

    def _vectors(self, ids: np.ndarray, tnp: np.ndarray, active) -> pa.Array:
        """The stored vector of each embedded, active node of a batch as list<float32> (null elsewhere)."""
        vec = self.store.vectors
        dim = int(vec.ndim)
        embedded = np.isin(tnp, np.asarray([int(t) for t in EMBEDDED_TYPES], np.uint8))
        embedded &= np.asarray(active.to_numpy(zero_copy_only=False), dtype=bool)
        embedded &= self.type_mask[tnp]
        has = np.zeros(ids.shape[0], dtype=bool)
        if embedded.any():
            has[embedded] = vec.contains(ids[embedded])
        rows = vec.get(ids[has]) if has.any() else np.zeros((0, dim), np.float32)
        offsets = np.zeros(ids.shape[0] + 1, dtype=np.int32)
        np.cumsum(np.where(has, dim, 0), out=offsets[1:])
        values = pa.array(np.ascontiguousarray(rows, dtype=np.float32).reshape(-1))
        mask = pa.array(~has)
        return pa.ListArray.from_arrays(pa.array(offsets), values, mask=mask)

    # ------------------------------------------------------------------ edges

    def edge_batches(self, layers: Iterable[str] = LAYERS) -> Iterator[pa.RecordBatch]:
        """Record batches of the exported edges (``EDGE_SCHEMA``): each layer, by the lower end's id."""
        for layer in layers:
            yield from self._layer_batches(layer)

    def _layer_batches(self, layer: str) -> Iterator[pa.RecordBatch]:
        csr = self.store.graph.layer(layer)
        indptr = np.asarray(csr.indptr, dtype=np.int64)
        nnz = int(indptr[-1]) if indptr.size else 0
        if nnz == 0:
            return
        n = indptr.shape[0] - 1
        # node ranges holding about edge_batch stored entries each (a hub may make one larger)
        starts = np.unique(np.searchsorted(indptr, np.arange(0, nnz, self.edge_batch, dtype=np.int64),
                                           side="right") - 1)
        bounds = np.append(np.clip(starts, 0, n), n)
        types = self._types
        layer_value = pa.scalar(layer, pa.string())
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            if b <= a:
                continue
            s, e = int(indptr[a]), int(indptr[b])
            if e == s:
                continue
            cols = np.asarray(csr.indices[s:e], dtype=np.int32)
            rows = np.repeat(np.arange(a, b, dtype=np.int32), np.diff(indptr[a:b + 1]))
            keep = rows < cols
            tr, tc = types[rows], types[cols]
            keep &= self.type_mask[tr] & self.type_mask[tc]
            rows, cols, tr, tc = rows[keep], cols[keep], tr[keep], tc[keep]
            if rows.size == 0:
                continue
            w = np.asarray(csr.weights[s:e], dtype=np.float32)[keep]
            swap = tr > tc
            src = np.where(swap, cols, rows)
            dst = np.where(swap, rows, cols)
            kind = np.minimum(tr, tc).astype(np.int32) * N_TYPES + np.maximum(tr, tc).astype(np.int32)
            yield pa.RecordBatch.from_arrays([
                pa.array(src), pa.array(dst), pc.take(self._kinds, pa.array(kind)),
                pa.repeat(layer_value, src.shape[0]),
                pa.array(w),
            ], schema=EDGE_SCHEMA)

    # ------------------------------------------------------------------ documents

    def document_batches(self) -> Iterator[pa.RecordBatch]:
        """Record batches of ``documents.parquet`` (``DOCUMENT_SCHEMA``)."""
        for folder in self.segment_folders:
            pf = pq.ParquetFile(folder / DOCUMENTS, memory_map=True)
            for batch in pf.iter_batches(batch_size=self.node_batch, columns=list(DOCUMENT_SCHEMA.names),
                                         use_threads=False):
                yield pa.RecordBatch.from_arrays([batch.column(c).cast(DOCUMENT_SCHEMA.field(c).type)
                                                  for c in DOCUMENT_SCHEMA.names], schema=DOCUMENT_SCHEMA)
