"""The lexical entry point: BM25 impact postings against the benchmark's sparse-matrix BM25."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderag.search.baselines import BM25Retriever
from noderag.search.lexical import LexicalIndex, csr_of, lexical_arrays, passage_terms, titled, top_scored

WORDS = ["alpha", "beta", "gamma", "delta", "river", "castle", "the", "of", "1986", "zeta", "omega", "kappa"]
texts_st = st.lists(st.lists(st.sampled_from(WORDS), min_size=0, max_size=12).map(" ".join), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(texts=texts_st, query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join),
       offset=st.integers(0, 50))
def test_scores_equal_sparse_matrix_bm25(texts, query, offset):
    ids = np.arange(len(texts), dtype=np.int64) + offset  # node ids need not start at 0
    lex = LexicalIndex(lexical_arrays(ids, texts))
    ref = BM25Retriever([str(i) for i in ids], texts).scores([query])[0]
    got_ids, got = lex.scores(query)
    dense = np.zeros(len(texts))
    dense[got_ids - offset] = got
    np.testing.assert_allclose(dense, ref, rtol=1e-5, atol=1e-6)
    assert np.all(np.diff(got_ids) > 0)  # sorted, unique


def test_postings_are_impact_ordered_and_truncated_per_term():
    texts = [" ".join(["river"] * (i + 1) + ["castle"]) for i in range(6)]
    arrays = lexical_arrays(np.arange(6), texts)
    ptr, w = arrays["lex_post_ptr"], arrays["lex_post_weight"]
    for t in range(ptr.shape[0] - 1):
        seg = w[ptr[t]:ptr[t + 1]]
        assert np.all(np.diff(seg) <= 0)
    full = LexicalIndex(arrays).scores("river")
    cut = LexicalIndex(arrays, max_postings=2).scores("river")
    assert cut[0].size == 2
    # the two passages kept are the two with the highest impact for "river"
    best = full[0][np.argsort(-full[1], kind="stable")[:2]]
    assert sorted(cut[0].tolist()) == sorted(best.tolist())
    assert csr_of(arrays, 6).shape == (ptr.shape[0] - 1, 6)


def test_search_ranks_best_first_with_ties_by_id():
    lex = LexicalIndex(lexical_arrays(np.array([5, 3, 9]), ["castle river", "castle river", "river"]))
    ids, scores = lex.search("castle", 5)
    assert ids.tolist() == [3, 5]
    assert scores[0] == pytest.approx(scores[1])
    assert top_scored(np.array([1, 2, 3]), np.array([0.5, 2.0, 2.0]), 2)[0].tolist() == [2, 3]
    assert lex.search("unknownword", 3)[0].size == 0
    assert lex.search("", 3)[0].size == 0


def test_deterministic_and_title_indexed():
    texts = [titled("Built in 1901 on the cliff.", "Haldis Lighthouse"), titled("A ferry line.", None)]
    a = lexical_arrays(np.arange(2), texts)
    b = lexical_arrays(np.arange(2), list(texts))
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].tobytes() == b[key].tobytes()
    ids, _ = LexicalIndex(a).search("haldis", 2)
    assert ids.tolist() == [0]


def test_chinese_terms_are_segmenter_words_folded_to_simplified():
    terms = passage_terms("馬祖列島位於臺灣海峽")
    assert "马祖" in terms or "马祖列岛" in terms
    lex = LexicalIndex(lexical_arrays(np.arange(2), ["馬祖列島位於臺灣海峽", "台北是一座城市"]))
    assert lex.search("马祖在哪里", 1)[0].tolist() == [0]


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_insert_and_delete_keep_the_lexical_tables_consistent(tmp_path):
    import json

    import noderag

    first = tmp_path / "a.jsonl"
    first.write_text("".join(json.dumps({"id": f"a{i}", "title": f"Harbour {i}", "text": f"Harbour {i} has "
                                         f"{i + 2} cranes and a lighthouse."}) + "\n" for i in range(4)))
    second = tmp_path / "b.jsonl"
    second.write_text(json.dumps({"id": "b0", "title": "Quarry", "text": "The quarry yields zircon."}) + "\n")
    index = noderag.build([str(first)], str(tmp_path / "index"), embed="hash:64", progress=False)
    assert index.query_index.lexical.search("zircon", 3)[0].size == 0
    index = index.insert([str(second)])
    ids, _ = index.query_index.lexical.search("zircon quarry", 3)
    assert [index.query_index.label(int(i)) for i in ids] == ["b0"]
    index = index.delete(["b0"])
    assert index.query_index.lexical.search("zircon", 3)[0].size == 0
    assert "b0" not in index.retrieve("zircon quarry").passages


@settings(max_examples=40, deadline=None)
@given(texts=st.lists(st.text(alphabet="abcde ", max_size=30), min_size=1, max_size=12),
       query=st.text(alphabet="abcde ", max_size=12), offset=st.integers(0, 50))
def test_scratch_accumulator_gives_the_unique_sums(texts, query, offset):
    ids = np.arange(len(texts), dtype=np.int64) * 3 + offset  # passages spread over the node ids
    plain = LexicalIndex(lexical_arrays(ids, texts))
    bound = LexicalIndex(lexical_arrays(ids, texts))
    bound.bind_passages(np.concatenate([ids, ids[:1] + 1]))  # a bound id that no posting names
    for _ in range(2):  # the scratch arrays are reset after each query
        a, b = plain.scores(query), bound.scores(query)
        assert a[0].tolist() == b[0].tolist()
        assert a[1].tolist() == b[1].tolist()  # same float64 sums, same order of addition


def test_scratch_accumulator_falls_back_for_a_posting_outside_the_bound_passages():
    ids = np.array([2, 5, 9])
    idx = LexicalIndex(lexical_arrays(ids, ["red apple", "green apple", "red car"]))
    idx.bind_passages(np.array([2, 5]))  # 9 is missing: the query must not lose it
    got = idx.scores("red apple")
    assert got[0].tolist() == [2, 5, 9]
    idx.bind_passages(np.array([2, 5, 9]))
    assert idx.scores("red apple")[0].tolist() == [2, 5, 9]


def test_an_unwritten_ordinal_entry_never_names_another_passage():
    """The node -> ordinal map is written at the bound passages only; whatever another node's entry holds, a
    posting naming that node is no bound passage (the query falls back to the unbound path)."""
    ids = np.array([2, 3, 5])
    idx = LexicalIndex(lexical_arrays(ids, ["red apple", "red pear", "green apple"]))
    idx.bind_passages(np.array([2, 5]))
    for garbage in (0, 1, -7, 2**31 - 1):
        idx._ordinal[3] = garbage  # node 3 is no bound passage
        assert idx._ordinals_of(np.array([2, 3], np.int32)) is None
        assert idx.scores("red")[0].tolist() == [2, 3]  # found by the fallback, not lost


def test_kept_posting_lists_score_as_fresh_ones(monkeypatch):
    """Long posting lists keep their passage ordinals between queries (and are dropped past the budget):
    the scores stay those of a fresh look-up."""
    import noderag.search.lexical as lexical

    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(30)]
    texts = [" ".join(rng.choice(words, 12)) for _ in range(200)]
    ids = np.arange(200, dtype=np.int64) * 2 + 1
    plain = LexicalIndex(lexical_arrays(ids, texts))
    kept = LexicalIndex(lexical_arrays(ids, texts))
    kept.bind_passages(ids)
    monkeypatch.setattr(lexical, "TERM_CACHE_FROM", 1)
    monkeypatch.setattr(lexical, "TERM_CACHE_POSTINGS", 300)  # a few lists: the budget is passed and reset
    for _ in range(3):
        for q in ("w1 w2 w3", "w2 w5", "w7 w1 w29", "w0"):
            a, b = plain.scores(q), kept.scores(q)
            assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()
    assert 0 < kept._term_cached <= 300
    kept.bind_passages(ids[:-1])  # other ordinals: nothing kept survives
    assert kept._term_cached == 0


@settings(max_examples=60, deadline=None)
@given(texts=texts_st, terms=st.lists(st.sampled_from(WORDS + ["absent"]), min_size=0, max_size=6, unique=True),
       picks=st.lists(st.integers(0, 40), min_size=1, max_size=10), offset=st.integers(0, 50),
       max_postings=st.sampled_from([2, 4096]))
def test_term_impacts_equal_single_term_scores_bound_or_not(texts, terms, picks, offset, max_postings):
    """Each row is that term's BM25 on the asked passages (repeats and ids no passage has included), with the
    passages bound to scratch ordinals or not, and within each term's ``max_postings`` read."""
    ids = np.arange(len(texts), dtype=np.int64) * 2 + offset
    asked = np.asarray([offset + p for p in picks], dtype=np.int64)  # odd offsets name no passage
    plain = LexicalIndex(lexical_arrays(ids, texts), max_postings=max_postings)
    bound = LexicalIndex(lexical_arrays(ids, texts), max_postings=max_postings)
    bound.bind_passages(ids)
    expected = np.zeros((len(terms), asked.size))
    for row, term in enumerate(terms):
        got_ids, got = plain.term_scores({term})
        score = dict(zip(got_ids.tolist(), got.tolist()))
        expected[row] = [score.get(i, 0.0) for i in asked.tolist()]
    for lex in (plain, bound, bound):  # the scratch is clean after each call
        np.testing.assert_array_equal(lex.term_impacts(terms, asked), expected)
    bound.term_scores(set(terms) | {"absent"})  # a query's postings kept: some of its terms are read from them
    np.testing.assert_array_equal(bound.term_impacts(terms[::-1], asked), expected[::-1])


