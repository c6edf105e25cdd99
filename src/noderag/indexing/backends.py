"""The LLM a build run uses: opened from the run's arguments and configuration, closed when the run ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..store.layout import LLM_CACHE
__all__ = ["open_llm", "close_llm"]


def open_llm(llm: Any, config, root: Path, executor=None):
    """The run's LLM backend, every call through the index's cache (``llm_cache.sqlite``); None without an LLM.

    ``llm``: the caller's backend (wrapped in the cache, never closed by the run), a spec string, or
    None for ``config.llm.spec``. ``vllm:`` with the Ray executor runs every LLM stage on the
    cluster's GPUs (``ray.data.llm``).
    """
    if llm is None and config.llm.spec is None:
        return None
    cache_path = (root / LLM_CACHE) if config.llm.cache else None
    if llm is None or isinstance(llm, str):
        from ..llm import from_config

        spec = llm if isinstance(llm, str) else config.llm.spec
        if config.executor.kind == "ray" and spec.strip().lower().startswith("vllm:") and executor is not None:
            from .executor.ray_llm import make_ray_vllm

            return make_ray_vllm(spec, executor.get(), cache_path=cache_path, **config.llm.backend_options())
        return from_config(config.llm, spec=spec, cache_path=cache_path)
    from ..llm import CachedBackend, LLMCache

    if config.llm.cache and not isinstance(llm, CachedBackend) and hasattr(llm, "generate"):
        # every call goes through the index's cache, so a rerun after a kill reuses finished calls
        return CachedBackend(llm, LLMCache(cache_path))
    return llm


def close_llm(backend: Any, llm: Any) -> None:
    """Close what :func:`open_llm` opened, never the caller's backend (only the cache wrapped around it)."""
    if backend is None or backend is llm:
        return
    if isinstance(llm, str) or llm is None:
        backend.close()
    else:
        backend.cache.close()
