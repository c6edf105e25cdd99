"""Per-question retrieval scores, bootstrap intervals, paired comparisons and group breakdowns.

Why per question: a benchmark figure is a mean over questions, and both its uncertainty (a
percentile bootstrap over questions) and the comparison of two methods on the same questions (a
paired bootstrap) need the per-question values, not just the mean. Everything here is numpy over
arrays of per-question values; resamples are drawn in blocks (no Python loop per resample) from
``numpy.random.default_rng(seed)``, so the same inputs and seed give the same interval in any process.

Ranking conventions (shared with ``noderag.search.metrics``): a ranking is the list of passage ids
as returned, best first; ``top-k`` is its first ``k`` entries; an id that appears again later in the
ranking adds nothing after its first occurrence (duplicates count once). Gold is a set: repeated
gold ids count once, and an empty gold list is an error (a question without gold is skipped by the
caller, never scored as zero).
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

__all__ = ["passage_scores", "bootstrap_interval", "paired_bootstrap", "breakdown", "musique_hops"]

# resampled indices held at once (rows x questions): bounds the memory of a bootstrap at ~32 MB
_BLOCK_ELEMENTS = 4_000_000


def passage_scores(ranked: Sequence[Sequence[str]], gold: Sequence[Sequence[str]], ks: Sequence[int] = (2, 5, 10),
                   all_gold_k: int = 8) -> dict[str, np.ndarray]:
    """Per-question passage scores: ``recall@k`` for each k, ``all_gold@{all_gold_k}``, ``mrr``, ``ndcg@10``.

    Parameters
    ----------
    ranked : per question, the ranked passage ids (best first; any length)
    gold : per question, the gold (supporting) passage ids; none may be empty
    ks : cut-offs of recall@k = |gold ∩ top-k| / |gold|
    all_gold_k : cut-off of all-gold@k = 1.0 when every gold id is in the top k

    Returns
    -------
    dict of float64 arrays of length ``len(ranked)``, keyed ``recall@K``..., ``all_gold@K``, ``mrr``
    (1 / rank of the first gold id in the whole ranking, 0 if none) and ``ndcg@10`` (binary relevance:
    DCG of the gold hits in the top 10 over the DCG of min(|gold|, 10) hits at the top).
    """
    if len(ranked) != len(gold):
        raise ValueError(f"ranked ({len(ranked)}) and gold ({len(gold)}) differ in length")
    ks = [int(k) for k in ks]
    if any(k < 1 for k in ks) or int(all_gold_k) < 1:
        raise ValueError(f"cut-offs must be >= 1, got ks={ks}, all_gold_k={all_gold_k}")
    n = len(ranked)
    depth = max([*ks, int(all_gold_k), 10])
    hits = np.zeros((n, depth), dtype=np.float64)  # 1 where a first occurrence of a gold id sits
    n_gold = np.zeros(n, dtype=np.float64)
    first = np.full(n, np.inf)  # 1-based rank of the first gold id
    for q, (r, g) in enumerate(zip(ranked, gold)):
        gs = set(g)
        if not gs:
            raise ValueError(f"gold[{q}] is empty: every question needs at least one supporting passage")
        n_gold[q] = len(gs)
        seen: set = set()
        for pos, pid in enumerate(r):
            if pid in gs and pid not in seen:
                seen.add(pid)
                if first[q] == np.inf:
                    first[q] = pos + 1
                if pos < depth:
                    hits[q, pos] = 1.0
                elif first[q] != np.inf:
                    break  # nothing further can change a score
    cum = np.cumsum(hits, axis=1) if n else hits
    out: dict[str, np.ndarray] = {}
    for k in ks:
        out[f"recall@{k}"] = cum[:, k - 1] / n_gold if n else np.zeros(0)
    agk = int(all_gold_k)
    out[f"all_gold@{agk}"] = (cum[:, agk - 1] >= n_gold).astype(np.float64) if n else np.zeros(0)
    out["mrr"] = 1.0 / first  # 1/inf == 0.0
    discount = 1.0 / np.log2(np.arange(2, 12, dtype=np.float64))  # positions 1..10
    dcg = hits[:, :10] @ discount
    ideal = np.cumsum(discount)[np.minimum(n_gold, 10).astype(np.int64) - 1] if n else np.zeros(0)
    out["ndcg@10"] = dcg / ideal if n else np.zeros(0)
    return out


def _resampled_means(values: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """Means of ``n_resamples`` resamples (with replacement, same size) of ``values``' rows.

    Indices are drawn block by block from one generator: the same seed gives the same resamples
    whatever the block size, since bounded integers come off the stream in order.
    """
    n = values.shape[0]
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples, dtype=np.float64)
    block = max(1, _BLOCK_ELEMENTS // max(n, 1))
    for start in range(0, n_resamples, block):
        stop = min(n_resamples, start + block)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = values[idx].mean(axis=1)
    return means


def _check_resampling(values: np.ndarray, n_resamples: int, level: float) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"values must be one-dimensional (one value per question), got shape {values.shape}")
    if int(n_resamples) < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    return values


def bootstrap_interval(values: np.ndarray, n_resamples: int = 2000, level: float = 0.95,
                       seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high): the mean of per-question ``values`` and its percentile-bootstrap interval.

    Questions are resampled with replacement ``n_resamples`` times; ``low``/``high`` are the
    (1 - level)/2 and (1 + level)/2 percentiles of the resampled means. NaN triple for no questions.
    """
    values = _check_resampling(values, n_resamples, level)
    if values.size == 0:
        return (float("nan"),) * 3
    means = _resampled_means(values, int(n_resamples), seed)
    lo, hi = np.percentile(means, [50.0 * (1.0 - level), 50.0 * (1.0 + level)])
    return float(values.mean()), float(lo), float(hi)


