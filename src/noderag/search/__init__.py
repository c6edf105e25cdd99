"""noderag.search: query-time retrieval (entry points, shallow PPR, typed selection, context, answer)."""

from .config import QuotaConfig, SearchConfig
from .result import AnswerResult, RetrievalResult, RetrievedNode
from .searcher import LLMNotConfiguredError, Searcher

__all__ = ["SearchConfig", "QuotaConfig", "Searcher", "RetrievalResult", "RetrievedNode", "AnswerResult",
           "LLMNotConfiguredError"]
