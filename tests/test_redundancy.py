"""Redundancy in the passage list (:mod:`noderag.search.redundancy`): the greedy kernel against a brute-force
reference on random inputs, the per-term BM25 impacts it reads, and the redundancy stage on an index built by the
real pipeline (a near-copy of the first passage gives the second place to the passage that matches what the first
does not), and the residual term that picks a shared-entity bridge by the terms its source lacks."""

from __future__ import annotations

import numpy as np
import pytest

from noderag.search import SearchConfig, Searcher
from noderag.search.ranking import (AgreementCap, Bridges, DenseFit, Distinct, EntryPoints, LexicalFit,
                                    PropagatedMass, Redundancy)
from noderag.search.ranking.fit import lexical_share, residual_shares
from noderag.search.redundancy import redundancy_order

from conftest import build_passages


def reference_order(scores, credit, matched, cosines, top):
    """Brute force: position by position, every remaining passage re-scored from the passages placed so far
    (after ``top`` positions, from the first ``top`` alone); the best wins, ties to the lower index."""
    n = len(scores)
    placed: list[int] = []
    values: list[float] = []
    for step in range(n):
        basis = placed[:top]
        best, best_v = None, None
        for i in range(n):
            if i in placed:
                continue
            new_term = any(matched[t, i] and not any(matched[t, j] for j in basis) for t in range(matched.shape[0]))
            closer = cosines[i] > max((cosines[j] for j in basis), default=-np.inf)
            v = scores[i] if new_term or closer else scores[i] - credit[i]
            if best_v is None or v > best_v:
                best, best_v = i, v
        placed.append(best)
        values.append(best_v)
    return placed, values


@pytest.mark.parametrize("seed", range(60))
def test_redundancy_order_matches_the_brute_force_reference(seed):
    rng = np.random.default_rng(seed)
    n, terms = int(rng.integers(1, 13)), int(rng.integers(0, 6))
    scores = -np.sort(-rng.choice([0.5, 1.0, 1.5, 2.0, 2.5], n) + rng.random(n) * (seed % 2))  # ties on odd seeds
    credit = rng.random(n) * scores.clip(0)
    matched = rng.random((terms, n)) < 0.4
    cosines = rng.choice([0.1, 0.3, 0.5], n) if seed % 3 == 0 else rng.random(n)  # equal cosines too
    top = int(rng.integers(0, n + 2))
    order, values = redundancy_order(scores, credit, matched, cosines, top)
    ref_order, ref_values = reference_order(scores, credit, matched, cosines, top)
    assert order.tolist() == ref_order
    assert values.tolist() == pytest.approx(ref_values)
    assert np.all(np.diff(values) <= 1e-12)  # scores stay non-increasing
    assert sorted(order.tolist()) == list(range(n))


def _numpy_order(scores, credit, matched, cosines, top):
    """The numpy form the core's kernel replaced (a few array passes per position)."""
    n = scores.shape[0]
    covered = np.zeros(matched.shape[0], dtype=bool)
    best_cos = -np.inf
    left = np.ones(n, dtype=bool)
    order, out = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.float64)

    def current():
        new_term = (matched & ~covered[:, None]).any(axis=0)
        return np.where(~new_term & (cosines <= best_cos), scores - credit, scores)

    k = 0
    for _ in range(min(top, n)):
        value = np.where(left, current(), -np.inf)
        i = int(np.argmax(value))
        order[k], out[k] = i, value[i]
        k += 1
        left[i] = False
        covered |= matched[:, i]
        best_cos = max(best_cos, float(cosines[i]))
    if k < n:
        rest = np.flatnonzero(left)
        value = current()[rest]
        tail = np.argsort(-value, kind="stable")
        order[k:], out[k:] = rest[tail], value[tail]
    return order, out


