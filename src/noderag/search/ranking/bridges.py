"""The bridging round: from the best first-round passages to the passages they lead to (:class:`Bridges`), and
the ceiling the passages both first-round signals agree on set for them (:class:`AgreementCap`)."""

from __future__ import annotations

import numpy as np

from .context import QueryContext
from .fit import dense, fit, lexical_share, residual_shares, shortlist
from .links import about, shared_each, source_entities, title_groups, title_links, titled_passages

__all__ = ["Bridges", "AgreementCap", "source_strengths", "bonus"]

#: Ties below a ceiling: a held passage ranks just under the one that sets it.
_EPS = 1e-9


def source_strengths(scores: list[float]) -> list[float]:
    """Each bridging source's strength: its score over the best source's (in [0, 1]; 1.0 when the best scores
    <= 0). A bridge is as strong as the passage it starts from."""
    top = max(scores, default=0.0)
    if top <= 0:
        return [1.0] * len(scores)
    return [min(max(s / top, 0.0), 1.0) for s in scores]


def _best_of(ctx: QueryContext, groups: list[np.ndarray]) -> list[int]:
    """The passage of each group the question fits best (ties to the lower id), in one pass over all groups."""
    if not groups:
        return []
    cand = np.concatenate(groups)
    group = np.repeat(np.arange(len(groups)), [g.size for g in groups])
    order = np.lexsort((cand, -fit(ctx, cand), group))
    first = np.flatnonzero(np.r_[True, group[order][1:] != group[order][:-1]])
    return cand[order[first]].tolist()


def _shared_best(ctx: QueryContext, sources: list[tuple[int, dict[int, float]]], strength: dict[int, float],
                 per_source: int) -> dict[int, float]:
    """Per source, the ``per_source`` passages sharing a rare entity with it (``sources``: source -> those
    passages' link strengths) that fit best what the question asks beyond the source (dense + BM25 over the
    terms the source does not match)."""
    sources = [(c, sh) for c, sh in sources if sh]
    cands = [np.fromiter(sorted(sh), dtype=np.int64, count=len(sh)) for _, sh in sources]
    out: dict[int, float] = {}
    if not sources:
        return out
    lexicals = residual_shares(ctx, [(c, cand) for (c, _), cand in zip(sources, cands)])
    for (c, sh), cand, lexical in zip(sources, cands, lexicals):
        for i in np.lexsort((cand, -fit(ctx, cand, lexical)))[:per_source].tolist():
            c2 = int(cand[i])
            out[c2] = max(out.get(c2, 0.0), min(sh[c2], 1.0) * strength[c])
    return out


def bonus(ctx: QueryContext, hop1: list[int], strengths: list[float], shared_per_source: int = 1,
          group_shortlist: int = 16) -> tuple[dict[int, float], set[int]]:
    """Bridge strength of every passage reached from the ``hop1`` passages, and the passages that rank after
    every ``hop1`` passage (those reached by a weaker link: a shared entity, a title a source names).

    "About" bridges, as strong as their share; the best passage of each title the *question* names, at full
    strength (the question names its subject, which the first round may rank low when the rest of its words
    fit other passages better; even a ``hop1`` passage, else the bridges from its peers would overtake it);
    the best passage of each title a source names, and per source the best passage sharing a rare entity with
    it, as strong as their source, ranked after it. A title's passages are first narrowed to the
    ``group_shortlist`` that fit best by their own vector (:func:`~.fit.shortlist`): a title many documents bear
    would otherwise cost a vector look-up for each of their passages and units.
    """
    view = ctx.view
    strength = dict(zip(hop1, strengths))
    walked = source_entities(view, np.asarray(hop1, dtype=np.int64))  # the walk about and shared_each start with
    out = about(ctx, hop1, strength, walked)
    follows: set[int] = set()
    asked_groups = title_links(view).named_groups(ctx.query)
    asked = [shortlist(ctx, g, group_shortlist) for g in title_groups(view, asked_groups, [])]
    titled_of = [(c, shortlist(ctx, g, group_shortlist))
                 for c, g in titled_passages(ctx, hop1, {d for g in asked_groups for d in g})]
    shared_of = shared_each(ctx, hop1, walked) if shared_per_source > 0 else []
    pool = [np.fromiter(out, dtype=np.int64, count=len(out)), *asked, *(g for _, g in titled_of),
            *(np.fromiter(sh, dtype=np.int64, count=len(sh)) for _, sh in shared_of)]
    dense(ctx, np.unique(np.concatenate(pool)))  # one vector look-up for the passages compared below
    for c2 in _best_of(ctx, asked):
        out[c2] = 1.0
    for (c, _), c2 in zip(titled_of, _best_of(ctx, [g for _, g in titled_of])):
        if c2 not in out:
            out[c2] = strength[c]
            follows.add(c2)
        else:  # as strong a bridge as its source, whatever else leads there
            out[c2] = max(out[c2], strength[c])
    if not shared_of:
        return out, follows
    about_set = set(out) - follows
    for c2, b in _shared_best(ctx, shared_of, strength, shared_per_source).items():
        out[c2] = max(out.get(c2, 0.0), b)
        if c2 not in about_set:
            follows.add(c2)
    return out, follows


