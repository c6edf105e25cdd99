"""Test double: a scripted, deterministic LLM backend for unit tests of the pipeline (never for real use)."""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from .accounting import TokenLedger
from .base import BaseBackend, RawOutput, _check_requests, validated_batch
from .types import LLMRequest, LLMResult, ResultCallback, Usage

__all__ = ["ScriptedLLM"]


class ScriptedLLM(BaseBackend):
    """Test double: ``respond(request)`` gives each reply; output is validated like a real backend's.

    ``respond`` returns a JSON-able value (serialised with ``json.dumps``) or a ``str`` (sent as
    the raw reply text, so tests can script invalid JSON); raising marks that request failed.
    Usage is a deterministic whitespace token count. ``calls`` counts requests answered.
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

    def generate(
        self, requests: Sequence[LLMRequest], *, on_result: ResultCallback | None = None
    ) -> list[LLMResult]:
        """Answer every request through the callback, validating and retrying like a real backend."""
        reqs = _check_requests(requests)
        return validated_batch(reqs, self._call_batch, self.validators, self.max_validation_retries, on_result)

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
