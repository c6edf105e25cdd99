"""Tests for noderag.graph.betweenness against networkx betweenness_centrality."""

import random

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderag.graph.betweenness import betweenness, sample_pivots
from noderag.graph.csr import CSR, csr_from_coo

from nx_reference import csr_to_nx


def _nx_array(d: dict, n: int) -> np.ndarray:
    return np.array([d[v] for v in range(n)], dtype=np.float64)


def _random_csr(seed: int, n: int, m: int, integer_weights: bool = True) -> CSR:
    rng = np.random.default_rng(seed)
    if n == 0:
        return CSR.empty(0)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    # distinct pairs only, so weights are not summed into unexpected values
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    pairs = np.unique(lo * n + hi)
    lo, hi = pairs // n, pairs % n
    w = rng.integers(1, 4, lo.shape[0]).astype(np.float32) if integer_weights else rng.uniform(0.1, 2.0, lo.shape[0])
    return csr_from_coo(n, lo, hi, w)


class _FixedSample(random.Random):
    """A random.Random whose ``sample`` returns a given pivot list (to feed networkx our pivots)."""

    def __init__(self, pivots):
        super().__init__(0)
        self._pivots = [int(p) for p in pivots]

    def sample(self, population, k, **kwargs):
        if k != len(self._pivots):
            raise ValueError("unexpected k")
        return list(self._pivots)


@pytest.fixture(scope="module", autouse=True)
def _warm_jit():
    csr = csr_from_coo(4, [0, 1, 2], [1, 2, 3])
    for weighted in (False, True):
        betweenness(csr, weighted=weighted)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 30), density=st.floats(0.0, 3.0), seed=st.integers(0, 2**31 - 1),
       weighted=st.booleans(), normalized=st.booleans(), n_threads=st.integers(1, 3))
def test_exact_equals_networkx(n, density, seed, weighted, normalized, n_threads):
    csr = _random_csr(seed, n, int(density * n))
    got = betweenness(csr, k=n if n else None, weighted=weighted, normalized=normalized, n_threads=n_threads)
    assert got.dtype == np.float64 and got.shape == (n,)
    want = nx.betweenness_centrality(csr_to_nx(csr), normalized=normalized, weight="weight" if weighted else None)
    np.testing.assert_allclose(got, _nx_array(want, n), rtol=1e-12, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(3, 30), frac=st.floats(0.05, 0.99), seed=st.integers(0, 2**31 - 1),
       weighted=st.booleans(), normalized=st.booleans())
def test_sampled_equals_networkx_with_same_pivots(n, frac, seed, weighted, normalized):
    csr = _random_csr(seed, n, 2 * n)
    k = max(1, min(n - 1, int(frac * n)))
    pivots = sample_pivots(n, k, seed)
    got = betweenness(csr, k=k, seed=seed, weighted=weighted, normalized=normalized)
    want = nx.betweenness_centrality(csr_to_nx(csr), k=k, normalized=normalized,
                                     weight="weight" if weighted else None, seed=_FixedSample(pivots))
    want = np.nan_to_num(_nx_array(want, n), nan=0.0)  # networkx gives NaN at the pivot when k == 1
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_non_integer_weights_close_to_networkx():
    csr = _random_csr(3, 60, 200, integer_weights=False)
    want = _nx_array(nx.betweenness_centrality(csr_to_nx(csr), weight="weight"), 60)
    np.testing.assert_allclose(betweenness(csr, weighted=True), want, rtol=1e-9, atol=1e-12)


def test_disconnected_and_path_values():
    # path 0-1-2-3-4 plus a separate edge 5-6 and an isolated node 7
    csr = csr_from_coo(8, [0, 1, 2, 3, 5], [1, 2, 3, 4, 6])
    got = betweenness(csr, normalized=False)
    np.testing.assert_allclose(got, [0, 3, 4, 3, 0, 0, 0, 0])
    want = nx.betweenness_centrality(csr_to_nx(csr))
    np.testing.assert_allclose(betweenness(csr), _nx_array(want, 8), rtol=1e-12)


@pytest.mark.parametrize("n", [0, 1, 2])
def test_tiny_graphs(n):
    csr = csr_from_coo(n, [0] if n == 2 else [], [1] if n == 2 else [])
    for weighted in (False, True):
        got = betweenness(csr, weighted=weighted)
        np.testing.assert_array_equal(got, np.zeros(n))


def test_seeded_sampling_is_deterministic_and_seed_sensitive():
    csr = _random_csr(11, 200, 600)
    a = betweenness(csr, k=20, seed=5)
    b = betweenness(csr, k=20, seed=5)
    c = betweenness(csr, k=20, seed=6)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_thread_count_does_not_change_result():
    csr = _random_csr(12, 300, 900)
    one = betweenness(csr, k=50, n_threads=1)
    many = betweenness(csr, k=50, n_threads=4)
    np.testing.assert_allclose(one, many, rtol=1e-12, atol=1e-15)


def test_rejects_bad_arguments():
    csr = csr_from_coo(4, [0, 1], [1, 2])
    with pytest.raises(ValueError, match="k must"):
        betweenness(csr, k=0)
    with pytest.raises(ValueError, match="n_threads"):
        betweenness(csr, n_threads=0)
    with pytest.raises(TypeError, match="csr"):
        betweenness([[0, 1], [1, 0]])
    zero = csr_from_coo(3, [0, 1], [1, 2], [1.0, 0.0])
    with pytest.raises(ValueError, match="positive"):
        betweenness(zero, weighted=True)
    np.testing.assert_allclose(betweenness(zero), [0.0, 1.0, 0.0])


@pytest.mark.parametrize("weighted", [False, True])
def test_locality_relabel_path_equals_networkx(monkeypatch, weighted):
    import noderag.graph.betweenness as module

    monkeypatch.setattr(module, "_RELABEL_MIN_NODES", 0)
    for seed in range(4):
        csr = _random_csr(100 + seed, 40, 45)  # sparse: several components
        got = betweenness(csr, weighted=weighted)
        want = nx.betweenness_centrality(csr_to_nx(csr), weight="weight" if weighted else None)
        np.testing.assert_allclose(got, _nx_array(want, 40), rtol=1e-12, atol=1e-12)
        pivots = sample_pivots(40, 7, seed)
        got = betweenness(csr, k=7, seed=seed, weighted=weighted)
        want = nx.betweenness_centrality(csr_to_nx(csr), k=7, weight="weight" if weighted else None,
                                         seed=_FixedSample(pivots))
        np.testing.assert_allclose(got, _nx_array(want, 40), rtol=1e-12, atol=1e-12)
