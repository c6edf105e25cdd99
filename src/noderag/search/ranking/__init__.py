"""Passage ranking as a pipeline of stages: entry points -> dense fit -> propagated mass -> lexical fit ->
bridges -> agreement cap -> redundancy -> one passage per label -> fill -> rerank (:mod:`.pipeline`)."""

from .bridges import AgreementCap, Bridges
from .candidates import EntryPoints, PropagatedMass
from .context import IndexView, QueryContext
from .fill import Distinct, Fill
from .fit import DenseFit, LexicalFit, fit
from .order import Redundancy, Rerank
from .pipeline import DEFAULT_NAMES, STAGE_NAMES, Ranking, Stage, default_stages, rank, stages_named
from .variants import StagedConfig

__all__ = ["AgreementCap", "Bridges", "EntryPoints", "PropagatedMass", "IndexView", "QueryContext", "Distinct",
           "Fill", "DenseFit", "LexicalFit", "fit", "Redundancy", "Rerank", "DEFAULT_NAMES", "STAGE_NAMES", "Ranking",
           "Stage", "default_stages", "rank", "stages_named", "StagedConfig"]
