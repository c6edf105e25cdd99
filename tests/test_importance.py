"""Tests for noderag.graph.importance against a networkx implementation of the reference rule."""

import math
import random

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderag.graph.betweenness import sample_pivots
from noderag.graph.csr import CSR, csr_from_coo
from noderag.graph.importance import ImportanceConfig, important_entities, resolve_thresholds
from noderag.graph.types import NodeType

from nx_reference import csr_to_nx


class _FixedSample(random.Random):
    def __init__(self, pivots):
        super().__init__(0)
        self._pivots = [int(p) for p in pivots]

    def sample(self, population, k, **kwargs):
        return list(self._pivots)


def _reference_rule(csr, types, mentions, pivots=10, seed=0):
    """The reference NodeRAG rule written with networkx (k-core + sampled betweenness)."""
    g = csr_to_nx(csr)
    n = g.number_of_nodes()
    mean_degree = 2 * g.number_of_edges() / n
    k = max(1, round(math.log(n) * math.sqrt(mean_degree)))
    core = set(nx.k_core(g, k).nodes())
    sample = None if pivots >= n else _FixedSample(sample_pivots(n, pivots, seed))
    bc = nx.betweenness_centrality(g, k=None if sample is None else pivots, seed=sample)
    mean = sum(bc.values()) / n
    factor = round(math.log10(n))
    central = core | {v for v, b in bc.items() if b > mean * factor}
    return sorted(v for v in central if types[v] == NodeType.N and mentions[v] >= 2)


def _typed_graph(seed, n, m):
    rng = np.random.default_rng(seed)
    csr = csr_from_coo(n, rng.integers(0, n, m), rng.integers(0, n, m))
    types = rng.integers(0, 4, n).astype(np.uint8)
    mentions = rng.integers(0, 4, n)
    return csr, types, mentions


@pytest.fixture(scope="module", autouse=True)
def _warm_jit():
    csr, types, mentions = _typed_graph(0, 10, 20)
    important_entities(csr, types, mentions)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 60), density=st.floats(0.0, 5.0), seed=st.integers(0, 2**31 - 1))
def test_equals_networkx_reference_rule(n, density, seed):
    csr, types, mentions = _typed_graph(seed, n, int(density * n))
    got = important_entities(csr, types, mentions)
    assert got.dtype == np.int32
    assert got.tolist() == _reference_rule(csr, types, mentions)


def test_hub_entities_are_selected():
    # star of 40 units around entity 0, plus a chain; entity 0 is the only betweenness hub
    n = 50
    src = np.concatenate([np.zeros(40, np.int64), np.arange(40, 49)])
    dst = np.concatenate([np.arange(1, 41), np.arange(41, 50)])
    csr = csr_from_coo(n, src, dst)
    types = np.full(n, NodeType.S, np.uint8)
    types[[0, 45]] = NodeType.N
    mentions = np.full(n, 5)
    got = important_entities(csr, types, mentions, ImportanceConfig(betweenness_pivots=n))
    assert 0 in got.tolist()
    mentions[0] = 1  # mentioned once: excluded
    assert 0 not in important_entities(csr, types, mentions, ImportanceConfig(betweenness_pivots=n)).tolist()


def test_explicit_thresholds():
    # 5-clique of entities (core 4) and a pendant entity (core 1)
    src = [0, 0, 0, 0, 1, 1, 1, 2, 2, 3, 4]
    dst = [1, 2, 3, 4, 2, 3, 4, 3, 4, 4, 5]
    csr = csr_from_coo(6, src, dst)
    types = np.full(6, NodeType.N, np.uint8)
    mentions = np.full(6, 3)
    cfg = ImportanceConfig(k_core=4, betweenness_factor=100)
    np.testing.assert_array_equal(important_entities(csr, types, mentions, cfg), [0, 1, 2, 3, 4])
    cfg = ImportanceConfig(k_core=5, betweenness_factor=100)
    np.testing.assert_array_equal(important_entities(csr, types, mentions, cfg), [])
    # node 4 is the only cut vertex: with a factor of 1 it passes on betweenness alone
    cfg = ImportanceConfig(k_core=5, betweenness_factor=1, betweenness_pivots=6)
    np.testing.assert_array_equal(important_entities(csr, types, mentions, cfg), [4])


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_tiny_and_edgeless_graphs(n):
    types = np.full(n, NodeType.N, np.uint8)
    mentions = np.full(n, 5)
    got = important_entities(CSR.empty(n), types, mentions)
    assert got.dtype == np.int32 and got.shape == (0,)


def test_two_node_graph_is_core():
    csr = csr_from_coo(2, [0], [1])
    got = important_entities(csr, np.array([NodeType.N, NodeType.N], np.uint8), np.array([2, 1]))
    np.testing.assert_array_equal(got, [0])  # k = max(1, round(ln 2 * 1)) = 1; node 1 mentioned once


def test_resolve_thresholds():
    assert resolve_thresholds(0, 0) == (1, 0)
    assert resolve_thresholds(1, 0) == (1, 0)
    assert resolve_thresholds(1000, 4000) == (round(math.log(1000) * 2), 3)
    assert resolve_thresholds(1000, 4000, ImportanceConfig(k_core=7, betweenness_factor=2)) == (7, 2)


def test_rejects_bad_input():
    csr = csr_from_coo(3, [0, 1], [1, 2])
    with pytest.raises(ValueError, match="node_types"):
        important_entities(csr, np.zeros(2, np.uint8), np.zeros(3))
    with pytest.raises(ValueError, match="mention_counts"):
        important_entities(csr, np.zeros(3, np.uint8), np.zeros(4))
    with pytest.raises(ValueError, match="k_core"):
        ImportanceConfig(k_core=-1)
    with pytest.raises(ValueError, match="betweenness_pivots"):
        ImportanceConfig(betweenness_pivots=0)
    with pytest.raises(TypeError, match="config"):
        important_entities(csr, np.zeros(3, np.uint8), np.zeros(3), config={"k_core": 1})


def test_nodes_restricts_to_induced_subgraph():
    csr, types, mentions = _typed_graph(21, 80, 240)
    nodes = np.flatnonzero(types != NodeType.T)
    # the same rule on the relabelled induced subgraph, mapped back to original ids
    sub_src, sub_dst = [], []
    pos = {int(v): i for i, v in enumerate(nodes)}
    rows = np.repeat(np.arange(csr.n), csr.degree())
    for u, v in zip(rows.tolist(), csr.indices.tolist()):
        if u < v and u in pos and v in pos:
            sub_src.append(pos[u])
            sub_dst.append(pos[v])
    sub = csr_from_coo(nodes.size, sub_src, sub_dst)
    want = nodes[np.asarray(_reference_rule(sub, types[nodes], mentions[nodes]), dtype=np.int64)]
    got = important_entities(csr, types, mentions, nodes=nodes[::-1])
    np.testing.assert_array_equal(got, want)
    assert important_entities(csr, types, mentions, nodes=[]).shape == (0,)
    with pytest.raises(ValueError, match="nodes"):
        important_entities(csr, types, mentions, nodes=[0, 500])