class Bridges:
    """Lifts the passages the ``top`` best first-round passages lead to (:func:`bonus`) by up to ``weight``
    times their bridge strength; a passage reached by a weaker link stays below every source. Passages new to
    the candidates enter at their fit to the question."""

    name = "bridges"

    def __init__(self, top: int = 2, weight: float = 0.6, shared_per_source: int = 1, group_shortlist: int = 16
                 ) -> None:
        self.top = top  # two sources: the second hop of a 2-hop question starts from either of its passages
        # most of the dense term: a bridged passage that fits the question little still outranks the first
        # round's distractors, not its best passages (0.3-0.8 tried, benchmarks/bench_retrieval.py)
        self.weight = weight
        self.shared_per_source = shared_per_source  # one: more let near-copies of the source in
        # a title's passages fully scored: larger than every title of the English dev samples and all but one
        # of the Chinese (a 30-passage article), so the narrowing binds only where a title is a hub
        self.group_shortlist = group_shortlist

    def __call__(self, cands: np.ndarray, scores: np.ndarray, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
        if not cands.size or self.top <= 0:
            return cands, scores
        order = np.lexsort((cands, -scores))[: self.top]
        hop1 = cands[order].tolist()
        ctx.first = dict(zip(cands.tolist(), scores.tolist()))
        ctx.hop1 = hop1
        gained, follows = bonus(ctx, hop1, source_strengths(scores[order].tolist()), self.shared_per_source,
                                 self.group_shortlist)
        total = dict(ctx.first)
        new = np.fromiter(sorted(c for c in gained if c not in total), dtype=np.int64)
        if new.size:
            total.update(zip(new.tolist(), fit(ctx, new).tolist()))
        below_hop1 = min(total[h] for h in hop1) - _EPS
        for c, b in gained.items():
            base = total[c]
            ceiling = below_hop1 if c in follows else np.inf
            if base < ceiling:
                lifted = base + self.weight * min(b, 1.0)
                if lifted > ceiling:
                    ctx.uncapped[c] = lifted
                total[c] = min(lifted, ceiling)
                ctx.bridged[c] = (base, lifted)
        out = np.fromiter(total, dtype=np.int64, count=len(total))
        return out, np.fromiter(total.values(), dtype=np.float64, count=len(total))


class AgreementCap:
    """Holds bridged passages just below the passages that are among the ``top`` best first-round candidates by
    the query vector *and* by BM25: a passage both signals agree on is, on single-hop questions, most often the
    answer, and a bridge should not push it down. No ceiling when the signals agree on none."""

    name = "agreement_cap"

    def __init__(self, top: int = 2) -> None:
        self.top = top  # the two best of each: one agreed passage is enough, more would cap every bridge

    def ceiling(self, ctx: QueryContext) -> float:
        """The score a bridged passage may not reach."""
        chunks = np.fromiter(ctx.first, dtype=np.int64, count=len(ctx.first))
        share = lexical_share(ctx, chunks)
        if self.top == 0 or not chunks.size or share is None or ctx.lexical_weight <= 0:
            return np.inf
        lex = ctx.lexical_weight * share
        if not lex.any():
            return np.inf
        by_dense = chunks[np.lexsort((chunks, -dense(ctx, chunks)))[: self.top]]
        agreed = set(by_dense.tolist()) & set(chunks[np.lexsort((chunks, -lex))[: self.top]].tolist())
        return min(ctx.first[a] for a in agreed) - _EPS if agreed else np.inf

    def __call__(self, cands: np.ndarray, scores: np.ndarray, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
        if not ctx.bridged:
            return cands, scores
        cap = self.ceiling(ctx)
        if not np.isfinite(cap):
            return cands, scores
        scores = scores.copy()
        at = {c: i for i, c in enumerate(cands.tolist())}
        for c, (base, lifted) in ctx.bridged.items():
            i = at[c]
            if base >= cap:  # no lift for a passage already at the ceiling
                scores[i] = base
                ctx.uncapped.pop(c, None)
            elif scores[i] > cap:
                scores[i] = cap
                ctx.uncapped[c] = lifted
        return cands, scores
