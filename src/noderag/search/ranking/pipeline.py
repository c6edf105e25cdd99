"""Passage ranking as a list of stages over one candidate set.

A :class:`Stage` maps ``(candidates, scores, ctx)`` to new ``(candidates, scores)``. A scoring stage may return
them in any order; an ordering stage (``orders = True``) reads them best first (by :func:`rank`: score, then
the score a ceiling held a passage below, then id) and returns its own order. The searcher runs :func:`default_stages`; an ablation is
another list (:func:`stages_named`, the names of :data:`STAGE_NAMES`).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from .bridges import AgreementCap, Bridges
from .candidates import EntryPoints, PropagatedMass
from .context import QueryContext
from .fill import Distinct, Fill, distinct
from .fit import DenseFit, LexicalFit
from .order import Redundancy, Rerank

__all__ = ["Stage", "Ranking", "rank", "default_stages", "stages_named", "STAGE_NAMES", "DEFAULT_NAMES"]


class Stage(Protocol):
    """One ranking mechanism."""

    name: str

    def __call__(self, cands: np.ndarray, scores: np.ndarray, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
        ...


def rank(cands: np.ndarray, scores: np.ndarray, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
    """Best first: by score, then passages held at one ceiling in the order of their scores without it (a
    ceiling bounds how far a bridge lifts a passage, it should not order those it holds), then by id."""
    held = np.fromiter((ctx.uncapped.get(c, s) for c, s in zip(cands.tolist(), scores.tolist())),
                       dtype=np.float64, count=cands.size)
    order = np.lexsort((cands, -held, -scores))
    return cands[order], scores[order]


class Ranking:
    """Runs a stage list over one query; ``timings`` (name -> seconds per call), when a dict, collects each
    stage's time (benchmarks/bench_search_cost.py)."""

    def __init__(self, stages: Sequence[Stage]) -> None:
        self.stages = list(stages)
        self.timings: dict[str, list[float]] | None = None

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.stages]

    def __call__(self, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
        """The ranked passages (chunk ids, best first, one per label) and their scores."""
        for stage in self.stages:
            prepare = getattr(stage, "prepare", None)
            if prepare is not None:
                prepare(ctx)
        cands, scores = np.zeros(0, np.int64), np.zeros(0)
        timings = self.timings
        ranked = True
        for stage in self.stages:
            t0 = time.perf_counter() if timings is not None else 0.0
            orders = getattr(stage, "orders", False)
            if orders and not ranked:  # an ordering stage reads the list best first
                cands, scores = rank(cands, scores, ctx)
            cands, scores = stage(cands, scores, ctx)
            ranked = orders
            if timings is not None:
                timings.setdefault(stage.name, []).append(time.perf_counter() - t0)
        if not ranked:
            cands, scores = rank(cands, scores, ctx)
        return distinct(cands, scores, ctx)


#: The default stage list, by name, in order.
DEFAULT_NAMES = ("entry", "dense", "mass", "lexical", "bridges", "agreement_cap", "redundancy", "distinct", "fill",
                 "rerank")


def _stage_makers(config: Any, reranker: Callable[[], Any], passage_texts: Callable) -> dict[str, Callable[[], Any]]:
    return {
        "entry": EntryPoints, "dense": DenseFit, "mass": PropagatedMass, "lexical": LexicalFit,
        "bridges": Bridges, "agreement_cap": AgreementCap, "redundancy": Redundancy, "distinct": Distinct,
        "fill": lambda: Fill(config.min_passages, config.expansion_search),
        "rerank": lambda: Rerank(reranker, passage_texts, config.rerank_top),
        # variants of a stage, for ablations
        "bridges_about_only": lambda: Bridges(shared_per_source=0),
    }


#: Every stage name :func:`stages_named` knows.
STAGE_NAMES = tuple(_stage_makers(None, lambda: None, lambda c: []))


def stages_named(names: Sequence[str], config: Any, reranker: Callable[[], Any], passage_texts: Callable
                 ) -> list[Stage]:
    """The stages of ``names`` (of :data:`STAGE_NAMES`), in that order; an unknown name is a ValueError naming it."""
    makers = _stage_makers(config, reranker, passage_texts)
    bad = [n for n in names if n not in makers]
    if bad:
        raise ValueError(f"unknown ranking stage(s) {bad}; known: {list(makers)}")
    return [makers[n]() for n in names]


def default_stages(config: Any, reranker: Callable[[], Any], passage_texts: Callable) -> list[Stage]:
    """The searcher's stage list for a configuration: without the bridging round when ``config.bridging`` is
    off, without the cross-encoder when ``config.rerank`` is None."""
    names = [n for n in DEFAULT_NAMES
             if (config.bridging or n not in ("bridges", "agreement_cap")) and (config.rerank or n != "rerank")]
    return stages_named(names, config, reranker, passage_texts)
