"""noderag.eval.metrics against hand-worked values and plain-Python references."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from noderag.eval import (bootstrap_interval, breakdown, musique_hops, paired_bootstrap, passage_scores)
from noderag.eval import metrics as M
from noderag.search.metrics import all_gold_in_top, recall_at_k


def _ref_scores(r, g):
    """Plain-Python definitions of every score of one question."""
    gs = set(g)
    out = {}
    for k in (2, 5, 10):
        out[f"recall@{k}"] = len(set(r[:k]) & gs) / len(gs)
    out["all_gold@8"] = float(gs <= set(r[:8]))
    rank = next((i + 1 for i, p in enumerate(r) if p in gs), None)
    out["mrr"] = 0.0 if rank is None else 1.0 / rank
    seen, dcg = set(), 0.0
    for i, p in enumerate(r[:10]):
        if p in gs and p not in seen:
            seen.add(p)
            dcg += 1.0 / math.log2(i + 2)
    idcg = sum(1.0 / math.log2(i + 2) for i in range(min(len(gs), 10)))
    out["ndcg@10"] = dcg / idcg
    return out


def test_hand_worked_question():
    s = passage_scores([["x", "a", "y", "b"]], [["a", "b", "c"]])
    assert s["recall@2"][0] == pytest.approx(1 / 3)
    assert s["recall@5"][0] == pytest.approx(2 / 3)
    assert s["all_gold@8"][0] == 0.0
    assert s["mrr"][0] == pytest.approx(0.5)
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    idcg = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert s["ndcg@10"][0] == pytest.approx(dcg / idcg)


def test_duplicates_count_once_and_no_gold_is_zero():
    s = passage_scores([["a", "a", "a"], ["z", "y"], []], [["a", "b"], ["q"], ["q"]])
    assert s["recall@2"].tolist() == [0.5, 0.0, 0.0]
    assert s["ndcg@10"][0] == pytest.approx(1 / (1 + 1 / math.log2(3)))  # one hit at rank 1 of two golds
    assert s["mrr"].tolist() == [1.0, 0.0, 0.0]
    s = passage_scores([["a", "b", "a", "b"]], [["a", "b", "b"]])  # repeated gold counts once too
    assert s["all_gold@8"][0] == 1.0 and s["ndcg@10"][0] == pytest.approx(1.0)


def test_random_rankings_match_reference_and_search_metrics():
    rng = random.Random(7)
    ranked, gold = [], []
    for _ in range(300):
        pool = [f"p{i}" for i in range(25)]
        ranked.append([rng.choice(pool) for _ in range(rng.randint(0, 15))])
        gold.append(rng.sample(pool, rng.randint(1, 12)))
    got = passage_scores(ranked, gold)
    assert set(got) == {"recall@2", "recall@5", "recall@10", "all_gold@8", "mrr", "ndcg@10"}
    for i, (r, g) in enumerate(zip(ranked, gold)):
        for name, v in _ref_scores(r, g).items():
            assert got[name][i] == pytest.approx(v), (name, r, g)
    for k in (2, 5, 10):  # the benchmark's mean figures are unchanged
        assert got[f"recall@{k}"].mean() == pytest.approx(recall_at_k(ranked, gold, k))
    assert got["all_gold@8"].mean() == pytest.approx(all_gold_in_top(ranked, gold, 8))


def test_custom_cutoffs_and_errors():
    s = passage_scores([["a", "b", "c"]], [["c"]], ks=(1, 3), all_gold_k=2)
    assert set(s) == {"recall@1", "recall@3", "all_gold@2", "mrr", "ndcg@10"}
    assert s["recall@1"][0] == 0.0 and s["recall@3"][0] == 1.0 and s["all_gold@2"][0] == 0.0
    with pytest.raises(ValueError, match="gold\\[0\\] is empty"):
        passage_scores([["a"]], [[]])
    with pytest.raises(ValueError, match="differ in length"):
        passage_scores([["a"]], [])
    assert passage_scores([], [])["mrr"].shape == (0,)


def _ref_bootstrap_means(values, n_resamples, seed):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(n_resamples, len(values)))
    return values[idx].mean(axis=1)


def test_bootstrap_matches_reference_and_is_block_size_independent(monkeypatch):
    values = np.random.default_rng(1).random(137)
    mean, lo, hi = bootstrap_interval(values, n_resamples=500, level=0.9, seed=3)
    ref = _ref_bootstrap_means(values, 500, 3)
    assert mean == pytest.approx(values.mean())
    assert lo == pytest.approx(np.percentile(ref, 5)) and hi == pytest.approx(np.percentile(ref, 95))
    monkeypatch.setattr(M, "_BLOCK_ELEMENTS", 137 * 7)  # blocks of 7 resamples: same draws
    assert bootstrap_interval(values, n_resamples=500, level=0.9, seed=3) == (mean, lo, hi)
    assert bootstrap_interval(values, n_resamples=500, level=0.9, seed=4) != (mean, lo, hi)


def test_bootstrap_interval_covers_mean_and_shrinks_with_n():
    rng = np.random.default_rng(0)
    small = rng.integers(0, 2, 50).astype(float)
    large = rng.integers(0, 2, 5000).astype(float)
    m, lo, hi = bootstrap_interval(small)
    assert lo <= m <= hi
    m2, lo2, hi2 = bootstrap_interval(large)
    assert (hi2 - lo2) < (hi - lo) / 5  # width ~ 1/sqrt(n): 10x narrower
    # binomial standard error: the 95% interval is about mean +- 1.96 sqrt(p(1-p)/n)
    assert hi2 - lo2 == pytest.approx(2 * 1.96 * math.sqrt(m2 * (1 - m2) / 5000), rel=0.15)
    assert bootstrap_interval(np.ones(10)) == (1.0, 1.0, 1.0)
    assert all(math.isnan(x) for x in bootstrap_interval(np.zeros(0)))


def test_paired_bootstrap():
    rng = np.random.default_rng(2)
    b = rng.random(400)
    a = b + 0.05 + rng.normal(0, 0.01, 400)  # a better on (almost) every question
    p = paired_bootstrap(a, b, seed=5)
    assert p["diff"] == pytest.approx((a - b).mean())
    assert 0 < p["low"] < p["diff"] < p["high"] and p["p_le_0"] == 0.0 and p["n"] == 400
    ref = _ref_bootstrap_means(a - b, 2000, 5)
    assert p["low"] == pytest.approx(np.percentile(ref, 2.5))
    assert paired_bootstrap(b, a, seed=5)["p_le_0"] == 1.0
    same = paired_bootstrap(b, b)
    assert same["diff"] == 0.0 and same["p_le_0"] == 1.0
    # pairing matters: a shifted copy of the same noisy values has a narrow paired interval while
    # the unpaired intervals of a and b overlap
    noisy = rng.random(400)
    q = paired_bootstrap(noisy + 0.02, noisy)
    assert q["high"] - q["low"] < 1e-9
    _, lo_a, _ = bootstrap_interval(noisy + 0.02)
    _, _, hi_b = bootstrap_interval(noisy)
    assert lo_a < hi_b
    with pytest.raises(ValueError, match="same questions"):
        paired_bootstrap(np.ones(3), np.ones(4))


def test_breakdown():
    vals = {"recall@2": np.array([1.0, 0.0, 0.5, 1.0]), "mrr": np.array([1.0, 0.25, 0.5, 0.5])}
    out = breakdown(vals, ["2hop", "3hop", "2hop", "4hop"])
    assert list(out) == ["2hop", "3hop", "4hop"]
    assert out["2hop"] == {"recall@2": 0.75, "mrr": 0.75, "n": 2}
    assert out["3hop"] == {"recall@2": 0.0, "mrr": 0.25, "n": 1}
    assert breakdown(vals, []) == {}
    with pytest.raises(ValueError, match="groups has 3"):
        breakdown(vals, ["a", "b", "c"])


@pytest.mark.parametrize("qid,hops", [("2hop__1234_5678", "2hop"), ("3hop1__9_8_7", "3hop"),
                                      ("4hop3__1_2_3_4", "4hop"), ("2hop__482757_12019", "2hop")])
def test_musique_hops(qid, hops):
    assert musique_hops(qid) == hops


def test_musique_hops_rejects_other_ids():
    with pytest.raises(ValueError, match="not a MuSiQue question id"):
        musique_hops("5a8b57f25542995d1e6f1371")
