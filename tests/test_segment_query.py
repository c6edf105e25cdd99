"""One look-up for all segments (noderag.search.segments) answers as asking every segment in turn did.

BM25 over all segments in one kernel call equals each segment's own sums bit for bit (random postings split
into parts, impacts of very different magnitudes so that any change in a passage's addition order shows); the
name directories, texts, labels and document labels of a segmented index equal the per-segment look-ups.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderag.config import NodeRAGConfig
from noderag.indexing.segmented import build_segmented
from noderag.search.entities import MappedNames, hash64, name_arrays
from noderag.search.lexical import TERM_CACHE_FROM, LexicalIndex
from noderag.search.segments import SegmentedLexical, SegmentedNames
from noderag.store.aliases import Aliases

VOCAB = [f"w{i}" for i in range(40)]


def _part(rng: np.random.Generator, first: int, n_nodes: int, long_term: str | None) -> tuple[LexicalIndex, np.ndarray]:
    """A random BM25 index over the passages among node ids ``first .. first + n_nodes`` (about two in three nodes
    are passages), the terms a random subset of VOCAB (``long_term`` in every passage), impacts spread over
    eleven orders of magnitude; and its passage ids."""
    nodes = np.arange(first, first + n_nodes)
    passages = np.sort(rng.choice(nodes, size=max(1, 2 * n_nodes // 3), replace=False))
    terms = [t for t in VOCAB if rng.random() < 0.6] + ([long_term] if long_term and long_term not in VOCAB else [])
    hashes, lists = [], []
    for t in terms:
        size = passages.size if t == long_term else int(rng.integers(1, passages.size + 1))
        ids = rng.choice(passages, size=size, replace=False).astype(np.int32)
        w = (10.0 ** rng.uniform(-8, 3, size)).astype(np.float32)
        order = np.lexsort((ids, -w))
        hashes.append(hash64(t))
        lists.append((ids[order], w[order]))
    by_hash = np.argsort(np.asarray(hashes, dtype=np.uint64), kind="stable")
    ptr = np.zeros(len(terms) + 1, np.int64)
    np.cumsum([lists[i][0].size for i in by_hash], out=ptr[1:])
    empty = (np.zeros(0, np.int32), np.zeros(0, np.float32))
    arrays = {"lex_term_hash": np.asarray(hashes, dtype=np.uint64)[by_hash], "lex_post_ptr": ptr,
              "lex_post_node": np.concatenate([lists[i][0] for i in by_hash] or [empty[0]]),
              "lex_post_weight": np.concatenate([lists[i][1] for i in by_hash] or [empty[1]])}
    return LexicalIndex(arrays), passages


def _segmented(seed: int, n_parts: int, long_list: bool) -> tuple[SegmentedLexical, list[LexicalIndex], np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 60, n_parts)
    if long_list:
        sizes[0] = 2 * TERM_CACHE_FROM  # one segment's list of the common term is kept by the segment itself
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    made = [_part(rng, int(s), int(n), "common" if long_list else None) for s, n in zip(starts, sizes)]
    parts = [p for p, _ in made]
    seg = SegmentedLexical(parts, starts)
    passages = np.concatenate([ids for _, ids in made])
    seg.bind_passages(passages)  # binds every part to its own passages too
    return seg, parts, passages


def _by_part(parts: list[LexicalIndex], terms: set[str]) -> tuple[np.ndarray, np.ndarray]:
    got = [p.term_scores(terms) for p in parts]
    return np.concatenate([g[0] for g in got]), np.concatenate([g[1] for g in got])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n_parts=st.integers(1, 6), max_postings=st.sampled_from([2, 7, 4096]),
       n_terms=st.integers(1, 12))
def test_one_pass_bm25_equals_the_parts_sums_bit_for_bit(seed, n_parts, max_postings, n_terms):
    seg, parts, passages = _segmented(seed, n_parts, long_list=False)
    seg.max_postings = max_postings
    rng = np.random.default_rng(seed + 1)
    for _ in range(3):  # later rounds read the kept lists
        terms = set(rng.choice(VOCAB + ["absent"], size=n_terms).tolist())
        ids, scores = seg.term_scores(terms)
        want_ids, want = _by_part(parts, terms)
        assert ids.dtype == np.int64 and scores.dtype == np.float64
        assert ids.tolist() == want_ids.tolist()
        assert scores.tobytes() == want.tobytes()  # the same float64 bits
        asked = rng.choice(passages, size=int(rng.integers(1, 40)))  # repeats allowed
        listed = rng.choice(VOCAB + ["absent"], size=n_terms).tolist()
        got = seg.term_impacts(listed, asked)
        assert got.tobytes() == seg._term_impacts_by_part(listed, asked).tobytes()


def test_long_lists_kept_by_a_segment_and_by_the_whole_sum_as_the_parts_do():
    seg, parts, passages = _segmented(7, 4, long_list=True)
    assert parts[0]._ptr.shape[0] > 1
    terms = {"common", "w1", "w2", "w3"}
    for _ in range(2):
        ids, scores = seg.term_scores(terms)
        want_ids, want = _by_part(parts, terms)
        assert ids.tolist() == want_ids.tolist() and scores.tobytes() == want.tobytes()
    assert parts[0]._term_cache  # the parts' own path keeps the long list as before
    assert seg._kept  # and the segmented index keeps each term's lists over all segments
    asked = passages[::5]
    assert seg.term_impacts(["common", "w1"], asked).tobytes() == \
        seg._term_impacts_by_part(["common", "w1"], asked).tobytes()


def test_changing_max_postings_drops_the_kept_lists():
    seg, parts, _ = _segmented(3, 3, long_list=False)
    terms = set(VOCAB[:10])
    seg.term_scores(terms)
    seg.max_postings = 1
    ids, scores = seg.term_scores(terms)
    want_ids, want = _by_part(parts, terms)
    assert ids.tolist() == want_ids.tolist() and scores.tobytes() == want.tobytes()
    assert ids.size <= len(parts) * len(terms)  # one posting a term and segment


def test_unbound_segments_and_unbound_ids_fall_back_to_each_segment():
    rng = np.random.default_rng(5)
    made = [_part(rng, 0, 30, None), _part(rng, 30, 30, None)]
    seg = SegmentedLexical([p for p, _ in made], np.array([0, 30]))
    terms = set(VOCAB[:20])
    ids, scores = seg.term_scores(terms)  # not bound: each segment's np.unique path
    want_ids, want = _by_part([p for p, _ in made], terms)
    assert ids.tolist() == want_ids.tolist() and scores.tobytes() == want.tobytes()
    seg.bind_passages(np.concatenate([ids for _, ids in made]))
    not_passage = np.setdiff1d(np.arange(60), np.concatenate([ids for _, ids in made]))[:2]
    asked = np.concatenate([made[1][1][:3], not_passage])
    got = seg.term_impacts(VOCAB[:20], asked)
    assert got.tobytes() == seg._term_impacts_by_part(VOCAB[:20], asked).tobytes()
    assert not got[:, 3:].any()


# ----------------------------------------------------------------------------- names
NAMES = ["Hank Snow", "Canada", "Hello Love", "Publix", "Snow Canada Records", "Lake Tamsin", "Corven Bridge",
         "Ilse Marrow", "Dunmere", "Dunmere Chronicle", "Pell Harbour", "Harbour Guild of Pell Harbour", "Canada Post",
         "Snow", "New Snow Canada", "Tamsin"]


def _name_parts(seed: int, n_parts: int) -> tuple[list[MappedNames], Aliases]:
    """Segments' mapped name tables over consecutive id ranges, some names in several segments (the later copies
    aliases of the first)."""
    rng = np.random.default_rng(seed)
    parts, first, seen, dup, canon = [], 0, {}, [], []
    for _ in range(n_parts):
        names = sorted(set(rng.choice(NAMES, size=int(rng.integers(1, 9))).tolist()))
        ids = first + np.arange(len(names))
        for nid, name in zip(ids.tolist(), names):
            if name in seen:
                dup.append(nid)
                canon.append(seen[name])
            else:
                seen[name] = nid
        arrays, max_tokens = name_arrays(ids, names)
        parts.append(MappedNames(arrays, max_tokens))
        first += len(names) + 3
    order = np.argsort(dup)
    return parts, Aliases(np.asarray(dup, np.int64)[order], np.asarray(canon, np.int64)[order])


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("with_aliases", [False, True])
def test_name_directories_answer_as_every_segment(seed, with_aliases):
    parts, aliases = _name_parts(seed, 4)
    fast = SegmentedNames(parts, aliases if with_aliases else None)
    slow = SegmentedNames(parts, aliases if with_aliases else None)
    slow._mapped = False  # every segment asked in turn, as before
    assert fast._mapped
    words = ["snow", "canada", "harbour", "nothing", "of", "pell harbour", "tamsin", ""]
    assert fast._may_occur(words) == slow._may_occur(words)
    phrases = ["hank snow", "snow", "canada", "snow canada records", "pell harbour", "nothing here", "tamsin"]
    assert fast._phrase_js_many(phrases) == slow._phrase_js_many(phrases)
    for ent in ["Snow", "canada", "Pell Harbour", "LAKE TAMSIN", "Nobody", "Harbour", "Snow Canada", "Dunmere"]:
        assert fast.exact(ent) == slow.exact(ent)
        for limit in (0, 1, 2, 5, 50):
            assert fast.containing(ent, limit) == slow.containing(ent, limit)
    for text in ["Hank Snow left Canada for Publix.", "The Harbour Guild of Pell Harbour met at Lake Tamsin",
                 "nothing here", "Snow Canada Records signed Hank Snow in New Snow Canada"]:
        assert fast.in_text(text) == slow.in_text(text)
        got = fast.match(["Snow", "Canada Post", "Tamsin"], text, limit=2)
        want = slow.match(["Snow", "Canada Post", "Tamsin"], text, limit=2)
        assert [(m.node_id, m.phrase, m.kind) for m in got] == [(m.node_id, m.phrase, m.kind) for m in want]


def test_a_hash_shared_by_two_keys_is_verified_per_segment(monkeypatch):
    """Two different keys with one hash (forced): each segment's stored strings decide, as each segment did."""
    parts, _ = _name_parts(2, 3)
    fast = SegmentedNames(parts)
    slow = SegmentedNames(parts)
    slow._mapped = False
    from noderag.search import segments

    real = segments.hash64
    monkeypatch.setattr(segments, "hash64", lambda k: real("snow") if k == "nothing" else real(k))
    assert fast._may_occur(["nothing", "snow"]) == slow._may_occur(["nothing", "snow"])
    assert fast._may_occur(["nothing"]) == [False]


