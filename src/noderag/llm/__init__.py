"""LLM backends behind one batched protocol, with a SQLite response cache and per-stage token accounting.

Importing this package never imports vllm or llama_cpp; their backends load them on construction.
"""

from .accounting import StageStats, TokenLedger
from .base import BaseBackend
from .cache import CachedBackend, LLMCache, cache_key
from .factory import make_llm, parse_llm_spec
from .types import STAGES, LLMBackend, LLMError, LLMRequest, LLMResult, Sampling, Usage

__all__ = [
    "STAGES",
    "BaseBackend",
    "CachedBackend",
    "LLMBackend",
    "LLMCache",
    "LLMError",
    "LLMRequest",
    "LLMResult",
    "Sampling",
    "StageStats",
    "TokenLedger",
    "Usage",
    "cache_key",
    "make_llm",
    "parse_llm_spec",
]
