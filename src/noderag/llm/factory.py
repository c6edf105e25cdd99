"""Build an LLM backend from a spec string: ``openai:MODEL@URL``, ``vllm:PATH``, ``llamacpp:PATH.gguf``."""

from __future__ import annotations

import os
from typing import Any

from .accounting import TokenLedger
from .cache import CachedBackend, LLMCache
from .options import LLM_OPTIONS, split_llm_options
from .sampling import SamplingOverride
from .types import LLMError

__all__ = ["parse_llm_spec", "make_llm", "from_config", "BACKEND_KINDS"]

BACKEND_KINDS = ("openai", "vllm", "llamacpp")


def parse_llm_spec(spec: str) -> tuple[str, str | None, str | None]:
    """Split a spec into ``(kind, model_or_path, base_url)``; ValueError names the bad spec."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"LLM spec must be a non-empty string, got {spec!r}")
    kind, _, rest = spec.strip().partition(":")
    kind = kind.lower()
    if kind not in BACKEND_KINDS:
        raise ValueError(
            f"LLM spec {spec!r}: unknown backend {kind!r}; expected one of {BACKEND_KINDS} "
            "(e.g. 'openai:MODEL@http://127.0.0.1:8080/v1', 'vllm:/path/to/model', 'llamacpp:/path/model.gguf')"
        )
    base_url = None
    if kind == "openai":
        model, at, url = rest.rpartition("@")
        if at and url.startswith(("http://", "https://")):
            rest, base_url = model, url
        elif rest.startswith(("http://", "https://")):
            rest, base_url = "", rest
    elif not rest:
        raise ValueError(f"LLM spec {spec!r}: {kind} needs a model path, e.g. '{kind}:/path/to/model'")
    return kind, (rest or None), base_url


def make_llm(
    spec: str, *, cache_path: str | os.PathLike[str] | None = None, ledger: TokenLedger | None = None,
    **overrides: Any,
):
    """Return a backend for ``spec`` (wrapped in a SQLite cache when ``cache_path`` is given).

    ``overrides`` set fields of the backend's config dataclass (e.g. ``dialect="json_object"``,
    ``max_concurrency=4`` for openai; ``tensor_parallel_size=2`` for vllm; ``n_ctx`` for llamacpp),
    or sampling of every request (``temperature``, ``top_p``, ``seed``, ``max_tokens``; applied
    outside the cache, so they are part of the cache key). ``api_key_env`` names the environment
    variable with the openai API key. A ``None`` value means "backend default".
    """
    kind, model, base_url = parse_llm_spec(spec)
    overrides = {k: v for k, v in overrides.items() if v is not None}
    shared = {k: v for k, v in overrides.items() if k in LLM_OPTIONS}
    backend_only = {k: v for k, v in overrides.items() if k not in LLM_OPTIONS}
    opts, sampling = split_llm_options(kind, shared)
    overrides = {**backend_only, **opts}
    if "api_key_env" in overrides:
        var = overrides.pop("api_key_env")
        if not os.environ.get(var):
            raise LLMError(f"openai backend: api_key_env names {var!r}, which is not set in the environment")
        overrides["api_key"] = os.environ[var]
    if kind == "openai":
        from .backends.openai import OpenAIBackend, OpenAIConfig

        cfg = OpenAIConfig(model=model, base_url=base_url)
        backend: Any = OpenAIBackend(cfg, ledger=ledger, **overrides)
    elif kind == "vllm":
        from .backends.vllm import VLLMBackend, VLLMConfig

        backend = VLLMBackend(VLLMConfig(model=model or ""), ledger=ledger, **overrides)
    elif kind == "llamacpp":
        from .backends.llamacpp import LlamaCppBackend, LlamaCppConfig

        backend = LlamaCppBackend(LlamaCppConfig(model=model or ""), ledger=ledger, **overrides)
    else:  # pragma: no cover - parse_llm_spec rejects it
        raise LLMError(f"unknown backend {kind!r}")
    if cache_path is not None:
        backend = CachedBackend(backend, LLMCache(cache_path))
    if sampling:
        backend = SamplingOverride(backend, **sampling)
    return backend


def from_config(config: Any, *, spec: str | None = None, cache_path: str | os.PathLike[str] | None = None,
                options: dict[str, Any] | None = None, ledger: TokenLedger | None = None):
    """The backend an ``[llm]`` section (:class:`noderag.config.LLMConfig`) describes, or None without a spec.

    ``spec`` replaces ``config.spec``; ``options`` (checked ``--llm-option`` values) go on top of the
    section's settings; ``cache_path`` is used when ``config.cache`` is on. The one way the package
    makes an LLM from configuration.
    """
    spec = spec or config.spec
    if not spec:
        return None
    return make_llm(spec, cache_path=cache_path if config.cache else None, ledger=ledger,
                    **{**config.backend_options(), **(options or {})})
