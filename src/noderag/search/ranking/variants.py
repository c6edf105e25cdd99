"""A search configuration with an explicit stage list: how a benchmark ranks an ablation (the user's
:class:`~noderag.config.search.SearchConfig` has no switch per mechanism)."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError
from ..config import SearchConfig
from .pipeline import STAGE_NAMES

__all__ = ["StagedConfig"]


@dataclass
class StagedConfig(SearchConfig):
    """:class:`SearchConfig` plus ``stages``: the ranking stages by name (:data:`STAGE_NAMES`), in order; None
    ranks with the searcher's default list."""

    stages: tuple[str, ...] | list[str] | None = None

    def validate(self) -> "StagedConfig":
        super().validate()
        if self.stages is not None:
            bad = [s for s in self.stages if s not in STAGE_NAMES]
            if bad or isinstance(self.stages, str):
                raise ConfigError(f"search.stages must be a list of {list(STAGE_NAMES)}, got {self.stages!r}")
        return self
