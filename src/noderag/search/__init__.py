"""noderag.search: query-time retrieval (entry points, shallow PPR, typed selection, context, answer)."""

from .config import QuotaConfig, SearchConfig
from .result import AnswerResult, RetrievalResult, RetrievedNode
from .searcher import LLMNotConfiguredError, Searcher

__all__ = ["SearchConfig", "QuotaConfig", "Searcher", "RetrievalResult", "RetrievedNode", "AnswerResult",
           "LLMNotConfiguredError", "attach_to_index"]


def attach_to_index(index_cls: type) -> None:
    """Add ``searcher``, ``retrieve``, ``retrieve_many`` and ``answer`` to ``noderag.Index``."""
    from .api import answer, retrieve, retrieve_many, searcher

    index_cls.searcher = searcher
    index_cls.retrieve = retrieve
    index_cls.retrieve_many = retrieve_many
    index_cls.answer = answer