@settings(max_examples=60, deadline=None)
@given(texts=texts_st, terms=st.lists(st.sampled_from(WORDS + ["absent"]), min_size=1, max_size=6, unique=True),
       picks=st.lists(st.integers(0, 40), min_size=1, max_size=2))
def test_term_impacts_of_kept_lists_binary_searched_equal_the_scatter(texts, terms, picks):
    """A kept posting list long against the asked ids is read by a binary search (kept lists are sorted by ordinal):
    the impacts are those of the scatter over the same list (repeats included), every call."""
    from noderag.search import lexical

    ids = np.arange(len(texts), dtype=np.int64) * 2
    asked = np.asarray(picks, dtype=np.int64)
    asked = asked[asked < ids[-1] + 1]
    asked = np.asarray([i - i % 2 for i in asked.tolist()] or [0], dtype=np.int64)  # bound passages only
    scatter = LexicalIndex(lexical_arrays(ids, texts))
    scatter.bind_passages(ids)
    searched = LexicalIndex(lexical_arrays(ids, texts))
    searched.bind_passages(ids)
    expected = scatter.term_impacts(terms, asked)
    old = lexical.TERM_CACHE_FROM
    lexical.TERM_CACHE_FROM = 1  # every list kept, so each long one is binary-searched
    try:
        for _ in range(2):  # sorted at the first call, reused at the second
            np.testing.assert_array_equal(searched.term_impacts(terms, asked), expected)
    finally:
        lexical.TERM_CACHE_FROM = old
    kept = list(searched._term_cache.values())
    assert all(bool(np.all(np.diff(o) > 0)) for o, _ in kept)  # each kept list sorted by ordinal


