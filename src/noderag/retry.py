"""Retrying transient HTTP failures: exponential backoff with equal jitter that honours ``Retry-After``.

One policy for the OpenAI-compatible LLM and embedding clients, on tenacity: attempt ``k`` (from 1)
waits ``d / 2 + U(0, d / 2)`` with ``d = min(max_s, base_s * 2 ** (k - 1))``, at least the server's
``Retry-After`` (capped at ``max_s``). The jitter comes from the caller's ``random.Random``, so a seeded
client waits the same way every run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields
from typing import Any, Callable

import tenacity

__all__ = ["RetrySettings", "Transient", "retrying", "async_retrying", "attempts_made"]


class Transient(Exception):
    """A failure worth retrying (timeout, connection error, 408/409/425/429/5xx); ``retry_after`` in seconds."""

    def __init__(self, message: str, retry_after: float | str | None = None) -> None:
        super().__init__(message)
        try:
            self.retry_after = float(retry_after) if retry_after is not None else None
        except ValueError:
            self.retry_after = None


def _wait(base_s: float, max_s: float, rng: random.Random) -> Callable[[tenacity.RetryCallState], float]:
    def wait(state: tenacity.RetryCallState) -> float:
        delay = min(max_s, base_s * (2 ** (state.attempt_number - 1)))
        delay = delay / 2 + rng.uniform(0, delay / 2)
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, Transient) and exc.retry_after is not None:
            delay = max(delay, min(exc.retry_after, max_s))
        return delay
    return wait


def _policy(max_retries: int, base_s: float, max_s: float, rng: random.Random, on_retry) -> dict[str, Any]:
    return {"stop": tenacity.stop_after_attempt(max_retries + 1), "wait": _wait(base_s, max_s, rng),
            "retry": tenacity.retry_if_exception_type(Transient), "reraise": True,
            "before_sleep": (lambda state: on_retry()) if on_retry is not None else None}


def retrying(max_retries: int, base_s: float, max_s: float, rng: random.Random,
             on_retry: Callable[[], None] | None = None) -> tenacity.Retrying:
    """``for attempt in retrying(...): with attempt: ...``; the last :class:`Transient` is re-raised."""
    return tenacity.Retrying(**_policy(max_retries, base_s, max_s, rng, on_retry))


def async_retrying(max_retries: int, base_s: float, max_s: float, rng: random.Random,
                   on_retry: Callable[[], None] | None = None) -> tenacity.AsyncRetrying:
    """``async for attempt in async_retrying(...): with attempt: ...``; the last :class:`Transient` is re-raised."""
    return tenacity.AsyncRetrying(**_policy(max_retries, base_s, max_s, rng, on_retry))


def attempts_made(controller: tenacity.BaseRetrying) -> int:
    """How many attempts a finished retry loop made."""
    return int(controller.statistics.get("attempt_number", 0))


@dataclass
class RetrySettings:
    """The request timeouts and retries of an HTTP client, declared once: the ``[embed]`` and ``[llm]`` sections
    and the openai embedding and LLM clients all extend it. ``None``: the client's default."""

    timeout_s: float | None = None
    connect_timeout_s: float | None = None
    max_retries: int | None = None
    backoff_base_s: float | None = None
    backoff_max_s: float | None = None

    def retry_settings(self) -> dict[str, Any]:
        """The settings that are set (not None), by name."""
        return {f.name: getattr(self, f.name) for f in fields(RetrySettings) if getattr(self, f.name) is not None}

    def retry_problems(self) -> list[tuple[str, Any, str]]:
        """(name, value, what it must be) of each set value out of its range, in declaration order of the checks."""
        def num(v: Any) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool)

        out = [(name, getattr(self, name), "a number > 0") for name in ("timeout_s", "connect_timeout_s", "backoff_max_s")
               if getattr(self, name) is not None and not (num(getattr(self, name)) and getattr(self, name) > 0)]
        if self.backoff_base_s is not None and not (num(self.backoff_base_s) and self.backoff_base_s >= 0):
            out.append(("backoff_base_s", self.backoff_base_s, "a number >= 0"))
        r = self.max_retries
        if r is not None and not (isinstance(r, int) and not isinstance(r, bool) and r >= 0):
            out.append(("max_retries", r, "an int >= 0"))
        return out
