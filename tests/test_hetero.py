"""HeteroGraph: construction, incremental append, combination, persistence and exports."""

from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from noderag.graph.csr import CSR, csr_from_coo
from noderag.graph.hetero import HeteroGraph, merge_csr
from noderag.graph.storage import FORMAT_VERSION, FormatVersionError, atomic_save_npy
from noderag.graph.types import NodeType

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------ strategies and references


@st.composite
def graphs(draw, max_n=14, max_m=30):
    """(types, keys, struct (src, dst, w), sem (src, dst, w)) with integer-valued weights."""
    n = draw(st.integers(0, max_n))
    types = draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    keys = draw(st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n, unique=True))

    def edges():
        if n == 0:
            return [], [], []
        m = draw(st.integers(0, max_m))
        src = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
        dst = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
        w = draw(st.lists(st.integers(0, 8), min_size=m, max_size=m))
        return src, dst, [float(x) for x in w]

    return types, keys, edges(), edges()


def reference_dense(n, src, dst, w):
    """Dict-of-edges reference: undirected, loops dropped, duplicates summed."""
    ref = defaultdict(float)
    for s, d, x in zip(src, dst, w):
        if s != d:
            ref[(min(s, d), max(s, d))] += x
    dense = np.zeros((n, n))
    for (a, b), x in ref.items():
        dense[a, b] = dense[b, a] = x
    pattern = np.zeros((n, n), bool)
    for a, b in ref:
        pattern[a, b] = pattern[b, a] = True
    return dense, pattern


def check_canonical(csr: CSR, n: int):
    assert csr.n == n
    assert csr.indptr.dtype == np.int64 and csr.indices.dtype == np.int32 and csr.weights.dtype == np.float32
    rows = np.repeat(np.arange(n), np.diff(csr.indptr))
    flat = rows.astype(np.int64) * max(n, 1) + csr.indices
    assert np.all(np.diff(flat) > 0), "columns sorted and unique within rows"
    assert not np.any(rows == csr.indices), "no self-loops"
    m = csr.to_scipy()
    assert (m != m.T).nnz == 0, "symmetric"


def dense(csr: CSR) -> np.ndarray:
    return csr.to_scipy().toarray().astype(np.float64)


def pattern(csr: CSR) -> np.ndarray:
    out = np.zeros((csr.n, csr.n), bool)
    rows = np.repeat(np.arange(csr.n), np.diff(csr.indptr))
    out[rows, csr.indices] = True
    return out


# ------------------------------------------------------------------ construction


@SETTINGS
@given(graphs())
def test_from_coo_matches_dict_reference(g):
    types, keys, (ss, sd, sw), (es, ed, ew) = g
    n = len(types)
    hg = HeteroGraph.from_coo(types, keys, ss, sd, sw, sem_src=es, sem_dst=ed, sem_w=ew)
    assert len(hg) == n
    np.testing.assert_array_equal(hg.types, np.asarray(types, np.uint8))
    np.testing.assert_array_equal(hg.keys, np.asarray(keys, np.uint64))
    assert hg.types.dtype == np.uint8 and hg.keys.dtype == np.uint64
    for csr, (s, d, w) in ((hg.structural, (ss, sd, sw)), (hg.semantic, (es, ed, ew))):
        check_canonical(csr, n)
        ref, ref_pattern = reference_dense(n, s, d, w)
        np.testing.assert_array_equal(dense(csr), ref)
        np.testing.assert_array_equal(pattern(csr), ref_pattern)
    # tuple form gives the same graph
    hg2 = HeteroGraph.from_coo(types, keys, struct_edges=(ss, sd, sw), semantic_edges=(es, ed, ew))
    assert hg2.equals(hg)
    np.testing.assert_array_equal(hg.ids_of(keys), np.arange(n, dtype=np.int32))
    counts = hg.counts_by_type()
    assert list(counts) == ["T", "S", "N", "R", "A", "H", "O"]
    assert counts == {t.name: types.count(int(t)) for t in NodeType}


