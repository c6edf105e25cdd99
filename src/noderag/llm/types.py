"""Records shared by every LLM backend: requests, sampling, usage, results, the protocol."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from ..errors import NodeRAGError

__all__ = [
    "StreamUnavailable",
    "Sampling",
    "LLMRequest",
    "Usage",
    "LLMResult",
    "LLMBackend",
    "LLMError",
    "ResultCallback",
    "STAGES",
]

#: Build/search stages the token ledger knows by name (others are accepted too).
STAGES = ("decompose", "attributes", "communities", "query", "answer")


class LLMError(NodeRAGError, RuntimeError):
    """Raised for backend configuration errors (never for a single failed request)."""


class StreamUnavailable(LLMError):
    """This backend or its server cannot stream this request; use the batched path instead."""


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters of one request (greedy and seeded by default)."""

    temperature: float = 0.0
    max_tokens: int = 512
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.max_tokens, int) and self.max_tokens > 0):
            raise ValueError(f"Sampling.max_tokens must be a positive int, got {self.max_tokens!r}")
        if not (0.0 <= float(self.temperature) <= 5.0):
            raise ValueError(f"Sampling.temperature must be in [0, 5], got {self.temperature!r}")
        if not (0.0 < float(self.top_p) <= 1.0):
            raise ValueError(f"Sampling.top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.seed, int):
            raise ValueError(f"Sampling.seed must be an int, got {self.seed!r}")

    def to_dict(self) -> dict[str, Any]:
        """Return the parameters as a plain dict (part of the cache key)."""
        return {
            "temperature": float(self.temperature),
            "max_tokens": int(self.max_tokens),
            "top_p": float(self.top_p),
            "seed": int(self.seed),
        }

    def with_seed(self, seed: int) -> "Sampling":
        """Return a copy with another seed (used for validation retries)."""
        return replace(self, seed=int(seed))


@dataclass(frozen=True)
class LLMRequest:
    """One chat request: messages, an optional JSON schema and sampling parameters."""

    messages: list[dict[str, str]]
    schema: dict[str, Any] | None = None
    sampling: Sampling = field(default_factory=Sampling)
    id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.messages, (list, tuple)) or not self.messages:
            raise ValueError(f"LLMRequest.messages must be a non-empty list, got {self.messages!r}")
        for i, m in enumerate(self.messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(
                m.get("content"), str
            ):
                raise ValueError(
                    f"LLMRequest.messages[{i}] must be a dict with str 'role' and 'content', got {m!r}"
                )
        if self.schema is not None and not isinstance(self.schema, dict):
            raise ValueError(f"LLMRequest.schema must be a dict or None, got {type(self.schema).__name__}")
        if not isinstance(self.sampling, Sampling):
            raise ValueError(f"LLMRequest.sampling must be a Sampling, got {self.sampling!r}")


@dataclass(frozen=True)
class Usage:
    """Token usage of one call; ``estimated`` when counted offline, not reported by the backend."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0
    estimated: bool = False

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(
            self.prompt + other.prompt,
            self.completion + other.completion,
            self.cached + other.cached,
            self.estimated or other.estimated,
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the usage as a plain dict."""
        return {
            "prompt": self.prompt,
            "completion": self.completion,
            "cached": self.cached,
            "estimated": self.estimated,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Usage":
        """Build a Usage from :meth:`to_dict` output."""
        return cls(
            int(d.get("prompt", 0)),
            int(d.get("completion", 0)),
            int(d.get("cached", 0)),
            bool(d.get("estimated", False)),
        )


@dataclass(frozen=True)
class LLMResult:
    """Outcome of one request: validated value (JSON or text) or an error message."""

    value: Any = None
    text: str = ""
    usage: Usage = field(default_factory=Usage)
    latency_s: float = 0.0
    error: str | None = None
    cached: bool = False
    attempts: int = 1
    id: str | None = None

    @property
    def ok(self) -> bool:
        """True when the request succeeded (value parsed and validated)."""
        return self.error is None


#: Called once per finished request, as soon as it finishes: (index in batch, request, result).
ResultCallback = Callable[[int, LLMRequest, LLMResult], None]


@runtime_checkable
class LLMBackend(Protocol):
    """A batched chat backend: results come back in request order, one per request."""

    model_id: str

    def run(self, requests: Sequence[LLMRequest], *, stage: str) -> list[LLMResult]:
        """Run a batch of requests for ``stage`` and return one result per request."""
        ...


def now() -> float:
    """Monotonic clock in seconds."""
    return time.perf_counter()
