"""Index directory: writers of the node/document tables and the read-only :class:`IndexStore`.

An index directory holds generations (see :mod:`noderag.store.generations`): ``CURRENT``
names the live folder ``generations/N``, which holds::

    manifest.json        format version, config, stage states, counts, tokens, time, bytes
    nodes.parquet        id, type, name, doc_id, chunk_id, source_id, mentions, active
                         (``IndexStore.nodes`` adds ``key`` from node_keys.npy and ``text`` from the pages;
                         ``name`` is left out when it is the text of N/O nodes and null elsewhere)
    text_off.npy, text/  every node's text, stored once in pages (:mod:`noderag.store.node_texts`)
    documents.parquet    doc_id, source, title, content_hash, chunk_ids (a document deleted in place keeps
                         its row as a tombstone: null source, title and hash, no chunks)
    decompositions/      per assembled chunk: doc_id, T node id, its units' S ids, entity and
                         relation surface forms (what a delete re-assembles the survivors from), in
                         Parquet parts of 256 chunks and up
    scrubbed.npy         after a delete in place: the scrubbed nodes, whose edges the shared graph
                         files still hold (left out where the graph is opened)
    node_types.npy, node_keys.npy, graph/, semantic/   (HeteroGraph.save)
    linked.parquet       name-link S-N edges (src, dst, w); the decomposed T/S/N/R edges an insert
                         extends are the graph's T/S/N/R structural edges minus these
    vectors.usearch      HNSW index of T, S, A, H vectors, key = node id; a large index is sharded
                         (``embed.vector_shards``): shard j >= 1 in vectors.j.usearch
    vectors.keys.npy     the vector keys in add order where every add was single-threaded (int64;
                         a view reads rows straight from the files by it: noderag.graph.vector_slots)
    query/               what a query needs, memory-mapped at open (noderag.search.query_index)

``INDEX/llm_cache.sqlite`` (LLM builds and answers) is shared by the generations.
Opening pins one generation, memory-maps its arrays, never writes and never executes code from disk.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .layout import CURRENT, DOCUMENTS, GENERATIONS, MANIFEST, NODES, READERS, SCRUBBED, VECTORS
from ..graph.storage import atomic_write_parquet, check_format_version, read_json

from .text_column import NAME_IS_TEXT as _NAME_IS_TEXT

from .errors import IndexNotFoundError

__all__ = [
    "IndexStore",
    "IndexNotFoundError",
    "NODE_COLUMNS",
    "nodes_table",
    "read_nodes_file",
    "documents_table",
    "write_nodes",
    "write_documents",
    "MANIFEST",
]

NODE_COLUMNS = ("id", "type", "key", "name", "text", "doc_id", "chunk_id", "source_id", "mentions", "active")
# the key column is not stored twice: node_keys.npy (HeteroGraph.save) holds it
_STORED_NODE_COLUMNS = tuple(c for c in NODE_COLUMNS if c != "key")


def check_layout(root: Path) -> None:
    """Refuse the flat single-folder layout of format version 1 with a one-line 'rebuild it' error."""
    from ..graph.storage import FORMAT_VERSION, REBUILD_HINT, FormatVersionError

    if root.parent.name == GENERATIONS and (root / READERS).is_file():
        raise IndexNotFoundError(f"{root}: a generation folder; open the index directory {root.parent.parent} instead")
    if not (root / CURRENT).exists() and (root / MANIFEST).is_file():
        raise FormatVersionError(
            f"{root}: an index in the flat layout of format version 1 (an earlier noderag); this noderag reads "
            f"format version {FORMAT_VERSION} only: {REBUILD_HINT}")


def _schema_nodes():
    import pyarrow as pa

    return pa.schema([
        ("id", pa.int32()), ("type", pa.uint8()), ("name", pa.string()),
        ("text", pa.string()), ("doc_id", pa.int32()), ("chunk_id", pa.int32()),
        ("source_id", pa.string()), ("mentions", pa.int32()), ("active", pa.bool_()),
    ])


# the metadata flag marks a file without a name column (N/O names are their texts: _NAME_IS_TEXT)
_NAME_META = b"noderag.name"
_NAME_META_VALUE = b"text of types 2,6, else null"


def nodes_table(table, mentions: np.ndarray, first: int = 0):
    """The ``nodes.parquet`` table of a :class:`~noderag.indexing.assemble.NodeTable` (no ``key`` column):
    its rows ``first..`` (a delta segment holds only the nodes its insert added; ``mentions``: of those rows).

    The ``name`` column is left out (and the schema metadata says so) when every
    N/O name equals its text and every other name is null, as the builders make them.
    """
    import pyarrow as pa

    n = len(table)
    if len(mentions) != n - first:
        raise ValueError(f"{len(mentions)} mention counts for the {n - first} rows from {first} on")
    types = table.types_array(first)
    derived = not any(i >= first for i in table.names.exceptions)
    schema = _schema_nodes()
    tab = pa.Table.from_arrays([
        pa.array(np.arange(first, n, dtype=np.int32)),
        pa.array(types),
        pa.nulls(n - first, pa.string()) if derived else pa.array(table.names.take(np.arange(first, n)),
                                                                  type=pa.string()),
        table.texts.to_arrow(first),
        pa.array(table.doc_ids.numpy(first).astype(np.int32)),
        pa.array(table.chunk_ids.numpy(first).astype(np.int32)),
        pa.array(table.source_ids[first:], type=pa.string()),
        pa.array(np.asarray(mentions, dtype=np.int32)),
        pa.array(table.active_array(first)),
    ], schema=schema)
    if derived:
        tab = tab.drop_columns(["name"]).replace_schema_metadata({_NAME_META: _NAME_META_VALUE})
    return tab


def read_nodes_file(path: str | os.PathLike, columns: Sequence[str] | None = None):
    """``nodes.parquet`` as a pyarrow Table with its ``text`` (read from the pages beside it) and ``name``
    (restored when left out) columns; no key added.

    ``columns``: read only these (a derived ``name`` reads ``text`` and ``type`` to restore it).
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise IndexNotFoundError(f"{path}: missing")
    want = list(_STORED_NODE_COLUMNS) if columns is None else list(columns)
    stored = pq.read_schema(path).names
    derive_name = "name" in want and "name" not in stored
    read = [c for c in want if c in stored]
    if derive_name and "type" not in read:
        read.append("type")
    tab = pq.read_table(path, memory_map=True, columns=read)
    if derive_name and (tab.schema.metadata or {}).get(_NAME_META) != _NAME_META_VALUE:
        raise ValueError(f"{path}: no name column and no {_NAME_META.decode()} metadata saying how to derive it")
    if "text" in want or derive_name:
        from .node_texts import node_texts

        texts = node_texts(path)  # beside the file, in pages
        rows = pq.ParquetFile(path).metadata.num_rows
        if texts.n != rows:
            raise ValueError(f"{path.parent / 'text_off.npy'}: {texts.n} texts for {rows} nodes")
        col = texts.column()
        tab = tab.append_column(pa.field("text", col.type), col)
    if derive_name:
        name = pc.if_else(pc.is_in(tab.column("type"), value_set=pa.array(_NAME_IS_TEXT, pa.uint8())),
                          tab.column("text"), pa.scalar(None, pa.string()))
        tab = tab.add_column(tab.column_names.index("text"), pa.field("name", pa.string()), name)
        tab = tab.replace_schema_metadata(None)
    missing = [c for c in want if c not in tab.column_names]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}")
    return tab.select(want)