@SETTINGS
@given(st.integers(1, 50), st.data())
def test_csr_from_coo_directed_with_hubs(n, data):
    """csr_from_coo (symmetric=False) against a dict reference; hub rows exercise the long-row sort."""
    m = data.draw(st.integers(0, 200))
    hub = data.draw(st.integers(0, n - 1))
    src = data.draw(st.lists(st.one_of(st.just(hub), st.integers(0, n - 1)), min_size=m, max_size=m))
    dst = data.draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    w = data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 3.0]), min_size=m, max_size=m))
    ref = defaultdict(float)
    for a, b, x in zip(src, dst, w):
        if a != b:
            ref[(a, b)] += x
    csr = csr_from_coo(n, src, dst, w, symmetric=False)
    rows = np.repeat(np.arange(n), np.diff(csr.indptr))
    got = {(int(a), int(b)): float(x) for a, b, x in zip(rows, csr.indices, csr.weights)}
    assert got == dict(ref)
    assert np.all(np.diff(rows.astype(np.int64) * n + csr.indices) > 0)


def test_from_coo_defaults_and_letters():
    hg = HeteroGraph.from_coo(["T", "S", NodeType.N], np.array([5, 6, 7], np.uint64), [0, 1], [1, 2])
    np.testing.assert_array_equal(hg.types, [0, 1, 2])
    np.testing.assert_array_equal(dense(hg.structural), [[0, 1, 0], [1, 0, 1], [0, 1, 0]])
    assert hg.semantic.nnz == 0 and hg.semantic.n == 3
    e = HeteroGraph.empty()
    assert len(e) == 0 and e.structural.n == 0 and e.combined().n == 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(types=[0, 1], keys=[1, 1]), r"keys must be unique: key 1 appears at positions 0 and 1"),
        (dict(types=[0, 9], keys=[1, 2]), r"types must hold type codes in 0..6, found 9"),
        (dict(types=[0, 1], keys=[1]), "types and keys must have the same length"),
        (dict(types=[0, 1], keys=[-1, 2]), "keys must"),
        (dict(types=[0, 1], keys=[1.5, 2.0]), "keys must hold unsigned"),
        (dict(types=[[0, 1]], keys=[[1, 2]]), "types must be 1-D"),
        (dict(types=["X", "T"], keys=[1, 2]), "types: unknown node type 'X'"),
        (dict(types=[0, 1], keys=[1, 2], struct_src=[0, 2], struct_dst=[1, 0]), r"struct_src must hold node ids in \[0, 2\), found 2"),
        (dict(types=[0, 1], keys=[1, 2], struct_src=[0], struct_dst=[1, 0]), "struct_src and struct_dst must have the same length"),
        (dict(types=[0, 1], keys=[1, 2], struct_src=[0], struct_dst=[1], struct_w=[-1.0]), "struct_w must be non-negative"),
        (dict(types=[0, 1], keys=[1, 2], struct_src=[0], struct_dst=[1], struct_w=[np.nan]), "struct_w must be finite"),
        (dict(types=[0, 1], keys=[1, 2], struct_src=[0], struct_dst=[1], struct_w=[1.0, 2.0]), r"struct_w must have shape \(1,\)"),
        (dict(types=[0, 1], keys=[1, 2], struct_src=[0]), "struct_dst is missing"),
        (dict(types=[0, 1], keys=[1, 2], sem_src=[0.5], sem_dst=[1]), "sem_src must hold integer node ids"),
        (dict(types=[0, 1], keys=[1, 2], semantic_edges=([0], [5])), r"semantic_edges\[1\] must hold node ids"),
        (dict(types=[0, 1], keys=[1, 2], semantic_edges=[0, 1, 2, 3]), "semantic_edges must be a tuple"),
        (dict(types=[0, 1], keys=[1, 2], struct_src=[0], struct_dst=[1], struct_edges=([0], [1])), "either"),
    ],
)
def test_from_coo_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HeteroGraph.from_coo(**kwargs)


# ------------------------------------------------------------------ incremental