def paired_bootstrap(a: np.ndarray, b: np.ndarray, n_resamples: int = 2000, level: float = 0.95,
                     seed: int = 0) -> dict:
    """Paired bootstrap of mean(a - b) over the same questions (resampled together).

    Returns ``{"diff", "low", "high", "p_le_0", "n"}``: the observed mean difference, its
    percentile interval, and the share of resamples whose mean difference is <= 0 (a one-sided
    bootstrap p-value for "a is better than b").
    """
    a = _check_resampling(a, n_resamples, level)
    b = _check_resampling(b, n_resamples, level)
    if a.shape != b.shape:
        raise ValueError(f"a ({a.shape[0]}) and b ({b.shape[0]}) must score the same questions")
    d = a - b
    if d.size == 0:
        nan = float("nan")
        return {"diff": nan, "low": nan, "high": nan, "p_le_0": nan, "n": 0}
    means = _resampled_means(d, int(n_resamples), seed)
    lo, hi = np.percentile(means, [50.0 * (1.0 - level), 50.0 * (1.0 + level)])
    return {"diff": float(d.mean()), "low": float(lo), "high": float(hi),
            "p_le_0": float(np.mean(means <= 0.0)), "n": int(d.size)}


def breakdown(values: dict[str, np.ndarray], groups: Sequence[str]) -> dict[str, dict[str, float]]:
    """Mean of each metric per group label, plus ``n`` (questions in the group); labels sorted.

    ``values`` maps metric names to per-question arrays aligned with ``groups``.
    """
    labels = np.asarray([str(g) for g in groups], dtype=object)
    if not len(labels):
        return {}
    uniq, inverse = np.unique(labels.astype(str), return_inverse=True)
    counts = np.bincount(inverse, minlength=len(uniq)).astype(np.float64)
    out: dict[str, dict[str, float]] = {str(u): {} for u in uniq}
    for name, arr in values.items():
        arr = np.asarray(arr, dtype=np.float64)
        if arr.shape != (len(labels),):
            raise ValueError(f"values[{name!r}] has {arr.shape[0] if arr.ndim else 0} entries, "
                             f"groups has {len(labels)}")
        sums = np.bincount(inverse, weights=arr, minlength=len(uniq))
        for i, u in enumerate(uniq):
            out[str(u)][name] = float(sums[i] / counts[i])
    for i, u in enumerate(uniq):
        out[str(u)]["n"] = int(counts[i])
    return out


_HOPS = re.compile(r"^([2-9])hop\d*__")


def musique_hops(question_id: str) -> str:
    """'2hop', '3hop' or '4hop' from a MuSiQue question id ('2hop__1234_5678', '3hop1__...', '4hop3__...')."""
    m = _HOPS.match(str(question_id))
    if not m:
        raise ValueError(f"not a MuSiQue question id (expected '<N>hop[K]__...'): {question_id!r}")
    return f"{m.group(1)}hop"