# ----------------------------------------------------------------------------- tables of a segmented index
DOCS = [{"id": f"d{i}", "title": f"Place {i}", "text": f"Town {i} lies on the river Arn. Mayor Vell Orrin {i % 3} "
         f"opened the Arn Bridge {i} in {1900 + i}."} for i in range(9)]


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("segq")
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
    build_segmented([corpus], tmp / "idx", NodeRAGConfig.from_dict({"embed": {"spec": "hash:64"}}), segments=4)
    import noderag

    idx = noderag.Index.open(tmp / "idx")
    yield idx
    idx.close()


def test_texts_labels_and_document_labels_read_each_segment_once(four):
    tables = four.query_index
    assert len(tables.parts) == 4
    rng = np.random.default_rng(0)
    ids = rng.integers(0, tables.n, 200)
    want = [tables.parts[int(np.searchsorted(tables._starts, i, side="right")) - 1].texts([i])[0] for i in ids]
    assert tables.texts(ids) == want
    assert tables.texts(ids.tolist()) == want and tables.texts([]) == []
    nodes = np.concatenate([ids, [-1, tables.n, tables.n + 5]])
    assert tables.labels(nodes) == [tables.label(int(c)) for c in nodes]
    assert sum(x is not None for x in tables.labels(nodes)) > 0
    assert tables._doc_firsts is not None
    for doc in range(-1, len(DOCS) + 2):
        slow = next((p._text("doclabel", int(np.searchsorted(p._a["doclabel_id"], doc))) for p in tables.parts
                     if doc in set(np.asarray(p._a["doclabel_id"]).tolist())), f"doc:{doc}")
        assert tables.doc_label(doc) == slow
    assert tables.doc_label(4) != "doc:4"