@SETTINGS
@given(graphs(), st.data())
def test_append_equals_building_at_once(g, data):
    """build(A) + add_nodes(B) + add_edges == from_coo(A ∪ B) with all edges."""
    types, keys, (ss, sd, sw), (es, ed, ew) = g
    n = len(types)
    cut = data.draw(st.integers(0, n))
    # second batch: the remaining nodes, some repeated nodes of the first batch, shuffled
    rest = list(range(cut, n))
    again = data.draw(st.lists(st.integers(0, max(cut - 1, 0)), max_size=4)) if cut else []
    batch2 = data.draw(st.permutations(rest + again))
    # union order: batch 1, then first occurrences in batch 2
    union = list(range(cut))
    for i in batch2:
        if i not in union:
            union.append(i)
    pos = {old: new for new, old in enumerate(union)}
    remap = np.array([pos[i] for i in range(n)], dtype=np.int64)

    def split(s, d, w):
        s, d, w = np.asarray(s, np.int64), np.asarray(d, np.int64), np.asarray(w, np.float64)
        first = (s < cut) & (d < cut)
        return (s[first], d[first], w[first]), (s[~first], d[~first], w[~first])

    (s1, d1, w1), (s2, d2, w2) = split(ss, sd, sw)
    (t1, u1, x1), (t2, u2, x2) = split(es, ed, ew)
    inc = HeteroGraph.from_coo(types[:cut], keys[:cut], s1, d1, w1, sem_src=t1, sem_dst=u1, sem_w=x1)
    ids = inc.add_nodes([types[i] for i in batch2], [keys[i] for i in batch2])
    np.testing.assert_array_equal(ids, remap[np.asarray(batch2, np.int64)].astype(np.int32))
    # split the new edges in two calls to exercise repeated merging
    h = len(s2) // 2
    inc.add_edges("structural", remap[s2[:h]], remap[d2[:h]], w2[:h])
    inc.add_edges("structural", remap[s2[h:]], remap[d2[h:]], w2[h:])
    inc.add_edges("semantic", remap[t2], remap[u2], x2)
    # also re-add some old edges (duplicates must sum)
    inc.add_edges("structural", remap[s1], remap[d1], w1)

    full = HeteroGraph.from_coo(
        [types[i] for i in union], [keys[i] for i in union],
        np.concatenate([remap[ss], remap[s1]]) if n else [], np.concatenate([remap[sd], remap[d1]]) if n else [],
        np.concatenate([np.asarray(sw, float), w1]) if n else [],
        sem_src=remap[np.asarray(es, np.int64)] if n else [], sem_dst=remap[np.asarray(ed, np.int64)] if n else [],
        sem_w=ew,
    )
    assert len(inc) == len(full) == n
    np.testing.assert_array_equal(inc.types, full.types)
    np.testing.assert_array_equal(inc.keys, full.keys)
    for layer in ("structural", "semantic"):
        a, b = inc.layer(layer), full.layer(layer)
        check_canonical(a, n)
        np.testing.assert_array_equal(a.indptr, b.indptr)
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_allclose(a.weights, b.weights, rtol=1e-6)
    np.testing.assert_array_equal(inc.ids_of(keys), remap.astype(np.int32))


def test_add_nodes_existing_repeated_and_conflicting():
    hg = HeteroGraph.from_coo([NodeType.T, NodeType.N], [100, 200])
    ids = hg.add_nodes([2, 3, 3, 0, 2], [200, 300, 300, 100, 400])
    np.testing.assert_array_equal(ids, [1, 2, 2, 0, 3])
    assert ids.dtype == np.int32
    np.testing.assert_array_equal(hg.keys, [100, 200, 300, 400])
    np.testing.assert_array_equal(hg.types, [0, 2, 3, 2])
    np.testing.assert_array_equal(hg.ids_of([400, 7, 100]), [3, -1, 0])
    np.testing.assert_array_equal(hg.ids_of(300), [2])
    assert hg.structural.n == 4 and hg.semantic.n == 4
    with pytest.raises(ValueError, match=r"keys\[1\] = 300 already exists as node 2 of type R, but types\[1\] = N"):
        hg.add_nodes([0, 2], [999, 300])
    with pytest.raises(ValueError, match="key 555 is given with two types"):
        hg.add_nodes([0, 1], [555, 555])
    assert len(hg) == 4, "failed calls add nothing"
    assert hg.add_nodes([], []).shape == (0,)
    with pytest.raises(ValueError, match=r"dst must hold node ids in \[0, 4\), found 4"):
        hg.add_edges("structural", [0], [4])
    with pytest.raises(ValueError, match="layer must be"):
        hg.add_edges("combined", [0], [1])


