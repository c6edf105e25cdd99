"""Stages that re-order a ranked list: :class:`Redundancy` (a passage that adds nothing the passages above it
hold loses its BM25 credit) and :class:`Rerank` (a cross-encoder re-orders the head)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..redundancy import content_terms, redundancy_order
from .context import QueryContext
from .fit import dense, lexical_share, term_impacts

__all__ = ["Redundancy", "Rerank"]


class Redundancy:
    """Fills the first ``top`` positions one at a time: a passage matching no content word of the question that
    the passages above it lack, and no closer to the query vector than they are, loses its BM25 credit there
    (:func:`~noderag.search.redundancy.redundancy_order`): a multi-hop question's second passage is the one
    that matches what the first does not."""

    name = "redundancy"
    orders = True

    def __init__(self, top: int = 10) -> None:
        self.top = top  # the passages a reader sees; each greedy step is O(candidates x terms)

    def __call__(self, cands: np.ndarray, scores: np.ndarray, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
        share = lexical_share(ctx, cands)
        terms = content_terms(ctx.lex_terms)
        if self.top <= 0 or cands.size < 2 or share is None or ctx.lexical_weight <= 0 or not terms:
            return cands, scores
        matched = term_impacts(ctx, terms, cands) > 0
        order, adjusted = redundancy_order(scores, ctx.lexical_weight * share, matched, dense(ctx, cands), self.top)
        return cands[order], adjusted


class Rerank:
    """Re-orders the ``top`` best passages by a cross-encoder: their scores become its logits, and the passages
    after them keep their order below the lowest of those."""

    name = "rerank"
    orders = True

    def __init__(self, reranker: Any, passage_texts: Any, top: int = 20) -> None:
        self.reranker = reranker  # () -> the cross-encoder, loaded at the first query that needs it
        self.passage_texts = passage_texts  # chunk ids -> title + text, as the cross-encoder reads them
        self.top = top

    def __call__(self, cands: np.ndarray, scores: np.ndarray, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
        top = min(self.top, cands.size)
        if not top:
            return cands, scores
        logits = self.reranker().score(ctx.query, self.passage_texts(cands[:top])).astype(np.float64)
        order = np.argsort(-logits, kind="stable")
        head = logits[order]
        rest = scores[top:]
        tail = head[-1] - 1.0 - (rest[0] - rest) if rest.size else rest
        return np.concatenate([cands[:top][order], cands[top:]]), np.concatenate([head, tail])
