"""Index directory: writers of the node/document tables and the read-only :class:`IndexStore`.

Layout (DESIGN §2)::

    manifest.json        format version, config, stage states, counts, tokens, time, bytes
    nodes.parquet        id, type, name, text, doc_id, chunk_id, source_id, mentions, active
                         (``IndexStore.nodes`` adds ``key`` from node_keys.npy; older files carry it;
                         ``name`` is left out when it is the text of N/O nodes and null elsewhere)
    documents.parquet    doc_id, source, title, content_hash, chunk_ids
    node_types.npy, node_keys.npy, graph/, semantic/   (HeteroGraph.save)
    linked.parquet       name-link S-N edges (src, dst, w); the decomposed T/S/N/R edges an insert
                         extends are the graph's T/S/N/R structural edges minus these
    vectors.usearch      HNSW index of T, S, A, H vectors, key = node id
    query/               what a query needs, memory-mapped at open (noderag.index.query_index)
    llm_cache.sqlite     LLM request/response cache (LLM builds only)

Opening memory-maps the arrays and never executes code from disk.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from noderag.graph.storage import atomic_write_parquet, check_format_version, read_json

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

MANIFEST = "manifest.json"
NODE_COLUMNS = ("id", "type", "key", "name", "text", "doc_id", "chunk_id", "source_id", "mentions", "active")
# the key column is not stored twice: node_keys.npy (HeteroGraph.save) holds it
_STORED_NODE_COLUMNS = tuple(c for c in NODE_COLUMNS if c != "key")


class IndexNotFoundError(FileNotFoundError):
    """The directory holds no finished index."""


def _schema_nodes():
    import pyarrow as pa

    return pa.schema([
        ("id", pa.int32()), ("type", pa.uint8()), ("name", pa.string()),
        ("text", pa.string()), ("doc_id", pa.int32()), ("chunk_id", pa.int32()),
        ("source_id", pa.string()), ("mentions", pa.int32()), ("active", pa.bool_()),
    ])


# type codes (N, O) whose name is their text; the metadata flag marks a file without a name column
_NAME_IS_TEXT = (2, 6)
_NAME_META = b"noderag.name"
_NAME_META_VALUE = b"text of types 2,6, else null"


def nodes_table(table, mentions: np.ndarray):
    """The ``nodes.parquet`` table of a :class:`~noderag.index.assemble.NodeTable` (no ``key`` column).

    The ``name`` column is left out (and the schema metadata says so) when every
    N/O name equals its text and every other name is null, as the builders make them.
    """
    import pyarrow as pa

    n = len(table)
    types = table.types_array()
    from_text = np.isin(types, _NAME_IS_TEXT).tolist()
    derived = all((nm == tx) if ft else (nm is None) for nm, tx, ft in zip(table.names, table.texts, from_text))
    schema = _schema_nodes()
    tab = pa.Table.from_arrays([
        pa.array(np.arange(n, dtype=np.int32)),
        pa.array(types),
        pa.array(table.names, type=pa.string()),
        pa.array(table.texts, type=pa.string()),
        pa.array(np.asarray(table.doc_ids, dtype=np.int32)),
        pa.array(np.asarray(table.chunk_ids, dtype=np.int32)),
        pa.array(table.source_ids, type=pa.string()),
        pa.array(np.asarray(mentions, dtype=np.int32)),
        pa.array(np.asarray(table.active, dtype=bool)),
    ], schema=schema)
    if derived:
        tab = tab.drop_columns(["name"]).replace_schema_metadata({_NAME_META: _NAME_META_VALUE})
    return tab


def read_nodes_file(path: str | os.PathLike):
    """``nodes.parquet`` as a pyarrow Table with its ``name`` column (restored when left out); no key added."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise IndexNotFoundError(f"{path}: missing")
    tab = pq.read_table(path, memory_map=True)
    if "name" not in tab.column_names and "text" in tab.column_names and "type" in tab.column_names:
        meta = tab.schema.metadata or {}
        if meta.get(_NAME_META) != _NAME_META_VALUE:
            raise ValueError(f"{path}: no name column and no {_NAME_META.decode()} metadata saying how to derive it")
        name = pc.if_else(pc.is_in(tab.column("type"), value_set=pa.array(_NAME_IS_TEXT, pa.uint8())),
                          tab.column("text"), pa.scalar(None, pa.string()))
        tab = tab.add_column(tab.column_names.index("text"), pa.field("name", pa.string()), name)
        tab = tab.replace_schema_metadata(None)
    missing = [c for c in _STORED_NODE_COLUMNS if c not in tab.column_names]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}")
    return tab


