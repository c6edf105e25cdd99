"""One retrieval as framework-neutral passages: the text of each ranked passage and its metadata.

The framework retrievers (LangChain, LlamaIndex) and the MCP server all return what
``Index.retrieve`` ranks, in its order: passage ``i`` is ``result.passages[i]``, its text the text
of its best-scoring chunk (``result.passage_node_ids[i]``, a T node), its score
``result.passage_scores[i]``. Node texts are read through the searcher's memory-mapped tables, so
a call touches only the returned nodes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

__all__ = ["open_index", "search_config", "passages", "node_payload", "PassageRetriever"]

#: metadata keys too large or too query-specific to show an LLM or embed with each passage
BULKY_KEYS = ("context", "context_node_ids", "nodes", "query")


def open_index(index: Any):
    """``index`` itself when it is an opened ``noderag.Index``, else ``Index.open(index)`` of a directory."""
    from ..api import Index

    if isinstance(index, Index):
        return index
    if isinstance(index, (str, os.PathLike)):
        return Index.open(Path(index))
    raise TypeError(f"index: expected a noderag.Index or an index directory, got {type(index).__name__}")


def search_config(search: Any):
    """A ``SearchConfig`` from None (the defaults), a ``SearchConfig``, or a dict of its fields."""
    from ..search import SearchConfig

    if search is None or isinstance(search, SearchConfig):
        return search
    if isinstance(search, Mapping):
        return SearchConfig.from_dict(dict(search))
    raise TypeError(f"search: expected a SearchConfig or a dict of its fields, got {type(search).__name__}")


def node_payload(node) -> dict[str, Any]:
    """A retrieved node as a JSON-ready dict (id, type letter, score, text, origin)."""
    return node.to_dict()


def passages(index: Any, result: Any, k: int | None, *, config: Any = None) -> list[dict[str, Any]]:
    """The first ``k`` (None: all) ranked passages of ``result`` as ``{"text", "metadata"}`` dicts.

    ``metadata``: ``passage_id`` (the source id: the JSONL ``id`` or the file path), ``node_id``
    (the T node whose text this is), ``doc_id``, ``title``, ``score``, ``rank`` (0-based),
    ``generation``, ``matched`` (whether anything matched confidently), ``query``, ``context``
    (the typed context of the whole retrieval, grouped by node type), ``context_node_ids`` and
    ``nodes`` (the retrieved nodes: id, type, score, text, origin).
    """
    if k is not None and k < 1:
        raise ValueError(f"k must be >= 1 (or None for every passage), got {k}")
    n = len(result.passages) if k is None else min(k, len(result.passages))
    ids = [int(i) for i in result.passage_node_ids[:n]]
    searcher = index.searcher(config)
    texts = searcher.node_texts(ids)
    docs = [int(searcher.tables.doc[i]) for i in ids]
    titles = _titles(index, docs)
    nodes = [node_payload(nd) for nd in result.nodes]
    out = []
    for rank, (pid, nid, score, text, doc) in enumerate(zip(result.passages[:n], ids, result.passage_scores[:n],
                                                            texts, docs)):
        out.append({"text": text, "metadata": {
            "passage_id": pid, "node_id": nid, "doc_id": doc, "title": titles.get(doc), "score": float(score),
            "rank": rank, "generation": result.generation, "matched": bool(result.matched), "query": result.query,
            "context": result.context, "context_node_ids": [int(i) for i in result.context_node_ids],
            "nodes": nodes}})
    return out


def _titles(index: Any, docs: list[int]) -> dict[int, str | None]:
    """Titles of some documents, from the (memory-mapped) documents table; its doc_id column is cached."""
    import numpy as np

    if not docs:
        return {}
    table = index.documents
    ids = index.__dict__.get("_integration_doc_ids")
    if ids is None:
        ids = np.asarray(table.column("doc_id").to_numpy(zero_copy_only=False), dtype=np.int64)
        index.__dict__["_integration_doc_ids"] = ids
    out: dict[int, str | None] = {}
    titles = table.column("title")
    for d in set(docs):
        rows = np.flatnonzero(ids == d) if not (0 <= d < ids.shape[0] and ids[d] == d) else [d]
        out[d] = titles[int(rows[0])].as_py() if len(rows) else None
    return out


class PassageRetriever:
    """What the framework retrievers share: the fields ``index``, ``k`` and ``search``, ``from_path``
    and the passages of one question.

    ``index`` is an opened ``noderag.Index``; ``k`` the passages returned per question (None: every
    ranked passage; default 5); ``search`` the search settings (``noderag.search.SearchConfig`` or a
    dict of its fields; None: the defaults).
    """

    @classmethod
    def from_path(cls, path: Any, **fields: Any):
        """Open the index in directory ``path`` and wrap it; ``fields`` are the others (``k``, ``search``, ...)."""
        return cls(index=open_index(path), **fields)

    def _passages(self, query: str) -> list[dict[str, Any]]:
        """The first ``k`` ranked passages of ``Index.retrieve(query)`` as ``{"text", "metadata"}`` dicts."""
        result = self.index.retrieve(query, config=self.search)
        return passages(self.index, result, self.k, config=self.search)