def test_many_small_appends_key_index():
    """Thousands of small add_nodes calls (exercises the delta merge of the key index)."""
    rng = np.random.default_rng(0)
    keys = rng.choice(2**62, size=9000, replace=False).astype(np.uint64)
    hg = HeteroGraph.empty()
    for i in range(0, keys.size, 97):
        chunk = keys[i:i + 97]
        got = hg.add_nodes(np.ones(chunk.size, np.uint8), chunk)
        np.testing.assert_array_equal(got, np.arange(i, i + chunk.size))
        # re-adding earlier keys returns their ids
        back = rng.integers(0, i + chunk.size, size=5)
        np.testing.assert_array_equal(hg.add_nodes(np.ones(5, np.uint8), keys[back]), back)
    np.testing.assert_array_equal(hg.ids_of(keys), np.arange(keys.size))
    assert hg.ids_of(np.array([2**63 + 5], np.uint64))[0] == -1


def test_returned_arrays_are_readonly_and_owned():
    types = np.array([0, 1, 1], np.uint8)
    keys = np.array([1, 2, 3], np.uint64)
    hg = HeteroGraph.from_coo(types, keys, [0, 1], [1, 2])
    types[0] = 5
    keys[0] = 99
    np.testing.assert_array_equal(hg.types, [0, 1, 1])
    np.testing.assert_array_equal(hg.keys, [1, 2, 3])
    sem = csr_from_coo(3, [0], [2], [0.5])
    hg.set_layer("semantic", sem)
    sem.weights[:] = 7.0
    np.testing.assert_array_equal(hg.semantic.weights, [0.5, 0.5])
    hg.add_edges("structural", [0], [2])
    hg.add_nodes([2], [50])
    for arr in (hg.types, hg.keys, *(getattr(hg.layer(name), f) for name in ("structural", "semantic")
                                     for f in ("indptr", "indices", "weights"))):
        with pytest.raises(ValueError):
            arr[0] = 3


# ------------------------------------------------------------------ layers


@SETTINGS
@given(graphs(), st.sampled_from([0.0, 0.5, 1.0, 2.0]), st.sampled_from([0.0, 0.25, 1.0, 3.0]))
def test_combined_is_weighted_sum(g, a, b):
    types, keys, (ss, sd, sw), (es, ed, ew) = g
    hg = HeteroGraph.from_coo(types, keys, ss, sd, sw, sem_src=es, sem_dst=ed, sem_w=ew)
    c = hg.combined(a, b)
    n = len(types)
    check_canonical(c, n)
    expect = a * hg.structural.to_scipy().astype(np.float64) + b * hg.semantic.to_scipy().astype(np.float64)
    np.testing.assert_allclose(dense(c), expect.toarray(), rtol=1e-6)
    # pattern: union of the layers with nonzero weight (explicit zero-weight edges kept)
    expect_pattern = np.zeros((n, n), bool)
    if a:
        expect_pattern |= pattern(hg.structural)
    if b:
        expect_pattern |= pattern(hg.semantic)
    np.testing.assert_array_equal(pattern(c), expect_pattern)
    np.testing.assert_allclose(hg.to_scipy().toarray(), dense(hg.combined()), rtol=1e-6)


def test_combined_rejects_bad_weights():
    hg = HeteroGraph.from_coo([0, 1], [1, 2], [0], [1])
    with pytest.raises(ValueError, match="semantic_weight must be finite and non-negative"):
        hg.combined(1.0, -1.0)
    with pytest.raises(ValueError, match="structural_weight"):
        hg.combined(np.inf, 1.0)


def test_merge_csr_matches_scipy():
    rng = np.random.default_rng(1)
    n = 50
    a = csr_from_coo(n, rng.integers(0, n, 200), rng.integers(0, n, 200), rng.random(200))
    b = csr_from_coo(n, rng.integers(0, n, 150), rng.integers(0, n, 150), rng.random(150))
    m = merge_csr(a, b, 2.0, 0.5)
    np.testing.assert_allclose(m.to_scipy().toarray(), (2 * a.to_scipy() + 0.5 * b.to_scipy()).toarray(), rtol=1e-6)
    with pytest.raises(ValueError, match="different sizes"):
        merge_csr(a, CSR.empty(3))


