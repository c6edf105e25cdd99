"""Passage-retrieval metrics over ranked lists of source ids."""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["recall_at_k", "all_gold_in_top", "percentile_ms", "retrieval_metrics"]


def _check(ranked: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]) -> None:
    if len(ranked) != len(gold):
        raise ValueError(f"ranked ({len(ranked)}) and gold ({len(gold)}) differ in length")
    for i, g in enumerate(gold):
        if len(g) == 0:
            raise ValueError(f"gold[{i}] is empty: every question needs at least one supporting passage")


def recall_at_k(ranked: Sequence[Sequence[str]], gold: Sequence[Sequence[str]], k: int) -> float:
    """Mean over questions of |gold ∩ top-k| / |gold| (duplicates in the ranking count once)."""
    _check(ranked, gold)
    if not ranked:
        return float("nan")
    vals = [len(set(r[:k]) & set(g)) / len(set(g)) for r, g in zip(ranked, gold)]
    return float(np.mean(vals))


def all_gold_in_top(ranked: Sequence[Sequence[str]], gold: Sequence[Sequence[str]], k: int) -> float:
    """Share of questions whose every gold passage is in the top k."""
    _check(ranked, gold)
    if not ranked:
        return float("nan")
    return float(np.mean([set(g) <= set(r[:k]) for r, g in zip(ranked, gold)]))


def percentile_ms(seconds: Sequence[float], q: float) -> float:
    """The q-th percentile of durations given in seconds, in milliseconds."""
    if len(seconds) == 0:
        return float("nan")
    return float(np.percentile(np.asarray(seconds, dtype=np.float64), q) * 1e3)


def retrieval_metrics(ranked: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]) -> dict[str, float]:
    """recall@2/5/10 and all-gold-in-top-8, rounded to 4 decimals."""
    return {
        "recall@2": round(recall_at_k(ranked, gold, 2), 4),
        "recall@5": round(recall_at_k(ranked, gold, 5), 4),
        "recall@10": round(recall_at_k(ranked, gold, 10), 4),
        "all_gold@8": round(all_gold_in_top(ranked, gold, 8), 4),
    }