def documents_table(docs: Sequence[dict]):
    """The ``documents.parquet`` table from dicts with doc_id, source, title, content_hash, chunk_ids
    (or from an object that makes it itself: :class:`noderag.indexing.doc_rows.DocumentRows`)."""
    import pyarrow as pa

    if hasattr(docs, "to_table"):
        return docs.to_table()

    return pa.Table.from_arrays([
        pa.array([d["doc_id"] for d in docs], type=pa.int32()),
        pa.array([d["source"] for d in docs], type=pa.string()),
        pa.array([d["title"] for d in docs], type=pa.string()),
        pa.array([d["content_hash"] for d in docs], type=pa.string()),
        pa.array([list(d["chunk_ids"]) for d in docs], type=pa.list_(pa.int32())),
    ], names=["doc_id", "source", "title", "content_hash", "chunk_ids"])


# Parquet options of every index table: the columns are mostly unique texts and ids, where
# dictionary pages only add bytes; zstd 12 vs the default 3: MuSiQue nodes.parquet 948,823 ->
# 867,751 bytes (without dictionaries) for ~0.4 s more at build time
# zstd level 6: at 10^5 passages nodes.parquet writes in 2.8 s instead of 9.6 s (level 12) for 2.6% more bytes
PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 6, "use_dictionary": False}


