"""Passage ranking as stages (:mod:`noderag.search.ranking`): each stage alone on a hand-built graph (what it
adds, what it leaves), the composed default list against the rankings recorded before the pipeline on the
committed data slices, the stage names, and the size of the search package's functions."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest

import noderag
from noderag.search import Searcher, SearchConfig
from noderag.search.ranking import (DEFAULT_NAMES, STAGE_NAMES, AgreementCap, DenseFit, Distinct, EntryPoints, Fill,
                                    LexicalFit, PropagatedMass, Ranking, Rerank, StagedConfig, default_stages,
                                    stages_named)
from noderag.search.ranking.fit import dense, fit, lexical_share, shortlist

from conftest import DATA, HOTPOTQA, MUSIQUE
from test_search import toy_store

Q = "Hello Love album 1974"  # shares no word with p3 ("Pineapples grow in Hawaii on large farms.")
SRC = Path(noderag.__file__).parent / "search"


@pytest.fixture(scope="module")
def store():
    return toy_store()


def _ctx(store, q: str = Q, cfg: SearchConfig | None = None):
    s = Searcher(store, cfg)
    ctx = s.query_context(q)
    ctx.dense_weight, ctx.lexical_weight = 1.0, 0.5
    return s, ctx


def _chunks(s) -> np.ndarray:
    return np.flatnonzero(s.types == 0).astype(np.int64)


def test_entry_points_add_the_chunks_of_every_entry_and_of_the_walk(store):
    s, ctx = _ctx(store)
    cands, scores = EntryPoints()(np.zeros(0, np.int64), np.zeros(0), ctx)
    want = set(s._chunk[ctx.entry_ids].tolist()) | set(ctx.lex_top.tolist())
    ids, _ = ctx.ppr
    want |= {int(c) for t in (0, 1) for c in s._chunk[ids[t][ids[t] >= 0]].tolist()}
    assert set(cands.tolist()) == {c for c in want if c >= 0} and not scores.any()
    # no entry point, no lexical hit, no walk: nothing to rank
    ctx.entry_ids, ctx.lex_top, ctx.ppr = np.zeros(0, np.int64), np.zeros(0, np.int64), None
    assert EntryPoints()(np.zeros(0, np.int64), np.zeros(0), ctx)[0].size == 0


def test_dense_and_lexical_fit_add_their_weighted_terms_and_leave_the_candidates(store):
    s, ctx = _ctx(store)
    cands = _chunks(s)
    base = np.array([0.25, 0.5, 1.0])
    c1, d = DenseFit(weight=2.0)(cands, base, ctx)
    assert c1 is cands and d == pytest.approx(base + 2.0 * dense(ctx, cands))
    c2, lex = LexicalFit(weight=0.5)(cands, base, ctx)
    share = lexical_share(ctx, cands)
    assert c2 is cands and lex == pytest.approx(base + 0.5 * share)
    assert share.max() == pytest.approx(1.0) and share[2] == 0.0  # over the best; p3 shares no word
    # one fit for both, weighted as the stage list says
    assert fit(ctx, cands) == pytest.approx(1.0 * dense(ctx, cands) + 0.5 * share)
    ctx.lexical_weight = 0.0
    assert fit(ctx, cands) == pytest.approx(dense(ctx, cands))


def test_shortlist_keeps_the_passages_that_fit_best_by_their_own_vector_and_bm25(store):
    s, ctx = _ctx(store)
    cands = _chunks(s)
    own = ctx.dense_weight * ctx.view.stored_cosines(cands, ctx.vector) + ctx.lexical_weight * lexical_share(ctx, cands)
    for keep in (1, 2):
        want = np.sort(cands[np.lexsort((cands, -own))[:keep]])
        assert shortlist(ctx, cands, keep).tolist() == want.tolist()
    assert shortlist(ctx, cands[::-1], 3).tolist() == cands[::-1].tolist()  # no larger than keep: as given
    # a tie goes to the lower id
    ctx.dense_weight, ctx.lexical_weight = 0.0, 0.0
    assert shortlist(ctx, cands[::-1], 2).tolist() == cands[:2].tolist()


def test_propagated_mass_adds_only_what_the_walk_brought_and_only_with_lexical_evidence(store):
    s, ctx = _ctx(store)
    cands = _chunks(s)
    zero = np.zeros(cands.size)
    _, added = PropagatedMass()(cands, zero, ctx)
    assert (added >= 0).all() and added.max() > 0
    share = lexical_share(ctx, cands)
    assert share[2] == 0 and added[2] == 0  # a passage sharing no word with the question gets no mass
    assert added.max() <= 0.4 + 0.4 + 1e-12  # each mass normalised by its maximum
    ctx.ppr = None
    assert PropagatedMass()(cands, zero, ctx)[1].tolist() == zero.tolist()  # no walk, nothing added


def test_the_agreement_cap_alone_leaves_a_list_without_bridges(store):
    s, ctx = _ctx(store)
    cands, scores = _chunks(s), np.array([3.0, 2.0, 1.0])
    out = AgreementCap()(cands, scores, ctx)
    assert out[0].tolist() == cands.tolist() and out[1].tolist() == scores.tolist()


def test_distinct_keeps_the_best_passage_of_each_label(store):
    s, ctx = _ctx(store)
    c = _chunks(s)
    cands = np.array([c[1], c[0], 5, c[1]])  # node 5 is a unit: no passage label
    got, scores = Distinct()(cands, np.array([4.0, 3.0, 2.0, 1.0]), ctx)
    assert got.tolist() == [c[1], c[0]] and scores.tolist() == [4.0, 3.0]


def test_fill_extends_a_short_list_below_it_and_leaves_a_long_one(store):
    s, ctx = _ctx(store)
    c = _chunks(s)
    head, head_s = np.array([c[1]]), np.array([0.1])
    got, scores = Fill(want=3)(head, head_s, ctx)
    assert got[0] == c[1] and scores[0] == 0.1 and sorted(got.tolist()) == sorted(c.tolist())
    assert (np.diff(scores) <= 0).all() and scores[1:].max() <= 0.1  # after the graph's, non-increasing
    full = Fill(want=1)(head, head_s, ctx)
    assert full[0].tolist() == head.tolist() and full[1].tolist() == head_s.tolist()


class _Reverse:
    """A cross-encoder double that prefers the passage it reads last."""

    def score(self, query, texts):
        return np.arange(len(texts), dtype=np.float32)


def test_rerank_reorders_the_head_and_keeps_the_tail_below_it(store):
    s, ctx = _ctx(store)
    c = _chunks(s)
    stage = Rerank(lambda: _Reverse(), lambda ids: [str(i) for i in ids], top=2)
    got, scores = stage(c, np.array([3.0, 2.0, 1.0]), ctx)
    assert got.tolist() == [c[1], c[0], c[2]]
    assert scores.tolist() == [1.0, 0.0, -1.0]  # logits, then the tail below the lowest of them


def test_default_stages_follow_the_bridging_and_rerank_settings():
    names = [s.name for s in default_stages(SearchConfig(), lambda: None, lambda ids: [])]
    assert names == [n for n in DEFAULT_NAMES if n != "rerank"]
    off = [s.name for s in default_stages(SearchConfig(bridging=False, rerank="onnx:/m"), lambda: None, lambda i: [])]
    assert "bridges" not in off and "agreement_cap" not in off and off[-1] == "rerank"
    assert set(DEFAULT_NAMES) <= set(STAGE_NAMES)


def test_stage_lists_reject_unknown_names():
    with pytest.raises(ValueError, match=r"unknown ranking stage\(s\) \['bogus'\]"):
        stages_named(["entry", "bogus"], SearchConfig(), lambda: None, lambda ids: [])
    with pytest.raises(ValueError, match="search.stages must be a list of"):
        StagedConfig(stages=["entry", "nope"]).validate()
    assert StagedConfig(stages=["entry", "dense"]).replace(min_passages=3).stages == ["entry", "dense"]


def test_the_ranking_records_each_stage_time_when_asked(store):
    s, ctx = _ctx(store)
    ranking = Ranking([EntryPoints(), DenseFit(), Distinct()])
    ranking.timings = {}
    ranking(ctx)
    assert set(ranking.timings) == {"entry", "dense", "distinct"}


@pytest.fixture(scope="module")
def slice_indexes(tmp_path_factory):
    root = tmp_path_factory.mktemp("slices")
    return {name: noderag.build([str(folder / "corpus.jsonl")], str(root / name), embed="hash:64", progress=False)
            for name, folder in (("musique", MUSIQUE), ("hotpotqa", HOTPOTQA))}


def test_the_default_pipeline_ranks_the_data_slices_as_before_it(slice_indexes):
    """``data/search/slice_rankings.json``: the ten best passages and their scores of every slice question, as the
    searcher ranked them before passage ranking became a stage list (the default configuration)."""
    before = json.loads((DATA / "search" / "slice_rankings.json").read_text(encoding="utf-8"))
    for name, index in slice_indexes.items():
        folder = MUSIQUE if name == "musique" else HOTPOTQA
        rows = [json.loads(line) for line in (folder / "questions.jsonl").read_text("utf-8").splitlines()]
        results = index.searcher().retrieve_many([r["question"] for r in rows])
        assert len(rows) == len(before[name])
        for row, res in zip(rows, results):
            want = before[name][row["id"]]
            assert res.passages[:10] == want["passages"], (name, row["id"])
            assert res.passage_scores[:10] == pytest.approx(want["scores"], abs=1e-6), (name, row["id"])


#: Files of the search package whose owners rework them elsewhere (the query tables' format).
NOT_HERE = {"query_index.py"}


def test_no_function_in_the_search_package_is_over_60_lines():
    long = []
    for path in sorted(p for p in SRC.rglob("*.py") if p.name not in NOT_HERE):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 60:
                    long.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({n} lines)")
    assert long == []


def test_query_vector_products_run_on_one_blas_thread_and_restore_the_pool():
    """The dense fit's products use one BLAS thread (a helper thread would spin after each and take a core from the
    query) and leave the library's thread count as they found it."""
    from threadpoolctl import threadpool_info

    from noderag.search.ranking import context as rc

    def blas_threads():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    seen = []
    real = rc._BLAS.limit

    def spy(**kw):
        seen.append(kw)
        return real(**kw)

    before = blas_threads()
    rows, vector = np.arange(12.0).reshape(4, 3), np.array([1.0, -2.0, 0.5])
    rc._BLAS.limit = spy
    try:
        got = rc._product(rows, vector)
    finally:
        rc._BLAS.limit = real
    assert got.tolist() == [-1.0, -2.5, -4.0, -5.5]
    assert seen == [{"limits": 1, "user_api": "blas"}]
    assert blas_threads() == before
