"""Search configuration: lives in the configuration tree (:mod:`noderag.config.search`); re-exported here."""

from ..config.search import QuotaConfig, SearchConfig

__all__ = ["SearchConfig", "QuotaConfig"]
