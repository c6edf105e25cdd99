"""Delta segments: an insert writes only what it adds, shares the rest, and searches as one index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import noderag
from noderag.indexing.driver import build_index
from noderag.config import NodeRAGConfig
from noderag.graph.types import NodeType
from noderag.store.generations import current_path
from noderag.store.tables import IndexStore
from noderag.store.verify import IndexDamagedError, verify_index

CORPUS = Path(__file__).parent / "data" / "musique" / "corpus.jsonl"
CFG = NodeRAGConfig().with_overrides({"embed.spec": "hash:64"})
T, S, N, R = (int(NodeType.T), int(NodeType.S), int(NodeType.N), int(NodeType.R))


def _split(tmp_path: Path, cuts=(270, 280)) -> list[Path]:
    """The test corpus cut into consecutive JSONL parts (the first is the base)."""
    lines = CORPUS.read_text("utf-8").splitlines(keepends=True)
    out = []
    for k, (a, b) in enumerate(zip((0,) + tuple(cuts), tuple(cuts) + (len(lines),))):
        part = tmp_path / f"part{k}.jsonl"
        part.write_text("".join(lines[a:b]), encoding="utf-8")
        out.append(part)
    return out


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    return _split(tmp_path_factory.mktemp("segments"))


@pytest.fixture(scope="module")
def base(parts, tmp_path_factory):
    idx = tmp_path_factory.mktemp("base") / "idx"
    build_index([parts[0]], idx, CFG, progress=False)
    return idx


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _files(gen: Path) -> dict[str, os.stat_result]:
    return {p.relative_to(gen).as_posix(): p.stat() for p in sorted(gen.rglob("*")) if p.is_file()}


def test_an_insert_adds_a_delta_segment_and_shares_every_other_file(base, parts, tmp_path):
    idx = _copy(base, tmp_path / "idx")
    with IndexStore.open(idx) as before:  # pinned: the old generation stays, so its files can be compared
        old = _files(before.path)
        report = build_index([parts[1]], idx, progress=False)
        new = _files(current_path(idx))
    assert [d["name"] for d in report.manifest["deltas"]] == ["1"]
    assert report.manifest["stages"].keys() >= {"segment"} and "communities" not in report.manifest["stages"]
    shared = {rel for rel in old if rel not in ("manifest.json", ".readers")}
    for rel in shared:  # the same inode: nothing of the base was written again
        assert new[rel].st_ino == old[rel].st_ino, rel
    added = set(new) - set(old)
    assert added and all(rel.startswith("deltas/1/") for rel in added)
    written = sum(new[rel].st_size for rel in added)
    assert written < 0.2 * sum(s.st_size for s in old.values())
    verify_index(idx, "full")


def test_inserted_documents_are_found_and_merge_with_known_nodes(base, parts, tmp_path):
    idx = _copy(base, tmp_path / "idx")
    index = noderag.Index.open(idx).insert([parts[1]])
    assert len(index.deltas) == 1
    docs = [json.loads(line) for line in parts[1].read_text("utf-8").splitlines()]
    for d in docs:  # each new passage is found by its own words (dense, lexical and name search)
        assert d["id"] in index.retrieve(d["text"][:160]).passages[:3]
    first = index.deltas[0].first_node
    keys = np.asarray(index.keys)
    assert len(set(keys.tolist())) == keys.size  # a known name merged into its node: no key twice
    # a new unit links to an entity the base already had (the PPR graph joins the segments)
    g = index.graph.structural
    rows = np.repeat(np.arange(g.n), np.diff(g.indptr))
    cross = (rows >= first) & (np.asarray(g.indices) < first)
    assert cross.any()


def _key_view(store):
    """T/S/N/R nodes (type, key, text) and their decomposed edges by key, of an opened index."""
    types, keys = np.asarray(store.types), np.asarray(store.keys)
    keep = np.isin(types, (T, S, N, R))
    texts = store.nodes.column("text").to_pylist()
    nodes = {(int(types[i]), int(keys[i]), texts[i]) for i in np.flatnonzero(keep)}
    from noderag.indexing.previous import load_base

    src, dst, w = load_base(store.path, store.manifest).arrays()
    pairs: dict = {}
    for s, d, x in zip(keys[src].tolist(), keys[dst].tolist(), w.tolist()):
        k = (min(s, d), max(s, d))
        pairs[k] = pairs.get(k, 0.0) + x
    return nodes, pairs


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_a_delta_holds_the_nodes_and_decomposed_edges_of_a_full_build(base, parts, tmp_path):
    idx = _copy(base, tmp_path / "idx")
    build_index([parts[1]], idx, progress=False)
    build_index([parts[2]], idx, progress=False)
    full = tmp_path / "full"
    build_index(parts, full, CFG, progress=False)
    with IndexStore.open(idx) as a, IndexStore.open(full) as b:
        assert len(a.deltas) == 2 and not b.deltas
        assert _key_view(a) == _key_view(b)
        # the last insert's units link to older names and new ones alike as in the full build; units of earlier
        # inserts miss only the links to names that later inserts introduced (left for compaction)
        keys = np.asarray(a.keys)
        last = {int(k) for k in keys[a.deltas[-1].first_node:]}
        earlier = {int(k) for k in keys[a.deltas[0].first_node:a.deltas[-1].first_node]}
        links_a, links_b = _links(a), _links(b)
        assert {k: v for k, v in links_b.items() if k[0] in last} == {k: v for k, v in links_a.items() if k[0] in last}
        got = {k: v for k, v in links_a.items() if k[0] in earlier}
        want = {k: v for k, v in links_b.items() if k[0] in earlier}
        assert got and got.items() <= want.items()
        later_names = {int(k) for k in keys[a.deltas[-1].first_node:]}
        assert all(k[1] in later_names for k in set(want) - set(got))


def _links(store) -> dict:
    """(unit key, entity key) -> weight of the name links of every segment."""
    import pyarrow.parquet as pq

    keys = np.asarray(store.keys)
    out = {}
    for folder in store.segment_folders:
        t = pq.read_table(folder / "linked.parquet")
        for s, d, w in zip(t.column("src").to_pylist(), t.column("dst").to_pylist(), t.column("w").to_pylist()):
            out[(int(keys[s]), int(keys[d]))] = w
    return out


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_compaction_gives_the_bytes_of_a_fresh_build(base, parts, tmp_path):
    from noderag.indexing.update.compact import compact_index

    idx = _copy(base, tmp_path / "idx")
    build_index([parts[1]], idx, progress=False)
    build_index([parts[2]], idx, progress=False)
    report = compact_index(idx, full=True, progress=False)
    assert not report.manifest.get("deltas")
    fresh = tmp_path / "fresh"
    build_index(parts, fresh, CFG, progress=False)
    a, b = current_path(idx), current_path(fresh)
    fa = {p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file()}
    fb = {p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file()}
    assert fa == fb
    for rel in sorted(fa - {"manifest.json", ".readers"}):
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    ma, mb = (json.loads((x / "manifest.json").read_text()) for x in (a, b))
    assert ma["checksums"]["files"] == mb["checksums"]["files"] and ma["counts"] == mb["counts"]


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_deltas_past_the_share_compact_by_themselves(base, parts, tmp_path):
    idx = _copy(base, tmp_path / "idx")
    small = NodeRAGConfig().with_overrides({"update.max_delta_share": 0.02,  # 10 of 270 is over 2%
                                            "update.compaction": "inline"})
    messages: list[str] = []
    report = build_index([parts[1]], idx, small, progress=False, log=messages.append)
    assert not report.manifest.get("deltas") and "communities" in report.manifest["stages"]
    assert any("update.max_delta_share" in m for m in messages)
    off = NodeRAGConfig().with_overrides({"update.segments": False})
    report = build_index([parts[2]], idx, off, progress=False)
    assert not report.manifest.get("deltas")


def test_a_damaged_delta_is_named(base, parts, tmp_path):
    idx = _copy(base, tmp_path / "idx")
    build_index([parts[1]], idx, progress=False)
    path = current_path(idx) / "deltas" / "1" / "text" / "000000.bin"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x20
    path.write_bytes(bytes(data))
    with pytest.raises(IndexDamagedError, match=r"checksum mismatch in deltas/1/text/000000\.bin"):
        verify_index(idx, "full")
    keys = current_path(idx) / "deltas" / "1" / "node_keys.npy"  # read whole by the next insert: checked first
    data = bytearray(keys.read_bytes())
    data[-1] ^= 0x20
    keys.write_bytes(bytes(data))
    with pytest.raises(IndexDamagedError, match=r"deltas/1/node_keys\.npy"):
        build_index([parts[2]], idx, progress=False)


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_a_delete_inside_the_deltas_rewrites_only_them(base, parts, tmp_path):
    idx = _copy(base, tmp_path / "idx")
    build_index([parts[1]], idx, progress=False)
    build_index([parts[2]], idx, progress=False)
    first = [json.loads(line) for line in parts[1].read_text("utf-8").splitlines()]
    gone = first[0]
    with IndexStore.open(idx) as before:
        old = _files(before.path)
        index = noderag.Index.open(idx).delete([gone["id"]])
        new = _files(index.path)
    assert [d.name for d in index.deltas] == ["3"] and index.manifest["counts"]["documents"] == 299
    assert index.manifest["runs"][-1]["documents_deleted"] == 1 and "communities" not in index.manifest["stages"]
    for rel in (r for r in old if not r.startswith("deltas/") and r not in ("manifest.json", ".readers")):
        assert new[rel].st_ino == old[rel].st_ino, rel  # the base is shared, not rewritten
    assert not any(r.startswith(("deltas/1/", "deltas/2/")) for r in new)
    needle = gone["text"][20:80].encode("utf-8")
    for p in index.path.rglob("*.npy"):
        assert needle not in p.read_bytes(), p
    assert gone["id"] not in index.retrieve(gone["text"][:160]).passages
    for d in first[1:4] + [json.loads(parts[2].read_text("utf-8").splitlines()[0])]:  # the others are still found
        assert d["id"] in index.retrieve(d["text"][:160]).passages[:3]
    verify_index(idx, "full")
    # and then the same documents as a fresh build of the survivors has them (nodes and decomposed edges by key)
    survivors = tmp_path / "survivors.jsonl"
    lines = [line for p in parts for line in p.read_text("utf-8").splitlines() if json.loads(line)["id"] != gone["id"]]
    survivors.write_text("\n".join(lines) + "\n", encoding="utf-8")
    fresh = tmp_path / "fresh"
    build_index([survivors], fresh, CFG, progress=False)
    with IndexStore.open(idx) as a, IndexStore.open(fresh) as b:
        assert _key_view(a) == _key_view(b)


def test_a_delete_of_a_base_document_is_done_in_place_beside_the_deltas(base, parts, tmp_path):
    idx = _copy(base, tmp_path / "idx")
    build_index([parts[1]], idx, progress=False)
    gone = json.loads(parts[0].read_text("utf-8").splitlines()[0])
    before = noderag.Index.open(idx).deltas
    index = noderag.Index.open(idx).delete([gone["id"]])  # noderag.indexing.update.scrub: the deltas are shared
    assert index.deltas == before and list(index.manifest["stages"]) == ["scrub"]
    needle = gone["text"][20:80].encode("utf-8")
    for p in index.path.rglob("*.npy"):
        assert needle not in p.read_bytes(), p
    assert gone["id"] not in index.retrieve(gone["text"][:160]).passages


_SUB = """
import sys
from noderag.indexing.driver import build_index
build_index([sys.argv[1]], sys.argv[2], progress=False)
"""

KILL_POINTS = ("assemble", "embed", "segment", "commit", "switch", "committed")  # the earlier ones as in a build


def _insert(part: Path, idx: Path, kill_at: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NODERAG_TEST_KILL_AT"}
    if kill_at:
        env["NODERAG_TEST_KILL_AT"] = kill_at
    return subprocess.run([sys.executable, "-c", _SUB, str(part), str(idx)], env=env, capture_output=True,
                          text=True, timeout=600)


def _generation_bytes(idx: Path) -> dict[str, bytes]:
    gen = current_path(idx)
    out = {p.relative_to(gen).as_posix(): p.read_bytes() for p in sorted(gen.rglob("*")) if p.is_file()}
    m = json.loads(out.pop("manifest.json"))
    m.pop("stages")
    m["checksums"].pop("manifest")
    out["manifest.json"] = json.dumps(m, sort_keys=True).encode()
    return out


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_a_delta_insert_killed_anywhere_resumes_to_the_same_bytes(base, parts, tmp_path):
    clean = _copy(base, tmp_path / "clean")
    assert _insert(parts[1], clean, None).returncode == 0
    want = _generation_bytes(clean)
    for point in KILL_POINTS:
        idx = _copy(base, tmp_path / point)
        killed = _insert(parts[1], idx, point)
        assert killed.returncode == -9, (point, killed.stderr[-2000:])
        again = _insert(parts[1], idx, None)
        assert again.returncode == 0, (point, again.stderr[-2000:])
        assert _generation_bytes(idx) == want, point


def test_flat_vectors_search_exactly():
    from noderag.graph.vectors import FlatVectors

    rng = np.random.default_rng(3)
    vecs = rng.normal(size=(50, 8)).astype(np.float32)
    ids = rng.permutation(1000)[:50]
    flat = FlatVectors(ids, vecs)
    q = rng.normal(size=(4, 8)).astype(np.float32)
    got_ids, got_dist = flat.search(q, 7)
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    dist = 1 - (q / np.linalg.norm(q, axis=1, keepdims=True)) @ unit.T
    for r in range(4):
        want = np.argsort(dist[r], kind="stable")[:7]
        assert got_ids[r].tolist() == ids[want].tolist()
        assert np.allclose(got_dist[r], dist[r][want], atol=1e-6)
    assert np.array_equal(flat.get(ids[[5, 2]]), vecs[[5, 2]])
    wide_ids, wide_dist = flat.search(q, 60)  # more than it holds: padded as the HNSW index pads
    assert (wide_ids[:, 50:] == -1).all() and np.isinf(wide_dist[:, 50:]).all()


def test_merged_postings_score_as_their_parts():
    from noderag.search.lexical import LexicalIndex, lexical_arrays
    from noderag.search.segments import merged_lexical

    a = LexicalIndex(lexical_arrays(np.array([10, 11, 12]), ["red apple tree", "green apple", "blue sky"]))
    b = LexicalIndex(lexical_arrays(np.array([20, 21]), ["apple pie", "red car sky"]))
    m = merged_lexical([a, b])
    for q in ("red apple", "sky", "pie tree green", "nothing"):
        ids_a, sa = a.scores(q)
        ids_b, sb = b.scores(q)
        ids_m, sm = m.scores(q)
        assert ids_m.tolist() == ids_a.tolist() + ids_b.tolist()
        assert np.allclose(sm, np.concatenate([sa, sb]))


def test_segmented_postings_give_each_passage_its_own_segments_impacts():
    """``SegmentedLexical`` answers the term-level reads of the search (BM25 of tokenised terms, per-term
    impacts on any ids, bound or not) as the merged postings do."""
    from noderag.search.lexical import LexicalIndex, lexical_arrays
    from noderag.search.segments import SegmentedLexical, merged_lexical

    def parts():
        return [LexicalIndex(lexical_arrays(np.array([10, 11, 12]), ["red apple tree", "green apple", "blue sky"])),
                LexicalIndex(lexical_arrays(np.array([20, 21]), ["apple pie", "red car sky"]))]

    merged = merged_lexical(parts())
    for bind in (False, True):
        seg = SegmentedLexical(parts(), np.array([10, 20]))
        if bind:
            seg.bind_passages(np.array([10, 11, 12, 20, 21]))
        for terms in ({"red", "apple"}, {"sky"}, {"nothing"}, set()):
            a, b = seg.term_scores(terms), merged.term_scores(terms)
            assert a[0].tolist() == b[0].tolist() and np.allclose(a[1], b[1])
        terms = ["apple", "red", "sky", "nothing"]
        asked = np.array([21, 10, 5, 21, 12, 99, 20])  # repeats, and ids no segment holds
        np.testing.assert_allclose(seg.term_impacts(terms, asked), merged.term_impacts(terms, asked))
        assert not seg.term_impacts(terms, asked)[:, [2, 5]].any()


def test_names_over_segments_match_as_one_matcher():
    from noderag.search.entities import EntityMatcher
    from noderag.search.segments import SegmentedNames

    base = EntityMatcher([1, 2, 3], ["Hank Snow", "Canada", "Hello Love"])
    delta = EntityMatcher([7, 8], ["Publix", "Snow Canada Records"])
    one = EntityMatcher([1, 2, 3, 7, 8], ["Hank Snow", "Canada", "Hello Love", "Publix", "Snow Canada Records"])
    both = SegmentedNames([base, delta])
    for text in ("Hank Snow left Canada for Publix.", "Snow Canada Records signed Hank Snow", "nothing here"):
        assert sorted(both.in_text(text)) == sorted(one.in_text(text))
    assert both.exact("publix") == [7] and sorted(both.containing("Canada", 5)) == [2, 8]
    got = both.match(["Hank Snow", "Publix"], "Who sang Hello Love?")
    assert [(m.node_id, m.kind) for m in got] == [(1, "exact"), (7, "exact"), (3, "in_query")]


def test_export_reads_every_segment(base, parts, tmp_path):
    from noderag.export import export_index

    idx = _copy(base, tmp_path / "idx")
    build_index([parts[1]], idx, progress=False)
    out = tmp_path / "out"
    export_index(idx, "parquet", out=out)
    import pyarrow.parquet as pq

    with IndexStore.open(idx) as store:
        nodes = pq.read_table(out / "nodes.parquet")
        assert nodes.num_rows == len(store) and nodes.column("id").to_pylist() == list(range(len(store)))
        assert pq.read_table(out / "documents.parquet").num_rows == store.manifest["counts"]["documents"] == 280


_DELETE = """
import sys
from noderag.indexing.update.delete import delete_documents
delete_documents(sys.argv[2], [sys.argv[1]])
"""


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_a_delete_inside_the_deltas_killed_resumes_to_the_same_bytes(base, parts, tmp_path):
    with_delta = _copy(base, tmp_path / "with-delta")
    build_index([parts[1]], with_delta, progress=False)
    gone = json.loads(parts[1].read_text("utf-8").splitlines()[2])["id"]

    def delete(idx: Path, kill_at: str | None) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "NODERAG_TEST_KILL_AT"}
        if kill_at:
            env["NODERAG_TEST_KILL_AT"] = kill_at
        return subprocess.run([sys.executable, "-c", _DELETE, gone, str(idx)], env=env, capture_output=True,
                              text=True, timeout=600)

    clean = _copy(with_delta, tmp_path / "clean")
    assert delete(clean, None).returncode == 0
    want = _generation_bytes(clean)
    for point in ("segment", "switch"):
        idx = _copy(with_delta, tmp_path / point)
        assert delete(idx, point).returncode == -9
        again = delete(idx, None)
        assert again.returncode == 0, again.stderr[-2000:]
        assert _generation_bytes(idx) == want, point


def test_deleting_every_document_of_the_deltas_leaves_the_base(base, parts, tmp_path):
    idx = _copy(base, tmp_path / "idx")
    build_index([parts[1]], idx, progress=False)
    ids = [json.loads(line)["id"] for line in parts[1].read_text("utf-8").splitlines()]
    index = noderag.Index.open(idx).delete(ids)
    assert index.deltas == [] and index.manifest["counts"]["documents"] == 270
    assert not (index.path / "deltas").exists()
    with IndexStore.open(base) as b:
        assert index.manifest["counts"]["nodes"] == b.manifest["counts"]["nodes"]
    assert index.retrieve(json.loads(parts[0].read_text("utf-8").splitlines()[5])["text"][:160]).passages


@pytest.mark.parametrize("seed", range(6))
def test_splicing_delta_edges_equals_the_sparse_sum_of_the_whole_matrices(seed):
    """``with_edges`` (the touched rows summed, the rest copied; or, past its row limit, the whole sum) against
    scipy's ``B + A + A.T`` over every node: same structure, same float32 weights bit for bit (edges
    repeated, edges the base has, new nodes)."""
    import scipy.sparse as sp

    from noderag.graph.csr import CSR
    from noderag.store.segments import with_edges

    rng = np.random.default_rng(seed)
    n_base = int(rng.integers(1, 300))
    n = n_base + int(rng.integers(0, 50))
    m = int(rng.integers(0, 4 * n_base))
    r, c = rng.integers(0, n_base, m), rng.integers(0, n_base, m)
    b = sp.coo_array((rng.random(m, dtype=np.float32), (r, c)), shape=(n_base, n_base))
    b = (b + b.T).tocsr()
    b.sum_duplicates()
    base = CSR(b.indptr.astype(np.int64), b.indices.astype(np.int32), b.data.astype(np.float32))
    k = int(rng.integers(0, 60)) if seed else 0
    src = rng.integers(0, n, k).astype(np.int64)
    dst = rng.integers(0, n, k).astype(np.int64)
    if k > 3:
        src[:2], dst[:2] = r[:2], c[:2]  # edges the base has
        src[2], dst[2] = src[3], dst[3]  # one edge twice
    w = rng.random(k, dtype=np.float32)
    indptr, indices, weights = with_edges(base, n, src, dst, w, max_spliced_rows=65536 if seed % 2 else 4)
    padded = sp.csr_array((b.data, b.indices, np.concatenate([b.indptr, np.full(n - n_base, b.indptr[-1])])),
                          shape=(n, n))
    added = sp.coo_array((w, (src, dst)), shape=(n, n))
    want = (padded + added + added.T).tocsr()
    want.sort_indices()
    assert np.array_equal(indptr, want.indptr) and np.array_equal(indices, want.indices)
    assert weights.dtype == np.float32 and np.array_equal(weights.view(np.uint32), want.data.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("seed", range(6))
def test_leaving_nodes_out_equals_masking_the_whole_matrix(seed):
    """``without_nodes`` (the rows of the nodes and of their neighbours looked at, the rest copied) against a
    mask of every entry in their rows or columns: the same CSR entry for entry (isolated nodes, repeats)."""
    import scipy.sparse as sp

    from noderag.graph.csr import CSR
    from noderag.store.segments import without_nodes

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    m = int(rng.integers(0, 4 * n))
    r, c = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = r != c
    b = sp.coo_array((rng.random(int(keep.sum()), dtype=np.float32), (r[keep], c[keep])), shape=(n, n))
    b = (b + b.T).tocsr()
    b.sum_duplicates()
    b.sort_indices()
    csr = CSR(b.indptr.astype(np.int64), b.indices.astype(np.int32), b.data.astype(np.float32))
    ids = np.unique(rng.integers(0, n, int(rng.integers(0, max(1, n // 4)))))
    indptr, indices, weights = without_nodes(csr, ids)
    rows = np.repeat(np.arange(n), np.diff(b.indptr))
    kept = ~(np.isin(rows, ids) | np.isin(b.indices, ids))
    want_ptr = np.concatenate([[0], np.cumsum(np.bincount(rows[kept], minlength=n))])
    assert np.array_equal(indptr, want_ptr) and np.array_equal(indices, b.indices[kept])
    assert np.array_equal(weights, b.data[kept].astype(np.float32))


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_a_base_with_stored_sorted_keys_takes_inserts_as_one_without(base, parts, tmp_path, monkeypatch):
    """A large base stores its keys sorted (``HeteroGraph.save`` from ``KEY_ORDER_FROM`` nodes on); an insert
    binary-searches them in place, checks only the node types and flags byte for byte first (not the keys),
    and merges exactly as with the keys bucketed in memory."""
    import noderag.graph.hetero as hetero
    from noderag.indexing.run import delta_reads
    from noderag.store.verify import _check_key_order

    monkeypatch.setattr(hetero, "KEY_ORDER_FROM", 1)
    stored = tmp_path / "stored"
    build_index([parts[0]], stored, CFG, progress=False)
    gen = current_path(stored)
    assert (gen / "node_keys_sorted.npy").is_file() and (gen / "node_key_order.npy").is_file()
    manifest = json.loads((gen / "manifest.json").read_text())
    assert "node_keys.npy" not in delta_reads(manifest, gen) and "node_keys.npy" in delta_reads(manifest)
    bucketed = _copy(base, tmp_path / "bucketed")
    for part in parts[1:]:
        build_index([part], stored, progress=False)
        build_index([part], bucketed, progress=False)
    verify_index(stored, "full")
    with IndexStore.open(stored) as a, IndexStore.open(bucketed) as b:
        assert len(a.deltas) == 2 and _key_view(a) == _key_view(b) and _links(a) == _links(b)
    ga, gb = current_path(stored) / "deltas", current_path(bucketed) / "deltas"
    files = sorted(p.relative_to(gb).as_posix() for p in gb.rglob("*") if p.is_file())
    assert files and all((ga / rel).read_bytes() == (gb / rel).read_bytes() for rel in files)  # the same deltas
    # the structural check of the stored order (checksums aside): ids swapped are named
    gen = current_path(stored)
    order = np.load(gen / "node_key_order.npy")
    bad = tmp_path / "bad"
    bad.mkdir()
    for rel in ("node_keys.npy", "node_keys_sorted.npy"):
        (bad / rel).write_bytes((gen / rel).read_bytes())
    np.save(bad / "node_key_order.npy", order[::-1].copy())
    with pytest.raises(IndexDamagedError, match="node_keys_sorted.npy"):
        _check_key_order(bad, order.shape[0])


def test_a_merging_compaction_starts_leiden_from_the_stored_communities(base, parts, tmp_path):
    from noderag.indexing.update.compact import compact_index

    gen = current_path(base)
    labels, types = np.load(gen / "communities.npy"), np.load(gen / "node_types.npy")
    assert labels.dtype == np.int32 and labels.shape == types.shape
    assert np.all(labels[np.isin(types, (int(NodeType.H), int(NodeType.O)))] == -1)  # made after Leiden
    assert np.all(labels[types == S] >= 0)
    idx = _copy(base, tmp_path / "idx")
    build_index([parts[1]], idx, progress=False)
    report = compact_index(idx, progress=False)
    assert report.manifest["stages"]["communities"].get("warm_start") is True
    verify_index(idx, "full")
    after = np.load(current_path(idx) / "communities.npy")
    assert after.shape[0] > labels.shape[0] and np.all(after[labels.shape[0]:][
        np.load(current_path(idx) / "node_types.npy")[labels.shape[0]:] == S] >= 0)  # the inserted units joined
    # the switch: off, or no stored labels, or a run that renumbers nodes (a delete, --full) starts cold
    from dataclasses import replace
    from types import SimpleNamespace

    from noderag.indexing.driver import _stored_communities
    from noderag.indexing.plan import Compaction, Recompute, RunPlan

    n_nodes = labels.shape[0] + 5
    plan = RunPlan(root=idx, config=CFG, previous=SimpleNamespace(path=current_path(base)), kind=Compaction("merge"),
                   run_id="r", say=print)
    assert np.array_equal(_stored_communities(plan, n_nodes), labels)
    assert np.array_equal(_stored_communities(replace(plan, kind=Recompute("update.segments = false")), n_nodes),
                          labels)  # an insert that recomputes keeps every node id
    off = CFG.with_overrides({"communities.warm_start": False})
    for change in ({"config": off}, {"kind": Recompute("a delete", reassembles=True)}, {"kind": Compaction("full")},
                   {"previous": None}):
        assert _stored_communities(replace(plan, **change), n_nodes) is None


def test_damaged_stored_communities_are_named(base, tmp_path):
    idx = _copy(base, tmp_path / "idx")
    path = current_path(idx) / "communities.npy"
    np.save(path, np.load(path)[:-1])
    with pytest.raises(IndexDamagedError, match="communities.npy"):
        verify_index(idx, "cheap")
