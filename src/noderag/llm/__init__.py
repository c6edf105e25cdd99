"""LLM backends behind one batched protocol, with a SQLite response cache and per-stage token accounting.

Importing this package never imports vllm or llama_cpp; their backends load them on construction. Its
names load on first use (PEP 562), so reading a config (``noderag.llm.options``) at ``Index.open`` does
not import the backends, the cache or jsonschema.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .accounting import StageStats, TokenLedger
    from .base import BaseBackend
    from .cache import CachedBackend, LLMCache, cache_key
    from .factory import from_config, make_llm, parse_llm_spec
    from .types import STAGES, LLMBackend, LLMError, LLMRequest, LLMResult, Sampling, Usage

_HOME = {
    "StageStats": "accounting", "TokenLedger": "accounting",
    "BaseBackend": "base",
    "CachedBackend": "cache", "LLMCache": "cache", "cache_key": "cache",
    "make_llm": "factory", "parse_llm_spec": "factory", "from_config": "factory",
    "STAGES": "types", "LLMBackend": "types", "LLMError": "types", "LLMRequest": "types", "LLMResult": "types",
    "Sampling": "types", "Usage": "types",
}

# written out (not sorted(_HOME)) so that linters and readers see the names; a test keeps it equal to _HOME
__all__ = ["BaseBackend", "CachedBackend", "LLMBackend", "LLMCache", "LLMError", "LLMRequest", "LLMResult", "STAGES",
           "Sampling", "StageStats", "TokenLedger", "Usage", "cache_key", "from_config", "make_llm", "parse_llm_spec"]


def __getattr__(name: str):
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
