"""Synthetic benchmark graph invariants, reference-wheel preparation, and a tiny smoke run of bench_kernels."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import _reference  # noqa: E402
import bench_kernels  # noqa: E402
from synthetic import SyntheticConfig, make_graph, sample_seed_lists  # noqa: E402

from noderag.graph.types import EMBEDDED_TYPES, N_TYPES, NodeType  # noqa: E402


@pytest.fixture(scope="module")
def graph():
    return make_graph(3000, seed=7)


def _neighbour_types(csr, types, node):
    return types[csr.indices[csr.indptr[node]:csr.indptr[node + 1]]]


def test_size_types_and_keys(graph):
    assert abs(graph.n - 3000) / 3000 < 0.05
    counts = np.bincount(graph.types, minlength=N_TYPES)
    assert counts.shape == (N_TYPES,) and (counts > 0).all()
    assert graph.types.dtype == np.uint8 and graph.keys.dtype == np.uint64
    assert np.unique(graph.keys).shape[0] == graph.n
    # about five semantic units per chunk
    assert 4.0 <= counts[NodeType.S] / counts[NodeType.T] <= 6.0


def test_deterministic_in_seed():
    a, b, c = make_graph(1000, seed=3), make_graph(1000, seed=3), make_graph(1000, seed=4)
    for name in ("types", "keys", "struct_src", "struct_dst", "struct_w", "sem_src", "sem_dst", "sem_w"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert not np.array_equal(a.keys, c.keys)
    assert not (a.struct_dst.shape == c.struct_dst.shape and np.array_equal(a.struct_dst, c.struct_dst))


def test_structure_follows_the_noderag_schema(graph):
    s, t = graph.structural(), graph.types
    assert np.array_equal(s.to_scipy().toarray(), s.to_scipy().toarray().T)
    assert (s.degree() > 0).all()  # no isolated node in the structural layer
    for node in np.flatnonzero(t == NodeType.S)[:200]:
        nt = _neighbour_types(s, t, node)
        assert (nt == NodeType.T).sum() == 1
        assert 1 <= (nt == NodeType.N).sum() <= 6
    for node in np.flatnonzero(t == NodeType.R):
        nt = _neighbour_types(s, t, node)
        assert (nt == NodeType.N).all() and 1 <= nt.size <= 2
        assert s.strength()[node] == pytest.approx(2.0)
    for node in np.flatnonzero(t == NodeType.O):
        assert (_neighbour_types(s, t, node) == NodeType.H).all()
    for node in np.flatnonzero(t == NodeType.A):
        assert (_neighbour_types(s, t, node) == NodeType.N).sum() == 1
    # S–N weights are mention counts: they sum to the number of mentions (2–6 per unit)
    units = (t == NodeType.S).sum()
    sn = (t[graph.struct_src] == NodeType.S) & (t[graph.struct_dst] == NodeType.N)
    assert 2 * units <= graph.struct_w[sn].sum() <= 6 * units


def test_entity_mentions_are_heavy_tailed(graph):
    ent = graph.types == NodeType.N
    m = graph.mentions[ent]
    assert (m >= 1).all() and (graph.mentions[~ent] == 0).all()
    assert m.max() >= 20 * np.median(m)


def test_semantic_layer_is_knn_among_embedded_nodes(graph):
    sem, t = graph.semantic(), graph.types
    emb = np.isin(t, np.asarray(EMBEDDED_TYPES, np.uint8))
    rows = np.repeat(np.arange(sem.n), sem.degree())
    assert emb[rows].all() and emb[sem.indices].all()
    assert (sem.weights > 0).all() and (sem.weights < 1).all()
    deg = sem.degree()[emb]
    assert deg.min() >= 1 and 8 <= deg.mean() <= 2 * SyntheticConfig().knn_k
    combined = graph.combined()
    struct = graph.structural()
    assert max(sem.nnz, struct.nnz) < combined.nnz <= sem.nnz + struct.nnz
    np.testing.assert_allclose(combined.strength(), struct.strength() + sem.strength(), rtol=1e-5)


def test_seed_lists(graph):
    lists = sample_seed_lists(graph, 5, 20, seed=1)
    again = sample_seed_lists(graph, 5, 20, seed=1)
    assert len(lists) == 5
    for a, b in zip(lists, again):
        assert a.dtype == np.int32 and a.shape == (20,) and np.unique(a).size == 20
        assert np.array_equal(a, b)
        assert np.isin(graph.types[a], [int(x) for x in EMBEDDED_TYPES] + [NodeType.N, NodeType.O]).all()


def test_make_graph_rejects_bad_input():
    with pytest.raises(ValueError, match="n_nodes"):
        make_graph(10)
    with pytest.raises(ValueError, match="mentions_per_unit"):
        SyntheticConfig(mentions_per_unit=(1, 3))


def test_reference_preparation_without_network(tmp_path):
    status = _reference.prepare_reference(tmp_path, download=False)
    assert not status.ok and "download disabled" in status.reason
    bad = tmp_path / _reference.WHEEL_NAME
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr(_reference.PPR_MEMBER, "class sparse_PPR: pass\n")
    status = _reference.prepare_reference(tmp_path, download=False)
    assert not status.ok and "SHA-256" in status.reason
    assert not (tmp_path / "reference" / _reference.PPR_MEMBER).exists()


def test_scales_and_overlap_helpers():
    assert bench_kernels.scales_for(2000) == [2000]
    assert bench_kernels.scales_for(10_000) == [10_000]
    assert bench_kernels.scales_for(500_000) == [10_000, 100_000]
    exact = np.array([[1, 2, -1]] + [[-1, -1, -1]] * 6, np.int32)
    approx = np.array([[2, 5, -1]] + [[-1, -1, -1]] * 6, np.int32)
    assert bench_kernels.topk_overlap(exact, approx) == 0.5
    scores = np.array([0.0, 0.5, 0.1, 0.3])
    idx = [np.array([0, 1, 2, 3])] + [np.zeros(0, np.int64)] * 6
    top = bench_kernels.per_type_topk(scores, idx, 3)
    assert top[0].tolist() == [1, 3, 2]


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_bench_kernels_smoke_run(tmp_path):
    out = tmp_path / "out"
    rc = bench_kernels.main(["--max-nodes", "1500", "--runs", "1", "--queries", "2", "--out", str(out),
                             "--no-reference", "--epsilon", "1e-6"])
    assert rc == 0
    records = json.loads((out / "kernels.json").read_text())
    assert isinstance(records, list) and records
    for r in records:
        assert isinstance(r["scale_nodes"], int) and abs(r["scale_nodes"] - 1500) < 100
        assert isinstance(r["edges"], int) and r["edges"] > 0
        assert isinstance(r["op"], str) and isinstance(r["impl"], str)
        assert isinstance(r["median_s"], float) and r["median_s"] > 0
        assert isinstance(r["runs"], int) and r["runs"] >= 1
    by = {(r["op"], r["impl"]) for r in records}
    for op, impl in [("ppr", "noderag"), ("ppr", "noderag_lazy"), ("ppr", "noderag_eps"), ("ppr", "scipy"),
                     ("ppr", "igraph_0.5"), ("ppr", "igraph_0.85"), ("ppr_batch", "noderag"),
                     ("kcore", "noderag"), ("kcore", "igraph"), ("kcore", "networkx"),
                     ("betweenness", "noderag"), ("betweenness", "networkx"),
                     ("load", "noderag"), ("load", "pickle"), ("ppr_setup", "noderag")]:
        assert (op, impl) in by, (op, impl)
    find = {(r["op"], r["impl"]): r for r in records}
    # the implementations agree where they compute the same thing
    assert find[("kcore", "noderag")]["equals_igraph"] is True
    assert find[("kcore", "networkx")]["equals_noderag"] is True
    assert find[("ppr_batch", "noderag")]["equals_single"] is True
    assert find[("ppr", "scipy")]["overlap_at_50_vs_noderag"] >= 0.95
    assert 0.0 <= find[("ppr", "noderag_eps")]["overlap_at_50"] <= 1.0
    assert {r["params"]["k"] for r in records if r["op"] == "betweenness"} == {10, 100}
    md = (out / "kernels.md").read_text()
    assert "## Targets (issue 2)" in md and "reference PPR skipped (--no-reference)" in md
    assert "| exact PPR vs reference (×) | not measured | - | **N/A** |" in md


def test_bench_kernels_runs_without_networkx(tmp_path, monkeypatch):
    # `pip install .` has no networkx: the networkx, reference and pickle baselines are skipped with a note
    monkeypatch.setitem(sys.modules, "networkx", None)
    out = tmp_path / "out"
    rc = bench_kernels.main(["--scales", "600", "--runs", "1", "--queries", "2", "--out", str(out),
                             "--no-reference", "--epsilon", "1e-6"])
    assert rc == 0
    records = json.loads((out / "kernels.json").read_text())
    impls = {r["impl"] for r in records}
    assert "noderag" in impls and "igraph_0.5" in impls
    assert "networkx" not in impls and "pickle" not in impls
    assert "networkx not installed" in (out / "kernels.md").read_text()
