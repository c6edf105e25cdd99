"""The search functions behind ``noderag.Index`` (``index.retrieve(q)`` and friends).

One :class:`~noderag.search.Searcher` is prepared per (index, search config, LLM)
and cached on the index object, so repeated calls pay the O(n) setup once.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

from ..store.layout import LLM_CACHE
from .config import SearchConfig
from .result import AnswerResult, RetrievalResult
from .searcher import Searcher

__all__ = ["searcher", "retrieve", "retrieve_many", "answer"]

# guards the creation of each index's own lock (the per-index locks guard the Searcher caches)
_LOCKS_LOCK = threading.Lock()


def _index_lock(index: Any) -> threading.RLock:
    """The lock of ``index``'s searcher and LLM caches (created once, under a module lock)."""
    lock = index.__dict__.get("_search_lock")
    if lock is None:
        with _LOCKS_LOCK:
            lock = index.__dict__.setdefault("_search_lock", threading.RLock())
    return lock


def _default_config(index: Any) -> SearchConfig:
    """The current search defaults (search settings are query-time; the manifest's copy is not used)."""
    return SearchConfig()


def _resolve_llm(index: Any, llm: Any) -> Any:
    """An LLM backend from an object, a spec string, or the index config's ``llm.spec`` (else None)."""
    if llm is not None and not isinstance(llm, str):
        return llm
    spec = llm if isinstance(llm, str) else getattr(getattr(index.config, "llm", None), "spec", None)
    if not spec:
        return None
    cache = index.__dict__.setdefault("_search_llms", {})
    if spec not in cache:
        with _index_lock(index):
            if spec not in cache:
                from ..llm import make_llm

                llm_config = getattr(index.config, "llm", None)
                opts = llm_config.backend_options() if hasattr(llm_config, "backend_options") else {}
                cache[spec] = make_llm(spec, cache_path=index.root / LLM_CACHE, **opts)
    return cache[spec]


def searcher(self: Any, config: SearchConfig | None = None, *, llm: Any = None) -> Searcher:
    """The (cached) Searcher of this index for ``config`` (default: ``SearchConfig()``).

    ``llm`` is a backend, a spec string, or None for the index config's ``llm.spec``.
    Thread-safe: threads asking for the same searcher at once prepare it once (double-checked
    under the index's lock) and share it.
    """
    config = (config if config is not None else _default_config(self)).validate()
    backend = _resolve_llm(self, llm)
    cache = self.__dict__.setdefault("_searchers", {})
    key = (repr(config.to_dict()), id(backend))
    found = cache.get(key)
    if found is None:
        with _index_lock(self):
            found = cache.get(key)
            if found is None:
                found = Searcher(self, config, llm=backend)
                cache[key] = found
    return found


def retrieve(self: Any, query: str, *, config: SearchConfig | None = None) -> RetrievalResult:
    """Retrieve nodes, ranked source passages and a budgeted context for one question."""
    return searcher(self, config).retrieve(query)


def retrieve_many(self: Any, queries: Sequence[str], *, config: SearchConfig | None = None) -> list[RetrievalResult]:
    """Retrieve for many questions: one embedding batch and one multi-threaded PPR call."""
    return searcher(self, config).retrieve_many(queries)


def answer(self: Any, query: str, *, llm: Any = None, config: SearchConfig | None = None) -> AnswerResult:
    """Answer with one LLM call over the retrieved context, citing node ids.

    Raises ``LLMNotConfiguredError`` (only retrieval is available) without an LLM.
    """
    return searcher(self, config, llm=llm).answer(query)
