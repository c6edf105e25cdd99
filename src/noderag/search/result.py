"""Retrieval and answer records (plain dataclasses, JSON-serialisable through ``to_dict``)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Sequence

import numpy as np

from ..graph.types import NodeType

__all__ = ["Passage", "RetrievedNode", "RetrievalResult", "AnswerResult", "passage_records"]

SNIPPET_CHARS = 160  # the plain CLI, repr and the web page's list show this much of a passage's text


class Passage(str):
    """One ranked source passage: its id, title, text and score together.

    A ``Passage`` is its id string (it compares, hashes and serialises to JSON as the id, so code that ranks
    ids keeps working) with the rest attached: ``id``, ``title`` (None when the source has none), ``text``
    (the text of its best-scoring chunk), ``score`` and ``node_id`` (that chunk's T node).
    """

    text: str
    score: float
    node_id: int

    def __new__(cls, id: str, *, title: str | None = None, text: str = "", score: float = 0.0,
                node_id: int = -1, title_of: Any = None) -> "Passage":
        """``title_of``: a callable giving the title on first use (a retrieval reads no documents table)."""
        self = super().__new__(cls, id)
        self.__dict__.update(_title=title, _title_of=title_of, text=text, score=float(score), node_id=int(node_id))
        return self

    @property
    def title(self) -> str | None:
        """The title of the passage's document (None when it has none); read on first use."""
        d = self.__dict__
        if d["_title_of"] is not None:
            d["_title"], d["_title_of"] = d["_title_of"](), None
        return d["_title"]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Passage is read-only (tried to set {name!r})")

    def __reduce__(self):
        return (_passage, (str(self), self.title, self.text, self.score, self.node_id))

    @property
    def id(self) -> str:
        """The source id: the JSONL ``id``, or the document's path."""
        return str(self)

    def snippet(self, chars: int = SNIPPET_CHARS) -> str:
        """The text on one line, cut at a word boundary to about ``chars`` characters ("..." when cut)."""
        flat = " ".join(self.text.split())
        if len(flat) <= chars:
            return flat
        cut = flat[:chars].rsplit(" ", 1)[0] or flat[:chars]
        return cut + "..."

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: id, title, text, score and node_id."""
        return {"id": self.id, "title": self.title, "text": self.text, "score": round(self.score, 6),
                "node_id": self.node_id}

    def __repr__(self) -> str:
        return f"Passage({self.id!r}, title={self.title!r}, score={self.score:.4f}, text={self.snippet(40)!r})"


def _passage(id: str, title: str | None, text: str, score: float, node_id: int) -> Passage:
    return Passage(id, title=title, text=text, score=score, node_id=node_id)


def passage_records(store: Any, tables: Any, ids: Sequence[str], scores: Sequence[float],
                    node_ids: Sequence[int]) -> list[Passage]:
    """The ranked passages with their titles and texts: ``tables`` (the searcher's node tables) give each
    best chunk's text and document, the store's documents table the document's title."""
    nodes = [int(n) for n in node_ids]
    texts = tables.texts(nodes) if nodes else []
    docs = np.asarray(tables.doc, dtype=np.int64)[np.asarray(nodes, dtype=np.int64)].tolist() if nodes else []
    return [Passage(str(pid), text=t or "", score=float(sc), node_id=n, title_of=partial(_title, store, d))
            for pid, sc, n, t, d in zip(ids, scores, nodes, texts, docs)]


def _title(store: Any, doc: int) -> str | None:
    return _DocTitles.of(store).get(doc)


class _DocTitles:
    """Titles of a store's documents by doc id, read from its (memory-mapped) documents table on demand."""

    _cache: "weakref.WeakKeyDictionary[Any, _DocTitles]" = weakref.WeakKeyDictionary()

    def __init__(self, documents: Any) -> None:
        self._ids = self._titles = None
        if documents is not None and {"doc_id", "title"} <= set(documents.column_names):
            ids = documents.column("doc_id").combine_chunks()  # an Array converts without pandas
            self._ids = np.asarray(ids.to_numpy(zero_copy_only=False), dtype=np.int64)
            self._order = np.argsort(self._ids, kind="stable")
            self._titles = documents.column("title")

    @classmethod
    def of(cls, store: Any) -> "_DocTitles":
        try:
            got = cls._cache.get(store)
        except TypeError:  # a store that cannot be weakly referenced: no cache
            return cls(getattr(store, "documents", None))
        if got is None:
            got = cls._cache[store] = cls(getattr(store, "documents", None))
        return got

    def get(self, doc: int) -> str | None:
        """The title of document ``doc`` (None: no title, or no such document)."""
        ids = self._ids
        if ids is None or doc < 0:
            return None
        if doc < ids.shape[0] and ids[doc] == doc:  # doc ids are row numbers in a fresh build
            row = doc
        else:
            pos = int(np.searchsorted(ids, doc, sorter=self._order))
            if pos >= ids.shape[0] or ids[self._order[pos]] != doc:
                return None
            row = int(self._order[pos])
        return self._titles[row].as_py()


@dataclass(frozen=True)
class RetrievedNode:
    """One selected node.

    Attributes
    ----------
    id : int
        Node id in the index.
    type : NodeType
    score : float
        PPR score (entry points: their cosine similarity when PPR is off).
    text : str
        Node text (N: display name, O: title).
    origin : str
        Why it was selected: "entry" (vector hit), "name" (entity/title match),
        "ppr" (typed selection), "attribute" (A of a selected entity),
        "high_level" (H of a selected overview).
    """

    id: int
    type: NodeType
    score: float
    text: str
    origin: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; the type as its letter."""
        return {"id": self.id, "type": self.type.name, "score": self.score, "text": self.text, "origin": self.origin}


@dataclass
class RetrievalResult:
    """Everything retrieved for one query.

    Attributes
    ----------
    query : str
    nodes : list of RetrievedNode
        Entry points first, then the typed selection and its expansions; no duplicates.
    passages : list of Passage
        The ranked source passages, best first: each is its id (the ``id`` of the ingested JSONL line,
        or the document path) with its ``title``, ``text``, ``score`` and ``node_id`` attached.
    passage_scores : list of float
        Aligned with ``passages``.
    passage_node_ids : list of int
        The best-scoring T (chunk) node of each passage, aligned with ``passages``.
    documents : list of str
        Source documents of the selected T/S nodes, in first-seen order.
    context : str
        The context text, grouped by node type, within the token budget.
    context_tokens : int
    context_node_ids : list of int
        Ids of the nodes whose text is in ``context``.
    query_entities : list of str
    matched_names : list of int
        N/O node ids matched by name.
    generation : int or None
        The index generation every part of this result was read from.
    best_similarity : float or None
        Best cosine similarity of the query vector with an entry point (None: no vector search).
    min_similarity : float
        The ``search.min_similarity`` the result was judged against.
    matched : bool
        Whether anything matched confidently: a name match, or ``best_similarity >= min_similarity``.
        False means the nodes and passages are only the nearest ones, with no sign that they answer
        the query (the CLI says "no confident match").
    """

    query: str
    nodes: list[RetrievedNode]
    passages: list[Passage]
    passage_scores: list[float]
    passage_node_ids: list[int]
    documents: list[str]
    context: str
    context_tokens: int
    context_node_ids: list[int]
    query_entities: list[str] = field(default_factory=list)
    matched_names: list[int] = field(default_factory=list)
    generation: int | None = None
    best_similarity: float | None = None
    min_similarity: float = 0.0
    matched: bool = True

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "query": self.query,
            "nodes": [n.to_dict() for n in self.nodes],
            "passages": [_as_passage(p, s, n).to_dict() for p, s, n in zip(self.passages, self.passage_scores,
                                                                             self.passage_node_ids)],
            "passage_scores": [round(float(s), 6) for s in self.passage_scores],
            "passage_node_ids": list(self.passage_node_ids),
            "documents": list(self.documents),
            "context": self.context,
            "context_tokens": self.context_tokens,
            "context_node_ids": list(self.context_node_ids),
            "query_entities": list(self.query_entities),
            "matched_names": list(self.matched_names),
            "generation": self.generation,
            "matched": bool(self.matched),
            "best_similarity": None if self.best_similarity is None else round(float(self.best_similarity), 6),
            "min_similarity": float(self.min_similarity),
        }

    def __repr__(self) -> str:
        """One line: the query, the first passages (id and title), the counts; not the 20 KB of context."""
        top = ", ".join(f"{p!s}" + (f" ({p.title})" if getattr(p, "title", None) else "") for p in self.passages[:3])
        more = f", +{len(self.passages) - 3} more" if len(self.passages) > 3 else ""
        return (f"RetrievalResult(query={self.query!r}, passages=[{top}{more}], nodes={len(self.nodes)}, "
                f"context_tokens={self.context_tokens}, matched={self.matched}, generation={self.generation})")


def _as_passage(p: str, score: float, node_id: int) -> Passage:
    """``p`` when it is a :class:`Passage`, else a bare one from its id, score and node id."""
    return p if isinstance(p, Passage) else Passage(str(p), score=float(score), node_id=int(node_id))


@dataclass
class AnswerResult:
    """An LLM answer over one retrieval.

    Attributes
    ----------
    answer : str
    cited_ids : list of int
        Node ids the answer cites, restricted to ids that were in the context.
    retrieval : RetrievalResult
    usage : dict
        Prompt / completion tokens and wall time of the call.
    error : str or None
        Why no answer came back (failed, malformed or empty output after retries); ``answer`` is "".
    """

    answer: str
    cited_ids: list[int]
    retrieval: RetrievalResult
    usage: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"answer": self.answer, "cited_ids": list(self.cited_ids), "error": self.error,
                "usage": dict(self.usage), "retrieval": self.retrieval.to_dict()}