@pytest.mark.parametrize("seed", range(80))
def test_the_cores_order_is_the_numpy_forms_bit_for_bit(seed):
    rng = np.random.default_rng(1000 + seed)
    n, terms = int(rng.integers(0, 40)), int(rng.integers(0, 8))
    scores = -np.sort(-rng.choice([0.5, 1.0, 1.5], n) - rng.random(n) * (seed % 2))
    credit = rng.random(n) * (seed % 3 != 0)
    matched = rng.random((terms, n)) < 0.3
    cosines = rng.choice([0.1, 0.3], n) if seed % 4 == 0 else rng.random(n)
    top = int(rng.integers(0, n + 3))
    got, want = redundancy_order(scores, credit, matched, cosines, top), _numpy_order(scores, credit, matched,
                                                                                       cosines, top)
    assert got[0].tolist() == want[0].tolist() and got[1].tobytes() == want[1].tobytes()


def test_mismatched_shapes_are_a_value_error():
    with pytest.raises(ValueError, match=r"matched \(terms, 3\) expected"):
        redundancy_order(np.ones(3), np.ones(3), np.ones((2, 4), bool), np.ones(3), 2)


def test_a_near_copy_loses_its_lexical_credit_and_a_passage_the_vector_prefers_keeps_it():
    scores = np.array([2.0, 1.5, 1.2])
    credit = np.array([0.5, 0.5, 0.1])
    matched = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1]], bool)  # passage 1 matches only what passage 0 does
    order, values = redundancy_order(scores, credit, matched, np.array([0.6, 0.5, 0.2]), 10)
    assert order.tolist() == [0, 2, 1] and values.tolist() == [2.0, 1.2, 1.0]
    closer = redundancy_order(scores, credit, matched, np.array([0.6, 0.7, 0.2]), 10)[0]
    assert closer.tolist() == [0, 1, 2]  # the query vector prefers it: not redundant
    assert redundancy_order(scores, credit, matched, np.array([0.6, 0.5, 0.2]), 0)[0].tolist() == [0, 1, 2]


def test_function_words_are_no_content_of_the_question():
    from noderag.search.redundancy import content_terms

    assert content_terms(["2010", "chess", "did", "the", "teus", "where", "of"]) == ["2010", "chess", "teus"]
    assert content_terms(["台北", "市长", "首任"]) == ["台北", "市长", "首任"]


PASSAGES = [
    ("p-26", "26th Chess Olympiad", "The 26th Chess Olympiad was held in Thessaloniki, Greece, in 1984. Chess teams "
     "from many countries took part in the Olympiad."),
    ("p-41", "41st Chess Olympiad", "The 41st Chess Olympiad was held in Tromsø, Norway, in 2014. Chess teams from "
     "many countries took part in the Olympiad."),
    ("p-port", "Port of Thessaloniki", "The Port of Thessaloniki is one of the largest ports in Greece. In 2010 it "
     "handled 273,282 TEUs."),
    ("p-tromso", "Tromsø", "Tromsø is a city in northern Norway with a small port."),
    ("p-greece", "Greece", "Greece is a country in southeastern Europe. Athens is its capital."),
]
Q = "How many TEUs did the city where the 26th Chess Olympiad was held handle in 2010?"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return build_passages(tmp_path_factory.mktemp("redundancy"), PASSAGES)


def _stages(*, redundancy: bool) -> list:
    """The default stages up to the agreement cap, with or without the redundancy stage."""
    first = [EntryPoints(), DenseFit(), PropagatedMass(), LexicalFit(), Bridges(), AgreementCap()]
    return first + ([Redundancy()] if redundancy else []) + [Distinct()]


def test_the_near_copy_falls_below_the_passage_matching_what_the_first_does_not(index):
    on = Searcher(index, SearchConfig(), stages=_stages(redundancy=True)).retrieve(Q)
    off = Searcher(index, SearchConfig(), stages=_stages(redundancy=False)).retrieve(Q)
    assert off.passages[:2] == ["p-26", "p-41"]  # the other Olympiad matches the same words
    assert on.passages[0] == "p-26" and on.passages.index("p-port") < on.passages.index("p-41")
    assert on.passage_scores == sorted(on.passage_scores, reverse=True)
    assert set(on.passages) == set(off.passages)  # a re-ordering: nothing added, nothing dropped
    # the near-copy loses its BM25 credit; the first keeps its score
    assert on.passage_scores[0] == off.passage_scores[0]
    assert on.passage_scores[on.passages.index("p-41")] < off.passage_scores[1]


