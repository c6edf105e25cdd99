"""Query tables built in memory from a node table (O(n)), for the hand-built graphs of the search tests.

A real index has its tables written at build time (``query/``, :class:`noderag.search.query_index.QueryIndex`);
a test store built by hand has none, so it carries these (same interface), and ``test_query_index`` checks the
memory-mapped form against them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from noderag.graph.types import NodeType
from noderag.search.entities import EntityMatcher
from noderag.search.lexical import LexicalIndex, titled
from noderag.search.query_index import document_labels, passage_labels

_N, _O, _T = int(NodeType.N), int(NodeType.O), int(NodeType.T)


class InMemoryTables:
    """The node table's columns as arrays, passage/document labels as dicts, an :class:`EntityMatcher` and the
    passages' BM25 postings (title + text)."""

    line_tokens = None  # no build-time table: the searcher counts context lines itself

    def __init__(self, store: Any, types: np.ndarray) -> None:
        self.n = int(types.shape[0])
        nodes = store.nodes
        self._text = nodes.column("text")
        self.chunk = np.asarray(nodes.column("chunk_id").to_numpy(zero_copy_only=False), dtype=np.int64)
        self.doc = np.asarray(nodes.column("doc_id").to_numpy(zero_copy_only=False), dtype=np.int64)
        documents = getattr(store, "documents", None)
        self._doc_labels = document_labels(documents)
        self._labels = passage_labels(types, nodes.column("source_id").to_pylist(), self.doc, self._doc_labels)
        if "active" in nodes.column_names:
            self.active = np.asarray(nodes.column("active").to_numpy(zero_copy_only=False), dtype=bool)
        else:
            self.active = np.ones(self.n, dtype=bool)
        self._names = nodes.column("name").to_pylist()
        named = np.flatnonzero(((types == _N) | (types == _O)) & self.active)
        self.names = EntityMatcher(named, [self._names[i] for i in named.tolist()])
        titles = {} if documents is None or "title" not in documents.column_names else dict(
            zip(documents.column("doc_id").to_pylist(), documents.column("title").to_pylist()))
        t_ids = np.flatnonzero((types == _T) & self.active)
        texts = [titled(t, titles.get(int(d))) for t, d in zip(self.texts(t_ids), self.doc[t_ids].tolist())]
        self.lexical = LexicalIndex.from_texts(t_ids, texts)

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