def test_set_layer_validates():
    hg = HeteroGraph.from_coo([0, 1, 1], [1, 2, 3], [0], [1])
    good = csr_from_coo(3, [0, 1], [2, 2], [0.5, 0.25])
    hg.set_layer("semantic", good)
    np.testing.assert_array_equal(dense(hg.semantic), dense(good))
    hg.set_layer("semantic", sp.csr_array(good.to_scipy()))
    np.testing.assert_array_equal(dense(hg.semantic), dense(good))
    asym = csr_from_coo(3, [0], [2], symmetric=False)
    with pytest.raises(ValueError, match="csr must be symmetric"):
        hg.set_layer("semantic", asym)
    uneven = CSR(np.array([0, 1, 1, 2]), np.array([2, 0], np.int32), np.array([1.0, 2.0], np.float32))
    with pytest.raises(ValueError, match=r"csr must be symmetric .* edge \(0, 2\) has no equal mirror"):
        hg.set_layer("semantic", uneven)
    loop = CSR(np.array([0, 1, 1, 1]), np.array([0], np.int32), np.array([1.0], np.float32))
    with pytest.raises(ValueError, match="self-loops"):
        hg.set_layer("semantic", loop)
    unsorted = CSR(np.array([0, 2, 3, 4]), np.array([2, 1, 0, 0], np.int32), np.ones(4, np.float32))
    with pytest.raises(ValueError, match="strictly increasing column ids"):
        hg.set_layer("semantic", unsorted)
    with pytest.raises(ValueError, match=r"csr.indptr has length 3, expected n \+ 1 = 4"):
        hg.set_layer("semantic", CSR.empty(2))
    with pytest.raises(ValueError, match="layer must be"):
        hg.set_layer("other", good)


@SETTINGS
@given(graphs(), st.data())
def test_induced_matches_scipy_submatrix(g, data):
    types, keys, (ss, sd, sw), _ = g
    hg = HeteroGraph.from_coo(types, keys, ss, sd, sw)
    n = len(types)
    full = hg.structural.to_scipy().toarray()
    letters = data.draw(st.sets(st.sampled_from("TSNRAHO")))
    mask = hg.subgraph_mask(sorted(letters))
    np.testing.assert_array_equal(mask, np.isin(np.asarray(types, int), [int(NodeType[x]) for x in letters]))
    sub, ids = hg.induced(mask)
    check_canonical(sub, len(ids))
    np.testing.assert_array_equal(sub.to_scipy().toarray(), full[np.ix_(ids, ids)])
    perm = data.draw(st.permutations(range(n)))
    chosen = perm[: data.draw(st.integers(0, n))]
    sub, ids = hg.induced(np.asarray(chosen, np.int64))
    np.testing.assert_array_equal(ids, chosen)
    check_canonical(sub, len(ids))
    np.testing.assert_array_equal(sub.to_scipy().toarray(), full[np.ix_(ids, ids)])


def test_subgraph_mask_forms_and_induced_errors():
    hg = HeteroGraph.from_coo([0, 1, 2, 3, 4], [1, 2, 3, 4, 5], [0, 1, 2], [1, 2, 3])
    np.testing.assert_array_equal(hg.subgraph_mask("SNRA"), [0, 1, 1, 1, 1])
    np.testing.assert_array_equal(hg.subgraph_mask("entity"), [0, 0, 1, 0, 0])
    np.testing.assert_array_equal(hg.subgraph_mask(NodeType.T), [1, 0, 0, 0, 0])
    np.testing.assert_array_equal(hg.subgraph_mask([3, "A"]), [0, 0, 0, 1, 1])
    with pytest.raises(ValueError, match="types: unknown node type"):
        hg.subgraph_mask(["Q"])
    with pytest.raises(ValueError, match="duplicate"):
        hg.induced([1, 1])
    with pytest.raises(ValueError, match=r"mask must have shape \(5,\)"):
        hg.induced(np.ones(3, bool))


# ------------------------------------------------------------------ exports


