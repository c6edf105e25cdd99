"""Read-only views of an opened index for the API: the edges among retrieved nodes, one node's details.

Prepared once per server from the store's memory-mapped arrays; every call touches only the few
hundred nodes it is asked about.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..graph.types import NodeType

__all__ = ["GraphView", "NodeNotFound", "node_label"]

_T, _N, _O = int(NodeType.T), int(NodeType.N), int(NodeType.O)


class NodeNotFound(LookupError):
    """No node with that id in the index."""


def node_label(node_type: int, name: str | None, text: str | None, width: int = 80) -> str:
    """Short display label: the name of an entity or overview, else the first ``width`` characters of the text."""
    if node_type in (_N, _O) and name:
        return name
    s = " ".join((text or name or "").split())
    return s if len(s) <= width else s[: width - 1].rstrip() + "…"


class GraphView:
    """Subgraph edges and node details over one index store (``graph``, ``nodes``, ``documents``)."""

    def __init__(self, store: Any) -> None:
        graph = store.graph
        self.n = int(graph.n)
        self._indptr = np.asarray(graph.structural.indptr, dtype=np.int64)
        self._indices = np.asarray(graph.structural.indices)
        self.types = np.asarray(graph.types, dtype=np.uint8)
        nodes = store.nodes
        self._text = nodes.column("text")
        self._name = nodes.column("name")
        self._chunk = np.asarray(nodes.column("chunk_id").to_numpy(zero_copy_only=False), dtype=np.int64)
        self._doc = np.asarray(nodes.column("doc_id").to_numpy(zero_copy_only=False), dtype=np.int64)
        self._source = nodes.column("source_id")
        self._active = (np.asarray(nodes.column("active").to_numpy(zero_copy_only=False), dtype=bool)
                        if "active" in nodes.column_names else np.ones(self.n, dtype=bool))
        self._docs: dict[int, tuple[str | None, str | None]] = {}
        docs = getattr(store, "documents", None)
        if docs is not None and "doc_id" in docs.column_names:
            src = docs.column("source").to_pylist() if "source" in docs.column_names else [None] * docs.num_rows
            title = docs.column("title").to_pylist() if "title" in docs.column_names else [None] * docs.num_rows
            for d, s, t in zip(docs.column("doc_id").to_pylist(), src, title):
                self._docs[int(d)] = (s, t)

    def check(self, node_id: int) -> int:
        """``node_id`` as an int in range, else :class:`NodeNotFound` naming the valid range."""
        if not (0 <= node_id < self.n):
            raise NodeNotFound(f"node {node_id} does not exist: node ids run from 0 to {self.n - 1}")
        return int(node_id)

    def edges(self, ids: list[int]) -> list[list[int]]:
        """Structural edges ``[u, v]`` (u < v) among ``ids``, sorted."""
        if not ids:
            return []
        sel = np.unique(np.asarray(ids, dtype=np.int64))
        out: list[list[int]] = []
        for u in sel.tolist():
            nb = np.asarray(self._indices[self._indptr[u]:self._indptr[u + 1]], dtype=np.int64)
            nb = nb[nb > u]
            if nb.size:
                hit = nb[np.isin(nb, sel, assume_unique=False)]
                out.extend([u, int(v)] for v in np.unique(hit).tolist())
        return out

    def texts(self, ids: list[int]) -> list[str]:
        """Texts of ``ids`` ("" when missing)."""
        if not ids:
            return []
        return [t or "" for t in self._text.take(np.asarray(ids, dtype=np.int64)).to_pylist()]

    def _summary(self, ids: np.ndarray) -> list[dict[str, Any]]:
        names = self._name.take(ids).to_pylist()
        texts = self._text.take(ids).to_pylist()
        return [{"id": int(i), "type": NodeType(int(self.types[i])).name,
                 "label": node_label(int(self.types[i]), nm, tx)}
                for i, nm, tx in zip(ids.tolist(), names, texts)]

    def node(self, node_id: int, *, max_neighbours: int = 50) -> dict[str, Any]:
        """Text, type, source passage and (up to ``max_neighbours``) neighbours of one node."""
        i = self.check(node_id)
        t = int(self.types[i])
        name = self._name[i].as_py()
        text = self._text[i].as_py()
        source = None
        chunk = int(self._chunk[i])
        if 0 <= chunk < self.n:
            d = int(self._doc[chunk]) if self._doc[chunk] >= 0 else int(self._doc[i])
            doc_src, title = self._docs.get(d, (None, None))
            label = self._source[chunk].as_py() or doc_src or f"doc:{d}"
            source = {"chunk_id": chunk, "passage": label, "title": title, "text": self._text[chunk].as_py() or ""}
        nb = np.asarray(self._indices[self._indptr[i]:self._indptr[i + 1]], dtype=np.int64)
        nb = np.unique(nb[self._active[nb]]) if nb.size else nb
        # neighbours listed by type (T, S, N, ...), then id: stable and readable
        order = np.lexsort((nb, self.types[nb])) if nb.size else nb
        shown = nb[order][:max_neighbours]
        return {"id": i, "type": NodeType(t).name, "name": name, "text": text or name or "",
                "active": bool(self._active[i]), "source": source,
                "neighbours": self._summary(shown), "neighbour_count": int(nb.size)}