def test_a_segmented_index_retrieves_as_with_every_segment_asked(four):
    """The whole query, directories and one-pass BM25 against every segment asked in turn."""
    searcher = four.searcher()
    questions = ["Who opened the Arn Bridge 4?", "Which town lies on the river Arn?", "Vell Orrin 2 in 1907"]
    fast = [searcher.retrieve(q) for q in questions]
    assert searcher.tables is four.query_index
    names, lexical = four.query_index.names, four.query_index.lexical
    assert names._mapped and lexical._kept  # the directories answered the first round
    names._mapped = False
    lexical._lists = lambda terms: None  # every segment's own path
    slow = [searcher.retrieve(q) for q in questions]
    for a, b in zip(fast, slow):
        assert a.passage_node_ids == b.passage_node_ids and a.context == b.context
        assert [float(s).hex() for s in a.passage_scores] == [float(s).hex() for s in b.passage_scores]
    assert any(r.passage_node_ids for r in fast)


def test_texts_read_by_segment_keep_every_character():
    """Texts gathered per segment go back in the order asked, as the strings were read (a trailing NUL too)."""
    from noderag.search.segments import SegmentedTables

    class Part:
        def __init__(self, first):
            self.first = first

        def texts(self, ids):
            return [f"{i}\x00" if i % 2 else f"{i} \ud800" for i in np.asarray(ids).tolist()]

    tables = SegmentedTables.__new__(SegmentedTables)
    tables.parts, tables._starts = [Part(0), Part(10), Part(20)], np.array([0, 10, 20])
    ids = [25, 3, 11, 3, 29, 0]
    assert tables.texts(ids) == [f"{i}\x00" if i % 2 else f"{i} \ud800" for i in ids]
    assert tables.texts(np.array([12, 14])) == ["12 \ud800", "14 \ud800"]
