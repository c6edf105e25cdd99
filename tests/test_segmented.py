"""Segment-parallel builds (noderag.indexing.segmented) in this process: one index across segments.

A small corpus whose question needs two documents that land in different segments, joined only by an entity
both mention: the segmented index links that entity (an alias), walks across it and ranks as the one-segment
index does; inserts, deletes and compaction keep working on it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse import csr_array
from scipy.sparse.csgraph import connected_components

import noderag
from noderag.config import NodeRAGConfig
from noderag.errors import BuildError
from noderag.indexing.segmented import build_segmented
from noderag.indexing.update.compact import compact_index
from noderag.store.aliases import Aliases, merge_keys, read_aliases, write_aliases
from noderag.store.errors import IndexDamagedError
from noderag.store.tables import IndexStore

DOCS = [
    {"id": "a", "title": "Ilse Marrow", "text": "Ilse Marrow was an engineer from Dunmere. In 1921 Ilse Marrow designed "
                                                "the Corven Bridge, a stone arch over a cold river."},
    {"id": "b", "title": "Dunmere", "text": "Dunmere is a market town known for its wool fairs. The Dunmere Chronicle "
                                            "is printed there every week."},
    {"id": "c", "title": "Pell Harbour", "text": "Pell Harbour hosts a fishing fleet. The Harbour Guild of Pell Harbour "
                                                 "meets in the old customs house."},
    {"id": "d", "title": "Corven Bridge", "text": "The Corven Bridge spans the outflow of Lake Tamsin. Boats from Lake "
                                                  "Tamsin pass under the Corven Bridge in summer."},
]
QUESTION = "Which lake flows under the bridge that Ilse Marrow designed?"
CONFIG = {"embed": {"spec": "hash:64"}, "update": {"max_delta_share": 100.0}}


def _corpus(folder: Path, docs=DOCS) -> Path:
    path = folder / "corpus.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("seg")
    corpus = _corpus(tmp)
    cfg = NodeRAGConfig.from_dict(CONFIG)
    one = build_segmented([corpus], tmp / "one", cfg, segments=1)
    two = build_segmented([corpus], tmp / "two", cfg, segments=2)
    return tmp, one, two


def test_manifest_lists_the_parts_as_base_and_delta_segments(built):
    tmp, _, two = built
    assert two.manifest["deltas"] == [{"name": "1", "first_node": two.parts[0]["nodes"],
                                       "nodes": two.parts[1]["nodes"], "first_document": 2, "documents": 2}]
    assert two.manifest["counts"]["documents"] == 4
    assert two.manifest["segments"]["aliases"] >= 1  # Corven Bridge, in both halves
    with IndexStore.open(tmp / "two", verify="full") as store:  # every checksum and structure check passes
        assert [str(p) for p in store.documents.column("source").to_pylist()] == ["a", "b", "c", "d"]


def test_question_with_evidence_in_two_segments_ranks_as_on_one_segment(built):
    tmp = built[0]
    got = {}
    for name in ("one", "two"):
        got[name] = _ranked(tmp / name, QUESTION)
    assert got["two"] == got["one"]
    assert got["two"][:2] == ["a", "d"]


def test_a_shared_entity_is_one_node_to_the_graph(built, monkeypatch):
    tmp = built[0]
    with IndexStore.open(tmp / "two") as store:
        g, keys, types = store.graph, np.asarray(store.keys), np.asarray(store.types)
        aliases = read_aliases(store.path, g.n)
        assert np.array_equal(keys[aliases.dup], keys[aliases.canon]) and np.all(aliases.canon < aliases.dup)
        deg = np.diff(np.asarray(g.structural.indptr))
        assert np.all(deg[aliases.dup] == 0)  # a duplicate's edges end at its canonical node
        t_nodes = np.flatnonzero(types == 0)
        first = store.deltas[0].first_node
        assert t_nodes[0] < first <= t_nodes[-1]
        assert _component(g, t_nodes[0]) == _component(g, t_nodes[-1])  # doc a's passage reaches doc d's
    import noderag.store.segments as segments

    monkeypatch.setattr(segments, "read_aliases", lambda *a, **k: None)
    with IndexStore.open(tmp / "two") as store:  # without the alias table the halves do not meet
        assert _component(store.graph, t_nodes[0]) != _component(store.graph, t_nodes[-1])


def _ranked(root: Path, question: str) -> list[str]:
    idx = noderag.Index.open(root)
    try:
        return [str(p) for p in idx.retrieve(question).passages]
    finally:
        idx.close()


def _component(g, node: int) -> int:
    indptr = np.asarray(g.structural.indptr)
    m = csr_array((np.ones(len(g.structural.indices)), np.asarray(g.structural.indices), indptr), shape=(g.n, g.n))
    return int(connected_components(m, directed=False)[1][node])


def test_name_matching_answers_the_canonical_node(built):
    tmp = built[0]
    idx = noderag.Index.open(tmp / "two")
    hits = idx.query_index.names.exact("Corven Bridge")
    idx.close()
    with IndexStore.open(tmp / "two") as store:
        aliases = read_aliases(store.path)
    assert len(hits) == 1 and hits[0] in set(aliases.canon.tolist())


def test_merge_keys_marks_later_copies_of_a_key():
    a = merge_keys([(0, np.array([5, 3, 9], np.uint64)), (3, np.array([9, 1], np.uint64)),
                    (5, np.array([3, 1, 7], np.uint64))])
    assert a.dup.tolist() == [3, 5, 6] and a.canon.tolist() == [2, 1, 4]
    assert a.resolve(np.array([6, 7, 3])).tolist() == [4, 7, 2]
    assert a.resolve_list([6, 4, 1]) == [4, 1]


def test_a_damaged_alias_table_is_named(tmp_path):
    write_aliases(tmp_path, Aliases(np.array([4, 2]), np.array([1, 0])))
    with pytest.raises(IndexDamagedError, match="aliases/dup.npy"):
        read_aliases(tmp_path)


def test_more_segments_than_documents_is_refused(tmp_path):
    with pytest.raises(BuildError, match="4 documents cannot make 5 segments"):
        build_segmented([_corpus(tmp_path)], tmp_path / "idx", NodeRAGConfig.from_dict(CONFIG), segments=5)


def test_insert_delete_and_compact_on_a_segmented_index(tmp_path):
    cfg = NodeRAGConfig.from_dict(CONFIG)
    root = tmp_path / "idx"
    build_segmented([_corpus(tmp_path)], root, cfg, segments=3)
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps({"id": "e", "title": "Lake Tamsin", "text": "Lake Tamsin is fed by mountain streams. "
                               "Ilse Marrow sketched Lake Tamsin before building the Corven Bridge."}) + "\n")
    q = "Which lake did Ilse Marrow sketch?"
    noderag.Index.open(root).insert([new])
    with IndexStore.open(root, verify="full") as store:
        assert len(store.deltas) == 3  # two parts and the insert's delta
        before = read_aliases(store.path)
    assert "e" in _ranked(root, q)[:2]
    noderag.Index.open(root).delete(["d"])  # in the last part: the deltas from it on are rewritten, aliases dropped
    with IndexStore.open(root, verify="full") as store:
        after = read_aliases(store.path, store.graph.n)
        assert np.all(after.dup < store.deltas[-1].first_node)
        assert len(after) < len(before)
    assert "d" not in _ranked(root, q)
    compact_index(root, progress=False)  # a segmented index compacts by re-assembling every document
    with IndexStore.open(root, verify="full") as store:
        assert not store.deltas and read_aliases(store.path) is None
        assert np.unique(np.asarray(store.keys)).shape[0] == store.graph.n
    assert sorted(_ranked(root, q)) == ["a", "b", "c", "e"]


def test_cli_build_segments(tmp_path, capsys):
    from noderag.cli import main

    assert main(["build", str(_corpus(tmp_path)), "--index", str(tmp_path / "idx"), "--segments", "2",
                 "--embed", "hash:64", "--no-progress"]) == 0
    assert "4 document(s) in 2 segments" in capsys.readouterr().out
    with IndexStore.open(tmp_path / "idx") as store:
        assert [d.name for d in store.deltas] == ["1"]


def test_a_delete_in_place_of_the_canonical_node_leaves_the_duplicate_standing(tmp_path):
    root = tmp_path / "idx"
    build_segmented([_corpus(tmp_path)], root, NodeRAGConfig.from_dict(CONFIG), segments=2)
    with IndexStore.open(root) as store:
        aliases = read_aliases(store.path)
    noderag.Index.open(root).delete(["a"])  # a base document: scrubbed in place, Corven Bridge's canonical node too
    with IndexStore.open(root, verify="full") as store:
        assert store.manifest["counts"].get("scrubbed_nodes")
        deg = np.diff(np.asarray(store.graph.structural.indptr))
        assert np.all(deg[aliases.dup] > 0)  # each duplicate keeps its own segment's edges
    idx = noderag.Index.open(root)
    try:
        hits = idx.query_index.names.exact("Corven Bridge")
        assert hits == [int(d) for d in aliases.dup if int(d) in hits] and len(hits) == 1
        assert bool(idx.query_index.active[hits[0]])
    finally:
        idx.close()
    assert "d" in _ranked(root, "Which lake does the Corven Bridge span?")[:2]


def test_parts_with_sharded_vectors_verify_and_search(tmp_path):
    cfg = NodeRAGConfig.from_dict({**CONFIG, "embed": {"spec": "hash:64", "vector_shards": 2}})
    root = tmp_path / "idx"
    build_segmented([_corpus(tmp_path)], root, cfg, segments=2)
    with IndexStore.open(root, verify="full") as store:  # the cheap check counted every shard of every segment
        assert (store.path / "deltas" / "1" / "vectors.1.usearch").is_file()
        types = np.asarray(store.types)
        embedded = np.flatnonzero(np.isin(types, (0, 1)) & (np.arange(types.shape[0]) >= store.deltas[0].first_node))
        assert np.all(store.vectors.contains(embedded))
    assert _ranked(root, QUESTION)[:2] == ["a", "d"]


def test_a_segmented_build_into_an_existing_index_is_refused(built):
    tmp = built[0]
    with pytest.raises(BuildError, match="holds an index already"):
        build_segmented([tmp / "corpus.jsonl"], tmp / "two", NodeRAGConfig.from_dict(CONFIG), segments=2)
    with IndexStore.open(tmp / "two", verify="full") as store:  # untouched
        assert store.generation == 1
