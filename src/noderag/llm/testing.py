"""Test double: a scripted, deterministic LLM backend for unit tests of the pipeline (never for real use)."""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from .accounting import TokenLedger
from .base import BatchedBackend, RawOutput
from .types import LLMRequest, Usage

__all__ = ["ScriptedLLM", "rule_based_respond"]


class ScriptedLLM(BatchedBackend):
    """Test double: ``respond(request)`` gives each reply; output is validated like a real backend's.

    ``respond`` returns a JSON-able value (serialised with ``json.dumps``) or a ``str`` (sent as
    the raw reply text, so tests can script invalid JSON); raising marks that request failed.
    Usage is a deterministic whitespace token count. ``calls`` counts requests answered, ``batches``
    the batches (a ``generate`` call is one batch, and one more per round of validation retries).
    """

    def __init__(
        self,
        respond: Callable[[LLMRequest], Any],
        *,
        model_id: str = "scripted-test-double",
        max_validation_retries: int = 2,
        ledger: TokenLedger | None = None,
    ) -> None:
        if not callable(respond):
            raise TypeError(f"ScriptedLLM: respond must be callable, got {type(respond).__name__}")
        super().__init__(max_validation_retries=max_validation_retries, ledger=ledger)
        self.respond = respond
        self.model_id = model_id
        self.calls = 0
        self.batches = 0

    def _call_batch(self, batch: list[LLMRequest]) -> list[RawOutput]:
        self.batches += 1
        out = []
        for req in batch:
            self.calls += 1
            try:
                v = self.respond(req)
            except Exception as e:  # a failing item, never a failing batch
                out.append(RawOutput(error=f"{type(e).__name__}: {e}"))
                continue
            text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
            prompt = sum(len(m["content"].split()) for m in req.messages)
            out.append(RawOutput(text=text, usage=Usage(prompt, len(text.split()), 0), finish_reason="stop"))
        return out


_SENT = re.compile(r"(?<=[.!?。！？])\s*")
_CAPS = re.compile(r"\b[A-Z][\w'-]*(?:\s+(?:of\s+)?[A-Z][\w'-]*)*|\b\d{3,4}\b")
_STOP = frozenset("The A An It In On At He She They We I Who What When Where Which Why How".split())


def _entities(text: str, limit: int) -> list[str]:
    out: list[str] = []
    for m in _CAPS.finditer(text):
        words = m.group(0).split()
        if words and words[0] in _STOP:
            words = words[1:]
        e = " ".join(words)[:100]
        if e and e not in out:
            out.append(e)
        if len(out) == limit:
            break
    return out


def rule_based_respond(request: LLMRequest) -> Any:
    """Deterministic schema-valid replies for the prompts of :mod:`noderag.llm.prompts` (test double).

    decompose: one unit per sentence, capitalised word runs and years as entities, consecutive
    entities linked by "related to"; community: one element; query: capitalised words; answer:
    cites the first context id; plain-text requests: the first line of the user message.
    """
    user = request.messages[-1]["content"]
    props = (request.schema or {}).get("properties", {})
    if request.schema is None:
        return "Summary: " + user.splitlines()[0][:200]
    if "units" in props:
        unit_s = props["units"]
        item = unit_s["items"]["properties"]
        max_e, max_r = item["entities"]["maxItems"], item["relations"]["maxItems"]
        units = []
        for sent in (x.strip() for x in _SENT.split(user)):
            if not sent:
                continue
            ents = _entities(sent, max_e)
            rels = [{"source": a, "relation": "related to", "target": b} for a, b in zip(ents, ents[1:])][:max_r]
            units.append({"text": sent[: item["text"]["maxLength"]], "entities": ents, "relations": rels})
            if len(units) == unit_s["maxItems"]:
                break
        return {"units": units}
    if "elements" in props:
        first = user.splitlines()[0].lstrip("- ")[:100] or "cluster"
        return {"elements": [{"title": first[:60], "description": user.replace("\n", " ")[:300]}]}
    if "answer" in props:
        ids = re.findall(r"^\[([^\]]+)\]", user, flags=re.M)
        return {"answer": "See the cited context.", "citations": ids[:1]}
    if "entities" in props:
        return {"entities": _entities(user, props["entities"]["maxItems"])}
    raise ValueError(f"rule_based_respond: no rule for schema with properties {sorted(props)}")
