"""How well a passage fits the question: the query vector's similarity and BM25, as one :func:`fit`.

Every stage that scores a passage against the question (the first round, bridges, the agreement cap, the
fill) uses :func:`fit`, weighted by the :class:`DenseFit` and :class:`LexicalFit` stages of the list: drop
:class:`LexicalFit` and BM25 weighs nothing anywhere.
"""

from __future__ import annotations

import numpy as np

from ...graph.types import NodeType
from .context import QueryContext

__all__ = ["DenseFit", "LexicalFit", "dense", "lexical_share", "residual_shares", "fit", "shortlist", "term_impacts"]

_S = int(NodeType.S)


def dense(ctx: QueryContext, chunks: np.ndarray) -> np.ndarray:
    """Query similarity of some passages, each passage's vectors read once per query: the mean of its own
    vector's cosine and its best semantic unit's (the unit that says what the question asks outweighs the
    rest of a long passage); its own alone when it has no unit."""
    memo = ctx.cosines
    ids = np.asarray(chunks, dtype=np.int64).tolist()
    missing = [c for c in dict.fromkeys(ids) if c not in memo]
    if missing:
        memo.update(zip(missing, _unit_cosines(ctx, np.asarray(missing, dtype=np.int64)).tolist()))
    return np.fromiter((memo[c] for c in ids), dtype=np.float64, count=len(ids))


def _unit_cosines(ctx: QueryContext, chunks: np.ndarray) -> np.ndarray:
    view = ctx.view
    owner, units = view.walk(chunks, _S)
    cos = view.stored_cosines(np.concatenate([chunks, units]), ctx.vector)  # one look-up per shard
    own = cos[:chunks.size]
    if not units.size:
        return own
    best = np.full(chunks.shape[0], -np.inf)
    np.maximum.at(best, owner, cos[chunks.size:])
    return np.where(np.isfinite(best), 0.5 * (own + best), own)


def shortlist(ctx: QueryContext, chunks: np.ndarray, keep: int) -> np.ndarray:
    """The ``keep`` of ``chunks`` (distinct) that fit the question best by their own vector and BM25 alone, ties
    to the lower id: a cheap first pass before :func:`fit`, whose units cost a vector look-up each (a passage
    has several), so a large group is narrowed first. ``chunks`` as they are when no larger than ``keep``."""
    chunks = np.asarray(chunks, dtype=np.int64)
    if chunks.size <= keep:
        return chunks
    score = ctx.dense_weight * ctx.view.stored_cosines(chunks, ctx.vector)
    share = lexical_share(ctx, chunks) if ctx.lexical_weight > 0 else None
    if share is not None:
        score = score + ctx.lexical_weight * share
    return np.sort(chunks[np.lexsort((chunks, -score))[:keep]])


def lexical_share(ctx: QueryContext, chunks: np.ndarray) -> np.ndarray | None:
    """BM25(query, passage) / the query's best BM25 for ``chunks`` in any order (0 without a shared term);
    None when the query has no lexical hit at all."""
    chunks = np.asarray(chunks, dtype=np.int64)
    top = ctx.lex_best
    if not ctx.lex_keys.size or not chunks.size or top <= 0:
        return None
    keys = ctx.lex_key_of(chunks)
    pos = np.minimum(np.searchsorted(ctx.lex_keys, keys), ctx.lex_keys.size - 1)
    return np.where(ctx.lex_keys[pos] == keys, ctx.lex_scores[pos], 0.0) / top


def term_impacts(ctx: QueryContext, terms: list[str], chunks: np.ndarray) -> np.ndarray:
    """Each of ``terms``' BM25 impact on each passage of ``chunks`` (float64 (terms, chunks)), read from the query's
    postings when it holds them, else looked up in the index."""
    postings = ctx.lex_postings
    got = postings.impacts(terms, chunks) if postings is not None else None
    return got if got is not None else ctx.view.lexical.term_impacts(terms, chunks)


def residual_shares(ctx: QueryContext, groups: list[tuple[int, np.ndarray]]) -> list[np.ndarray]:
    """For each ``(source, chunks)``: ``lexical_weight`` * the chunks' BM25 over the query terms the source
    passage does not match / the query's best BM25 (what the question asks beyond the source), in one read of
    the postings."""
    sizes = [int(np.asarray(c).shape[0]) for _, c in groups]
    top, w = ctx.lex_best, ctx.lexical_weight
    lexical = ctx.view.lexical
    if lexical is None or w <= 0 or not sum(sizes) or not ctx.lex_terms or top <= 0:
        return [np.zeros(k) for k in sizes]
    ids = np.concatenate([np.concatenate([[s], c]) for s, c in groups]).astype(np.int64)
    impacts = term_impacts(ctx, ctx.lex_terms, ids)
    out, at = [], 0
    for k in sizes:
        block, at = impacts[:, at:at + 1 + k], at + 1 + k
        rest = block[:, 0] <= 0  # the terms the source does not match
        out.append(w * block[rest, 1:].sum(axis=0) / top)
    return out


def fit(ctx: QueryContext, chunks: np.ndarray, lexical: np.ndarray | None = None) -> np.ndarray:
    """``dense_weight`` * :func:`dense` + ``lexical_weight`` * BM25 share, the weights of the stage list
    (``ctx``); ``lexical`` replaces the weighted BM25 term (a bridge source's :func:`residual_shares`)."""
    chunks = np.asarray(chunks, dtype=np.int64)
    out = ctx.dense_weight * dense(ctx, chunks)
    if lexical is not None:
        return out + lexical
    if ctx.lexical_weight > 0:
        share = lexical_share(ctx, chunks)
        if share is not None:
            out = out + ctx.lexical_weight * share
    return out


class DenseFit:
    """Adds ``weight`` * the query vector's similarity to every candidate."""

    name = "dense"

    def __init__(self, weight: float = 1.0) -> None:
        self.weight = weight  # the unit of every other weight (benchmarks/bench_retrieval.py)

    def prepare(self, ctx: QueryContext) -> None:
        ctx.dense_weight = self.weight

    def __call__(self, cands: np.ndarray, scores: np.ndarray, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
        return cands, scores + self.weight * dense(ctx, cands)


class LexicalFit:
    """Adds ``weight`` * BM25(question, passage) / the question's best BM25 to every candidate."""

    name = "lexical"

    def __init__(self, weight: float = 0.5) -> None:
        # half the dense term: BM25 breaks the vector's near-ties on rare words without outvoting it
        # (0.25-1.0 tried on the English and Chinese dev samples, benchmarks/bench_retrieval.py)
        self.weight = weight

    def prepare(self, ctx: QueryContext) -> None:
        ctx.lexical_weight = self.weight

    def __call__(self, cands: np.ndarray, scores: np.ndarray, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
        share = lexical_share(ctx, cands)
        return cands, scores if share is None else scores + self.weight * share
