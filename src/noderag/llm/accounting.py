"""Per-stage token accounting: requests, failures, cache hits, tokens and wall time."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterable

from .types import STAGES, LLMResult

__all__ = ["StageStats", "TokenLedger", "count_tokens_offline"]


@dataclass
class StageStats:
    """Counters of one stage; tokens count only calls actually made (cache hits add none)."""

    requests: int = 0
    failures: int = 0
    cache_hits: int = 0
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    estimated: bool = False
    wall_s: float = 0.0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


class TokenLedger:
    """Token and time accounting per stage (thread-safe; one per backend stack, never global)."""

    def __init__(self) -> None:
        self._stages: dict[str, StageStats] = {}
        self._lock = threading.Lock()

    def stage(self, name: str) -> StageStats:
        """Return the (live) counters of stage ``name``, creating them if needed."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"stage must be a non-empty str, got {name!r}")
        with self._lock:
            return self._stages.setdefault(name, StageStats())

    def record(self, stage: str, results: Iterable[LLMResult], wall_s: float) -> None:
        """Add a finished batch of ``results`` for ``stage`` that took ``wall_s`` seconds."""
        st = self.stage(stage)
        with self._lock:
            for r in results:
                st.requests += 1
                if r.error is not None:
                    st.failures += 1
                if r.cached:
                    st.cache_hits += 1
                    continue
                st.attempts += r.attempts
                st.prompt_tokens += r.usage.prompt
                st.completion_tokens += r.usage.completion
                st.cached_tokens += r.usage.cached
                st.estimated = st.estimated or r.usage.estimated
            st.wall_s += float(wall_s)

    @property
    def stages(self) -> dict[str, StageStats]:
        """Copy of the per-stage counters, known stages first."""
        with self._lock:
            order = [s for s in STAGES if s in self._stages] + sorted(
                s for s in self._stages if s not in STAGES
            )
            return {s: StageStats(**asdict(self._stages[s])) for s in order}

    def totals(self) -> StageStats:
        """Sum over all stages."""
        tot = StageStats()
        for st in self.stages.values():
            for f in fields(StageStats):
                if f.name == "estimated":
                    tot.estimated = tot.estimated or st.estimated
                else:
                    setattr(tot, f.name, getattr(tot, f.name) + getattr(st, f.name))
        return tot

    def merge(self, other: "TokenLedger") -> None:
        """Add every stage of ``other`` into this ledger."""
        for name, st in other.stages.items():
            mine = self.stage(name)
            with self._lock:
                for f in fields(StageStats):
                    if f.name == "estimated":
                        mine.estimated = mine.estimated or st.estimated
                    else:
                        setattr(mine, f.name, getattr(mine, f.name) + getattr(st, f.name))

    def to_dict(self) -> dict[str, Any]:
        """Return ``{stage: {counter: value}}`` for the index manifest."""
        return {s: asdict(st) for s, st in self.stages.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TokenLedger":
        """Rebuild a ledger from :meth:`to_dict` output; unknown counters raise ValueError."""
        if not isinstance(d, dict):
            raise ValueError(f"TokenLedger.from_dict expects a dict, got {type(d).__name__}")
        names = {f.name for f in fields(StageStats)}
        led = cls()
        for stage, counters in d.items():
            if not isinstance(counters, dict):
                raise ValueError(f"TokenLedger stage {stage!r}: expected a dict, got {counters!r}")
            bad = set(counters) - names
            if bad:
                raise ValueError(f"TokenLedger stage {stage!r}: unknown counters {sorted(bad)}")
            st = led.stage(stage)
            for k, v in counters.items():
                setattr(st, k, bool(v) if k == "estimated" else (float(v) if k == "wall_s" else int(v)))
        return led

    def format_table(self) -> str:
        """Return a fixed-width text table (one row per stage plus a total row) for the CLI."""
        head = ("stage", "requests", "failed", "cache hits", "prompt tok", "compl tok", "cached tok", "wall s")
        rows = []
        items = list(self.stages.items())
        if not items:
            return "no LLM calls"
        for name, st in items + [("total", self.totals())]:
            mark = "~" if st.estimated else ""
            rows.append(
                (
                    name,
                    str(st.requests),
                    str(st.failures),
                    str(st.cache_hits),
                    f"{mark}{st.prompt_tokens}",
                    f"{mark}{st.completion_tokens}",
                    str(st.cached_tokens),
                    f"{st.wall_s:.1f}",
                )
            )
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]

        def fmt(r: tuple[str, ...]) -> str:
            return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

        lines = [fmt(head), "  ".join("-" * w for w in widths)]
        lines += [fmt(r) for r in rows[:-1]]
        lines += ["  ".join("-" * w for w in widths), fmt(rows[-1])]
        if any(st.estimated for _, st in items):
            lines.append("~ counted offline (the backend reported no usage)")
        return "\n".join(lines)


def count_tokens_offline(text: str) -> int:
    """Count tokens of ``text`` with the packaged offline tokenizer (noderag.tokenize)."""
    from ..tokenize import count_tokens  # lazy: tokenizer files load on first use

    return int(count_tokens(text))
