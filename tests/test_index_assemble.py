"""Assemble and name linking: keys, merging, weights, whole-word linking independent of insertion order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, note, settings
from hypothesis import strategies as st

from noderag.graph.keys import canonical_name, node_key
from noderag.graph.types import NodeType
from noderag.indexing.assemble import ChunkRecord, NodeTable, assemble_chunks, link_known_names
from noderag.indexing.decompose.base import ChunkDecomposition, Unit

T, S, N, R = (int(NodeType.T), int(NodeType.S), int(NodeType.N), int(NodeType.R))


def _chunks():
    recs = [ChunkRecord(0, 0, "c0", "doc-a", None), ChunkRecord(1, 1, "c1", "doc-b", None)]
    decs = [
        ChunkDecomposition(0, [Unit("Grey Heron Line sails to Kessel. Kessel again.",
                                    ["Grey Heron Line", "Kessel", "Kessel"],
                                    [("Grey Heron Line", "sails to", "Kessel")])]),
        ChunkDecomposition(1, [Unit("The grey heron line and GREY HERON LINE; Port Emmerich has the Grey Heron Line office.",
                                    ["Port Emmerich", "the Grey Heron Line"],
                                    [("Port Emmerich", "has the", "Grey Heron Line"),
                                     ("Grey Heron Line", "sails to", "Kessel")])]),
    ]
    return recs, decs


def test_assemble_keys_merging_and_weights():
    table = NodeTable()
    recs, decs = _chunks()
    e = assemble_chunks(table, recs, decs)
    src, dst, w = e.arrays()
    types = table.types_array()
    assert types.tolist()[:2] == [T, S]
    ents = {table.names[i]: i for i in np.flatnonzero(types == N)}
    assert set(ents) == {"Grey Heron Line", "Kessel", "Port Emmerich", "the Grey Heron Line"}
    kessel = ents["Kessel"]
    assert table.keys[kessel] == node_key(N, canonical_name("kessel"))
    s0 = 1
    pair = {(int(a), int(b)): float(x) for a, b, x in zip(src, dst, w)}
    assert pair[(s0, kessel)] == 2.0  # mention count
    rels = [i for i in np.flatnonzero(types == R)]
    # the same canonical (source, relation, target) in two chunks is one R node, linked twice
    assert len(rels) == 2
    r_sail = [i for i in rels if "sails to" in table.texts[i]][0]
    assert table.texts[r_sail] == "Grey Heron Line sails to Kessel"
    assert sum(x for (a, b), x in pair.items() if b == r_sail and a == kessel) == 1.0
    assert int(np.sum((dst == r_sail))) == 4  # two statements x two endpoints


def test_link_known_names_whole_word_case_and_longest():
    table = NodeTable()
    recs, decs = _chunks()
    e = assemble_chunks(table, recs, decs)
    src, dst, w = e.arrays()
    link = link_known_names(table, src, dst, w)
    ls, ld, lw = link.arrays()
    names = {i: table.names[i] for i in range(len(table))}
    got = {(int(a), names[int(b)]): float(x) for a, b, x in zip(ls, ld, lw)}
    s1 = [i for i in np.flatnonzero(table.types_array() == S)][1]
    # "grey heron line" (lower case) is not a mention; "GREY HERON LINE" and "Grey Heron Line" are (2 in total);
    # the decomposer recorded none for the canonical "grey heron line" entity in unit 2, so both are added
    assert got[(s1, "Grey Heron Line")] == 2.0
    # counts already recorded by the decomposer are not added twice
    assert (1, "Kessel") not in got and (1, "Grey Heron Line") not in got


def test_link_is_independent_of_insertion_order():
    recs, decs = _chunks()
    a = NodeTable()
    ea = assemble_chunks(a, recs, decs)
    b = NodeTable()
    eb = assemble_chunks(b, recs[:1], decs[:1])
    eb.extend(assemble_chunks(b, recs[1:], decs[1:]))

    def view(table, edges):
        s, d, w = edges.arrays()
        link = link_known_names(table, s, d, w)
        ls, ld, lw = link.arrays()
        k = table.keys_array()
        return sorted(zip(k[np.r_[s, ls]].tolist(), k[np.r_[d, ld]].tolist(), np.r_[w, lw].tolist()))

    assert view(a, ea) == view(b, eb)


def test_link_in_worker_processes_equals_in_process(monkeypatch):
    """Name matching split over forked workers (batches of one unit here) gives the in-process edges."""
    from noderag.indexing import assemble

    table = NodeTable()
    recs, decs = _chunks()
    edges = assemble_chunks(table, recs, decs)
    for copy in range(1, 4):  # the same chunks from other sources: more units
        edges.extend(assemble_chunks(table, [ChunkRecord(10 * copy + r.chunk_id, r.doc_id, r.text, f"{r.source}-{copy}",
                                                         None) for r in recs],
                                     [ChunkDecomposition(10 * copy + d.chunk_id, d.units) for d in decs]))
    src, dst, w = edges.arrays()
    one = link_known_names(table, src, dst, w).arrays()
    monkeypatch.setattr(assemble, "LINK_BATCH", 1)
    assert int(np.sum(table.types_array() == S)) >= 4  # enough batches for the worker path
    assert one[0].size >= 4
    two = link_known_names(table, src, dst, w, workers=2).arrays()
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


_VOCAB = ["Ada", "ada", "Bay", "bay", "Cole", "Dun", "Ely", "42", "of", "The", "Ōno", "Zürich"]


def _reference_links(names: dict[int, str], units: dict[int, str]) -> dict[tuple[int, int], int]:
    """Known-name occurrences by brute force: at each word that starts upper case or with a digit, the
    longest name whose canonical tokens follow (lowest id among equal ones), then skip past it."""
    import re

    from noderag.lang.entities import canonical_token

    word = re.compile(r"\w+")
    usable = {}
    for nid in sorted(names):
        toks = tuple(canonical_token(t) for t in word.findall(names[nid]))
        if toks and any(ch.isalpha() for ch in names[nid]) and not (len(toks) == 1 and len(toks[0]) < 3):
            usable.setdefault(toks, nid)
    out: dict[tuple[int, int], int] = {}
    for sid, text in units.items():
        words = word.findall(text)
        low = [canonical_token(w) for w in words]
        i = 0
        while i < len(words):
            hits = [(len(t), nid) for t, nid in usable.items() if tuple(low[i:i + len(t)]) == t]
            if hits and (words[i][0].isupper() or words[i][0].isdigit()):
                k, nid = max(hits, key=lambda h: (h[0], -h[1]))
                out[(sid, nid)] = out.get((sid, nid), 0) + 1
                i += k
            else:
                i += 1
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_VOCAB), min_size=1, max_size=3), min_size=1, max_size=8),
       st.lists(st.lists(st.one_of(st.sampled_from(_VOCAB + [",", "."]), st.integers(0, 7)), max_size=10),
                min_size=1, max_size=5))
def test_link_known_names_equals_brute_force(name_words, unit_pieces):
    """The name index (NUL-joined token keys, lengths per first token) finds what a scan over every name
    finds, on random names that share first tokens, prefixes and case-folded forms."""
    table = NodeTable()
    names, units = {}, {}
    for i, ws in enumerate(name_words):
        name = " ".join(ws)
        nid, created = table.add(N, node_key(N, f"{i}"), name=name, text=name)
        names[nid] = name
    for i, pieces in enumerate(unit_pieces):  # an integer piece: the words of that name (modulo their count)
        text = " ".join(p if isinstance(p, str) else " ".join(name_words[p % len(name_words)]) for p in pieces)
        sid, _ = table.add(S, node_key(S, f"{i}"), name=None, text=text)
        units[sid] = text
    empty = np.zeros(0, np.int32)
    ls, ld, lw = link_known_names(table, empty, empty, np.zeros(0, np.float32)).arrays()
    got = {(int(a), int(b)): int(x) for a, b, x in zip(ls, ld, lw)}
    assert got == _reference_links(names, units)
    note(f"links {got}")


def test_fork_map_keeps_order_and_shares_without_pickling():
    from noderag.indexing.executor.local import fork_map

    shared = {"offset": 100, "blob": object()}  # an object() cannot be pickled: it must arrive by fork
    got = list(fork_map(_add_offset, [(i,) for i in range(9)], 2, shared=shared))
    assert got == [100 + i for i in range(9)]
    assert list(fork_map(divmod, [(7, 2), (9, 4)], 2)) == [(3, 1), (2, 1)]


def _add_offset(shared, i):
    return shared["offset"] + i


def test_assembly_fed_in_any_cuts_equals_one_pass():
    """The assemble stage fed as shards of records arrive (``Assembly.advance``) gives the table, edges,
    traces and name links of assembling every chunk at once, wherever the cuts fall."""
    from types import SimpleNamespace

    from hypothesis import given, note, settings
    from hypothesis import strategies as st

    from noderag.config import NodeRAGConfig
    from noderag.indexing import assemble as build_stages
    from noderag.indexing.assemble import EdgeList

    recs, decs = _chunks()
    recs = [ChunkRecord(10 * c + r.chunk_id, 10 * c + r.doc_id, r.text, f"{r.source}-{c % 2}", None)
            for c in range(4) for r in recs]  # copies 0/2 and 1/3 share their sources: merged T nodes
    decs = [ChunkDecomposition(10 * c + d.chunk_id, d.units) for c in range(4) for d in decs]
    rows = [[r.chunk_id, r.doc_id, r.text] for r in recs]
    doc_of = {r.doc_id: SimpleNamespace(source=r.source, title=None, content_hash=f"h{r.doc_id}") for r in recs}
    by_id = {d.chunk_id: d for d in decs}
    config = NodeRAGConfig()

    class Records:
        def __init__(self, k):
            self.ids, self.errors = {r[0] for r in rows[:k]}, {}

        def __contains__(self, cid):
            return cid in self.ids

        def plan(self, cid, source, text):
            from noderag.indexing.assembly_plan import plan_chunks

            return plan_chunks([source], [text], [by_id[cid]]), 0

    def run(cuts):
        table, base, docs = NodeTable(), EdgeList(), []
        asm = build_stages.Assembly(table, base, [], rows, doc_of, docs, config)
        for k in cuts:
            asm.advance(Records(k))
        traces, link = build_stages.assemble_stage(asm, Records(len(rows)))
        return (table.keys_array().tolist(), list(table.texts), list(table.names),
                [a.tolist() for a in base.arrays()], [a.tolist() for a in link.arrays()],
                traces.to_pylist(), docs)

    whole = run([])

    @settings(max_examples=25, deadline=None)
    @given(st.lists(st.integers(0, len(rows)), max_size=5).map(sorted))
    def check(cuts):
        assert run(cuts) == whole

    check()


def test_column_sums_equal_scipy_column_indexing():
    """The community titles' mention weights: the sparse gather equals scipy's ``m[:, cols].sum(axis=0)``."""
    import scipy.sparse as sp
    from hypothesis import given, note, settings
    from hypothesis import strategies as st

    from noderag.indexing.augment import column_sums

    @settings(max_examples=60, deadline=None)
    @given(st.integers(1, 12), st.integers(1, 30), st.integers(0, 2 ** 31 - 1), st.data())
    def check(n_rows, n_cols, seed, data):
        rng = np.random.default_rng(seed)
        m = sp.random(n_rows, n_cols, density=0.3, random_state=rng, format="csr") * 5
        m.data = np.rint(m.data)
        cols = np.asarray(sorted(data.draw(st.sets(st.integers(0, n_cols - 1), min_size=1))), dtype=np.int64)
        want = np.asarray(m[:, cols].sum(axis=0)).ravel()
        assert np.array_equal(column_sums(m, cols), want)

    check()


def _blocked(vectors: np.ndarray, ids: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """(centroid, similarities) of ``vectors[ids]`` read ``block`` vectors at a time."""
    import noderag.indexing.augment as augment

    def vectors_of(part):
        return vectors[part]

    old = augment.VECTOR_BLOCK
    augment.VECTOR_BLOCK = block
    try:
        mean = augment.block_mean(ids, vectors_of)
        return mean, augment.block_sims(ids, vectors_of, mean)
    finally:
        augment.VECTOR_BLOCK = old


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300), st.integers(1, 40), st.integers(1, 64), st.integers(0, 2 ** 31 - 1))
def test_block_mean_and_sims_equal_the_whole_array(n, dim, block, seed):
    """A community's centroid read in blocks is the float64 mean rounded once, bit for bit, whatever the block
    size and the dimension (one dimension included: ``hash:1`` is a valid embedder); its similarities do not
    depend on the block size (each row's dot product is computed alone). The vectors are float16-rounded,
    as a float16 build stores them: their float64 sums are exact, so the order of the additions cannot show."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n + 7, dim)).astype(np.float16).astype(np.float32)
    ids = rng.permutation(n + 7)[:n]
    whole_mean = vectors[ids].mean(axis=0, dtype=np.float64).astype(np.float32)
    whole = _blocked(vectors, ids, 1 << 20)  # one block
    mean, sims = _blocked(vectors, ids, block)
    assert mean.dtype == np.float32 and np.array_equal(mean, whole_mean) and np.array_equal(whole[0], whole_mean)
    assert np.array_equal(sims, whole[1])
    np.testing.assert_allclose(sims, vectors[ids] @ whole_mean, rtol=1e-5, atol=1e-5)


def test_block_mean_of_the_one_dimension_case_hypothesis_found():
    """n=229, dim=1, block=1, seed=1: float32 accumulation gave -0.06873032 read in blocks against -0.06873031
    for the whole column (NumPy sums one contiguous column pairwise); the float64 sum gives one answer."""
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((236, 1)).astype(np.float16).astype(np.float32)
    ids = rng.permutation(236)[:229]
    assert np.array_equal(_blocked(vectors, ids, 1)[0], _blocked(vectors, ids, 1 << 20)[0])
    assert np.array_equal(_blocked(vectors, ids, 1)[0], vectors[ids].mean(axis=0, dtype=np.float64).astype(np.float32))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300), st.integers(1, 40), st.integers(1, 64), st.integers(0, 2 ** 31 - 1))
def test_block_mean_of_float32_vectors_is_within_one_ulp(n, dim, block, seed):
    """Full float32 vectors: the float64 sums may round, so the blocked mean is within one float32 ulp of the
    whole array's float64 mean (the tolerance :func:`~noderag.indexing.augment.block_mean` documents)."""
    rng = np.random.default_rng(seed)
    vectors = (rng.standard_normal((n + 7, dim)) * rng.uniform(1e-3, 1e3)).astype(np.float32)
    ids = rng.permutation(n + 7)[:n]
    mean, _ = _blocked(vectors, ids, block)
    np.testing.assert_array_max_ulp(mean, vectors[ids].mean(axis=0, dtype=np.float64).astype(np.float32), maxulp=1)
