"""The PPR wrapper rejects bad input with a ValueError naming the argument, and never crashes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from noderag import _core
from noderag.graph.csr import CSR, csr_from_coo
from noderag.graph.ppr import PPROperator, PPRResult, shallow_ppr, shallow_ppr_batch


@pytest.fixture(scope="module")
def graph():
    csr = csr_from_coo(6, [0, 1, 2, 3], [1, 2, 3, 4])
    return csr, np.array([0, 1, 2, 3, 4, 5], np.uint8)


def bad_csr(**kw):
    base = dict(indptr=np.array([0, 1, 2], np.int64), indices=np.array([1, 0], np.int32),
                weights=np.ones(2, np.float32))
    base.update(kw)
    return CSR(**base)


@pytest.mark.parametrize("kwargs, match", [
    (dict(seeds=[0.5]), "seeds must be integer"),
    (dict(seeds=[[0, 1]]), "seeds must be 1-D"),
    (dict(seeds=[]), "seeds must be non-empty"),
    (dict(seeds=[6]), r"seeds must lie in \[0, 6\), found 6"),
    (dict(seeds=[-1]), "seeds must lie in .* found -1"),
    (dict(seeds=[True]), "seeds must be integer"),
    (dict(seed_weights=[1.0, 2.0]), "seed_weights must have shape"),
    (dict(seed_weights=[0.0]), "seed_weights must not all be zero"),
    (dict(seed_weights=[-1.0]), "seed_weights must be finite and >= 0"),
    (dict(seed_weights=[np.nan]), "seed_weights must be finite"),
    (dict(seed_weights=["a"]), "seed_weights must be real numbers"),
    (dict(seed_weights=[1e300]), "seed_weights must fit in float32"),
    (dict(alpha=1.5), r"alpha must be a real number in \[0, 1\], got 1.5"),
    (dict(alpha=float("nan")), "alpha"),
    (dict(alpha="0.5"), "alpha"),
    (dict(iterations=-1), "iterations must be an int >= 0, got -1"),
    (dict(iterations=2.0), "iterations"),
    (dict(rule="pagerank"), "rule must be one of .* got 'pagerank'"),
    (dict(epsilon=-0.1), "epsilon"),
    (dict(epsilon=float("inf")), "epsilon"),
    (dict(k_per_type=-1), "k_per_type must be >= 0, got -1"),
    (dict(k_per_type=[1, 2, 3]), "k_per_type must be an int or a length-7"),
    (dict(k_per_type=2.5), "k_per_type"),
    (dict(k_per_type=[1, 1, 1, 1, 1, 1, -2]), "k_per_type must be >= 0"),
    (dict(n_threads=0), "n_threads"),
    (dict(node_types=[0, 1, 2]), r"node_types must have shape \(6,\)"),
    (dict(node_types=[0, 1, 2, 3, 4, 7]), r"node_types must lie in \[0, 7\), found 7"),
    # uint8 codes: left to the compiled kernel's check at open, still named by the numpy check it falls back to
    (dict(node_types=np.array([0, 1, 2, 3, 4, 7], np.uint8)), r"node_types must lie in \[0, 7\), found 7"),
    (dict(node_types=np.zeros(6, np.float32)), "node_types must be integer"),
    (dict(node_types=None), "node_types is required"),
])
def test_bad_arguments_raise_value_error(graph, kwargs, match):
    csr, types = graph
    args = dict(seeds=[0], seed_weights=None, node_types=types, k_per_type=3)
    args.update(kwargs)
    seeds = args.pop("seeds")
    weights = args.pop("seed_weights")
    with pytest.raises(ValueError, match=match):
        shallow_ppr(csr, seeds, weights, **args)


@pytest.mark.parametrize("csr, match", [
    (bad_csr(indptr=np.array([0, 2, 1], np.int64)), "indptr"),
    (bad_csr(indptr=np.array([1, 1, 2], np.int64)), r"indptr\[0\] must be 0"),
    # a damaged middle offset past the edge arrays, in the kernel's own dtypes (no numpy pass runs first)
    (bad_csr(indptr=np.array([0, 2**40, 2], np.int64)), "indptr"),
    (bad_csr(indices=np.array([1, 5], np.int32)), r"indices must lie in \[0, 2\), found 5"),
    (bad_csr(indices=np.array([1.0, 0.0])), "indices must be integer"),
    (bad_csr(weights=np.array([1.0, -1.0], np.float32)), "weights must be non-negative"),
    (bad_csr(weights=np.array([1.0, np.inf], np.float32)), "weights must be finite"),
    (bad_csr(weights=np.ones(3, np.float32)), "weights must have shape"),
    (bad_csr(indptr=np.array([[0, 1, 2]], np.int64)), "indptr must be 1-D"),
])
def test_non_csr_input_rejected(csr, match):
    with pytest.raises(ValueError, match=match):
        shallow_ppr(csr, [0], node_types=[0, 0], k_per_type=1)


@pytest.mark.parametrize("seeds, weights, match", [
    (np.array([0, 6], np.int64), None, r"seeds must lie in \[0, 6\), found 6"),
    (np.array([-2], np.int32), None, "seeds must lie in .* found -2"),
    (np.array([2**40], np.int64), None, "seeds must lie in .* found 1099511627776"),
    (np.array([0, 1], np.int32), np.array([1.0, -1.0]), "seed_weights must be finite"),
    (np.array([0, 1], np.int32), np.array([1.0, np.nan], np.float32), "seed_weights must be finite"),
    (np.array([0, 1], np.int32), np.array([1.0, 1e300]), "seed_weights must be finite float32"),
    (np.array([0, 1], np.int32), np.zeros(2, np.float32), "seed_weights must not all be zero"),
    (np.array([0, 1], np.int32), np.ones(3, np.float32), "seed_weights must"),
])
def test_native_fast_path_rejects_bad_values(graph, seeds, weights, match):
    csr, types = graph
    op = PPROperator(csr, types)
    with pytest.raises(ValueError, match=match):
        op.query(seeds, weights, k_per_type=2)


def test_any_array_layout_gives_the_same_result(graph):
    csr, types = graph
    op = PPROperator(csr, types)
    base = op.query(np.array([0, 2, 2], np.int32), np.array([1.0, 2.0, 0.5], np.float32), k_per_type=3)
    variants = [
        (np.array([0, 2, 2], np.int64), np.array([1.0, 2.0, 0.5])),
        (np.array([0, 2, 2], ">i4"), np.array([1.0, 2.0, 0.5], ">f8")),
        (np.array([0, 9, 2, 9, 2, 9], np.int64)[::2], np.array([1.0, 0, 2.0, 0, 0.5, 0])[::2]),
        ([0, 2, 2], [2, 4, 1]),
    ]
    for seeds, weights in variants:
        res = op.query(seeds, weights, k_per_type=3)
        np.testing.assert_array_equal(res.ids, base.ids)
        np.testing.assert_allclose(res.scores, base.scores, rtol=1e-6)


def test_non_csr_object_rejected():
    with pytest.raises(ValueError, match="csr must be a noderag.graph.csr.CSR"):
        shallow_ppr((np.array([0, 0]), np.zeros(0), np.zeros(0)), [0], node_types=[0], k_per_type=1)


def test_batch_errors_name_the_query(graph):
    csr, types = graph
    with pytest.raises(ValueError, match="query 1: seeds must lie in"):
        shallow_ppr_batch(csr, [[0], [9]], node_types=types, k_per_type=1)
    with pytest.raises(ValueError, match="query 0: seed_weights must not all be zero"):
        shallow_ppr_batch(csr, [[0]], [[0.0]], node_types=types, k_per_type=1)
    # Well-formed arrays take the vectorised path; a bad value still names its query.
    arrays = [np.array([0, 1], np.int64), np.array([2], np.int64), np.array([3, 9], np.int64)]
    with pytest.raises(ValueError, match="query 2: seeds must lie in"):
        shallow_ppr_batch(csr, arrays, node_types=types, k_per_type=1)
    weights = [np.ones(2), np.zeros(1), np.ones(2)]
    with pytest.raises(ValueError, match="query 1: seed_weights must not all be zero"):
        shallow_ppr_batch(csr, arrays[:2] + [np.array([3, 4])], weights, node_types=types, k_per_type=1)
    fast = shallow_ppr_batch(csr, arrays[:2], [np.ones(2), np.full(1, 2.0)], node_types=types, k_per_type=2)
    slow = shallow_ppr_batch(csr, [[0, 1], [2]], [[1, 1], [2]], node_types=types, k_per_type=2)
    for f, g in zip(fast, slow):
        np.testing.assert_array_equal(f.ids, g.ids)
        np.testing.assert_array_equal(f.scores, g.scores)
    with pytest.raises(ValueError, match="weight_lists must be None or a sequence of 2"):
        shallow_ppr_batch(csr, [[0], [1]], [[1.0]], node_types=types, k_per_type=1)
    with pytest.raises(ValueError, match="seed_lists must be a sequence"):
        shallow_ppr_batch(csr, 5, node_types=types, k_per_type=1)
    assert shallow_ppr_batch(csr, [], node_types=types, k_per_type=1) == []


def test_operator_node_types_conflict(graph):
    csr, types = graph
    op = PPROperator(csr, types)
    with pytest.raises(ValueError, match="node_types differs"):
        shallow_ppr(op, [0], node_types=np.zeros(6, np.uint8), k_per_type=1)


def test_native_guards_throw_instead_of_reading_out_of_bounds(graph):
    """The private binding refuses wrong dtypes (no implicit casts) and out-of-range values."""
    csr, types = graph
    kern = _core.PPRKernel(csr.indptr, csr.indices, csr.weights, types)
    with pytest.raises(TypeError):
        _core.PPRKernel(csr.indptr.astype(np.int16), csr.indices, csr.weights, types)
    with pytest.raises(TypeError):
        _core.PPRKernel(csr.indptr, csr.indices.astype(np.int64), csr.weights, types)
    with pytest.raises(ValueError, match="indices must lie"):
        _core.PPRKernel(csr.indptr, np.full_like(csr.indices, 99), csr.weights, types)
    with pytest.raises(ValueError, match="indptr"):
        _core.PPRKernel(np.array([0, 5], np.int64), np.zeros(1, np.int32), np.ones(1, np.float32),
                        np.zeros(1, np.uint8))

    def run(seeds, offsets, k=np.ones(7, np.int64), q=1, push=0.0):
        kern.run(np.asarray(seeds, np.int32), np.ones(len(seeds), np.float32), np.asarray(offsets, np.int64), k,
                 0.5, 2, True, 0.0, push, 1, np.empty((q, 7, 1), np.int32), np.empty((q, 7, 1), np.float32),
                 np.empty(q), np.empty(q, np.int64))

    run([0], [0, 1])
    with pytest.raises(ValueError, match="seed ids"):
        run([6], [0, 1])
    with pytest.raises(ValueError, match="offsets"):
        run([0], [0, 5])
    with pytest.raises(ValueError, match="out_ids"):
        run([0], [0, 1], k=np.full(7, 2, np.int64))
    with pytest.raises(ValueError, match="push_epsilon must be finite"):
        run([0], [0, 1], push=float("nan"))


dtypes = st.sampled_from([np.int8, np.int32, np.int64, np.uint64, np.float32, np.float64, np.bool_, "U1", object])


@st.composite
def arrays(draw, max_len=8):
    shape = draw(st.sampled_from([(), (0,), (1,), (draw(st.integers(0, max_len)),), (2, 2)]))
    dt = draw(dtypes)
    size = int(np.prod(shape))
    vals = draw(st.lists(st.one_of(st.integers(-3, 9), st.just(2**40), st.floats(allow_nan=True)),
                         min_size=size, max_size=size))
    arr = np.array(vals, dtype=object).reshape(shape)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return arr.astype(dt)
    except (ValueError, TypeError, OverflowError):
        return np.array(vals[:0], dtype=np.int64)


scalars = st.one_of(st.none(), st.integers(-2, 10), st.floats(allow_nan=True), st.text(max_size=2),
                    st.booleans(), st.lists(st.integers(-1, 4), max_size=8))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(indptr=arrays(), indices=arrays(), weights=arrays(), types=st.one_of(arrays(), scalars),
       seeds=st.one_of(arrays(), scalars), sw=st.one_of(arrays(), scalars, st.none()),
       k=scalars, alpha=scalars, t=st.one_of(st.integers(-1, 4), scalars), rule=st.sampled_from(["restart", "lazy", "x"]),
       eps=scalars)
def test_fuzz_wrapper_only_raises_value_error(indptr, indices, weights, types, seeds, sw, k, alpha, t, rule, eps):
    csr = CSR(indptr, indices, weights)
    try:
        res = shallow_ppr(csr, seeds, sw, node_types=types, k_per_type=k, alpha=alpha, iterations=t, rule=rule,
                          epsilon=eps if eps is not None else 0.0)
    except ValueError:
        return
    assert isinstance(res, PPRResult)
    assert res.ids.shape[0] == 7 and res.ids.shape == res.scores.shape


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 10), data=st.data())
def test_fuzz_valid_graph_bad_queries(n, data):
    csr = csr_from_coo(n, np.arange(n - 1), np.arange(1, n))
    seeds = data.draw(st.one_of(arrays(), scalars))
    sw = data.draw(st.one_of(arrays(), scalars, st.none()))
    k = data.draw(st.one_of(st.integers(-1, 12), scalars))
    try:
        out = shallow_ppr_batch(csr, [seeds, [0]], [sw, None] if sw is not None else None,
                                node_types=np.zeros(n, np.uint8), k_per_type=k, n_threads=2)
    except ValueError:
        return
    assert len(out) == 2


def test_unchecked_edges_are_checked_as_rows_are_read():
    """check_edges=False: O(n) construction; a bad row raises ValueError naming it when a query reads it."""
    n = 6
    indptr = np.array([0, 2, 3, 4, 4, 4, 4], np.int64)
    indices = np.array([1, 2, 0, 99], np.int32)  # row 2 points outside the graph
    weights = np.ones(4, np.float32)
    csr = CSR(indptr, indices, weights)
    types = np.zeros(n, np.uint8)
    with pytest.raises(ValueError, match="indices"):
        PPROperator(csr, types)
    op = PPROperator(csr, types, check_edges=False)
    res = op.query([0], k_per_type=3, iterations=1, push_epsilon=1e-9)  # reads rows 0 only
    assert res.top(0)[0].tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match=r"indices must lie in \[0, n\) \(row 2\)"):
        op.query([0], k_per_type=3, iterations=2, push_epsilon=1e-9)  # the second step reads row 2
    bad_w = CSR(indptr, np.array([1, 2, 0, 1], np.int32), np.array([1, 1, -1, 1], np.float32))
    op = PPROperator(bad_w, types, check_edges=False)
    with pytest.raises(ValueError, match=r"weights must be finite and >= 0 \(row 1\)"):
        op.query([1], k_per_type=3, iterations=1, push_epsilon=1e-9)
    with pytest.raises(ValueError, match=r"weights must be finite and >= 0"):
        bool(op.mirrored)  # the grouped rows' pass checks every row