def test_term_impacts_sum_to_the_terms_bm25(index):
    s = index.searcher()
    ids, scores = s.lexical.term_scores({"chess", "teus", "2010", "olympiad"})
    terms = ["2010", "chess", "nosuchterm", "olympiad", "teus"]
    imp = s.lexical.term_impacts(terms, ids[::-1])
    assert imp.shape == (5, ids.size) and not imp[2].any()
    assert imp.sum(axis=0) == pytest.approx(scores[::-1])
    for t, row in zip(terms, imp):
        one, one_s = s.lexical.term_scores({t})
        assert dict(zip(ids[::-1].tolist(), row.tolist())) == pytest.approx(
            {i: dict(zip(one.tolist(), one_s.tolist())).get(i, 0.0) for i in ids.tolist()})


def _ctx(index, q: str = Q):
    s = Searcher(index)
    ctx = s.query_context(q)
    ctx.dense_weight, ctx.lexical_weight = DenseFit().weight, LexicalFit().weight
    return s, ctx


def test_the_residual_term_scores_what_the_question_asks_beyond_the_source(index):
    """BM25 over the question terms the source passage lacks (found here by tokenizing its text), on the scale
    of the whole question's lexical term; the other Olympiad matches nothing beyond p-26."""
    from noderag.search.lexical import passage_terms
    from noderag.search.searcher import passage_texts

    s, ctx = _ctx(index)
    t_ids = np.asarray([i for i in range(s.n) if int(s.types[i]) == 0], dtype=np.int64)
    labels = s.tables.labels(t_ids.tolist())
    source = int(t_ids[labels.index("p-26")])
    residual = dict(zip(labels, residual_shares(ctx, [(source, t_ids)])[0].tolist()))
    own = set(passage_terms(passage_texts(s.store, s.tables, np.asarray([source]))[0]))
    ids, scores = s.lexical.term_scores({t for t in ctx.lex_terms if t not in own})
    expected = dict(zip(s.tables.labels(ids.tolist()), (0.5 * scores / ctx.lex_scores.max()).tolist()))
    assert residual == pytest.approx({lab: expected.get(lab, 0.0) for lab in labels})
    assert residual["p-41"] == 0.0 and residual["p-26"] == 0.0 and residual["p-port"] > 0
    whole = dict(zip(labels, (0.5 * lexical_share(ctx, t_ids)).tolist()))
    assert whole["p-41"] > whole["p-port"] > residual["p-port"]  # the whole question favours the other Olympiad


def test_the_residual_terms_of_several_sources_read_together_are_each_sources_own(index):
    s, ctx = _ctx(index)
    t_ids = np.asarray([i for i in range(s.n) if int(s.types[i]) == 0], dtype=np.int64)
    groups = [(int(t_ids[0]), t_ids[1:]), (int(t_ids[2]), t_ids[::-1]), (int(t_ids[1]), t_ids[:0])]
    together = residual_shares(ctx, groups)
    assert [a.shape for a in together] == [(t_ids.size - 1,), (t_ids.size,), (0,)]
    for (source, chunks), got in zip(groups, together):
        assert got == pytest.approx(residual_shares(ctx, [(source, chunks)])[0])
    assert residual_shares(ctx, []) == []


def test_the_redundancy_stage_alone_changes_nothing_without_a_lexical_weight(index):
    """Redundancy takes back BM25 credit: with no lexical weight in the stage list it has none to take."""
    s, ctx = _ctx(index)
    cands = np.asarray([i for i in range(s.n) if int(s.types[i]) == 0], dtype=np.int64)
    scores = np.linspace(2.0, 1.0, cands.size)
    moved = Redundancy()(cands, scores, ctx)
    assert sorted(moved[0].tolist()) == sorted(cands.tolist())  # a re-ordering: nothing added, nothing dropped
    ctx.lexical_weight = 0.0
    same = Redundancy()(cands, scores, ctx)
    assert same[0].tolist() == cands.tolist() and same[1].tolist() == scores.tolist()
