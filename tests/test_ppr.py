"""Native shallow PPR against a dense numpy implementation of the same rules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from noderag.graph.csr import CSR, csr_from_coo
from noderag.graph.ppr import MIN_SKIP_SEGMENT, PPROperator, PPRResult, shallow_ppr, shallow_ppr_batch

N_TYPES = 7
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def dense_ppr(csr: CSR, seeds, weights, alpha: float, t: int, rule: str) -> np.ndarray:
    """Dense reference: P row-normalised, dangling rows replaced by a self-loop."""
    n = csr.n
    adj = csr.to_scipy().toarray().astype(np.float64)
    strength = adj.sum(axis=1)
    trans = np.zeros((n, n))
    live = strength > 0
    trans[live] = adj[live] / strength[live, None]
    dead = np.flatnonzero(~live)
    trans[dead, dead] = 1.0
    s = np.zeros(n)
    np.add.at(s, np.asarray(seeds), np.asarray(weights, np.float64))
    s /= s.sum()
    p = s.copy()
    for _ in range(t):
        p = alpha * trans.T @ p + (1.0 - alpha) * (s if rule == "restart" else p)
    return p


@st.composite
def graphs(draw, max_n: int = 24):
    n = draw(st.integers(1, max_n))
    m = draw(st.integers(0, 3 * n))
    src = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    dst = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    # Small integer weights make exact ties likely; zeros make zero-strength rows.
    w = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0, 3.0]), min_size=m, max_size=m))
    symmetric = draw(st.booleans())
    csr = csr_from_coo(n, np.array(src, np.int64), np.array(dst, np.int64), np.array(w), symmetric=symmetric)
    types = np.array(draw(st.lists(st.integers(0, N_TYPES - 1), min_size=n, max_size=n)), np.uint8)
    return csr, types


@st.composite
def queries(draw, n: int):
    size = draw(st.integers(1, 6))
    seeds = draw(st.lists(st.integers(0, n - 1), min_size=size, max_size=size))  # duplicates allowed
    weights = draw(st.lists(st.sampled_from([0.0, 0.25, 1.0, 2.0, 7.5]), min_size=size, max_size=size))
    if sum(weights) == 0:
        weights[0] = 1.0
    return np.array(seeds, np.int32), np.array(weights, np.float32)


def check_topk(res: PPRResult, p: np.ndarray, types: np.ndarray, k_vec: np.ndarray) -> None:
    """The returned rows are a valid top-k per type of ``p`` (tie-aware) with matching scores."""
    tol = 1e-6
    for t in range(N_TYPES):
        ids, scores = res.top(t)
        assert np.all(res.ids[t][len(ids):] == -1)
        assert np.all(res.scores[t][len(ids):] == 0)
        cand = np.flatnonzero((types == t) & (p > 0))
        assert len(ids) == min(k_vec[t], len(cand))
        assert len(set(ids.tolist())) == len(ids)
        assert np.all(types[ids] == t)
        np.testing.assert_allclose(scores, p[ids], rtol=1e-5, atol=1e-7)
        assert np.all(np.diff(scores) <= 0)
        best = np.sort(p[cand])[::-1][: len(ids)]
        np.testing.assert_allclose(scores, best, rtol=1e-5, atol=1e-7)
        if len(ids):
            rest = np.setdiff1d(cand, ids)
            assert np.all(p[rest] <= p[ids].min() + tol)


@SETTINGS
@given(data=st.data(), rule=st.sampled_from(["restart", "lazy"]), t=st.integers(0, 4),
       alpha=st.sampled_from([0.0, 0.15, 0.5, 0.85, 1.0]))
def test_matches_dense_reference(data, rule, t, alpha):
    csr, types = data.draw(graphs())
    seeds, weights = data.draw(queries(csr.n))
    k = data.draw(st.one_of(st.integers(0, 5), st.lists(st.integers(0, 6), min_size=7, max_size=7)))
    res = shallow_ppr(csr, seeds, weights, node_types=types, k_per_type=k, alpha=alpha, iterations=t, rule=rule)
    k_vec = np.minimum(np.broadcast_to(np.asarray(k), (N_TYPES,)), csr.n)
    assert res.ids.shape == res.scores.shape == (N_TYPES, int(k_vec.max()))
    assert res.ids.dtype == np.int32 and res.scores.dtype == np.float32
    assert res.error_bound == 0.0
    p = dense_ppr(csr, seeds, weights, alpha, t, rule)
    check_topk(res, p, types, k_vec)
    # With k = n every node of positive score comes back: the support holds all the mass.
    full = shallow_ppr(csr, seeds, weights, node_types=types, k_per_type=csr.n, alpha=alpha, iterations=t, rule=rule)
    assert full.scores.sum(dtype=np.float64) == pytest.approx(1.0, abs=1e-5)
    assert full.support_size == res.support_size == int((p > 0).sum())


def test_hand_computed_path():
    csr = csr_from_coo(5, [0, 1, 2], [1, 2, 3])
    res = shallow_ppr(csr, [0], node_types=[0, 1, 2, 0, 0], k_per_type=3, alpha=0.5, iterations=2, rule="restart")
    assert res.ids[0].tolist() == [0, -1, -1]
    assert res.ids[1].tolist() == [1, -1, -1]
    assert res.ids[2].tolist() == [2, -1, -1]
    np.testing.assert_allclose(res.scores[:3, 0], [0.625, 0.25, 0.125])
    lazy = shallow_ppr(csr, [0], node_types=[0, 1, 2, 0, 0], k_per_type=3, alpha=0.5, iterations=2, rule="lazy")
    # p1 = .5 e0 + .5 e1; p2 = .5 P^T p1 + .5 p1 = (.25 + .125) e0 + (.25 + .25) e1 + .125 e2
    np.testing.assert_allclose(lazy.scores[:3, 0], [0.375, 0.5, 0.125])


def test_dangling_seed_keeps_mass():
    csr = csr_from_coo(4, [1], [2])  # 0 and 3 isolated
    for rule in ("restart", "lazy"):
        res = shallow_ppr(csr, [0, 1], [3.0, 1.0], node_types=np.zeros(4, np.uint8), k_per_type=4, iterations=3,
                          rule=rule)
        ids, scores = res.top(0)
        got = dict(zip(ids.tolist(), scores.tolist()))
        assert got[0] == pytest.approx(0.75)
        assert 3 not in got
        assert sum(got.values()) == pytest.approx(1.0)


def test_ties_break_to_smaller_id():
    n = 12
    csr = csr_from_coo(n, np.zeros(n - 1, np.int64), np.arange(1, n))  # star, all leaves equal
    types = np.ones(n, np.uint8)
    types[0] = 0
    perm_seed = shallow_ppr(csr, [0], node_types=types, k_per_type=[1, 4, 0, 0, 0, 0, 0], iterations=1, rule="restart")
    assert perm_seed.ids[1].tolist() == [1, 2, 3, 4]
    assert np.all(perm_seed.scores[1] == perm_seed.scores[1][0])
    assert perm_seed.ids[0].tolist() == [0, -1, -1, -1]
    assert np.all(perm_seed.ids[2:] == -1)


def test_zero_weight_seed_is_not_returned():
    csr = csr_from_coo(6, [0, 2, 4], [1, 3, 5])
    res = shallow_ppr(csr, [0, 2], [1.0, 0.0], node_types=np.zeros(6, np.uint8), k_per_type=6, iterations=2, rule="restart")
    ids, scores = res.top(0)
    assert set(ids.tolist()) == {0, 1}
    assert np.all(scores > 0)


def test_restart_converges_to_networkx_pagerank():
    nx = pytest.importorskip("networkx")
    rng = np.random.default_rng(7)
    g = nx.connected_watts_strogatz_graph(60, 4, 0.3, seed=7)
    for u, v in g.edges:
        g[u][v]["weight"] = float(rng.integers(1, 5))
    src, dst = np.array(g.edges).T
    w = np.array([g[u][v]["weight"] for u, v in g.edges])
    csr = csr_from_coo(60, src, dst, w)
    seeds = np.array([3, 17, 42], np.int32)
    sw = np.array([1.0, 2.0, 1.0], np.float32)
    pers = {i: 0.0 for i in range(60)}
    pers.update({3: 0.25, 17: 0.5, 42: 0.25})
    ref = nx.pagerank(g, alpha=0.85, personalization=pers, weight="weight", tol=1e-13, max_iter=10_000)
    res = shallow_ppr(csr, seeds, sw, node_types=np.zeros(60, np.uint8), k_per_type=60, alpha=0.85,
                      iterations=300, rule="restart")
    ids, scores = res.top(0)
    assert len(ids) == 60
    np.testing.assert_allclose(scores, [ref[int(i)] for i in ids], rtol=1e-4, atol=1e-7)
    expected_order = sorted(ref, key=lambda i: (-ref[i], i))[:10]
    assert ids[:10].tolist() == expected_order


@settings(max_examples=40, deadline=None)
@given(data=st.data(), rule=st.sampled_from(["restart", "lazy"]), t=st.integers(0, 4),
       threads=st.integers(1, 3), eps=st.sampled_from([0.0, 0.01]))
def test_batch_equals_singles(data, rule, t, threads, eps):
    csr, types = data.draw(graphs())
    qs = data.draw(st.lists(queries(csr.n), min_size=0, max_size=9))
    op = PPROperator(csr, types)
    k = [3, 1, 0, 2, 5, 1, 2]
    batch = shallow_ppr_batch(op, [s for s, _ in qs], [w for _, w in qs], k_per_type=k, iterations=t, rule=rule,
                              epsilon=eps, n_threads=threads)
    assert len(batch) == len(qs)
    for (s, w), b in zip(qs, batch):
        one = op.query(s, w, k_per_type=k, iterations=t, rule=rule, epsilon=eps)
        np.testing.assert_array_equal(one.ids, b.ids)
        np.testing.assert_array_equal(one.scores, b.scores)
        assert one.error_bound == b.error_bound and one.support_size == b.support_size
    if len(batch) >= 2:
        assert not np.shares_memory(batch[0].ids, batch[1].ids)


def test_batch_larger_graph_many_threads():
    rng = np.random.default_rng(3)
    n = 3000
    src = rng.integers(0, n, 20_000)
    dst = (src + rng.zipf(1.6, src.size)) % n
    csr = csr_from_coo(n, src, dst, rng.random(src.size).astype(np.float32) + 0.1)
    types = rng.integers(0, 7, n).astype(np.uint8)
    op = PPROperator(csr, types)
    seed_lists = [rng.integers(0, n, 20) for _ in range(64)]
    batch = op.query_batch(seed_lists, k_per_type=10, n_threads=2)
    for s, b in zip(seed_lists, batch):
        one = op.query(s, k_per_type=10)
        np.testing.assert_array_equal(one.ids, b.ids)
        np.testing.assert_array_equal(one.scores, b.scores)


@st.composite
def hub_graphs(draw):
    """Graphs with a few hubs whose rows have type segments of >= MIN_SKIP_SEGMENT entries."""
    n = draw(st.integers(MIN_SKIP_SEGMENT + 40, 3 * MIN_SKIP_SEGMENT))
    types = np.array(draw(st.lists(st.sampled_from([1] * 12 + [3, 4, 0]), min_size=n, max_size=n)), np.uint8)
    n_hubs = draw(st.integers(1, 3))
    src, dst, w = [], [], []
    for h in range(n_hubs):
        deg = draw(st.integers(MIN_SKIP_SEGMENT + 30, n - 1))
        nbrs = np.array(draw(st.permutations(range(n))))[:deg]
        src += [h] * deg
        dst += nbrs.tolist()
        w += draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=deg, max_size=deg))
    m = draw(st.integers(0, 2 * n))
    src += draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    dst += draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    w += draw(st.lists(st.sampled_from([0.0, 1.0, 3.0]), min_size=m, max_size=m))
    symmetric = draw(st.booleans())
    csr = csr_from_coo(n, np.array(src), np.array(dst), np.array(w), symmetric=symmetric)
    return csr, types


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), rule=st.sampled_from(["restart", "lazy"]), t=st.integers(1, 4),
       eps=st.sampled_from([1e-4, 1e-3, 1e-2, 0.1]), alpha=st.sampled_from([0.3, 0.5, 0.85]))
@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_epsilon_mode_error_bound(data, rule, t, eps, alpha):
    csr, types = data.draw(hub_graphs())
    seeds, weights = data.draw(queries(csr.n))
    p = dense_ppr(csr, seeds, weights, alpha, t, rule)
    op = PPROperator(csr, types)
    res = op.query(seeds, weights, k_per_type=csr.n, alpha=alpha, iterations=t, rule=rule, epsilon=eps)
    approx = np.zeros(csr.n)
    for ty in range(N_TYPES):
        ids, scores = res.top(ty)
        approx[ids] = scores
    # Lower bounds of the exact scores, within the reported L1 bound (float32 output slack).
    assert np.all(approx <= p * (1 + 1e-6) + 1e-7)
    assert np.abs(p - approx).sum() <= res.error_bound + 1e-5
    assert res.error_bound <= alpha * t + 1e-12
    if t == 1 and op.mirrored:
        # Every skip happened at the last step and was added back to each returned node.
        nz = approx > 0
        np.testing.assert_allclose(approx[nz], p[nz], rtol=1e-5, atol=1e-8)
    # The exact mode reports no error and matches the dense reference.
    exact = op.query(seeds, weights, k_per_type=csr.n, alpha=alpha, iterations=t, rule=rule)
    assert exact.error_bound == 0.0
    check_topk(exact, p, types, np.full(N_TYPES, csr.n))


def test_symmetric_graph_is_mirrored():
    rng = np.random.default_rng(5)
    n = 300
    src = np.concatenate([np.zeros(200, np.int64), rng.integers(0, n, 500)])
    dst = np.concatenate([rng.permutation(np.arange(1, n))[:200], rng.integers(0, n, 500)])
    types = rng.integers(0, 7, n)
    assert PPROperator(csr_from_coo(n, src, dst), types).mirrored
    assert not PPROperator(csr_from_coo(n, src, dst, symmetric=False), types).mirrored
    c = csr_from_coo(n, src, dst)
    w = c.weights.copy()
    w[c.indptr[0]] += 1.0  # the hub's first edge no longer matches its mirror
    assert not PPROperator(CSR(c.indptr, c.indices, w), types).mirrored


def test_epsilon_mode_skips_hub_and_reports_bound():
    # Two seeds; one links to a big hub that gets little mass, so its row is not expanded.
    n = 2003
    hub = 2002
    src = np.concatenate([[0, 1, 0], np.full(2000, hub)])
    dst = np.concatenate([[1, hub, 2], np.arange(2, 2002)])
    csr = csr_from_coo(n, src, dst)
    types = np.zeros(n, np.uint8)
    exact = shallow_ppr(csr, [0, 1], node_types=types, k_per_type=n, iterations=2, rule="restart")
    approx = shallow_ppr(csr, [0, 1], node_types=types, k_per_type=n, iterations=2, epsilon=1e-3, rule="restart")
    assert exact.error_bound == 0.0
    assert approx.error_bound == pytest.approx(0.5 * 0.125)  # alpha * the hub's mass after step 1
    assert approx.support_size < 10 < exact.support_size
    l1 = exact.scores.sum(dtype=np.float64) - approx.scores.sum(dtype=np.float64)
    assert 0 < l1 <= approx.error_bound + 1e-6
    np.testing.assert_array_equal(approx.ids[0][:3], exact.ids[0][:3])
    # Nodes 1 and 2 touch the hub: the skipped share is added back, their scores are exact.
    got = dict(zip(*[x.tolist() for x in approx.top(0)]))
    want = dict(zip(*[x.tolist() for x in exact.top(0)]))
    for v in (0, 1, 2):
        assert got[v] == pytest.approx(want[v], rel=1e-6)
    # Below the threshold the hub is expanded and the result is exact.
    tight = shallow_ppr(csr, [0, 1], node_types=types, k_per_type=n, iterations=2, epsilon=1e-6, rule="restart")
    assert tight.error_bound == 0.0
    np.testing.assert_array_equal(tight.ids, exact.ids)


def test_exact_mode_prunes_hub_rows_only_when_certified():
    # Hub 0 (type 2) with 200 type-1 leaves gets a tiny mass; seed 201 has 29 type-1 leaves.
    n = 231
    src = np.concatenate([np.zeros(200, np.int64), np.full(29, 201)])
    dst = np.concatenate([np.arange(1, 201), np.arange(202, 231)])
    csr = csr_from_coo(n, src, dst)
    types = np.ones(n, np.uint8)
    types[0] = 2
    op = PPROperator(csr, types)
    seeds, w = np.array([201, 1]), np.array([1.0, 1e-5])
    p = dense_ppr(csr, seeds, w, 0.5, 2, "restart")
    small = op.query(seeds, w, k_per_type=5, rule="restart")
    check_topk(small, p, types, np.full(N_TYPES, 5))
    assert small.error_bound == 0.0
    assert small.support_size < int((p > 0).sum())  # the hub's leaves were never touched
    full = op.query(seeds, w, k_per_type=n, rule="restart")  # hub leaves reach the top-k: certification fails, rerun
    check_topk(full, p, types, np.full(N_TYPES, n))
    assert full.support_size == int((p > 0).sum())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), rule=st.sampled_from(["restart", "lazy"]), t=st.integers(1, 3))
def test_exact_mode_with_pruning_matches_dense(data, rule, t):
    csr, types = data.draw(hub_graphs())
    size = data.draw(st.integers(1, 5))
    seeds = np.array(data.draw(st.lists(st.integers(0, csr.n - 1), min_size=size, max_size=size)))
    w = np.array(data.draw(st.lists(st.sampled_from([1.0, 2.0, 1e-4, 1e-5, 3e-6]), min_size=size, max_size=size)))
    k = np.array(data.draw(st.lists(st.integers(0, 8), min_size=7, max_size=7)))
    p = dense_ppr(csr, seeds, w, 0.5, t, rule)
    res = shallow_ppr(csr, seeds, w, node_types=types, k_per_type=k, iterations=t, rule=rule)
    check_topk(res, p, types, k)


def test_epsilon_correction_for_a_long_candidate_row():
    # Hub 0 (type 2) -> 300 type-1 nodes; node 1 (type 1) also has 299 type-0 leaves, so its
    # row is long and its correction goes through binary searches in the skipped segments.
    n = 600
    src = np.concatenate([np.zeros(300, np.int64), np.ones(299, np.int64), [2]])
    dst = np.concatenate([np.arange(1, 301), np.arange(301, 600), [1]])
    csr = csr_from_coo(n, src, dst)
    types = np.zeros(n, np.uint8)
    types[1:301] = 1
    types[0] = 2
    op = PPROperator(csr, types)
    assert op.mirrored
    exact = op.query([2], k_per_type=n, iterations=2, rule="restart")
    approx = op.query([2], k_per_type=n, iterations=2, epsilon=1e-2, rule="restart")
    assert approx.error_bound > 0
    want = dict(zip(*[x.tolist() for x in exact.top(1)]))
    ids, scores = approx.top(1)
    assert 1 in ids.tolist() and 2 in ids.tolist()
    for v, sc in zip(ids.tolist(), scores.tolist()):
        assert sc == pytest.approx(want[v], rel=1e-6)


def test_epsilon_mode_keeps_small_segments_of_a_hub():
    # Hub 0: 300 type-1 leaves (skipped) and 3 type-4 leaves (a small segment, always expanded).
    n = 305
    leaves = np.arange(1, 304)
    csr = csr_from_coo(n, np.concatenate([np.zeros(303, np.int64), [304]]), np.concatenate([leaves, [0]]))
    types = np.ones(n, np.uint8)
    types[[5, 77, 300]] = 4
    types[304] = 0
    types[0] = 2
    exact = shallow_ppr(csr, [304], node_types=types, k_per_type=5, iterations=2, rule="restart")
    approx = shallow_ppr(csr, [304], node_types=types, k_per_type=5, iterations=2, epsilon=1e-2, rule="restart")
    assert approx.error_bound > 0
    np.testing.assert_array_equal(approx.ids[4], exact.ids[4])
    np.testing.assert_array_equal(approx.scores[4], exact.scores[4])
    assert np.all(approx.ids[1] == -1) and np.all(exact.ids[1] >= 0)


def test_concurrent_python_threads_share_one_operator():
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(11)
    n = 2000
    src = np.concatenate([np.zeros(900, np.int64), rng.integers(0, n, 8000)])
    dst = np.concatenate([rng.permutation(np.arange(1, n))[:900], rng.integers(0, n, 8000)])
    csr = csr_from_coo(n, src, dst, rng.random(src.size) + 0.5)
    types = rng.integers(0, 7, n)
    jobs = [(rng.integers(0, n, 8), eps) for eps in (0.0, 1e-4) for _ in range(20)]

    def run(op, job):
        return op.query(job[0], k_per_type=6, epsilon=job[1])

    want = [run(PPROperator(csr, types), j) for j in jobs]
    op = PPROperator(csr, types)  # fresh: the lazy bounded-mode tables are built under concurrency
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda j: run(op, j), jobs))
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a.ids, b.ids)
        np.testing.assert_array_equal(a.scores, b.scores)
        assert a.error_bound == b.error_bound


def test_operator_reuse_and_functional_equal():
    rng = np.random.default_rng(0)
    n = 200
    csr = csr_from_coo(n, rng.integers(0, n, 800), rng.integers(0, n, 800))
    types = rng.integers(0, 7, n)
    op = PPROperator(csr, types)
    assert op.n == n and op.node_types.dtype == np.uint8
    for seed in range(5):
        s = rng.integers(0, n, 4)
        a = op.query(s, k_per_type=[1, 2, 3, 4, 5, 6, 7])
        b = shallow_ppr(csr, s, node_types=types, k_per_type=[1, 2, 3, 4, 5, 6, 7])
        c = shallow_ppr(op, s, k_per_type=[1, 2, 3, 4, 5, 6, 7])
        np.testing.assert_array_equal(a.ids, b.ids)
        np.testing.assert_array_equal(a.ids, c.ids)
        np.testing.assert_array_equal(a.scores, b.scores)


def dense_push_ppr(csr: CSR, seeds, weights, alpha: float, t: int, rule: str, push: float) -> tuple[np.ndarray, float]:
    """Dense reference of the push threshold: at every step a node u with alpha * p[u] < push * degree(u)
    spreads nothing. Returns (scores, dropped mass)."""
    s = dense_ppr(csr, seeds, weights, alpha, 0, rule)
    adj = csr.to_scipy().toarray().astype(np.float64)
    strength = adj.sum(axis=1)
    live = strength > 0
    trans = np.zeros_like(adj)
    trans[live] = adj[live] / strength[live, None]
    dead = np.flatnonzero(~live)
    trans[dead, dead] = 1.0
    p, dropped = s.copy(), 0.0
    for _ in range(t):
        held = alpha * p < push * np.diff(csr.indptr)  # a zero-weight row with entries drops its mass too
        dropped += float(alpha * p[held].sum())
        p = alpha * trans.T @ np.where(held, 0.0, p) + (1.0 - alpha) * (s if rule == "restart" else p)
    return p, dropped


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), rule=st.sampled_from(["restart", "lazy"]), t=st.integers(0, 3),
       alpha=st.sampled_from([0.3, 0.5, 0.85]), push=st.sampled_from([0.0137, 0.0031, 7.3e-4, 0.21]))
def test_push_threshold_matches_dense_reference(data, rule, t, alpha, push):
    csr, types = data.draw(st.one_of(graphs(), hub_graphs()))
    seeds, weights = data.draw(queries(csr.n))
    ref, dropped = dense_push_ppr(csr, seeds, weights, alpha, t, rule, push)
    op = PPROperator(csr, types)
    res = op.query(seeds, weights, k_per_type=csr.n, alpha=alpha, iterations=t, rule=rule, push_epsilon=push)
    check_topk(res, ref, types, np.full(N_TYPES, csr.n))
    assert res.error_bound == pytest.approx(dropped, rel=1e-9, abs=1e-12)
    exact = dense_ppr(csr, seeds, weights, alpha, t, rule)
    assert np.all(ref <= exact * (1 + 1e-9) + 1e-12)  # lower bounds of the exact scores
    assert np.abs(exact - ref).sum() <= res.error_bound + 1e-9
    # Each step reads at most alpha / push row entries: the support is the seeds and at most t times that.
    assert res.support_size <= len(set(seeds[weights > 0].tolist())) + t * alpha / push + 1e-9
    # With the bounded mode too: still lower bounds, within the reported error; batches equal singles.
    both = op.query(seeds, weights, k_per_type=csr.n, alpha=alpha, iterations=t, rule=rule, epsilon=1e-3,
                    push_epsilon=push)
    approx = np.zeros(csr.n)
    for ty in range(N_TYPES):
        ids, scores = both.top(ty)
        approx[ids] = scores
    assert np.all(approx <= exact * (1 + 1e-6) + 1e-7)
    assert np.abs(exact - approx).sum() <= both.error_bound + 1e-5
    batch = op.query_batch([seeds, seeds[::-1]], [weights, weights[::-1]], k_per_type=csr.n, alpha=alpha,
                           iterations=t, rule=rule, push_epsilon=push, n_threads=2)
    np.testing.assert_array_equal(batch[0].ids, res.ids)
    np.testing.assert_array_equal(batch[0].scores, res.scores)
    assert batch[0].error_bound == res.error_bound


def test_push_threshold_bounds_a_hub_seeds_fan_out():
    # Seed 0 is a hub of 5000 leaves, each with 20 leaves of its own: the exact last step reads ~10^5 entries.
    hub_deg, fan = 5000, 20
    n = 1 + hub_deg + hub_deg * fan
    leaves = np.arange(1, hub_deg + 1)
    src = np.concatenate([np.zeros(hub_deg, np.int64), np.repeat(leaves, fan)])
    dst = np.concatenate([leaves, np.arange(hub_deg + 1, n)])
    csr = csr_from_coo(n, src, dst)
    types = np.zeros(n, np.uint8)
    types[leaves] = 1
    types[hub_deg + 1:] = 2
    op = PPROperator(csr, types)
    exact = op.query([0], k_per_type=30, iterations=2, rule="lazy")
    pushed = op.query([0], k_per_type=30, iterations=2, rule="lazy", push_epsilon=1e-5)
    assert exact.support_size == n and exact.error_bound == 0.0
    # After step 1 the hub holds 0.5 (0.25 >= 1e-5 * 5000: it spreads) and each leaf 1e-4 (5e-5 < 1e-5 * 21
    # entries: it does not), so the last step reads the hub's row only and drops the leaves' 0.5 * 0.5.
    assert pushed.support_size == 1 + hub_deg
    assert pushed.error_bound == pytest.approx(0.25)
    np.testing.assert_array_equal(pushed.ids[:2], exact.ids[:2])  # the hub and its leaves keep their order
    assert np.all(pushed.ids[2] == -1)  # the leaves' leaves, reached only through unspread rows, are absent
    with pytest.raises(ValueError, match="push_epsilon must be a finite real number >= 0"):
        op.query([0], k_per_type=3, push_epsilon=-1e-3)


def test_int32_offsets_are_read_in_place_with_the_same_results():
    rng = np.random.default_rng(9)
    n = 500
    csr = csr_from_coo(n, rng.integers(0, n, 3000), rng.integers(0, n, 3000), rng.random(3000) + 0.1)
    types = rng.integers(0, 7, n)
    compact = CSR(csr.indptr.astype(np.int32), csr.indices, csr.weights)
    wide, narrow = PPROperator(csr, types), PPROperator(compact, types, check_edges=False)
    assert narrow.csr.indptr.dtype == np.int32  # used as given, not widened
    for eps, push in ((0.0, 0.0), (1e-3, 0.0), (0.0, 1e-4)):
        for s in (rng.integers(0, n, 5) for _ in range(5)):
            a = wide.query(s, k_per_type=8, epsilon=eps, push_epsilon=push)
            b = narrow.query(s, k_per_type=8, epsilon=eps, push_epsilon=push)
            np.testing.assert_array_equal(a.ids, b.ids)
            np.testing.assert_array_equal(a.scores, b.scores)
    assert wide.mirrored == narrow.mirrored