@SETTINGS
@given(graphs(max_n=10, max_m=20), st.sampled_from(["structural", "semantic", "combined"]))
def test_exports_equal_scipy(g, layer):
    types, keys, (ss, sd, sw), (es, ed, ew) = g
    hg = HeteroGraph.from_coo(types, keys, ss, sd, sw, sem_src=es, sem_dst=ed, sem_w=ew)
    n = len(types)
    ref = hg.to_scipy(layer)
    assert isinstance(ref, sp.csr_array) and ref.shape == (n, n)
    ref = ref.toarray().astype(np.float64)
    ig = hg.to_igraph(layer)
    assert ig.vcount() == n and not ig.is_directed()
    assert ig.vs["type"] == list(types) if n else True
    got = np.zeros((n, n))
    for e in ig.es:
        got[e.source, e.target] = got[e.target, e.source] = e["weight"]
    np.testing.assert_array_equal(got, ref)
    assert ig.ecount() == hg.layer(layer).nnz // 2
    import networkx as nx

    nxg = hg.to_networkx(layer)
    assert nxg.number_of_nodes() == n and nxg.number_of_edges() == hg.layer(layer).nnz // 2
    if n:
        np.testing.assert_array_equal(nx.to_numpy_array(nxg, nodelist=range(n), weight="weight"), ref)
        assert [nxg.nodes[i]["type"] for i in range(n)] == list(types)
        assert [nxg.nodes[i]["key"] for i in range(n)] == list(keys)


@SETTINGS
@given(graphs())
def test_edge_list_and_neighbors(g):
    types, keys, (ss, sd, sw), (es, ed, ew) = g
    hg = HeteroGraph.from_coo(types, keys, ss, sd, sw, sem_src=es, sem_dst=ed, sem_w=ew)
    for layer in ("structural", "semantic", "combined"):
        src, dst, w = hg.edge_list(layer)
        assert src.dtype == dst.dtype == np.int32 and w.dtype == np.float32
        assert np.all(src < dst) and len(src) == hg.layer(layer).nnz // 2
        rebuilt = HeteroGraph.from_coo(types, keys, src, dst, w)
        np.testing.assert_array_equal(dense(rebuilt.structural), dense(hg.layer(layer)))
        full = dense(hg.layer(layer))
        for v in range(len(types)):
            ids, wv = hg.neighbors(v, layer)
            np.testing.assert_array_equal(ids, np.flatnonzero(pattern(hg.layer(layer))[v]))
            np.testing.assert_array_equal(wv, full[v, ids])
    with pytest.raises(ValueError, match="node must be an id"):
        hg.neighbors(len(types))


def test_layer_name_errors():
    hg = HeteroGraph.empty()
    with pytest.raises(ValueError, match="layer must be 'structural', 'semantic' or 'combined'"):
        hg.to_scipy("graph")


# ------------------------------------------------------------------ persistence


@settings(max_examples=15, deadline=None)
@given(graphs())
def test_save_load_roundtrip(g):
    types, keys, (ss, sd, sw), (es, ed, ew) = g
    hg = HeteroGraph.from_coo(types, keys, ss, sd, sw, sem_src=es, sem_dst=ed, sem_w=ew)
    with tempfile.TemporaryDirectory() as d:
        hg.save(d)
        for mmap in (True, False):
            back = HeteroGraph.load(d, mmap=mmap)
            assert back.equals(hg)
            arrays = [back.types, back.keys, back.structural.indptr, back.structural.indices,
                      back.structural.weights, back.semantic.indptr, back.semantic.indices, back.semantic.weights]
            for arr in arrays:
                assert not arr.flags.writeable
            if mmap:
                assert isinstance(back.structural.indices.base, np.memmap) or isinstance(back.structural.indices, np.memmap)
                assert isinstance(back._keys_buf, np.memmap)
            np.testing.assert_array_equal(back.ids_of(keys), np.arange(len(types)))
        with open(os.path.join(d, "graph", "meta.json"), encoding="utf-8") as fh:
            meta = json.load(fh)
        assert meta == {"format_version": FORMAT_VERSION, "n": len(types), "structural_nnz": hg.structural.nnz,
                        "semantic_nnz": hg.semantic.nnz}


