"""The list's final shape: one passage per source label (:class:`Distinct`, :func:`distinct`) and at least
``search.min_passages`` of them (:class:`Fill`)."""

from __future__ import annotations

import numpy as np

from .context import QueryContext
from .fit import fit

__all__ = ["Distinct", "Fill", "distinct", "labels"]


def labels(ctx: QueryContext, chunks: list[int]) -> list[str | None]:
    """Source labels of some passages, each read once per query (the list is made distinct up to three times)."""
    memo = ctx.labels
    missing = [c for c in dict.fromkeys(chunks) if c not in memo]
    if missing:
        memo.update(zip(missing, ctx.view.tables.labels(missing)))
    return [memo[c] for c in chunks]


def distinct(cands: np.ndarray, scores: np.ndarray, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
    """The ranked passages without those that have no label or whose label a better one holds."""
    seen: set[str] = set()
    keep = []
    for i, lab in enumerate(labels(ctx, cands.tolist())):
        if lab is not None and lab not in seen:
            seen.add(lab)
            keep.append(i)
    if len(keep) == cands.size:
        return cands, scores
    return cands[keep], scores[keep]


class Distinct:
    """One passage per source label, the best ranked."""

    name = "distinct"
    orders = True

    def __call__(self, cands: np.ndarray, scores: np.ndarray, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
        return distinct(cands, scores, ctx)


class Fill:
    """Extends a short list to ``want`` passages from the lexical and dense rankings, appended after the graph's.

    The graph's candidates run out on small corpora and on questions whose seeds reach few passages; the next
    passages are those BM25 and the query vector rank best, scored by their fit, below every graph candidate.
    """

    name = "fill"
    orders = True

    def __init__(self, want: int, expansion: int = 128) -> None:
        self.want = want
        self.expansion = expansion
        self.lexical_depth = 4  # x want: BM25's best, enough to fill after duplicates and graph candidates
        self.dense_depth = 8  # x want: the vector index's nearest nodes, passages and units alike

    def __call__(self, cands: np.ndarray, scores: np.ndarray, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
        cands, scores = distinct(cands, scores, ctx)
        if cands.size >= self.want:
            return cands, scores
        extra = self._extra(cands, ctx)
        if not extra.size:
            return cands, scores
        base = fit(ctx, extra)
        seen = set(labels(ctx, cands.tolist()))
        floor = float(scores[-1]) if scores.size else 0.0
        add_c, add_s = [], []
        order = np.lexsort((extra, -base))
        for i, lab in zip(order.tolist(), labels(ctx, extra[order].tolist())):
            if lab is None or lab in seen:
                continue
            seen.add(lab)
            floor = min(float(base[i]), floor)  # after every graph candidate: scores stay non-increasing
            add_c.append(int(extra[i]))
            add_s.append(floor)
            if cands.size + len(add_c) >= self.want:
                break
        return np.concatenate([cands, np.asarray(add_c, np.int64)]), np.concatenate([scores, add_s])

    def _extra(self, cands: np.ndarray, ctx: QueryContext) -> np.ndarray:
        """The passages BM25 and the query vector rank best that are not candidates yet."""
        view = ctx.view
        parts = [ctx.lex_id_of(ctx.lex_keys[np.argsort(-ctx.lex_scores, kind="stable")][: self.lexical_depth
                                                                                          * self.want])]
        if len(view.vectors) > 0:
            k = min(self.dense_depth * self.want, len(view.vectors))
            ids, _ = view.vectors.search(ctx.vector[None, :], k, threads=1, expansion=max(self.expansion, k))
            ids = np.asarray(ids, dtype=np.int64).ravel()
            ids = ids[(ids >= 0) & (ids < view.n)]
            parts.append(view.chunk[ids[view.active[ids]]])
        extra = np.unique(np.concatenate(parts).astype(np.int64))
        extra = extra[extra >= 0]
        return extra[np.isin(extra, cands, invert=True)]
