"""Request and response models of the HTTP API (pydantic): they validate bodies and make the OpenAPI schema.

Responses are encoded on the retrieval worker with ``json`` (the same dicts as ``noderag query --json``);
the response models document them and the tests validate real responses against them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from ..search.result import RetrievalResult

__all__ = ["Limits", "RetrieveRequest", "RetrieveManyRequest", "AnswerRequest", "RetrievalOut",
           "RetrieveManyOut", "AnswerOut", "NodeOut", "StatsOut", "HealthOut", "ErrorOut"]


class Limits:
    """Bounds of request fields (also named in the error messages)."""

    max_question_chars = 2000
    max_questions = 64
    max_k = 100
    max_body_bytes = 256 * 1024


def _question(v: str, field: str) -> str:
    if not v.strip():
        raise ValueError(f"{field} is blank: ask something with words in it")
    return v


class _Strict(BaseModel):
    """Request bodies: no unknown fields, and no coercion (``"5"``, ``true`` or ``5.0`` is no integer, ``"yes"``
    no boolean): a client's type mistake is a 422 naming the field, not a silently different request."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False, strict=True)


class RetrieveRequest(_Strict):
    """One question."""

    question: str = Field(min_length=1, max_length=Limits.max_question_chars,
                          description="the question (1 to 2000 characters, not blank)")
    k: int | None = Field(default=5, ge=1, le=Limits.max_k,
                          description="ranked passages to return (1 to 100, default 5, as `noderag query --k`; "
                                      "null: all that were ranked)")
    explain: bool = Field(default=False, description="also return the edges among the retrieved nodes, the seeds "
                                                     "and the texts of the returned passages (for the page's graph)")

    @field_validator("question")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        return _question(v, "question")


class RetrieveManyRequest(_Strict):
    """Several questions, retrieved in one batch."""

    questions: list[str] = Field(min_length=1, max_length=Limits.max_questions,
                                 description="1 to 64 questions of 1 to 2000 characters each")
    k: int | None = Field(default=5, ge=1, le=Limits.max_k,
                          description="ranked passages per question (1 to 100, default 5; null: all)")

    @field_validator("questions")
    @classmethod
    def _each(cls, v: list[str]) -> list[str]:
        for i, q in enumerate(v):
            if not q.strip():
                raise ValueError(f"questions[{i}] is blank: ask something with words in it")
            if len(q) > Limits.max_question_chars:
                raise ValueError(f"questions[{i}] has {len(q)} characters; at most {Limits.max_question_chars}")
        return v


class AnswerRequest(RetrieveRequest):
    """A question to retrieve for and answer with the configured LLM."""

    stream: bool = Field(default=True, description="server-sent events (retrieval, token..., answer, done); "
                                                   "false: one JSON object like `noderag query --answer --json`")


class NodeBrief(BaseModel):
    id: int
    type: Literal["T", "S", "N", "R", "A", "H", "O"]
    score: float
    text: str
    origin: Literal["entry", "name", "ppr", "attribute", "high_level"]


class Explain(BaseModel):
    edges: list[list[int]] = Field(description="structural edges [u, v] among the returned nodes")
    seeds: list[int] = Field(description="PPR seeds: vector entry points and name matches")
    passage_texts: list[str] = Field(description="text of each returned passage's best chunk")


class PassageOut(BaseModel):
    """One ranked passage: its source id, title, the text of its best chunk, score and that chunk's node id."""

    id: str
    title: str | None
    text: str
    score: float
    node_id: int


def _fields_of(cls: type, **types: Any) -> dict[str, Any]:
    """pydantic field definitions of the dataclass ``cls``'s fields (their annotations and defaults), ``types``
    replacing some annotations: a response model that follows the dataclass it serialises."""
    hints = get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = Field(default_factory=f.default_factory)
        else:
            default = ...
        out[f.name] = (types.get(f.name, hints[f.name]), default)
    return out


#: Every field of :class:`~noderag.search.result.RetrievalResult` (nodes and passages as :class:`NodeBrief` and
#: :class:`PassageOut`), so that the schema cannot fall behind the result.
RetrievalOut = create_model("RetrievalOut", __doc__="The JSON of `noderag query --json` (plus ``explain`` when asked).",
                            **_fields_of(RetrievalResult, nodes=list[NodeBrief], passages=list[PassageOut]),
                            explain=(Explain | None, None))


class RetrieveManyOut(BaseModel):
    results: list[RetrievalOut]


class AnswerOut(BaseModel):
    """The JSON of `noderag query --answer --json`."""

    answer: str
    cited_ids: list[int]
    error: str | None
    usage: dict
    retrieval: RetrievalOut


class NeighbourOut(BaseModel):
    id: int
    type: str
    label: str


class SourceOut(BaseModel):
    chunk_id: int
    passage: str
    title: str | None
    text: str


class NodeOut(BaseModel):
    id: int
    type: str
    name: str | None
    text: str
    active: bool
    source: SourceOut | None
    neighbours: list[NeighbourOut]
    neighbour_count: int


class StatsOut(BaseModel):
    generation: int | None = Field(description="the index generation being served")
    counts: dict
    bytes_total: int | None = None
    llm: str | None
    server: dict


class HealthOut(BaseModel):
    status: Literal["ok"]
    nodes: int
    llm: bool
    generation: int | None


class ErrorOut(BaseModel):
    """Every 4xx/5xx body: a message, and the request field it is about when there is one."""

    error: str
    field: str | None = None
