"""Tests for noderag.graph.kcore.core_numbers against networkx."""

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderag.graph.csr import CSR, csr_from_coo
from noderag.graph.kcore import core_numbers

from nx_reference import csr_to_nx


def _random_csr(rng: np.random.Generator, n: int, m: int) -> CSR:
    if n == 0:
        return CSR.empty(0)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    return csr_from_coo(n, src, dst)


@pytest.fixture(scope="module", autouse=True)
def _warm_jit():
    core_numbers(csr_from_coo(3, [0, 1], [1, 2]))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 40), density=st.floats(0.0, 4.0), seed=st.integers(0, 2**31 - 1))
def test_equals_networkx_on_random_graphs(n, density, seed):
    rng = np.random.default_rng(seed)
    csr = _random_csr(rng, n, int(density * n))
    got = core_numbers(csr)
    assert got.dtype == np.int32 and got.shape == (n,)
    want = nx.core_number(csr_to_nx(csr))
    np.testing.assert_array_equal(got, np.array([want[v] for v in range(n)], dtype=np.int32))


def test_hub_heavy_graph_equals_networkx():
    rng = np.random.default_rng(7)
    n = 600
    # preferential-attachment-like: a few hubs with very high degree plus a dense clique
    src = np.concatenate([rng.integers(0, n, 2000), np.zeros(300, np.int64), np.repeat(np.arange(10), 10)])
    dst = np.concatenate([rng.integers(0, n, 2000), rng.integers(1, n, 300), np.tile(np.arange(10), 10)])
    csr = csr_from_coo(n, src, dst)
    want = nx.core_number(csr_to_nx(csr))
    np.testing.assert_array_equal(core_numbers(csr), [want[v] for v in range(n)])


def test_known_values():
    # a 4-clique (core 3) with a pendant path 3-4-5 (core 1) and an isolated node 6
    src = [0, 0, 0, 1, 1, 2, 3, 4]
    dst = [1, 2, 3, 2, 3, 3, 4, 5]
    csr = csr_from_coo(7, src, dst)
    np.testing.assert_array_equal(core_numbers(csr), [3, 3, 3, 3, 1, 1, 0])


def test_empty_and_edgeless():
    assert core_numbers(CSR.empty(0)).shape == (0,)
    np.testing.assert_array_equal(core_numbers(CSR.empty(5)), np.zeros(5, np.int32))


def test_rejects_non_csr():
    with pytest.raises(TypeError, match="csr"):
        core_numbers(np.zeros((3, 3)))
    bad = CSR(np.array([0, 1, 2], np.int64), np.array([1, 5], np.int32), np.ones(2, np.float32))
    with pytest.raises(ValueError, match="indices"):
        core_numbers(bad)
