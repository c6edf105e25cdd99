"""The build-time query index (``query/``): same retrieval as the in-memory path, O(1) open, deterministic files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import noderag
from noderag.store.verify import IndexDamagedError
from noderag.data import demo_dir, demo_questions
from noderag.search.query_index import QUERY_DIR, QueryIndex, write_query_index
from noderag.search import SearchConfig, Searcher
from noderag.search.entities import EntityMatcher, MappedNames, name_arrays, name_index_arrays, name_tokens
from conftest import MUSIQUE, musique_queries
from search_tables import InMemoryTables



class _InMemory:
    """An opened index whose query tables are built in memory from its node table (:mod:`search_tables`): the
    reference the memory-mapped ``query/`` tables are checked against."""

    def __init__(self, index) -> None:
        self._index = index
        self.query_index = InMemoryTables(index, np.asarray(index.graph.types))

    def __getattr__(self, name):
        return getattr(self._index, name)


def _without_query_index(index, tmp: Path):
    """The index with its query tables made in memory (``tmp`` unused: nothing is copied)."""
    return _InMemory(index)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("qidx")
    return noderag.build([str(demo_dir())], str(root / "demo"), embed="hash:64", progress=False)


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    """The first 150 passages of the MuSiQue slice in ``tests/data`` and 40 queries: its 15 questions, then
    their gold sub-questions."""
    root = tmp_path_factory.mktemp("qdev")
    corpus = root / "corpus.jsonl"
    with open(MUSIQUE / "corpus.jsonl", encoding="utf-8") as fh:
        corpus.write_text("".join(line for _, line in zip(range(150), fh)), encoding="utf-8")
    questions = musique_queries(40)
    return noderag.build([str(corpus)], str(root / "idx"), embed="hash:64", progress=False), questions


def _rows(index, queries, config=None):
    return [r.to_dict() for r in Searcher(index, config).retrieve_many(queries)]


@pytest.mark.parametrize("config", [None, SearchConfig(entity_source="none"),
                                    SearchConfig(use_ppr=False)])
def test_demo_retrieval_identical_to_in_memory_path(demo, tmp_path, config):
    memory = _without_query_index(demo, tmp_path)
    queries = [q["question"] for q in demo_questions()] + ["Which river?", "?!?"]
    mapped = Searcher(demo, config)
    assert mapped.tables is demo.query_index and mapped.tables is not None
    ref = Searcher(memory, config)
    assert ref.tables.__class__.__name__ == "InMemoryTables"
    got = [r.to_dict() for r in mapped.retrieve_many(queries)]
    want = [r.to_dict() for r in ref.retrieve_many(queries)]
    assert [g["passages"] for g in got] == [w["passages"] for w in want]
    assert got == want


def test_dev_slice_retrieval_identical_to_in_memory_path(dev, tmp_path):
    index, questions = dev
    memory = _without_query_index(index, tmp_path)
    got, want = _rows(index, questions), _rows(memory, questions)
    assert sum(bool(g["matched_names"]) for g in got) >= 10  # the name index is exercised
    for g, w in zip(got, want):
        assert g["passages"] == w["passages"] and [n["id"] for n in g["nodes"]] == [n["id"] for n in w["nodes"]]
    assert got == want


def test_title_table_is_written_and_searches_like_the_in_memory_links(dev, tmp_path):
    """query/title_* (the title links' table) is written by the build and read at open; an index without it still
    opens and searches the same (its links are then made at the first bridging query)."""
    index, questions = dev
    table = QueryIndex.load(index.path).title_table
    assert table is not None and table["title_head"].size > 100
    linked = Searcher(index)
    assert "title_links" in linked.view.cache  # from the table, before any query
    with_table = [r.to_dict() for r in linked.retrieve_many(questions)]
    copy = tmp_path / "no_titles"
    shutil.copytree(index.root, copy)
    gen = copy / index.path.relative_to(index.root)
    for p in (gen / QUERY_DIR).glob("title*.npy"):
        p.unlink()
    manifest = json.loads((gen / "manifest.json").read_text(encoding="utf-8"))  # as an older build wrote it
    files = manifest["checksums"]["files"]
    for rel in [rel for rel in files if rel.startswith(f"{QUERY_DIR}/title")]:
        del files[rel]
    (gen / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert QueryIndex.load(gen).title_table is None
    older = Searcher(noderag.Index.open(copy))
    assert "title_links" not in older.view.cache
    assert [r.to_dict() for r in older.retrieve_many(questions)] == with_table
    assert "title_links" in older.view.cache  # made by a bridging query


def test_mapped_names_equal_in_memory_matcher(dev):
    index, questions = dev
    qi = index.query_index
    types = np.asarray(index.types)
    named = np.flatnonzero(np.isin(types, (2, 6)) & index.active)
    names = [index.names[i] for i in named.tolist()]
    ref = EntityMatcher(named, names)
    mapped = qi.names
    assert len(mapped) == len(ref) > 100
    probes = set()
    for nm in names[:400]:
        toks = name_tokens(nm)
        probes.update([nm, nm.upper(), " ".join(toks[:1]), " ".join(toks[1:]), " ".join(toks[:2]), f"{nm}s"])
    probes.update(["", "zzzz qqqq", "the", "of the"])
    for p in sorted(probes):
        assert mapped.exact(p) == ref.exact(p), p
        assert mapped.containing(p, 8) == ref.containing(p, 8), p
    for q in questions + [" ".join(names[:30])]:
        assert mapped.in_text(q) == ref.in_text(q), q
        assert mapped.match([q[:20], *name_tokens(q)[:3]], q) == ref.match([q[:20], *name_tokens(q)[:3]], q)


def test_hash_collisions_are_verified_not_trusted():
    ref = EntityMatcher([10, 11, 12], ["Hank Snow", "Snow White", "Hello Love"])
    arrays, max_tokens = name_index_arrays(ref)
    # every name hash replaced by one value: look-ups must still find exactly the right names
    for key in ("exact_hash", "phrase_hash"):
        arrays[key] = np.zeros_like(arrays[key])
    order = np.argsort(arrays["exact_name"], kind="stable")
    arrays["exact_name"], arrays["phrase_name"] = arrays["exact_name"][order], arrays["phrase_name"][order]
    import noderag.search.entities as ent

    orig = ent.hash64
    ent.hash64 = lambda text: 0
    try:
        mapped = MappedNames(arrays, max_tokens)
        # the token vocabulary was hashed for real: only the name hashes collide here
        ent.hash64 = lambda text: 0 if text.count(" ") or text in ("hank snow", "snow white", "hello love") else orig(text)
        for q in ("Hank Snow", "Snow White", "hello love", "Snow", "Hank"):
            assert mapped.exact(q) == ref.exact(q) and mapped.containing(q, 5) == ref.containing(q, 5)
        assert mapped.in_text("Did Hank Snow sing Hello Love?") == ref.in_text("Did Hank Snow sing Hello Love?")
    finally:
        ent.hash64 = orig


def test_open_and_retrieve_never_read_the_node_table(demo):
    from noderag.search import SearchConfig

    plain = noderag.Index.open(demo.root)
    res = plain.retrieve("Which river flows through the capital?",
                         config=SearchConfig(bridging=False))
    assert res.nodes and res.passages
    assert "nodes" not in plain.__dict__ and "documents" not in plain.__dict__  # cached_property never ran
    plain.close()
    # title links (the default) read the documents' titles once, at the first query: never the node table
    fresh = noderag.Index.open(demo.root)
    res = fresh.retrieve("Which river flows through the capital?")
    assert res.nodes and res.passages
    assert "nodes" not in fresh.__dict__
    texts = fresh.searcher().node_texts([n.id for n in res.nodes])
    assert texts == [n.text for n in res.nodes]
    assert texts == [t if t is not None else (nm or "") for t, nm in
                     zip(demo.nodes.column("text").take([n.id for n in res.nodes]).to_pylist(),
                         demo.nodes.column("name").take([n.id for n in res.nodes]).to_pylist())]


def test_open_and_retrieve_load_no_build_time_modules(demo):
    """Opening and querying an index loads neither Numba (build kernels: ~0.6 s), the LLM stack (jsonschema), nor
    pyarrow.dataset (which ``pq.read_table`` imports, and pandas with it: ~0.5 s of a first query)."""
    code = ("import sys, noderag; ix = noderag.Index.open(sys.argv[1]); "
            "r = ix.retrieve('Which river flows through the capital?'); assert r.passages; "
            "print(sorted(m for m in ('numba', 'jsonschema', 'noderag.llm.base', 'noderag.graph._hetero_kernels', "
            "'pyarrow.dataset', 'pandas') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code, str(demo.root)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", r.stdout


def test_query_index_files_are_deterministic_across_processes(demo, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(demo.path, copy)
    shutil.rmtree(copy / QUERY_DIR)
    code = "import sys; from noderag.search.query_index import write_query_index; write_query_index(sys.argv[1])"
    r = subprocess.run([sys.executable, "-c", code, str(copy)], capture_output=True, text=True, timeout=120,
                       env={"PYTHONHASHSEED": "4242", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    a = sorted(p.relative_to(demo.path / QUERY_DIR) for p in (demo.path / QUERY_DIR).rglob("*") if p.is_file())
    b = sorted(p.relative_to(copy / QUERY_DIR) for p in (copy / QUERY_DIR).rglob("*") if p.is_file())
    assert a == b and len(a) > 20
    for rel in a:
        assert (demo.path / QUERY_DIR / rel).read_bytes() == (copy / QUERY_DIR / rel).read_bytes(), rel


def test_damaged_query_index_is_a_clear_error(demo, tmp_path):
    copy = tmp_path / "damaged"
    shutil.copytree(demo.path, copy)
    n = int(demo.graph.n)
    chunk = np.load(copy / QUERY_DIR / "chunk.npy")
    np.save(copy / QUERY_DIR / "chunk.npy", chunk[:-1])
    with pytest.raises(ValueError, match=r"query/chunk\.npy: expected shape"):
        QueryIndex.load(copy, n=n)
    write_query_index(copy)
    with pytest.raises(ValueError, match=r"query/meta\.json: written for"):
        QueryIndex.load(copy, n=n + 1)
    # the node texts are the segment's own (text_off.npy and the pages of text/ beside nodes.parquet)
    off = np.load(copy / "text_off.npy")
    np.save(copy / "text_off.npy", off[:-1])
    with pytest.raises(IndexDamagedError, match=r"unreadable array in text_off\.npy"):
        QueryIndex.load(copy, n=n)
    np.save(copy / "text_off.npy", off)
    last = sorted((copy / "text").iterdir())[-1]
    last.write_bytes(last.read_bytes()[:-3])
    with pytest.raises(IndexDamagedError, match=rf"wrong size in text/{last.name}"):
        QueryIndex.load(copy, n=n)
    last.unlink()
    with pytest.raises(IndexDamagedError, match=rf"missing file in text/{last.name}"):
        QueryIndex.load(copy, n=n)


@pytest.mark.parametrize("size", [0, 1, 2, 65535, 65536, 65537, 200_003])
def test_the_blockwise_checks_answer_as_whole_array_reductions(size):
    """_bounds and _decreases (one pass, block by block) find what min, max and a whole-array comparison find,
    wherever the one bad entry lies (first, last, at a block edge, inside a block)."""
    from noderag.search.query_index import _bounds, _decreases

    rng = np.random.default_rng(size)
    ids = rng.integers(-1, 1000, size)
    assert _bounds(ids) == ((int(ids.min()), int(ids.max())) if size else (0, -1))
    off = np.cumsum(rng.integers(0, 3, size))
    assert not _decreases(off)
    for at in {1, size - 1, 65536, 65537, size // 2} if size > 1 else ():
        if at >= size:
            continue
        low, bad = ids.copy(), off.copy()
        low[at], bad[at] = -7, bad[at - 1] - 1
        assert _bounds(low)[0] == -7 and _decreases(bad), at
        high = ids.copy()
        high[at] = 10**12
        assert _bounds(high)[1] == 10**12


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_insert_rewrites_the_query_index(tmp_path):
    first = tmp_path / "a.txt"
    first.write_text("Hank Snow was a singer from Canada. Hank Snow recorded Hello Love.", encoding="utf-8")
    second = tmp_path / "b.txt"
    second.write_text("Publix is a supermarket chain in Florida. Publix operates stores in Georgia.",
                      encoding="utf-8")
    index = noderag.build([str(first)], str(tmp_path / "idx"), embed="hash:64", progress=False)
    assert index.query_index.names.exact("Florida") == []
    index = index.insert([str(second)])
    assert index.query_index.n == int(index.graph.n)
    assert index.query_index.names.exact("Florida")
    memory = _without_query_index(index, tmp_path)
    q = ["Where does Publix operate stores?", "Who recorded Hello Love?"]
    assert _rows(index, q) == _rows(memory, q)


def test_damaged_graph_is_still_caught_without_the_compiled_check(demo, tmp_path):
    # the searcher maps the graph without HeteroGraph's numba pass, and PPROperator checks each row as a query
    # first reads it: damage in a row the query reads is named (noderag verify checks every row)
    question = "Which river flows through the capital?"
    seed = int(noderag.Index.open(demo.root).searcher().query_context(question).seeds[0])
    copy = tmp_path / "badgraph"
    shutil.copytree(demo.root, copy)
    gen = copy / demo.path.relative_to(demo.root)
    ind = np.load(gen / "graph" / "indices.npy")
    ind[int(np.load(gen / "graph" / "indptr.npy")[seed])] = int(demo.graph.n) + 5
    np.save(gen / "graph" / "indices.npy", ind)
    with pytest.raises(IndexDamagedError, match=r"node id out of range in graph/indices\.npy"):
        noderag.Index.open(copy).retrieve(question)


_NAME_WORDS = ["Paris", "paris", "Bank", "of", "the", "St.", "Jean-Luc", "台北", "市", "March", "&", "42", "O'Neil",
               "New", "York", "", "  ", "İstanbul", "ß", "Straße"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), st.lists(st.sampled_from(_NAME_WORDS), max_size=4).map(" ".join),
                          st.text(max_size=12)), max_size=40),
       st.randoms(use_true_random=False))
def test_name_arrays_equal_the_matcher_arrays(names, rnd):
    """The lean builder of the query index's name arrays gives exactly the arrays of the in-memory matcher."""
    ids = list(range(1000, 1000 + len(names)))
    rnd.shuffle(ids)  # node ids in any order: ties between equal names break by node id
    ref, ref_max = name_index_arrays(EntityMatcher(ids, names))
    got, got_max = name_arrays(ids, names)
    assert got_max == ref_max and set(got) == set(ref)
    for key in ref:
        assert got[key].dtype == ref[key].dtype and np.array_equal(got[key], ref[key]), key


_PHRASE_WORDS = ["a", "b", "c", "a b", "b a", "Paris", "台北"]


@settings(max_examples=120, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_PHRASE_WORDS), min_size=1, max_size=6).map(" ".join), min_size=1,
                max_size=60),
       st.lists(st.sampled_from(_PHRASE_WORDS), min_size=1, max_size=3).map(" ".join),
       st.integers(0, 12), st.integers(1, 700))
def test_mapped_phrase_containment_equals_the_matcher(names, entity, limit, copies):
    """The array check of whole-word containment (in blocks of names) finds exactly the names, in the order and up
    to the limit, of the in-memory matcher's name-by-name check: repeated tokens, phrases met at several starts,
    names shorter than the phrase, and posting lists longer than one block."""
    names = (names * (copies // len(names) + 1))[:max(copies, len(names))]
    ids = list(range(5000, 5000 + len(names)))
    ref = EntityMatcher(ids, names)
    mapped = MappedNames(*name_arrays(ids, names))
    assert mapped.containing(entity, limit) == ref.containing(entity, limit)
    assert mapped.containing(entity, len(names)) == ref.containing(entity, len(names))