def documents_table(docs: Sequence[dict]):
    """The ``documents.parquet`` table from dicts with doc_id, source, title, content_hash, chunk_ids."""
    import pyarrow as pa

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
PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 12, "use_dictionary": False}


def write_nodes(path: str | os.PathLike, table, mentions: np.ndarray) -> Path:
    """Write ``nodes.parquet`` atomically."""
    # id is the row number: delta-encoded it takes ~200 bytes instead of ~90 KB (MuSiQue)
    return atomic_write_parquet(path, nodes_table(table, mentions), **PARQUET_OPTIONS,
                                column_encoding={"id": "DELTA_BINARY_PACKED"})


def write_documents(path: str | os.PathLike, docs: Sequence[dict]) -> Path:
    """Write ``documents.parquet`` atomically."""
    return atomic_write_parquet(path, documents_table(docs), **PARQUET_OPTIONS)


class IndexStore:
    """A finished index opened read-only (arrays memory-mapped).

    Attributes
    ----------
    path : Path
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

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        if (self.path / "stages" / "final" / ".complete").is_file():
            # a build was killed while moving its finished files into place: complete the move, but
            # only when no writer is running (a live writer is completing it itself)
            from .lock import IndexLockedError, WriterLock
            from .manifest import finish_pending_commit

            try:
                with WriterLock(self.path):
                    finish_pending_commit(self.path)
            except IndexLockedError:
                pass
        mpath = self.path / MANIFEST
        if not mpath.is_file():
            raise IndexNotFoundError(f"{self.path}: not an index directory (no {MANIFEST})")
        manifest = read_json(mpath)
        if not isinstance(manifest, dict):
            raise ValueError(f"{mpath}: expected a JSON object")
        check_format_version(manifest.get("format_version"), where=mpath)
        if manifest.get("state") != "complete":
            raise IndexNotFoundError(
                f"{self.path}: index build is not finished (state {manifest.get('state')!r}); "
                "rerun `noderag build` with the same inputs to resume it")
        self.manifest: dict[str, Any] = manifest

    @classmethod
    def open(cls, path: str | os.PathLike) -> "IndexStore":
        """Open the index in ``path`` (format version checked)."""
        return cls(path)

    def __repr__(self) -> str:
        counts = self.manifest.get("counts", {}).get("nodes", {})
        return f"{type(self).__name__}({str(self.path)!r}, nodes={counts})"

    def __len__(self) -> int:
        return int(self.graph.n)

    @cached_property
    def config(self):
        from noderag.config import NodeRAGConfig

        return NodeRAGConfig.from_dict(self.manifest.get("config") or {})

    @cached_property
    def graph(self):
        from noderag.graph.hetero import HeteroGraph

        return HeteroGraph.load(self.path, mmap=True)

    @cached_property
    def nodes(self):
        path = self.path / "nodes.parquet"
        tab = read_nodes_file(path)
        if "key" not in tab.column_names:  # stored once, in node_keys.npy
            import pyarrow as pa

            keys = np.asarray(self.graph.keys)
            if keys.shape[0] != tab.num_rows:
                raise ValueError(f"{path}: {tab.num_rows} rows but the graph has {keys.shape[0]} nodes")
            tab = tab.add_column(NODE_COLUMNS.index("key"), pa.field("key", pa.uint64()), pa.array(keys))
        return tab

    @cached_property
    def query_index(self):
        """The build-time query index (``query/``, memory-mapped), or None for an index without one."""
        from .query_index import QueryIndex

        return QueryIndex.load(self.path)  # its node count is checked against the graph by the searcher

    @cached_property
    def documents(self):
        import pyarrow.parquet as pq

        return pq.read_table(self.path / "documents.parquet", memory_map=True)

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
        from noderag.graph.vectors import VectorIndex

        path = self.path / "vectors.usearch"
        if not path.is_file():
            raise IndexNotFoundError(f"{path}: missing")
        return VectorIndex.load(path, view=True)

    def embedder(self):
        """The embedder named in the index config (created on first call, then reused)."""
        emb = self.__dict__.get("_embedder")
        if emb is None:
            from noderag.embed import make_embedder

            emb = make_embedder(self.config.embed.spec, **self.config.embed.backend_options())
            self.__dict__["_embedder"] = emb
        return emb

    def counts(self) -> dict[str, Any]:
        """Node counts per type and edges per layer from the manifest."""
        return dict(self.manifest.get("counts", {}))

