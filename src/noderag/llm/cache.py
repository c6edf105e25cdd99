"""SQLite response cache (WAL, busy timeout; safe across threads and processes) and its backend wrapper."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import AsyncIterator, Any, Sequence

from .base import _check_requests, run_stage
from .types import LLMRequest, LLMResult, ResultCallback, Usage
from .validate import canonical_json

__all__ = ["cache_key", "LLMCache", "CachedBackend"]

_SCHEMA_VERSION = 1


def cache_key(model_id: str, request: LLMRequest) -> str:
    """Return sha256 hex of the canonical JSON of (model id, messages, schema, sampling)."""
    payload = {
        "v": _SCHEMA_VERSION,
        "model": model_id,
        "messages": [dict(m) for m in request.messages],
        "schema": request.schema,
        "sampling": request.sampling.to_dict(),
    }
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


class LLMCache:
    """Persistent map from :func:`cache_key` to a successful result; each put commits at once."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 60.0) -> None:
        self.path = Path(path)
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(
                str(self.path), timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            self._conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS responses ("
                " key TEXT PRIMARY KEY, model TEXT NOT NULL, value TEXT NOT NULL,"
                " text TEXT NOT NULL, usage TEXT NOT NULL, created REAL NOT NULL)"
            )
        except sqlite3.DatabaseError as e:
            raise ValueError(f"LLM cache {str(self.path)!r} is not a usable SQLite database: {e}") from None
        self._lock = threading.Lock()

    def get(self, key: str) -> LLMResult | None:
        """Return the cached result for ``key`` (marked ``cached=True``) or None."""
        with self._lock:
            row = self._conn.execute(
                "SELECT value, text, usage FROM responses WHERE key = ?", (key,)
            ).fetchone()
        if row is None:
            return None
        value, text, usage = row
        return LLMResult(
            value=json.loads(value),
            text=text,
            usage=Usage.from_dict(json.loads(usage)),
            latency_s=0.0,
            error=None,
            cached=True,
            attempts=0,
        )

    def get_many(self, keys: Sequence[str]) -> dict[str, LLMResult]:
        """Return ``{key: result}`` for the keys present."""
        out: dict[str, LLMResult] = {}
        for k in dict.fromkeys(keys):
            r = self.get(k)
            if r is not None:
                out[k] = r
        return out

    def put(self, key: str, model_id: str, result: LLMResult) -> None:
        """Store a successful result (committed immediately); failed results raise ValueError."""
        if result.error is not None:
            raise ValueError(f"refusing to cache a failed result: {result.error}")
        row = (
            key,
            model_id,
            json.dumps(result.value, ensure_ascii=False),
            result.text,
            json.dumps(result.usage.to_dict()),
            time.time(),
        )
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO responses (key, model, value, text, usage, created)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                row,
            )

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "LLMCache":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class CachedBackend:
    """Wrap a backend so every request goes through an :class:`LLMCache` (hits make no call)."""

    def __init__(self, backend: Any, cache: LLMCache) -> None:
        if not hasattr(backend, "generate"):
            raise TypeError(f"CachedBackend needs a backend with generate(), got {type(backend).__name__}")
        self.backend = backend
        self.cache = cache
        self.model_id: str = backend.model_id
        self.ledger = backend.ledger
        #: every cache key looked up through this wrapper (a delete keeps only these entries)
        self.used_keys: set[str] = set()

    def astream(self, request: LLMRequest) -> AsyncIterator[str]:
        """The wrapped backend's stream (a streamed answer is not cached: it is a preview of a live call)."""
        return self.backend.astream(request)

    def streamed_result(self, request: LLMRequest, text: str, wall_s: float) -> LLMResult:
        return self.backend.streamed_result(request, text, wall_s)

    def generate(
        self, requests: Sequence[LLMRequest], *, on_result: ResultCallback | None = None
    ) -> list[LLMResult]:
        """Serve hits from the cache, call the backend for the rest, commit each success as it lands."""
        reqs = _check_requests(requests)
        keys = [cache_key(self.model_id, r) for r in reqs]
        self.used_keys.update(keys)
        hits = self.cache.get_many(keys)
        results: list[LLMResult | None] = [None] * len(reqs)
        first_of: dict[str, int] = {}
        miss_idx: list[int] = []
        dup_idx: list[int] = []
        for i, (r, k) in enumerate(zip(reqs, keys)):
            if k in hits:
                results[i] = _with_id(hits[k], r.id)
                if on_result is not None:
                    on_result(i, r, results[i])
            elif k in first_of:
                dup_idx.append(i)
            else:
                first_of[k] = i
                miss_idx.append(i)

        def landed(j: int, req: LLMRequest, res: LLMResult) -> None:
            i = miss_idx[j]
            if res.error is None:
                self.cache.put(keys[i], self.model_id, res)
            if on_result is not None:
                on_result(i, reqs[i], res)

        if miss_idx:
            got = self.backend.generate([reqs[i] for i in miss_idx], on_result=landed)
            for i, res in zip(miss_idx, got):
                results[i] = res
        for i in dup_idx:  # identical request earlier in the batch: no second call
            src = results[first_of[keys[i]]]
            results[i] = LLMResult(
                value=src.value, text=src.text, usage=src.usage, latency_s=0.0, error=src.error,
                cached=src.error is None, attempts=0, id=reqs[i].id,
            )
            if on_result is not None:
                on_result(i, reqs[i], results[i])
        return [r for r in results if r is not None]

    def run(self, requests: Sequence[LLMRequest], *, stage: str) -> list[LLMResult]:
        """Run a batch for ``stage`` through the cache; accounting goes to the wrapped backend's ledger."""
        return run_stage(self, requests, stage)

    def close(self) -> None:
        """Close the backend and the cache."""
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()
        self.cache.close()

    def __enter__(self) -> "CachedBackend":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _with_id(res: LLMResult, rid: str | None) -> LLMResult:
    return LLMResult(
        value=res.value, text=res.text, usage=res.usage, latency_s=res.latency_s, error=res.error,
        cached=res.cached, attempts=res.attempts, id=rid,
    )