def write_nodes(path: str | os.PathLike, table, mentions: np.ndarray, first: int = 0) -> Path:
    """Write ``nodes.parquet`` atomically (rows ``first..`` of the table, see :func:`nodes_table`), its texts
    beside it in pages (:mod:`noderag.store.node_texts`; the schema metadata gives the page size)."""
    from .node_texts import TEXT_META, write_node_texts

    path = Path(path)
    tab = nodes_table(table, mentions, first)
    page = write_node_texts(path.parent, tab.column("text"))
    tab = tab.drop_columns(["text"])
    tab = tab.replace_schema_metadata({**(tab.schema.metadata or {}), TEXT_META: str(page).encode()})
    # id is the row number: delta-encoded it takes ~200 bytes instead of ~90 KB (MuSiQue)
    return atomic_write_parquet(path, tab, **PARQUET_OPTIONS, column_encoding={"id": "DELTA_BINARY_PACKED"})


def write_documents(path: str | os.PathLike, docs: Sequence[dict]) -> Path:
    """Write ``documents.parquet`` atomically."""
    return atomic_write_parquet(path, documents_table(docs), **PARQUET_OPTIONS)


#: Up to this many delta vectors a reader searches them exactly (one matrix product a query batch) beside the
#: base's HNSW index; more are searched as HNSW shards of their own.
FLAT_DELTA_VECTORS = 32768


