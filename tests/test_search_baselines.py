"""BM25 / dense baselines against direct formulas, retrieval metrics, SearchConfig round trips."""

from __future__ import annotations

import math

import numpy as np
import pytest

from noderag.search.baselines import BM25Retriever, DenseRetriever, bm25_tokens, top_k_rows
from noderag.search.config import QuotaConfig, SearchConfig
from noderag.search.metrics import all_gold_in_top, recall_at_k, retrieval_metrics

DOCS = {
    "a": "the cat sat on the mat",
    "b": "the dog chased the cat around the garden",
    "c": "quantum chromodynamics of gluons",
    "d": "a cat and a dog",
}


def bm25_direct(query: str, docs: dict[str, str], k1=1.2, b=0.75) -> dict[str, float]:
    toks = {d: bm25_tokens(t) for d, t in docs.items()}
    avgdl = sum(len(t) for t in toks.values()) / len(toks)
    n = len(docs)
    out = {}
    for d, tt in toks.items():
        s = 0.0
        for term in set(bm25_tokens(query)):
            df = sum(term in t for t in toks.values())
            if df == 0:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            tf = tt.count(term)
            s += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(tt) / avgdl))
        out[d] = s
    return out


@pytest.mark.parametrize("query", ["cat dog", "gluons", "the cat", "unknown words only"])
def test_bm25_matches_direct_formula(query):
    ids = list(DOCS)
    bm = BM25Retriever(ids, list(DOCS.values()))
    got = bm.scores([query])[0]
    want = bm25_direct(query, DOCS)
    np.testing.assert_allclose(got, [want[d] for d in ids], rtol=1e-12, atol=1e-12)


def test_bm25_search_ranks_best_first():
    bm = BM25Retriever(list(DOCS), list(DOCS.values()))
    assert bm.search(["gluons quantum"], 2)[0][0] == "c"
    assert bm.search(["cat dog"], 4)[0][0] in ("b", "d")


def test_dense_is_exact_cosine():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(20, 8)).astype(np.float32)
    q = rng.normal(size=(3, 8)).astype(np.float32)
    d = DenseRetriever([f"p{i}" for i in range(20)], v)
    want = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (v / np.linalg.norm(v, axis=1, keepdims=True)).T
    np.testing.assert_allclose(d.scores(q), want, rtol=1e-5, atol=1e-6)
    top = d.search(q, 5)
    for row, w in zip(top, want):
        assert row == [f"p{i}" for i in np.argsort(-w, kind="stable")[:5]]
    with pytest.raises(ValueError, match="dim"):
        d.scores(np.ones((1, 4)))


def test_top_k_rows_ties_by_lower_index():
    idx, vals = top_k_rows(np.array([[1.0, 3.0, 3.0, 0.0]]), 3)
    assert idx.tolist() == [[1, 2, 0]]
    assert vals.tolist() == [[3.0, 3.0, 1.0]]


def test_metrics():
    ranked = [["a", "b", "c"], ["x", "y", "z"]]
    gold = [["b", "q"], ["x"]]
    assert recall_at_k(ranked, gold, 1) == pytest.approx((0 + 1) / 2)
    assert recall_at_k(ranked, gold, 2) == pytest.approx((0.5 + 1) / 2)
    assert all_gold_in_top(ranked, gold, 3) == pytest.approx(0.5)
    m = retrieval_metrics(ranked, gold)
    assert set(m) == {"recall@2", "recall@5", "recall@10", "all_gold@8"}
    with pytest.raises(ValueError, match="gold\\[0\\] is empty"):
        recall_at_k([["a"]], [[]], 1)
    with pytest.raises(ValueError, match="differ in length"):
        recall_at_k([["a"]], [], 1)


def test_search_config_round_trip_and_replace():
    cfg = SearchConfig(alpha=0.3, quotas=QuotaConfig(entities=3))
    again = SearchConfig.from_dict(cfg.to_dict())
    assert again == cfg
    changed = cfg.replace(rule="restart")
    assert changed.rule == "restart" and changed.quotas.entities == 3 and cfg.rule == "lazy"
    with pytest.raises(ValueError, match="search.alpha"):
        cfg.replace(alpha=1.5)
