"""One retrieval as framework-neutral passages: the text of each ranked passage and its metadata.

The framework retrievers (LangChain, LlamaIndex) and the MCP server all return what
``Index.retrieve`` ranks, in its order: passage ``i`` is ``result.passages[i]`` (a
:class:`~noderag.search.result.Passage`: its id, title, score and the text of its best-scoring chunk).
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

    ``text`` and ``title`` are what ``result.passages`` carries (the text of the passage's best chunk);
    ``metadata``: ``passage_id`` (the source id: the JSONL ``id`` or the file path), ``node_id``
    (the T node whose text this is), ``doc_id``, ``title``, ``score``, ``rank`` (0-based),
    ``generation``, ``matched`` (whether anything matched confidently), ``query``, ``context``
    (the typed context of the whole retrieval, grouped by node type), ``context_node_ids`` and
    ``nodes`` (the retrieved nodes: id, type, score, text, origin).
    """
    if k is not None and k < 1:
        raise ValueError(f"k must be >= 1 (or None for every passage), got {k}")
    ranked = result.passages if k is None else result.passages[:k]
    searcher = index.searcher(config)
    docs = [int(searcher.tables.doc[int(p.node_id)]) for p in ranked]
    nodes = [node_payload(nd) for nd in result.nodes]
    return [{"text": p.text, "metadata": {
        "passage_id": p.id, "node_id": p.node_id, "doc_id": doc, "title": p.title, "score": p.score,
        "rank": rank, "generation": result.generation, "matched": bool(result.matched), "query": result.query,
        "context": result.context, "context_node_ids": [int(i) for i in result.context_node_ids],
        "nodes": nodes}} for rank, (p, doc) in enumerate(zip(ranked, docs))]


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
