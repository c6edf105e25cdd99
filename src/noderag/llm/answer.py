"""Answering questions over a retrieved context: one prompt, checked citations, per-question errors.

Shared by ``Searcher.answer`` / ``noderag query --answer`` and ``benchmarks/bench_qa.py``, so every
method is answered with the same prompt. Context items are shown to the model as ``[id] text``; the
citations it returns are kept only when they are ids of that context (others are reported as invalid).
Malformed or empty output is retried with a shifted seed, then reported in ``error`` — never dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from .base import retry_request
from .prompts import answer_request
from .types import LLMRequest, LLMResult, Usage

__all__ = ["Answer", "answer_many", "parse_answer", "retrieval_context", "ANSWER_RETRIES"]

#: Extra attempts of a question whose answer came back failed, malformed or empty (after the
#: backend's own schema-validation retries).
ANSWER_RETRIES = 1

_ID = re.compile(r"[A-Za-z]?\d+")


@dataclass
class Answer:
    """One answered question.

    Attributes
    ----------
    answer : str
        The short answer ("" when ``error`` is set).
    cited : list of str
        Context ids the answer cites, in the model's order, restricted to ids of the context.
    invalid_citations : list of str
        Citations that are not ids of the context (reported, not kept).
    error : str or None
        Why no answer was obtained after the retries.
    usage : Usage
        Tokens over every attempt; ``latency_s`` likewise.
    cached : bool
        The final attempt came from the LLM cache.
    attempts : int
    """

    answer: str
    cited: list[str] = field(default_factory=list)
    invalid_citations: list[str] = field(default_factory=list)
    error: str | None = None
    usage: Usage = Usage()
    latency_s: float = 0.0
    cached: bool = False
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"answer": self.answer, "cited": list(self.cited), "invalid_citations": list(self.invalid_citations),
                "error": self.error, "prompt_tokens": self.usage.prompt, "completion_tokens": self.usage.completion,
                "cached_tokens": self.usage.cached, "latency_s": round(self.latency_s, 4), "cached": self.cached,
                "attempts": self.attempts}


def retrieval_context(retrieval: Any) -> list[tuple[str, str]]:
    """``(node id, text)`` pairs of a retrieval's context nodes, in context order (whitespace collapsed)."""
    by_id = {n.id: n for n in retrieval.nodes}
    return [(str(i), " ".join(by_id[i].text.split())) for i in retrieval.context_node_ids]


def _norm_id(c: Any) -> str:
    s = str(c).strip().strip("[]() ").strip()
    m = _ID.fullmatch(s) or _ID.search(s)
    return m.group(0) if m else s


def parse_answer(result: LLMResult, context_ids: Sequence[str]) -> tuple[str, list[str], list[str], str | None]:
    """Read ``(answer, cited, invalid_citations, error)`` from one answer call's result."""
    if not result.ok:
        return "", [], [], result.error
    value = result.value
    if not isinstance(value, dict):
        return "", [], [], f"answer output is not a JSON object: {str(result.text)[:200]!r}"
    answer = " ".join(str(value.get("answer") or "").split())
    if not answer:
        return "", [], [], f"empty answer: {str(result.text)[:200]!r}"
    allowed = {str(i) for i in context_ids}
    cited: list[str] = []
    invalid: list[str] = []
    for c in value.get("citations") or []:
        cid = _norm_id(c)
        if cid in allowed:
            if cid not in cited:
                cited.append(cid)
        else:
            invalid.append(str(c))
    return answer, cited, invalid, None


def answer_many(
    llm: Any, items: Sequence[tuple[str, Sequence[tuple[str, str]]]], *, stage: str = "answer",
    lang: str = "auto", max_tokens: int | None = None, retries: int = ANSWER_RETRIES,
) -> list[Answer]:
    """Answer each ``(question, [(context id, text), ...])`` in one batch; one :class:`Answer` per item.

    Items whose output failed, was malformed or empty are re-asked (seed shifted, at most
    ``retries`` times) in one further batch each round; what still fails keeps its error.
    """
    reqs: list[LLMRequest] = [answer_request(q, ctx, lang=lang, max_tokens=max_tokens, id=str(i))
                              for i, (q, ctx) in enumerate(items)]
    ctx_ids = [[cid for cid, _ in ctx] for _, ctx in items]
    out: list[Answer | None] = [None] * len(reqs)
    usage = [Usage() for _ in reqs]
    latency = [0.0] * len(reqs)
    todo = list(range(len(reqs)))
    for attempt in range(retries + 1):
        if not todo:
            break
        batch = [reqs[i] if attempt == 0 else retry_request(reqs[i], 100 + attempt) for i in todo]
        results = llm.run(batch, stage=stage)
        again = []
        for i, res in zip(todo, results):
            usage[i] = usage[i] + res.usage
            latency[i] += res.latency_s
            answer, cited, invalid, err = parse_answer(res, ctx_ids[i])
            out[i] = Answer(answer, cited, invalid, err, usage[i], latency[i], res.cached, attempt + 1)
            if err is not None:
                again.append(i)
        todo = again
    return [a for a in out if a is not None]
