"""A delete of base documents scrubs them in place (noderag.indexing.update.scrub): the text is gone from every file,
the index verifies and searches without them, ids stay, a full compaction gives the fresh build of the
survivors byte for byte, inserts and merges work on top, a kill leaves the previous generation; and the
rules that pick the scrubbed nodes, the tombstone keys and the blanked string blobs against simple references."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from noderag.api import Index
from noderag.indexing.update.compact import compact_index
from noderag.indexing.update.delete import UnknownDocumentError, delete_documents
from noderag.indexing.driver import build_index
from noderag.indexing.update.scrub import scrubbed_nodes, tombstone_keys
from noderag.config import NodeRAGConfig
from noderag.graph.types import NodeType
from noderag.search.query_index import _zeroed
from noderag.store.paged_blob import unzeroed
from noderag.store.generations import current_generation, current_path
from noderag.store.verify import verify_index

from test_delete import _files_with

T, S, N, R, A, H, O = (int(t) for t in NodeType)
SECRET = "Quillon Ebbersgate"


def _rows() -> list[dict]:
    """Towns, mayors and engineers that documents share, plus one document naming a secret person."""
    rows = [{"id": f"d{i}", "title": f"Town {i}",
             "text": f"Alder Town {i} lies on the river Wend{i % 4}. Mayor Hollis{i % 3} opened its bridge in "
                     f"{1880 + i}. Engineer Vance{i % 5} designed the bridge of Alder Town {i}."} for i in range(16)]
    rows[5] = {"id": "d5", "title": "Ferry", "text": f"{SECRET} founded the Grey Heron ferry line in 1871. "
                                                     f"Engineer Vance0 built the ferries of {SECRET}."}
    return rows


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _config(**over) -> NodeRAGConfig:
    return NodeRAGConfig().with_overrides({"embed.spec": "hash:32", **over})


def _files(gen: Path) -> dict[str, bytes]:
    return {p.relative_to(gen).as_posix(): p.read_bytes() for p in gen.rglob("*")
            if p.is_file() and p.name not in ("manifest.json", ".readers")}


@pytest.fixture()
def built(tmp_path):
    idx = tmp_path / "idx"
    build_index([_jsonl(tmp_path / "all.jsonl", _rows())], idx, _config(), progress=False)
    return idx


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_scrub_removes_the_text_and_compacts_to_the_fresh_build(tmp_path, built):
    rows = _rows()
    gone = ["d5", "d9", "d12"]
    assert _files_with(built, SECRET)
    rep = delete_documents(built, gone)
    assert rep.manifest["runs"][-1]["scrubbed"] is True and rep.deleted_documents == 3
    gen = current_path(built)
    assert _files_with(gen, SECRET) == [] and _files_with(gen, "Alder Town 9 lies") == []
    assert _files_with(gen, "Alder Town 10 lies")  # a survivor's text stays
    verify_index(gen, "full")
    with Index.open(built) as idx:
        docs = idx.documents.column("source").to_pylist()
        assert docs == [r["id"] if r["id"] not in gone else None for r in rows]  # tombstones keep the ids
        assert idx.manifest["counts"]["documents"] == len(rows) - 3
        for q in (f"Who founded the Grey Heron ferry line? {SECRET}", "Where does Alder Town 9 lie?"):
            res = idx.retrieve(q)
            assert not set(res.passages) & set(gone) and len(res.passages) >= 10
            assert SECRET not in res.context and "Alder Town 9 " not in res.context
        assert "d10" in idx.retrieve("Where does Alder Town 10 lie?").passages[:2]
    with pytest.raises(UnknownDocumentError):
        delete_documents(built, ["d5"])
    ref = tmp_path / "ref"
    build_index([_jsonl(tmp_path / "keep.jsonl", [r for r in rows if r["id"] not in gone])], ref, _config(),
                progress=False)
    compact_index(built, full=True)
    assert _files(current_path(built)) == _files(current_path(ref))


def test_a_scrub_shares_the_graph_and_leaves_the_scrubbed_edges_out_at_open(built):
    """The graph files, node types and communities are shared (hard links); ``scrubbed.npy`` names the nodes whose
    edges they still hold, and every opened graph (search, insert) leaves those edges out."""
    from noderag.graph.hetero import HeteroGraph
    from noderag.store.segments import generation_graph

    with Index.open(built):  # a reader pins the generation the delete starts from
        before = current_path(built)
        delete_documents(built, ["d5", "d9"])
        gen = current_path(built)
        for rel in ("graph/indices.npy", "graph/weights.npy", "graph/indptr.npy", "node_types.npy",
                    "communities.npy"):
            assert (gen / rel).stat().st_ino == (before / rel).stat().st_ino, rel
    ids = np.load(gen / "scrubbed.npy")
    raw = HeteroGraph.load(gen)
    assert ids.size and np.diff(np.asarray(raw.structural.indptr))[ids].any()  # still on disk
    with Index.open(built) as idx:
        for g in (idx.graph, generation_graph(gen, idx.manifest)):
            st = g.structural
            assert not np.diff(np.asarray(st.indptr))[ids].any() and not np.isin(np.asarray(st.indices), ids).any()
            assert st.nnz < raw.structural.nnz
        assert not np.asarray(idx.query_index.active)[ids].any()
        assert "d5" not in idx.retrieve(f"Who founded the Grey Heron ferry line? {SECRET}").passages


def test_filtering_decompositions_rewrites_only_the_parts_that_held_the_documents(tmp_path):
    from noderag.store.decompositions import (PART_ROWS, filter_decompositions, part_rows_for, read_decompositions,
                                              traces_columns, write_decompositions)

    n = 3 * PART_ROWS + 17
    docs = [i // 3 for i in range(n)]  # three chunks a document
    units = [json.dumps([[i, [f"E{i}"], [["a", "r", "b"]]]]) for i in range(n)]
    write_decompositions(tmp_path / "a", traces_columns(docs, list(range(n)), units))
    gone = [5, docs[2 * PART_ROWS + 4]]  # in the first and the third part
    assert filter_decompositions(tmp_path / "a", tmp_path / "b", gone) == 2
    same = [p.name for p in sorted((tmp_path / "a").iterdir())
            if (tmp_path / "b" / p.name).stat().st_ino == p.stat().st_ino]
    assert same == ["000001.parquet", "000003.parquet"]
    want = [t for t in read_decompositions(tmp_path / "a") if t.doc_id not in gone]
    assert read_decompositions(tmp_path / "b") == want and len(want) == n - 6
    assert part_rows_for(n) == PART_ROWS and part_rows_for(10**6) == 1024  # ~1,024 parts at most


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
@pytest.mark.parametrize("sorted_keys", [False, True])
def test_a_scrub_shares_the_keys_and_an_insert_never_finds_a_scrubbed_node(tmp_path, monkeypatch, sorted_keys):
    """The keys (and a large base's stored sorted keys) are shared; ``scrubbed_keys.npy`` holds the scrubbed
    nodes' tombstones, which every reader puts in. The same text inserted again makes new nodes, as with the
    keys bucketed in memory, and the index verifies."""
    import noderag.graph.hetero as hetero

    if sorted_keys:
        monkeypatch.setattr(hetero, "KEY_ORDER_FROM", 1)
    rows = _rows()
    idx = tmp_path / "idx"
    build_index([_jsonl(tmp_path / "all.jsonl", rows)], idx, _config(), progress=False)
    with Index.open(idx):
        before = current_path(idx)
        delete_documents(idx, ["d5"])
        gen = current_path(idx)
        names = ["node_keys.npy"] + (["node_keys_sorted.npy", "node_key_order.npy"] if sorted_keys else [])
        for rel in names:
            assert (gen / rel).stat().st_ino == (before / rel).stat().st_ino, rel
    ids, tomb = np.load(gen / "scrubbed.npy"), np.load(gen / "scrubbed_keys.npy")
    stored = np.load(gen / "node_keys.npy")
    assert ids.shape == tomb.shape and not np.isin(tomb, stored).any()
    with Index.open(idx) as index:
        assert np.array_equal(np.asarray(index.graph.keys)[ids], tomb)
    rep = build_index([_jsonl(tmp_path / "back.jsonl", [rows[5]])], idx, _config(), progress=False)
    assert rep.added_documents == 1 and rep.manifest.get("deltas")
    verify_index(current_path(idx), "full")
    with Index.open(idx) as index:
        n0 = index.deltas[0].first_node
        assert index.retrieve(f"Who founded the Grey Heron ferry line? {SECRET}").passages[0] == "d5"
        back = np.asarray(index.graph.keys)[n0:]
        assert np.isin(stored[ids], back).any()  # the text's keys again, on new nodes of the delta
        assert np.unique(np.asarray(index.graph.keys)).size == index.graph.n


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_insert_merge_and_delete_again_after_a_scrub(tmp_path, built):
    rows = _rows()
    delete_documents(built, ["d5", "d7"])
    # the same text again gets new nodes (the scrubbed ones' keys are tombstones), as a delta segment
    rep = build_index([_jsonl(tmp_path / "back.jsonl", [rows[5]])], built, _config(), progress=False)
    assert rep.added_documents == 1 and rep.manifest.get("deltas")
    verify_index(current_path(built), "full")
    with Index.open(built) as idx:
        assert idx.retrieve(f"Who founded the Grey Heron ferry line? {SECRET}").passages[0] == "d5"
    compact_index(built)  # merging: ids kept, the scrubbed nodes stay inactive and edge-less
    verify_index(current_path(built), "full")
    with Index.open(built) as idx:
        assert idx.retrieve(f"Who founded the Grey Heron ferry line? {SECRET}").passages[0] == "d5"
        assert "d7" not in idx.retrieve("Where does Alder Town 7 lie?").passages
    delete_documents(built, ["d5", "d3"])  # a second scrub on top of the first
    gen = current_path(built)
    assert _files_with(gen, SECRET) == []
    verify_index(gen, "full")


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_scrub_beside_delta_segments(tmp_path, built):
    rows = _rows()
    extra = [{"id": "x1", "title": "Mill", "text": f"Birch Mill stands by Wend1. {SECRET} bought Birch Mill."},
             {"id": "x2", "title": "Quay", "text": "Stone Quay faces Wend2. Mayor Hollis2 paved Stone Quay."}]
    build_index([_jsonl(tmp_path / "more.jsonl", extra)], built, _config(), progress=False)
    rep = delete_documents(built, ["d5", "d6"])  # base documents only: scrubbed, the delta shared
    assert rep.manifest["runs"][-1]["scrubbed"] is True and rep.manifest.get("deltas")
    gen = current_path(built)
    verify_index(gen, "full")
    assert _files_with(gen, "founded the Grey Heron") == [] and _files_with(gen, "Birch Mill stands")
    with Index.open(built) as idx:
        # SECRET was first named in d5: its node is scrubbed, and the delta's edges to it are dropped at open
        assert idx.retrieve("Who bought Birch Mill?").passages[0] == "x1"
        assert not {"d5", "d6"} & set(idx.retrieve(f"{SECRET} Grey Heron ferry").passages)
        assert idx.manifest["counts"]["documents"] == len(rows) - 2 + 2
    compact_index(built)  # merging: the delta's name links and edges to scrubbed nodes are left out
    verify_index(current_path(built), "full")
    said: list[str] = []
    rep = delete_documents(built, ["d1", "x2"], log=said.append)  # the merged index has no deltas: scrubbed
    assert rep.manifest["runs"][-1].get("scrubbed") is True
    build_index([_jsonl(tmp_path / "more2.jsonl", [dict(extra[1], id="x3", text="Oak Lane meets Wend3.")])],
                built, _config(), progress=False)
    rep = delete_documents(built, ["d2", "x3"], log=said.append)  # base and delta together: recomputed
    assert "scrubbed" not in rep.manifest["runs"][-1]
    assert any("recomputing the whole index: documents of the base and of the delta" in m for m in said), said
    ref = tmp_path / "ref"
    keep = [r for r in rows if r["id"] not in ("d5", "d6", "d1", "d2")] + [extra[0]]
    build_index([_jsonl(tmp_path / "keep.jsonl", keep)], ref, _config(), progress=False)
    compact_index(built, full=True)
    assert _files(current_path(built)) == _files(current_path(ref))


_DEL = """
import sys
from noderag.indexing.update.delete import delete_documents
delete_documents(sys.argv[1], sys.argv[2:])
"""


def test_a_killed_scrub_leaves_the_previous_generation(built):
    gen = current_generation(built)
    before = _files(current_path(built))
    for point in ("commit", "switch"):
        r = subprocess.run([sys.executable, "-c", _DEL, str(built), "d5"], capture_output=True, text=True,
                           timeout=300, env=dict(os.environ, NODERAG_TEST_KILL_AT=point))
        assert r.returncode == -9, (point, r.stderr)
        assert current_generation(built) == gen and _files(current_path(built)) == before
    r = subprocess.run([sys.executable, "-c", _DEL, str(built), "d5"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert not (built / "stages").exists() and _files_with(current_path(built), SECRET) == []


# ------------------------------------------------------------------ the rules against references


def test_scrubbed_nodes_follow_first_mentions_and_quotes():
    # chunk 0 (doc 0): T0 S1 N2 R3 ; chunk 1 (doc 1): T4 S5 N6 R7 ; then A8 (of N2), A9 (of N6), H10, O11
    types = np.array([T, S, N, R, T, S, N, R, A, A, H, O], dtype=np.uint8)
    doc = np.array([0, 0, -1, -1, 1, 1, -1, -1, -1, -1, -1, -1])
    texts = {1: "Ann founded Foo.", 2: "Ann", 3: "Ann founded Foo", 5: "Foo hired Ann.", 6: "Foo",
             7: "Foo hired Ann", 8: "Ann: Ann founded Foo.", 9: "Foo: a firm on the Wend.", 10: "Foo hired Ann.",
             11: "Foo"}
    edges = [(1, 0), (2, 1), (2, 3), (5, 4), (6, 5), (2, 5), (6, 7), (2, 7), (8, 2), (9, 6), (10, 5), (11, 10)]
    src = np.array([a for a, b in edges] + [b for a, b in edges])
    dst = np.array([b for a, b in edges] + [a for a, b in edges])
    order = np.lexsort((dst, src))
    indptr = np.zeros(types.size + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=types.size), out=indptr[1:])
    comm = np.array([0, 0, 0, 0, 1, 1, 1, 1, 0, 1, -1, -1], dtype=np.int32)
    dead = scrubbed_nodes(types, doc, indptr, dst[order], comm, [0], lambda i: texts.get(i, ""))
    # doc 0's T/S; Ann (first named there) and the relations naming her; Ann's attribute. Foo's attribute
    # quotes no deleted text and survives; H10 quotes only doc 1; O11 names no scrubbed entity
    assert np.flatnonzero(dead).tolist() == [0, 1, 2, 3, 7, 8]
    dead1 = scrubbed_nodes(types, doc, indptr, dst[order], comm, [1], lambda i: texts.get(i, ""))
    assert np.flatnonzero(dead1).tolist() == [4, 5, 6, 7, 9, 10, 11]


def test_tombstone_keys_are_distinct_and_clear_of_the_keys():
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 2**63, 5000, dtype=np.uint64)
    ids = np.sort(rng.choice(5000, 300, replace=False))
    z = tombstone_keys(ids, keys)
    assert np.unique(z).size == 300 and not np.isin(z, keys).any()
    assert np.array_equal(z, tombstone_keys(ids, keys))  # the same in any process
    clash = np.concatenate([keys, z[:1]])  # a clash takes the next salt
    z2 = tombstone_keys(ids, clash)
    assert not np.isin(z2, clash).any()


@pytest.mark.parametrize("seed", range(5))
def test_zeroed_blob_matches_python(seed):
    rng = np.random.default_rng(seed)
    strings = ["".join(rng.choice(list("abcé漢 "), rng.integers(0, 6))) for _ in range(40)]
    data = "".join(strings).encode("utf-8")
    off = np.zeros(41, np.int64)
    np.cumsum([len(s.encode("utf-8")) for s in strings], out=off[1:])
    blank = rng.random(40) < 0.3
    zeroed = _zeroed(off, np.frombuffer(data, np.uint8), blank)  # the same length: the offsets are shared
    assert zeroed.shape[0] == len(data)
    got = [unzeroed(bytes(zeroed[off[i]:off[i + 1]]).decode("utf-8")) for i in range(40)]
    assert got == ["" if b else s for s, b in zip(strings, blank)]


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_a_replacement_is_a_scrub_then_a_delta_insert(tmp_path, built):
    rows = _rows()
    new = dict(rows[5], text="Ilse Marrow founded the Blue Finch ferry line in 1902. Engineer Vance0 built its ferries.")
    said: list[str] = []
    rep = build_index([_jsonl(tmp_path / "v2.jsonl", [new, rows[6]])], built, _config(), progress=False,
                      log=said.append)
    assert rep.added_documents == 1 and rep.duplicates == 1 and rep.deleted_documents == 1
    assert rep.manifest.get("deltas") and [r.get("scrubbed") for r in rep.manifest["runs"][-2:]] == [True, None]
    gen = current_path(built)
    assert _files_with(gen, SECRET) == [] and _files_with(gen, "Blue Finch ferry")
    verify_index(gen, "full")
    with Index.open(built) as idx:
        assert idx.retrieve("Who founded the Blue Finch ferry line?").passages[0] == "d5"
        assert [s for s in idx.documents.column("source").to_pylist() if s] == \
            [r["id"] for r in rows if r["id"] != "d5"] + ["d5"]
    ref = tmp_path / "ref"
    build_index([_jsonl(tmp_path / "order.jsonl", [r for r in rows if r["id"] != "d5"] + [new])], ref, _config(),
                progress=False)
    compact_index(built, full=True)
    assert _files(current_path(built)) == _files(current_path(ref))


_INSERT = """
import sys
from noderag.indexing.driver import build_index
from noderag.config import NodeRAGConfig
build_index([sys.argv[2]], sys.argv[1], NodeRAGConfig().with_overrides({"embed.spec": "hash:32"}), progress=False)
"""


def test_a_replacement_killed_between_its_scrub_and_its_insert_completes_on_a_rerun(tmp_path, built):
    rows = _rows()
    part = _jsonl(tmp_path / "v2.jsonl", [dict(rows[5], text="Ilse Marrow founded the Blue Finch ferry line.")])
    twin = tmp_path / "twin"
    shutil.copytree(built, twin)
    r = subprocess.run([sys.executable, "-c", _INSERT, str(built), str(part)], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, NODERAG_TEST_KILL_AT="committed"))
    assert r.returncode == -9, r.stderr
    with Index.open(built) as idx:  # the old version is gone, the new one not in yet
        assert "d5" not in idx.documents.column("source").to_pylist()
    r = subprocess.run([sys.executable, "-c", _INSERT, str(built), str(part)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    build_index([part], twin, _config(), progress=False)  # the same replacement, not interrupted
    assert _files(current_path(built)) == _files(current_path(twin))
