"""What a reader of one index generation offers, as typed protocols, so that its users can say what they need
instead of typing it ``Any`` and probing it with ``getattr``/``hasattr``.

- :class:`IndexReader`: one generation of an index opened read-only. :class:`~noderag.store.tables.IndexStore`
  (and :class:`noderag.api.Index`, which extends it) implements it.
- :class:`NodeTables`: the per-node query tables (chunk and document ids, the active flags, display texts,
  passage and document labels, the name matcher, the BM25 postings) that a query reads.
  :class:`~noderag.search.query_index.QueryIndex` (one segment's ``query/``) and
  :class:`~noderag.search.segments.SegmentedTables` (every segment of a generation as one) implement it.

The protocols are structural (:class:`typing.Protocol`) and runtime-checkable: a test checks that each of the
classes above has every member, so neither side can drift without a failing test.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # annotations only: the store does not import the graph or the config at module load
    from ..config import NodeRAGConfig
    from ..graph.hetero import HeteroGraph

__all__ = ["IndexReader", "NodeTables"]


@runtime_checkable
class NodeTables(Protocol):
    """The query tables of a generation (or of one of its segments): node ids are global."""

    n: int  #: nodes in the tables
    first: int  #: the first node id (a delta segment's; 0 for a base or a whole generation)
    chunk: np.ndarray  #: (n,) int64 chunk id of every node
    doc: np.ndarray  #: (n,) int64 document id of every node
    active: np.ndarray  #: (n,) bool: False for retired and deleted nodes
    names: Any  #: the name matcher (``match``/``spans`` of :mod:`noderag.search.entities`)
    lexical: Any  #: the passages' BM25 postings (:class:`noderag.search.lexical.LexicalIndex` or alike)

    def texts(self, ids: Sequence[int] | np.ndarray) -> list[str]:
        """Display texts of some nodes (reads only their bytes)."""
        ...

    def label(self, node: int) -> str | None:
        """Source-passage label of a T node (None for other nodes)."""
        ...

    def labels(self, nodes: Sequence[int] | np.ndarray) -> list[str | None]:
        """:meth:`label` of many nodes."""
        ...

    def doc_label(self, doc: int) -> str:
        """Label of a document (``doc:ID`` when it has none)."""
        ...


@runtime_checkable
class IndexReader(Protocol):
    """One finished generation of an index, opened read-only and pinned until :meth:`close`."""

    root: Path  #: the index directory
    path: Path  #: the pinned generation's folder
    generation: int  #: the pinned generation's number
    manifest: dict[str, Any]  #: the generation's manifest
    deltas: list  #: its delta segments, oldest first (:class:`noderag.store.segments.Delta`)

    @property
    def segment_folders(self) -> list[Path]:
        """The folders of the segments: the base, then each delta's."""
        ...

    @property
    def config(self) -> "NodeRAGConfig":
        """The configuration the index was built with."""
        ...

    @property
    def graph(self) -> "HeteroGraph":
        """The graph of every segment (memory-mapped)."""
        ...

    @property
    def types(self) -> np.ndarray:
        """(n,) uint8 node type codes."""
        ...

    @property
    def keys(self) -> np.ndarray:
        """(n,) uint64 node keys."""
        ...

    @property
    def nodes(self) -> Any:
        """The node table (pyarrow)."""
        ...

    @property
    def documents(self) -> Any:
        """The documents table (pyarrow)."""
        ...

    def document_columns(self, names: Sequence[str]) -> Any:
        """Some columns of the documents table (pyarrow), read alone when the table is not loaded."""
        ...

    @property
    def vectors(self) -> Any:
        """The vector index of the T, S, A and H nodes."""
        ...

    def embedder(self) -> Any:
        """The embedder the index was built with."""
        ...

    def close(self) -> None:
        """Release the pinned generation."""
        ...
