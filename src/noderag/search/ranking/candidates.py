"""The first round's candidates and the graph's evidence for them: :class:`EntryPoints` (which passages are
ranked at all) and :class:`PropagatedMass` (what the personalised walk carried to them)."""

from __future__ import annotations

import numpy as np

from ...graph.types import NodeType
from .context import QueryContext
from .fit import lexical_share

__all__ = ["EntryPoints", "PropagatedMass"]

_T, _S = int(NodeType.T), int(NodeType.S)


def _ppr_rows(ctx: QueryContext) -> list[tuple[np.ndarray, np.ndarray]]:
    """The PPR result's passage (T) and unit (S) rows: (node ids, float64 scores) without the padding."""
    ids, scores = ctx.ppr
    out = []
    for t in (_T, _S):
        ok = ids[t] >= 0
        out.append((ids[t][ok], scores[t][ok].astype(np.float64)))
    return out


class EntryPoints:
    """The candidates: the passages of the vector entry points, the lexical entry points, and the passages of
    the passages and units PPR ranks best (``search.ppr_candidates`` of each). Scores start at 0."""

    name = "entry"

    def __call__(self, cands: np.ndarray, scores: np.ndarray, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
        chunk = ctx.view.chunk
        parts = [np.asarray(cands, dtype=np.int64)]
        if ctx.entry_ids.size:
            parts.append(chunk[ctx.entry_ids])
        if ctx.lex_top.size:
            parts.append(ctx.lex_top)
        if ctx.ppr is not None:
            parts.extend(chunk[row] for row, _ in _ppr_rows(ctx))
        out = np.unique(np.concatenate(parts).astype(np.int64))
        out = out[out >= 0]
        return out, np.zeros(out.size)


class PropagatedMass:
    """Adds the PPR mass that reached each candidate's passage node and its units, each normalised by its
    maximum, net of the mass a seed keeps for itself (an entry point is not its own evidence), and counted in
    proportion to the passage's BM25 share: graph proximity to the seeds AND the passage's own words, so a
    hub passage near the seeds that shares no word with the question is not carried up by the walk alone."""

    name = "mass"

    def __init__(self, text_weight: float = 0.4, unit_weight: float = 0.4) -> None:
        # below the dense term's 1.0: the walk re-orders what the vector finds more than it finds new
        # passages (0.2-0.8 tried, benchmarks/bench_retrieval.py)
        self.weights = (text_weight, unit_weight)

    def __call__(self, cands: np.ndarray, scores: np.ndarray, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
        if ctx.ppr is None or not cands.size:
            return cands, scores
        order = np.argsort(cands, kind="stable")
        sorted_c = cands[order]
        seed_u, inv = np.unique(ctx.seeds, return_inverse=True)
        seed_m = np.bincount(inv, weights=ctx.weights.astype(np.float64), minlength=seed_u.size)
        seed_m *= ctx.seed_keep / max(float(ctx.weights.sum()), 1e-30)
        evidence = lexical_share(ctx, cands)
        for (row_i, row_s), w in zip(_ppr_rows(ctx), self.weights):
            if seed_u.size and row_i.size:
                pos = np.minimum(np.searchsorted(seed_u, row_i), seed_u.size - 1)
                row_s = row_s - np.where(seed_u[pos] == row_i, seed_m[pos], 0.0)
            ch = ctx.view.chunk[row_i]
            good = ch >= 0
            ch, m = ch[good], np.clip(row_s[good], 0.0, None)
            if w <= 0 or not ch.size:
                continue
            at = np.minimum(np.searchsorted(sorted_c, ch), cands.size - 1)
            hit = sorted_c[at] == ch  # a passage outside the candidates gets nothing
            acc_sorted = np.zeros(cands.size)
            np.add.at(acc_sorted, at[hit], m[hit])
            acc = np.empty(cands.size)
            acc[order] = acc_sorted
            top = acc.max()
            if top > 0:
                scores = scores + w * acc / top * (1.0 if evidence is None else evidence)
        return cands, scores