def test_top_scored_breaks_ties_at_the_kth_by_lower_id():
    ids = np.arange(100, dtype=np.int64)[::-1].copy()
    scores = np.r_[np.full(99, 1.0), 2.0]
    got_ids, got = top_scored(ids, scores, 4)
    assert got_ids.tolist() == [0, 1, 2, 3] and got.tolist() == [2.0, 1.0, 1.0, 1.0]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3000), k=st.integers(1, 40), levels=st.integers(1, 50), seed=st.integers(0, 2**16))
def test_top_scored_is_the_head_of_the_sorted_list(n, k, levels, seed):
    """Many ties (few distinct scores) and long inputs (the sampled floor): always the first k of the list sorted by
    score descending, then id."""
    rng = np.random.default_rng(seed)
    ids = rng.permutation(10 * n)[:n].astype(np.int64)
    scores = rng.integers(0, levels, n).astype(np.float64) / 7.0
    order = np.lexsort((ids, -scores))[:k]
    got_ids, got = top_scored(ids, scores, k)
    assert got_ids.tolist() == ids[order].tolist() and got.tolist() == scores[order].tolist()


def test_threads_sum_in_their_own_scratch():
    """The native sums run without the GIL: each thread's scratch is its own, so concurrent queries give the
    sequential answers."""
    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in range(40)]
    texts = [" ".join(rng.choice(words, 10)) for _ in range(500)]
    ids = np.arange(500, dtype=np.int64) * 3 + 2
    lex = LexicalIndex(lexical_arrays(ids, texts))
    lex.bind_passages(ids)
    queries = [" ".join(rng.choice(words, 4)) for _ in range(40)]
    want = [lex.scores(q) for q in queries]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lex.scores, queries * 5))
    for (a_ids, a), (b_ids, b) in zip(want * 5, got):
        assert a_ids.tolist() == b_ids.tolist() and a.tolist() == b.tolist()


def test_a_querys_postings_score_passage_ordinals_and_map_ids_both_ways():
    """A query's BM25 is keyed by passage ordinal (no node id read back per touched passage); its ids map to
    ordinals (-1 for a node that is no bound passage, with or without the index's ordinal map) and back."""
    from noderag.search.lexical import QueryPostings

    ids = np.array([2, 5, 9, 14])
    idx = LexicalIndex(lexical_arrays(ids, ["red apple", "green apple", "red car", "blue sky"]))
    idx.bind_passages(ids)
    postings = idx.query_postings(["apple", "red"])
    ords, sums = postings.scores()
    assert ords.tolist() == [0, 1, 2] and postings.ids(ords).tolist() == [2, 5, 9]
    want_ids, want = idx.term_scores({"apple", "red"})
    assert want_ids.tolist() == [2, 5, 9] and sums.tobytes() == want.tobytes()
    asked = np.array([9, 3, 2, -4, 14, 99])
    for p in (postings, QueryPostings(postings.terms, np.arange(2), [(np.zeros(0, np.int32), np.zeros(0, np.float32))] * 2,
                                      idx._passages)):  # the index's map, and a binary search without one
        assert p.ordinals(asked).tolist() == [2, -1, 0, -1, 3, -1]
