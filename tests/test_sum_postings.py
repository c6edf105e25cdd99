"""The native BM25 posting sums (noderag._core.sum_postings through its checked wrapper)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderag.search.lexical import sum_postings


def _scratch(n_pass: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(n_pass), np.zeros((n_pass + 63) // 64, np.uint64)


@settings(max_examples=150, deadline=None)
@given(n_pass=st.integers(1, 300), data=st.data(), wdtype=st.sampled_from([np.float32, np.float64]),
       with_ids=st.booleans())
def test_sums_equal_unique_and_bincount(n_pass, data, wdtype, with_ids):
    m = data.draw(st.integers(0, 400))
    ords = np.asarray(data.draw(st.lists(st.integers(0, n_pass - 1), min_size=m, max_size=m)), np.int32)
    weights = np.asarray(data.draw(st.lists(st.floats(0.0, 30.0, width=32), min_size=m, max_size=m)), wdtype)
    acc, marks = _scratch(n_pass)
    ids = np.arange(n_pass, dtype=np.int64) * 7 + 3
    for _ in range(2):  # the scratch is left zeroed: a second call gives the same
        got_ids, got = sum_postings(ords, weights, acc, marks, ids if with_ids else None)
        uniq, inv = np.unique(ords, return_inverse=True)
        want = np.bincount(inv.ravel(), weights=weights.astype(np.float64), minlength=uniq.size)
        assert got_ids.dtype == np.int64 and got.dtype == np.float64
        assert got_ids.tolist() == (ids[uniq] if with_ids else uniq).tolist()
        assert got.tolist() == want.tolist()  # the same float64 sums: postings added in the given order
        assert not acc.any() and not marks.any()


def test_sums_follow_the_order_of_addition():
    """Float addition is not associative: the kernel adds in posting order, as np.add.at does."""
    weights = np.array([1e16, 1.0, -1e16, 1.0])
    acc, marks = _scratch(1)
    ref = np.zeros(1)
    np.add.at(ref, np.zeros(4, np.intp), weights)
    _, got = sum_postings(np.zeros(4, np.int32), weights, acc, marks)
    assert got.tolist() == ref.tolist() == [1.0]


def test_empty_postings_and_a_passage_at_the_last_bit():
    acc, marks = _scratch(64)
    ids, scores = sum_postings(np.zeros(0, np.int32), np.zeros(0, np.float32), acc, marks)
    assert ids.size == 0 and scores.size == 0
    ids, scores = sum_postings(np.array([63, 0, 63], np.int32), np.array([1.0, 2.0, 0.5]), acc, marks)
    assert ids.tolist() == [0, 63] and scores.tolist() == [2.0, 1.5]
    assert not acc.any() and not marks.any()


@pytest.mark.parametrize("bad", [10, -1, 2**31 - 1])
def test_an_ordinal_outside_the_scratch_is_a_value_error_and_writes_nothing(bad):
    acc, marks = _scratch(10)
    with pytest.raises(ValueError, match=rf"posting 1 names passage ordinal {bad}, outside \[0, 10\)"):
        sum_postings(np.array([2, bad, 3], np.int32), np.ones(3), acc, marks)
    assert not acc.any() and not marks.any()


def test_mismatched_shapes_are_value_errors():
    acc, marks = _scratch(100)
    with pytest.raises(ValueError, match="2 ordinals but 3 weights"):
        sum_postings(np.zeros(2, np.int32), np.ones(3), acc, marks)
    with pytest.raises(ValueError, match="the bitset needs 2 words for 100 passages, got 1"):
        sum_postings(np.zeros(2, np.int32), np.ones(2), acc, marks[:1])
    with pytest.raises(ValueError, match="5 ids for 100 passages"):
        sum_postings(np.zeros(2, np.int32), np.ones(2), acc, marks, np.arange(5))


@pytest.mark.parametrize(("args", "message"), [
    ((np.zeros(2, np.int64), np.ones(2), "acc", "marks"), "ords must be a C-contiguous int32 array, got int64"),
    ((np.zeros(2, np.int32), np.ones(2, np.float16), "acc", "marks"),
     "weights must be a C-contiguous float32 or float64 array, got float16"),
    ((np.zeros(2, np.int32), [1.0, 2.0], "acc", "marks"),
     "weights must be a C-contiguous float32 or float64 array, got list"),
    ((np.zeros(2, np.int32), np.ones(2), np.zeros(64, np.float32), "marks"),
     "acc must be a C-contiguous float64 array, got float32"),
    ((np.zeros(2, np.int32), np.ones(2), "acc", np.zeros(1, np.int64)),
     "marks must be a C-contiguous uint64 array, got int64"),
    ((np.zeros(4, np.int32)[::2], np.ones(2), "acc", "marks"),
     "ords must be a C-contiguous int32 array, got a strided int32"),
])
def test_a_wrong_array_is_a_type_error_naming_it(args, message):
    acc, marks = _scratch(64)
    args = tuple({"acc": acc, "marks": marks}[a] if isinstance(a, str) else a for a in args)
    with pytest.raises(TypeError, match=message):
        sum_postings(*args)


def test_ids_of_another_dtype_are_a_type_error():
    acc, marks = _scratch(64)
    with pytest.raises(TypeError, match="ids must be a C-contiguous int64 array, got int32"):
        sum_postings(np.zeros(1, np.int32), np.ones(1), acc, marks, np.arange(64, dtype=np.int32))


# -- runs ascending by passage, summed block by block (sum_runs), and read for a few passages (run_impacts)

def _runs(data, n_pass: int, wdtype) -> list[tuple[np.ndarray, np.ndarray]]:
    """A few runs, each a sorted set of ordinals with weights (a term's postings sorted by passage)."""
    out = []
    for _ in range(data.draw(st.integers(0, 6))):
        ords = sorted(set(data.draw(st.lists(st.integers(0, n_pass - 1), max_size=200))))
        weights = data.draw(st.lists(st.floats(0.0, 30.0, width=32), min_size=len(ords), max_size=len(ords)))
        out.append((np.asarray(ords, np.int32), np.asarray(weights, wdtype)))
    return out


def _concat(runs, wdtype):
    bounds = np.zeros(len(runs) + 1, np.int64)
    np.cumsum([o.size for o, _ in runs], out=bounds[1:])
    ords = np.concatenate([o for o, _ in runs]) if runs else np.zeros(0, np.int32)
    weights = np.concatenate([w for _, w in runs]) if runs else np.zeros(0, wdtype)
    return ords, weights.astype(wdtype), bounds


@settings(max_examples=150, deadline=None)
@given(n_pass=st.sampled_from([1, 70, 8191, 8192, 8193, 30000]), data=st.data(),
       wdtype=st.sampled_from([np.float32, np.float64]))
def test_runs_sum_as_the_scratch_kernel(n_pass, data, wdtype):
    """The block sweep gives the scratch kernel's ids and bit-identical sums (runs added in order), across block
    edges (a block is 8,192 ordinals)."""
    from noderag.search.lexical import sum_runs

    ords, weights, bounds = _concat(_runs(data, n_pass, wdtype), wdtype)
    ids = np.arange(n_pass, dtype=np.int64) * 3 + 1
    acc, marks = _scratch(n_pass)
    want_ids, want = sum_postings(ords, weights, acc, marks, ids)
    got_ids, got = sum_runs(ords, weights, bounds, ids)
    assert got_ids.tolist() == want_ids.tolist()
    assert got.tobytes() == want.tobytes()


def test_runs_add_in_run_order():
    from noderag.search.lexical import sum_runs

    ords = np.zeros(4, np.int32)
    weights = np.array([1e16, 1.0, -1e16, 1.0])
    _, got = sum_runs(ords, weights, np.arange(5, dtype=np.int64), np.arange(1, dtype=np.int64))
    assert got.tolist() == [1.0]


@pytest.mark.parametrize(("ords", "bounds", "message"), [
    ([5, 3, 9000, 2], [0, 2, 4], r"posting 1 names passage ordinal 3, outside \[0, 10000\) or below an earlier one"),
    ([5, 9000, 4], [0, 3], r"posting 2 names passage ordinal 4, outside \[0, 10000\) or below an earlier one"),
    ([1, 10000], [0, 2], r"posting 1 names passage ordinal 10000, outside \[0, 10000\)"),
    ([-1, 4], [0, 2], r"posting 0 names passage ordinal -1"),
])
def test_runs_out_of_order_or_range_are_value_errors(ords, bounds, message):
    from noderag.search.lexical import sum_runs

    with pytest.raises(ValueError, match=message):
        sum_runs(np.asarray(ords, np.int32), np.ones(len(ords)), np.asarray(bounds, np.int64),
                 np.arange(10000, dtype=np.int64))


def test_run_bounds_outside_the_postings_are_value_errors():
    from noderag.search.lexical import sum_runs

    with pytest.raises(ValueError, match=r"bounds must ascend within \[0, 2\], run 0 is \[0, 3\)"):
        sum_runs(np.zeros(2, np.int32), np.ones(2), np.array([0, 3], np.int64), np.arange(4, dtype=np.int64))


@settings(max_examples=100, deadline=None)
@given(n_pass=st.integers(1, 500), data=st.data(), wdtype=st.sampled_from([np.float32, np.float64]))
def test_run_impacts_equal_a_dict_lookup(n_pass, data, wdtype):
    from noderag._core import run_impacts

    runs = _runs(data, n_pass, wdtype)
    ords, weights, bounds = _concat(runs, wdtype)
    targets = np.asarray(data.draw(st.lists(st.integers(-2, n_pass + 2), max_size=30)), np.int32)
    got = run_impacts(ords, weights, bounds[:-1].copy(), bounds[1:].copy(), targets)
    want = [[float(dict(zip(o.tolist(), w.tolist())).get(t, 0.0)) for t in targets.tolist()] for o, w in runs]
    assert got.shape == (len(runs), targets.size)
    assert got.tolist() == (want if runs else np.zeros((0, targets.size)).tolist())
