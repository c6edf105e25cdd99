"""Retrieval and answer records (plain dataclasses, JSON-serialisable through ``to_dict``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..graph.types import NodeType

__all__ = ["RetrievedNode", "RetrievalResult", "AnswerResult"]


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
    passages : list of str
        Source passage ids (the ``id`` of the ingested JSONL line, or the document
        path), best first.
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
    passages: list[str]
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
            "passages": list(self.passages),
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
