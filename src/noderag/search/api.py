"""What ``noderag.Index`` searches with: one prepared :class:`~noderag.search.Searcher` per (search config,
LLM), cached, so repeated calls pay the O(n) setup once; and the LLM that answers over an index.
"""

from __future__ import annotations

import threading
from typing import Any

from ..store.layout import LLM_CACHE
from .config import SearchConfig
from .searcher import Searcher

__all__ = ["SearcherCache", "index_llm"]

class SearcherCache:
    """The prepared Searchers of one index (per search config and LLM) and the LLMs made for them.

    Thread-safe: threads asking for the same searcher at once prepare it once (double-checked under
    the cache's lock) and share it.
    """

    def __init__(self) -> None:
        self.searchers: dict[tuple[str, int], Searcher] = {}
        self.llms: dict[str, Any] = {}
        self.lock = threading.RLock()

    def searcher(self, index: Any, config: SearchConfig | None = None, *, llm: Any = None) -> Searcher:
        """The Searcher of ``index`` for ``config`` (default: ``SearchConfig()``, the current search defaults;
        the manifest's copy is not used). ``llm``: a backend, a spec string, or None for the index's ``llm.spec``."""
        config = (config if config is not None else SearchConfig()).validate()
        backend = self._llm(index, llm)
        key = (repr(config.to_dict()), id(backend))
        found = self.searchers.get(key)
        if found is None:
            with self.lock:
                found = self.searchers.get(key)
                if found is None:
                    found = self.searchers[key] = Searcher(index, config, llm=backend)
        return found

    def close(self) -> None:
        """End every cached searcher's forked workers (:meth:`Searcher.close`): they hold the index's maps."""
        with self.lock:
            for searcher in self.searchers.values():
                searcher.close()

    def _llm(self, index: Any, llm: Any) -> Any:
        if llm is not None and not isinstance(llm, str):
            return llm
        spec = llm if isinstance(llm, str) else index.config.llm.spec
        if not spec:
            return None
        if spec not in self.llms:
            with self.lock:
                if spec not in self.llms:
                    self.llms[spec] = index_llm(index, spec)
        return self.llms[spec]


def index_llm(index: Any, spec: str | None = None, option_items: Any = None) -> Any:
    """The LLM that answers over ``index``: ``spec`` (default: the index's ``llm.spec``) with the index's
    ``[llm]`` settings and ``option_items`` (``--llm-option KEY=VALUE``) on top, every call through the
    index's LLM cache. None without a spec. ``OptionError`` / ``ValueError`` name a bad option or spec."""
    from ..llm import from_config
    from ..llm.options import parse_llm_options

    return from_config(index.config.llm, spec=spec, cache_path=index.root / LLM_CACHE,
                       options=parse_llm_options(option_items))