def _snapshot(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_mutating_a_loaded_graph_copies_on_write(tmp_path):
    hg = HeteroGraph.from_coo([0, 1, 2], [10, 20, 30], [0, 1], [1, 2], [1.0, 2.0], sem_src=[0], sem_dst=[2])
    hg.save(tmp_path)
    before = _snapshot(tmp_path)
    g = HeteroGraph.load(tmp_path)
    ids = g.add_nodes([2, 3], [30, 40])
    np.testing.assert_array_equal(ids, [2, 3])
    g.add_edges("structural", [0, 3], [1, 2], [5.0, 1.0])
    g.add_edges("semantic", [1], [3], [0.5])
    g.set_layer("semantic", csr_from_coo(4, [0], [3]))
    after = _snapshot(tmp_path)
    assert after == before
    assert HeteroGraph.load(tmp_path).equals(hg)
    assert dense(g.structural)[0, 1] == 6.0
    # saving over the directory it was loaded from works (atomic replace of mapped files)
    g.save(tmp_path)
    again = HeteroGraph.load(tmp_path)
    assert again.equals(g)
    np.testing.assert_array_equal(again.ids_of([40, 10]), [3, 0])


def _saved(tmp_path):
    hg = HeteroGraph.from_coo([0, 1, 2, 3], [10, 20, 30, 40], [0, 1, 2], [1, 2, 3], [1.0, 2.0, 3.0],
                              sem_src=[0], sem_dst=[3], sem_w=[0.5])
    hg.save(tmp_path)
    return hg


def test_format_version_mismatch(tmp_path):
    _saved(tmp_path)
    meta_path = tmp_path / "graph" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["format_version"] = 99
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(FormatVersionError, match=rf"meta.json: format version 99 is not supported; this noderag reads format version {FORMAT_VERSION}"):
        HeteroGraph.load(tmp_path)


@pytest.mark.parametrize(
    "relpath, corrupt, exc, match",
    [
        ("graph/indices.npy", "delete", FileNotFoundError, r"graph/indices.npy"),
        ("semantic/weights.npy", "delete", FileNotFoundError, r"semantic/weights.npy"),
        ("node_keys.npy", "delete", FileNotFoundError, r"node_keys.npy"),
        ("graph/meta.json", "delete", FileNotFoundError, r"graph/meta.json"),
        ("graph/weights.npy", "truncate", ValueError, r"graph/weights.npy"),
        ("graph/meta.json", "truncate", ValueError, r"graph/meta.json: invalid JSON at line"),
        ("graph/indices.npy", "int64", ValueError, r"graph/indices.npy: expected dtype int32, found int64"),
        ("graph/indptr.npy", "float", ValueError, r"graph/indptr.npy: expected dtype int32 or int64, found float64"),
        ("node_types.npy", "short", ValueError, r"node_types.npy: expected shape \(4,\)"),
        ("node_keys.npy", "object", ValueError, r"node_keys.npy"),
        ("graph/indices.npy", "out_of_range", ValueError, r"graph: corrupt structural layer: indices.npy: column ids must lie in \[0, 4\); first violation at position 0"),
        ("semantic/weights.npy", "negative", ValueError, r"semantic: corrupt semantic layer: weights.npy: weights must be finite and non-negative"),
        ("graph/weights.npy", "nan", ValueError, r"graph: corrupt structural layer: weights.npy: .*position 2"),
        ("graph/indptr.npy", "not_monotone", ValueError, r"graph: corrupt structural layer: indptr.npy: indptr must be non-decreasing; first violation at position 2"),
        ("graph/indptr.npy", "bad_end", ValueError, r"graph/indptr.npy: indptr must start at 0 and end at nnz"),
        ("node_types.npy", "bad_type", ValueError, r"node_types.npy: type codes must be in 0..6, found 9"),
    ],
)
def test_corrupt_or_missing_files_are_named(tmp_path, relpath, corrupt, exc, match):
    _saved(tmp_path)
    p = tmp_path / relpath
    if corrupt == "delete":
        p.unlink()
    elif corrupt == "truncate":
        p.write_bytes(p.read_bytes()[: max(len(p.read_bytes()) - 7, 10)])
    else:
        arr = np.load(p)
        if corrupt == "int64":
            arr = arr.astype(np.int64)
        elif corrupt == "float":
            arr = arr.astype(np.float64)
        elif corrupt == "short":
            arr = arr[:-1]
        elif corrupt == "out_of_range":
            arr = arr.copy()
            arr[0] = 9
        elif corrupt == "negative":
            arr = -arr
        elif corrupt == "nan":
            arr = arr.copy()
            arr[2] = np.nan
        elif corrupt == "not_monotone":
            arr = arr.copy()
            arr[2] = 0
        elif corrupt == "bad_end":
            arr = arr.copy()
            arr[-1] += 1
        elif corrupt == "bad_type":
            arr = arr.copy()
            arr[0] = 9
        if corrupt == "object":
            np.save(p, np.array([10, 20, 30, 40], dtype=object), allow_pickle=True)
        else:
            atomic_save_npy(p, arr)
    with pytest.raises(exc, match=match):
        HeteroGraph.load(tmp_path)


@pytest.mark.parametrize("order, match", [([1, 0, 2, 3], "node key order is not"), ([0, 1, 2, 7], r"node ids must lie in \[0, 4\)"),
                                          ([0, 1, 1, 3], "node key order is not")])
def test_corrupt_key_order_detected_on_lookup(tmp_path, order, match):
    _saved(tmp_path)
    atomic_save_npy(tmp_path / "node_key_order.npy", np.array(order, np.int32))
    for validate in (True, False):
        g = HeteroGraph.load(tmp_path, validate=validate)
        with pytest.raises(ValueError, match="node_key_order.npy: " + match):
            g.ids_of([10])
        with pytest.raises(ValueError, match="node_key_order.npy"):
            g.add_nodes([0], [11])


def test_indptr_stored_int32_and_int64_files_load(tmp_path):
    hg = _saved(tmp_path)
    assert np.load(tmp_path / "graph" / "indptr.npy").dtype == np.int32
    back = HeteroGraph.load(tmp_path)
    assert back.structural.indptr.dtype == np.int64 and back.equals(hg)
    for sub in ("graph", "semantic"):  # files written before the int32 form
        atomic_save_npy(tmp_path / sub / "indptr.npy", np.load(tmp_path / sub / "indptr.npy").astype(np.int64))
    assert HeteroGraph.load(tmp_path).equals(hg)


def test_key_order_derived_not_stored(tmp_path):
    # an older save's order file is used when present; a new save removes it and lookups still work
    _saved(tmp_path)
    assert not (tmp_path / "node_key_order.npy").exists()
    atomic_save_npy(tmp_path / "node_key_order.npy", np.array([0, 1, 2, 3], np.int32))
    assert HeteroGraph.load(tmp_path).ids_of([40, 20, 99]).tolist() == [3, 1, -1]
    hg = HeteroGraph.from_coo([0, 1, 2], [30, 10, 20], [0], [1], [1.0])
    hg.save(tmp_path)
    assert not (tmp_path / "node_key_order.npy").exists()
    g = HeteroGraph.load(tmp_path)
    assert g.ids_of([10, 20, 30, 40]).tolist() == [1, 2, 0, -1]
    assert g.add_nodes([2, 0], [20, 50]).tolist() == [2, 3]


def test_load_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere"):
        HeteroGraph.load(tmp_path / "nothere")


def test_key_order_stored_from_key_order_from_nodes_on(tmp_path, monkeypatch):
    """A large graph stores its keys' sorted order and the sorted keys (a delta insert binary-searches them
    in place); a smaller save removes both, and look-ups agree either way."""
    import noderag.graph.hetero as hetero

    monkeypatch.setattr(hetero, "KEY_ORDER_FROM", 3)
    hg = HeteroGraph.from_coo([0, 1, 2, 2], [30, 10, 20, 5], [0], [1], [1.0])
    hg.save(tmp_path)
    order = np.load(tmp_path / "node_key_order.npy")
    assert order.dtype == np.int32 and order.tolist() == [3, 1, 2, 0]
    assert np.load(tmp_path / "node_keys_sorted.npy").tolist() == [5, 10, 20, 30]
    assert HeteroGraph.load(tmp_path).ids_of([10, 5, 30, 7]).tolist() == [1, 3, 0, -1]
    monkeypatch.setattr(hetero, "KEY_ORDER_FROM", 10)
    hg.save(tmp_path)
    assert not (tmp_path / "node_key_order.npy").exists() and not (tmp_path / "node_keys_sorted.npy").exists()