class IndexStore:
    """One generation of a finished index opened read-only (arrays memory-mapped): the
    :class:`~noderag.store.protocols.IndexReader` of the package.

    Opening resolves ``INDEX/CURRENT`` once and pins that generation (a shared lock, see
    :mod:`noderag.store.generations`) until :meth:`close` or garbage collection: every lazy
    load reads the same generation, whatever writers commit meanwhile. Opening never writes.

    Attributes
    ----------
    root : Path
        The index directory.
    path : Path
        The pinned generation's folder (every file is read from here).
    generation : int
        The pinned generation's number.
    manifest : dict
    config : NodeRAGConfig
    graph : HeteroGraph
    nodes : pyarrow.Table (columns ``NODE_COLUMNS``)
    types : ndarray (n,) uint8
    texts, names, source_ids : list of str or None
    chunk_ids, doc_ids, mentions : ndarray (n,) int32
    active : ndarray (n,) bool (False for retired A/H/O nodes of earlier inserts)
    vectors : VectorIndex (view-loaded)
    """

    def __init__(self, path: str | os.PathLike, *, verify: str = "cheap") -> None:
        from .generations import pin, pin_finalizer

        self.root = Path(path)
        self._embedder = None  # made on the first call of embedder()
        check_layout(self.root)
        p = pin(self.root)
        if p is None:
            if (self.root / "stages").is_dir():
                raise IndexNotFoundError(
                    f"{self.root}: index build is not finished; "
                    "rerun `noderag build` with the same inputs to resume it")
            raise IndexNotFoundError(f"{self.root}: not an index directory (no CURRENT generation pointer)")
        self._pin = p
        pin_finalizer(self, p)
        self.path = p.path
        self.generation = p.generation
        mpath = self.path / MANIFEST
        from .verify import IndexDamagedError, reading, verify_index

        try:
            with reading(self.path, MANIFEST):
                manifest = read_json(mpath)
            if not isinstance(manifest, dict):
                raise IndexDamagedError(self.path, MANIFEST, "damaged JSON", "not an object")
            check_format_version(manifest.get("format_version"), where=mpath)
            if manifest.get("state") != "complete":
                raise IndexNotFoundError(f"{mpath}: generation is not complete (state {manifest.get('state')!r})")
            verify_index(self.path, verify, manifest=manifest)  # IndexDamagedError naming the file
            from .segments import deltas_of

            self.deltas = deltas_of(manifest, self.path)  # the delta segments after the base (oldest first)
        except BaseException:
            p.close()
            raise
        self.manifest: dict[str, Any] = manifest

    @property
    def segment_folders(self) -> list[Path]:
        """The folders of the pinned generation's segments: its own (the base), then each delta's."""
        from .layout import DELTAS

        return [self.path] + [self.path / DELTAS / d.name for d in self.deltas]

    @classmethod
    def open(cls, path: str | os.PathLike, *, verify: str = "cheap") -> "IndexStore":
        """Open the current generation of the index in ``path`` (format version checked).

        ``verify``: "cheap" (default: sizes and headers, milliseconds), "full" (checksums and
        structure, :func:`~noderag.store.verify.verify_index`) or "none".
        """
        return cls(path, verify=verify)

    def close(self) -> None:
        """Release the pinned generation (a writer may then remove it); loaded arrays stay usable."""
        self._pin.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        counts = self.manifest.get("counts", {}).get("nodes", {})
        return f"{type(self).__name__}({str(self.root)!r}, generation={self.generation}, nodes={counts})"

    def __len__(self) -> int:
        return int(self.graph.n)

    @cached_property
    def config(self):
        from ..config import NodeRAGConfig

        return NodeRAGConfig.from_dict(self.manifest.get("config") or {})

    @cached_property
    def graph(self):
        from ..graph.hetero import HeteroGraph

        from .verify import reading

        with reading(self.path, "graph/"):
            if self.deltas or (self.path / SCRUBBED).is_file():
                from .segments import generation_graph

                return generation_graph(self.path, self.manifest)
            return HeteroGraph.load(self.path, mmap=True)

    @cached_property
    def nodes(self):
        from .verify import reading

        import pyarrow as pa

        path = self.path / NODES
        with reading(self.path, NODES):
            parts = [read_nodes_file(f / NODES) for f in self.segment_folders]
        tab = parts[0] if len(parts) == 1 else pa.concat_tables(parts)

        keys = np.asarray(self.graph.keys)  # stored once, in node_keys.npy
        if keys.shape[0] != tab.num_rows:
            raise ValueError(f"{path}: {tab.num_rows} rows but the graph has {keys.shape[0]} nodes")
        return tab.add_column(NODE_COLUMNS.index("key"), pa.field("key", pa.uint64()), pa.array(keys))

    @cached_property
    def documents(self):
        import pyarrow.parquet as pq

        from .verify import reading

        with reading(self.path, DOCUMENTS):
            if self.deltas:
                from .segments import concat_parquet

                return concat_parquet(self.segment_folders, DOCUMENTS)
            # ParquetFile, not read_table: the latter imports pyarrow.dataset (and pandas), ~0.5 s of a first query
            return pq.ParquetFile(self.path / DOCUMENTS, memory_map=True).read()

    def document_columns(self, names: Sequence[str]):
        """The documents table's columns among ``names``; of a base-only generation whose table is not loaded yet,
        only those columns are read (the chunk lists and hashes are most of its bytes)."""
        if "documents" in self.__dict__ or self.deltas:
            table = self.documents
            return table.select([c for c in names if c in table.column_names])
        import pyarrow.parquet as pq

        from .verify import reading

        with reading(self.path, DOCUMENTS):
            f = pq.ParquetFile(self.path / DOCUMENTS, memory_map=True)
            return f.read(columns=[c for c in names if c in f.schema_arrow.names])

    def _np(self, name: str) -> np.ndarray:
        return self.nodes.column(name).to_numpy(zero_copy_only=False)

    @cached_property
    def types(self) -> np.ndarray:
        return np.asarray(self.graph.types)

    @cached_property
    def keys(self) -> np.ndarray:
        return np.asarray(self.graph.keys)

    @cached_property
    def texts(self) -> list:
        return self.nodes.column("text").to_pylist()

    @cached_property
    def names(self) -> list:
        return self.nodes.column("name").to_pylist()

    @cached_property
    def source_ids(self) -> list:
        return self.nodes.column("source_id").to_pylist()

    @cached_property
    def chunk_ids(self) -> np.ndarray:
        return self._np("chunk_id")

    @cached_property
    def doc_ids(self) -> np.ndarray:
        return self._np("doc_id")

    @cached_property
    def mentions(self) -> np.ndarray:
        return self._np("mentions")

    @cached_property
    def active(self) -> np.ndarray:
        return self._np("active").astype(bool)

    @cached_property
    def vectors(self):
        from ..graph.vectors import VectorIndex

        path = self.path / VECTORS
        if not path.is_file():
            raise IndexNotFoundError(f"{path}: missing")
        from .verify import reading

        with reading(self.path, VECTORS):
            if not self.deltas:
                return VectorIndex.load(path, view=True)
            from ..graph.vectors import FlatVectors, LayeredVectors

            parts = [VectorIndex.load(f / VECTORS, view=True) for f in self.segment_folders[1:]]
            if sum(len(x) for x in parts) > FLAT_DELTA_VECTORS:  # many: each delta's HNSW, searched as shards
                return VectorIndex.load_segments([f / VECTORS for f in self.segment_folders], view=True)
            return LayeredVectors(VectorIndex.load(path, view=True), FlatVectors.of(parts))

    def embedder(self):
        """The embedder named in the index config (created on first call, then reused)."""
        if self._embedder is None:
            from .. import embed

            self._embedder = embed.from_config(self.config.embed)
        return self._embedder

    def counts(self) -> dict[str, Any]:
        """Node counts per type and edges per layer from the manifest."""
        return dict(self.manifest.get("counts", {}))

