"""Per-node columns, texts, labels and the name matcher of an index, built in memory (O(n)).

The searcher's fallback for an index without the build-time ``query/`` folder
(:class:`noderag.search.query_index.QueryIndex`, same interface), and the reference
the memory-mapped form is tested against.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..graph.types import NodeType
from .query_index import document_labels, passage_labels
from .entities import EntityMatcher

__all__ = ["InMemoryTables"]

_N, _O = int(NodeType.N), int(NodeType.O)


def _column(table: Any, name: str) -> Any:
    try:
        return table.column(name)
    except KeyError:
        raise ValueError(f"the index node table has no column {name!r}; columns: {table.column_names}") from None


class InMemoryTables:
    """The node table's columns as arrays, passage/document labels as dicts, an :class:`EntityMatcher`."""

    def __init__(self, store: Any, types: np.ndarray) -> None:
        self.n = int(types.shape[0])
        nodes = store.nodes
        if nodes.num_rows != self.n:
            raise ValueError(f"node table has {nodes.num_rows} rows but the graph has {self.n} nodes")
        self._text = _column(nodes, "text")
        self.chunk = np.asarray(_column(nodes, "chunk_id").to_numpy(zero_copy_only=False), dtype=np.int64)
        self.doc = np.asarray(_column(nodes, "doc_id").to_numpy(zero_copy_only=False), dtype=np.int64)
        self._doc_labels = document_labels(getattr(store, "documents", None))
        self._labels = passage_labels(types, _column(nodes, "source_id").to_pylist(), self.doc, self._doc_labels)
        if "active" in nodes.column_names:
            self.active = np.asarray(nodes.column("active").to_numpy(zero_copy_only=False), dtype=bool)
        else:
            self.active = np.ones(self.n, dtype=bool)
        self._names = _column(nodes, "name").to_pylist()
        named = np.flatnonzero(((types == _N) | (types == _O)) & self.active)
        self.names = EntityMatcher(named, [self._names[i] for i in named.tolist()])

    def texts(self, ids) -> list[str]:
        """Display texts (text, else name, else "")."""
        ids = np.asarray(list(ids), dtype=np.int64)
        if not ids.size:
            return []
        out = self._text.take(ids).to_pylist()
        return [t if t is not None else (self._names[i] or "") for i, t in zip(ids.tolist(), out)]

    def label(self, node: int) -> str | None:
        return self._labels.get(node)

    def labels(self, nodes) -> list[str | None]:
        return [self._labels.get(int(c)) for c in nodes]

    def doc_label(self, doc: int) -> str:
        return self._doc_labels.get(doc, f"doc:{doc}")
