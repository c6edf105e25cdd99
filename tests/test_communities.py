"""Tests for noderag.graph.communities.leiden."""

import igraph as ig
import leidenalg
import numpy as np
import pytest

from noderag.graph.communities import leiden
from noderag.graph.csr import CSR, csr_from_coo


def _planted(seed=0, groups=4, size=30, p_in=0.3, p_out=0.01):
    rng = np.random.default_rng(seed)
    n = groups * size
    truth = np.repeat(np.arange(groups), size)
    iu, ju = np.triu_indices(n, 1)
    p = np.where(truth[iu] == truth[ju], p_in, p_out)
    keep = rng.random(iu.shape[0]) < p
    w = rng.uniform(0.5, 2.0, int(keep.sum()))
    return csr_from_coo(n, iu[keep], ju[keep], w), truth


def _same_partition(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.array_equal(a[:, None] == a[None, :], b[:, None] == b[None, :])


def _igraph_loop(csr: CSR) -> ig.Graph:
    """An igraph graph built edge by edge (independent of the vectorised builder)."""
    edges, weights = [], []
    for u in range(csr.n):
        for j in range(csr.indptr[u], csr.indptr[u + 1]):
            v = int(csr.indices[j])
            if u < v:
                edges.append((u, v))
                weights.append(float(csr.weights[j]))
    g = ig.Graph(n=csr.n, edges=edges)
    g.es["weight"] = weights
    return g


def test_recovers_planted_partition():
    csr, truth = _planted()
    got = leiden(csr, seed=1)
    assert got.dtype == np.int32 and got.shape == (csr.n,)
    assert _same_partition(got, truth)
    assert _same_partition(leiden(csr, objective="rb", resolution=1.0, seed=1), truth)


def test_deterministic_with_seed():
    csr, _ = _planted(seed=3, groups=6, size=20, p_in=0.15, p_out=0.03)
    for engine in ("igraph", "leidenalg"):
        for objective in ("modularity", "rb"):
            a = leiden(csr, objective=objective, seed=7, engine=engine)
            b = leiden(csr, objective=objective, seed=7, engine=engine)
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("objective,resolution", [("modularity", 1.0), ("rb", 0.5), ("rb", 2.0)])
def test_igraph_engine_agrees_with_igraph_called_directly(objective, resolution):
    import random

    csr, _ = _planted(seed=6, groups=5, size=25, p_in=0.2, p_out=0.04)
    g = _igraph_loop(csr)
    ig.set_random_number_generator(random.Random(11))
    try:
        ref = np.asarray(g.community_leiden(objective_function="modularity", weights="weight",
                                            resolution=resolution, n_iterations=-1).membership)
    finally:
        ig.set_random_number_generator(random)
    got = leiden(csr, objective=objective, resolution=resolution, seed=11, engine="igraph")
    assert _same_partition(got, ref)
    sizes = np.bincount(got)
    assert np.all(sizes[:-1] >= sizes[1:])  # labels ordered by decreasing size
    q_ours = g.modularity(got.tolist(), weights="weight", resolution=resolution)
    q_ref = g.modularity(ref.tolist(), weights="weight", resolution=resolution)
    assert q_ours == pytest.approx(q_ref)


def test_igraph_engine_leaves_the_global_generator_alone():
    import random

    csr, _ = _planted(seed=3)
    random.seed(123)
    expect = random.random()
    random.seed(123)
    leiden(csr, seed=5, engine="igraph")
    assert random.random() == expect  # our call neither drew from nor reseeded the module's generator


@pytest.mark.parametrize("objective,resolution", [("modularity", 1.0), ("rb", 0.5), ("rb", 2.0)])
def test_agrees_with_leidenalg_called_directly(objective, resolution):
    csr, _ = _planted(seed=5, groups=5, size=25, p_in=0.2, p_out=0.04)
    g = _igraph_loop(csr)
    if objective == "modularity":
        part = leidenalg.find_partition(g, leidenalg.ModularityVertexPartition, weights="weight",
                                        n_iterations=-1, seed=11)
    else:
        part = leidenalg.find_partition(g, leidenalg.RBConfigurationVertexPartition, weights="weight",
                                        n_iterations=-1, seed=11, resolution_parameter=resolution)
    got = leiden(csr, objective=objective, resolution=resolution, seed=11, engine="leidenalg")
    np.testing.assert_array_equal(got, part.membership)


def test_resolution_controls_granularity():
    csr, _ = _planted(seed=2, groups=4, size=30)
    coarse = leiden(csr, objective="rb", resolution=0.05, seed=0)
    fine = leiden(csr, objective="rb", resolution=5.0, seed=0)
    assert np.unique(coarse).size < np.unique(fine).size


def test_weights_matter():
    # two triangles joined by one edge; a heavy bridge pulls its endpoints together
    src = [0, 1, 0, 3, 4, 3, 2]
    dst = [1, 2, 2, 4, 5, 5, 3]
    light = leiden(csr_from_coo(6, src, dst, [1, 1, 1, 1, 1, 1, 1]), seed=0)
    assert _same_partition(light, [0, 0, 0, 1, 1, 1])
    heavy = leiden(csr_from_coo(6, src, dst, [1, 1, 1, 1, 1, 1, 50]), seed=0)
    assert heavy[2] == heavy[3] and not _same_partition(heavy, light)


def test_subgraph_nodes():
    csr, truth = _planted(seed=4)
    nodes = np.flatnonzero(truth < 2)
    for engine in ("igraph", "leidenalg"):
        got = leiden(csr, nodes=nodes[::-1], seed=1, engine=engine)  # order does not matter
        outside = np.setdiff1d(np.arange(csr.n), nodes)
        assert np.all(got[outside] == -1)
        assert _same_partition(got[nodes], truth[nodes])
    g = _igraph_loop(csr).induced_subgraph(nodes.tolist())
    part = leidenalg.find_partition(g, leidenalg.ModularityVertexPartition, weights="weight", n_iterations=-1, seed=1)
    np.testing.assert_array_equal(leiden(csr, nodes=nodes, seed=1, engine="leidenalg")[nodes], part.membership)


def test_empty_and_edgeless():
    assert leiden(CSR.empty(0)).shape == (0,)
    np.testing.assert_array_equal(leiden(CSR.empty(3)), [0, 1, 2])
    np.testing.assert_array_equal(leiden(CSR.empty(3), nodes=[]), [-1, -1, -1])


def test_rejects_bad_arguments():
    csr, _ = _planted(groups=2, size=5)
    with pytest.raises(ValueError, match="objective"):
        leiden(csr, objective="cpm")
    with pytest.raises(ValueError, match="engine must be one of"):
        leiden(csr, engine="louvain")
    with pytest.raises(ValueError, match="resolution"):
        leiden(csr, resolution=0.5)
    with pytest.raises(ValueError, match="resolution"):
        leiden(csr, objective="rb", resolution=-1.0)
    with pytest.raises(ValueError, match="nodes"):
        leiden(csr, nodes=[0, 99])
    with pytest.raises(ValueError, match="nodes"):
        leiden(csr, nodes=[0.5])
    with pytest.raises(TypeError, match="csr"):
        leiden(np.eye(3))


@pytest.mark.parametrize("engine", ["igraph", "leidenalg"])
def test_warm_start_from_singletons_is_the_cold_start(engine):
    csr, _ = _planted(seed=5, groups=5, size=16, p_in=0.2, p_out=0.02)
    cold = leiden(csr, seed=3, engine=engine)
    for start in (np.arange(csr.n), np.full(csr.n, -1), np.arange(csr.n)[::-1] * 7):
        np.testing.assert_array_equal(leiden(csr, seed=3, engine=engine, initial_membership=start), cold)


@pytest.mark.parametrize("engine", ["igraph", "leidenalg"])
def test_warm_start_keeps_a_converged_partition_and_places_new_nodes(engine):
    csr, truth = _planted(seed=6)
    best = leiden(csr, seed=1, engine=engine, n_iterations=-1)
    again = leiden(csr, seed=9, engine=engine, n_iterations=1, initial_membership=best)
    assert _same_partition(again, best)  # nothing to improve: no node moves
    np.testing.assert_array_equal(again, leiden(csr, seed=9, engine=engine, n_iterations=1, initial_membership=best))
    start = best.astype(np.int64)
    start[::10] = -1  # nodes "added since": each starts alone and joins its group
    assert _same_partition(leiden(csr, seed=9, engine=engine, n_iterations=-1, initial_membership=start), truth)


def test_warm_start_labels_of_a_subgraph_and_bad_shapes():
    csr, truth = _planted(seed=4)
    nodes = np.flatnonzero(truth < 2)
    got = leiden(csr, nodes=nodes, seed=1, initial_membership=np.where(truth < 2, truth, 99))
    assert np.all(got[truth >= 2] == -1) and _same_partition(got[nodes], truth[nodes])
    with pytest.raises(ValueError, match="initial_membership"):
        leiden(csr, initial_membership=np.zeros(csr.n - 1, np.int64))
    with pytest.raises(ValueError, match="initial_membership"):
        leiden(csr, initial_membership=np.zeros(csr.n))  # float labels
