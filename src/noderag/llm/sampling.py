"""A backend wrapper that sets sampling fields (temperature, top_p, seed, max_tokens) of every request.

It sits outside the cache, so the overridden sampling is part of each request's cache key.
"""

from __future__ import annotations

from dataclasses import replace
from typing import AsyncIterator, Any, Sequence

from .types import LLMRequest, LLMResult, ResultCallback, Sampling

__all__ = ["SamplingOverride"]


class SamplingOverride:
    """Rewrite each request's :class:`Sampling` with fixed values, then delegate to ``backend``."""

    def __init__(self, backend: Any, **sampling: Any) -> None:
        unknown = sorted(set(sampling) - {"temperature", "top_p", "seed", "max_tokens"})
        if unknown:
            raise TypeError(f"SamplingOverride: unknown sampling field(s) {unknown}")
        Sampling(**{**Sampling().to_dict(), **sampling})  # validates the values once, naming the field
        self.backend = backend
        self.sampling = dict(sampling)
        self.model_id: str = backend.model_id
        self.ledger = backend.ledger

    def _rewrite(self, requests: Sequence[LLMRequest]) -> list[LLMRequest]:
        return [replace(r, sampling=replace(r.sampling, **self.sampling)) for r in requests]

    def generate(self, requests: Sequence[LLMRequest], *, on_result: ResultCallback | None = None) -> list[LLMResult]:
        """Run the rewritten requests without accounting."""
        return self.backend.generate(self._rewrite(requests), on_result=on_result)

    def run(self, requests: Sequence[LLMRequest], *, stage: str) -> list[LLMResult]:
        """Run the rewritten requests for ``stage`` (accounted by the wrapped backend)."""
        return self.backend.run(self._rewrite(requests), stage=stage)

    def astream(self, request: LLMRequest) -> AsyncIterator[str]:
        """The wrapped backend's stream of ``request`` with this wrapper's sampling."""
        return self.backend.astream(self._rewrite([request])[0])

    def streamed_result(self, request: LLMRequest, text: str, wall_s: float) -> LLMResult:
        return self.backend.streamed_result(self._rewrite([request])[0], text, wall_s)

    def close(self) -> None:
        """Close the wrapped backend."""
        self.backend.close()

    def __getattr__(self, name: str) -> Any:  # cache, http_calls, config ... of the wrapped backend
        if name == "backend":
            raise AttributeError(name)
        return getattr(self.backend, name)

    def __enter__(self) -> "SamplingOverride":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
