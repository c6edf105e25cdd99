"""Search pipeline on a small hand-built heterograph (exact control over its structure)."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pytest

from noderag.graph.hetero import HeteroGraph
from noderag.graph.keys import canonical_name, node_keys
from noderag.graph.types import NodeType as NT
from noderag.search import Searcher, SearchConfig
from noderag.search.config import QuotaConfig
from noderag.search.ranking import Distinct, EntryPoints, PropagatedMass
from noderag.search.entities import EntityMatcher, extract_query_entities
from noderag.search.searcher import LLMNotConfiguredError
from noderag.tokenize import count_tokens

from search_tables import InMemoryTables


class BagEmbedder:
    """Deterministic bag-of-words hashing embedder (test double, 64 dims)."""

    name = "bag:64"
    dim = 64

    def embed(self, texts):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.lower()):
                out[i, zlib.crc32(w.encode()) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1.0)


class ExactVectors:
    """Exact cosine vector index over some node ids (test double of VectorIndex)."""

    def __init__(self, ids, vecs):
        self.ids = np.asarray(ids, np.int64)
        self.vecs = np.asarray(vecs, np.float32)

    def __len__(self):
        return len(self.ids)

    def contains(self, ids):
        return np.isin(np.asarray(ids), self.ids)

    def get(self, ids):
        pos = {int(i): j for j, i in enumerate(self.ids)}
        return self.vecs[[pos[int(i)] for i in ids]]

    def search(self, q, k, *, threads=0, expansion=None):  # exact: the HNSW beam does not apply
        sims = np.atleast_2d(q) @ self.vecs.T
        k = min(k, len(self.ids))
        order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
        return self.ids[order], (1.0 - np.take_along_axis(sims, order, axis=1)).astype(np.float32)


# id, type, text, name, chunk (T id), source
NODES = [
    (0, NT.T, "Hank Snow was a country singer born in Canada.", None, 0, "p1"),
    (1, NT.T, "Hello Love is an album by Hank Snow released in 1974.", None, 1, "p2"),
    (2, NT.T, "Pineapples grow in Hawaii on large farms.", None, 2, "p3"),
    (3, NT.S, "Hank Snow was a country singer.", None, 0, "p1"),
    (4, NT.S, "Hello Love is an album by Hank Snow.", None, 1, "p2"),
    (5, NT.S, "Pineapples grow in Hawaii.", None, 2, "p3"),
    (6, NT.N, "Hank Snow", "Hank Snow", -1, None),
    (7, NT.N, "Hello Love", "Hello Love", -1, None),
    (8, NT.N, "Hawaii", "Hawaii", -1, None),
    (9, NT.N, "Snowboarding", "Snowboarding", -1, None),
    (10, NT.R, "Hank Snow recorded Hello Love", None, -1, None),
    (11, NT.A, "Hank Snow: Canadian-American country music singer, known for Hello Love.", None, -1, None),
    (12, NT.H, "Country music recordings of the 1970s by Canadian singers.", None, -1, None),
    (13, NT.O, "Country music", "Country music", -1, None),
    (14, NT.R, "Pineapples grow in Hawaii", None, -1, None),
]
STRUCT = [(3, 0, 1), (4, 1, 1), (5, 2, 1), (3, 6, 1), (4, 6, 1), (4, 7, 1), (5, 8, 1), (6, 10, 1), (7, 10, 1),
          (6, 11, 1), (12, 13, 1), (12, 3, 1), (12, 4, 1), (8, 14, 1)]
SEM = [(0, 3, 0.8), (1, 4, 0.9), (0, 1, 0.3)]


@dataclass
class ToyStore:
    graph: HeteroGraph
    nodes: pa.Table
    vectors: ExactVectors
    emb: BagEmbedder

    def embedder(self):
        return self.emb

    @property
    def query_index(self) -> InMemoryTables:
        """The query tables a build would write, made in memory once (after ``documents`` is set)."""
        if "_tables" not in self.__dict__:
            self.__dict__["_tables"] = InMemoryTables(self, np.asarray(self.graph.types))
        return self.__dict__["_tables"]


def toy_store() -> ToyStore:
    types = np.array([t for _, t, *_ in NODES], np.uint8)
    keys = node_keys(types.tolist(), [canonical_name(x[2]) for x in NODES])
    s, d, w = (np.array(c) for c in zip(*STRUCT))
    ss, sd, sw = (np.array(c) for c in zip(*SEM))
    g = HeteroGraph.from_coo(types, keys, s, d, w.astype(np.float32), sem_src=ss, sem_dst=sd,
                             sem_w=sw.astype(np.float32))
    table = pa.table({
        "id": pa.array([x[0] for x in NODES], pa.int32()),
        "type": pa.array(types, pa.uint8()),
        "key": pa.array(keys, pa.uint64()),
        "name": pa.array([x[3] for x in NODES], pa.string()),
        "text": pa.array([x[2] for x in NODES], pa.string()),
        "doc_id": pa.array([x[4] for x in NODES], pa.int32()),
        "chunk_id": pa.array([x[4] for x in NODES], pa.int32()),
        "source_id": pa.array([x[5] for x in NODES], pa.string()),
        "mentions": pa.array([1] * len(NODES), pa.int32()),
    })
    emb = BagEmbedder()
    embedded = [x[0] for x in NODES if x[1] in (NT.T, NT.S, NT.A, NT.H)]
    vecs = emb.embed([NODES[i][2] for i in embedded])
    return ToyStore(g, table, ExactVectors(embedded, vecs), emb)


@pytest.fixture(scope="module")
def store():
    return toy_store()


# ----------------------------------------------------------------- entity matcher
def test_matcher_exact_and_whole_word_without_partial_words():
    m = EntityMatcher([6, 7, 8, 9, 13], ["Hank Snow", "Hello Love", "Hawaii", "Snowboarding", "Country music"])
    assert m.exact("hank  SNOW") == [6]
    assert m.exact("Hank Snow.") == [6]
    assert m.containing("Snow", 10) == [6]  # not "Snowboarding"
    assert m.containing("Hank", 10) == [6]
    assert m.containing("Sno", 10) == []
    assert m.containing("Snow Hank", 10) == []  # phrase order matters
    assert m.containing("music", 10) == [13]


def test_matcher_in_text_needs_capitalised_span_and_prefers_longest():
    m = EntityMatcher([1, 2, 3], ["Hank Snow", "Snow", "the album"])
    found = m.in_text("Who performed with Hank Snow on the album?")
    assert [nid for nid, _ in found] == [1]  # "Snow" inside the longer span, "the album" lower-case
    assert m.in_text("who is hank snow") == []


def test_matcher_limit_prefers_shorter_names():
    names = ["John Smith Junior", "John", "John Smith"]
    m = EntityMatcher([10, 11, 12], names)
    assert m.containing("John", 2) == [11, 12]


def test_extract_query_entities_rules():
    ents = extract_query_entities("Who was the first president of the association which published "
                                  "Journal of Psychotherapy Integration in 1990?")
    assert ents == ["Journal of Psychotherapy Integration", "1990"]
    assert extract_query_entities('Where was "Hello Love" recorded?') == ["Hello Love"]
    assert extract_query_entities("what is this?") == []


# ------------------------------------------------------------------- pipeline
def test_retrieve_finds_passage_and_expands_entities_and_overviews(store):
    s = Searcher(store, SearchConfig(vector_top_k=2, quotas=QuotaConfig(others=0)))
    r = s.retrieve("Which album Hello Love was released in 1974?")
    assert r.passages[0] == "p2"
    by_id = {n.id: n for n in r.nodes}
    assert 7 in r.matched_names  # Hello Love matched by name
    assert by_id[11].origin == "attribute" and 6 in by_id  # Hank Snow's A follows its N
    order = [n.id for n in r.nodes]
    assert order.index(6) < order.index(11)
    entry = [n.id for n in r.nodes if n.origin == "entry"]
    assert order[:len(entry)] == entry  # entry points first
    assert len(order) == len(set(order))


def test_overview_expands_to_its_high_level_element(store):
    """An overview (O) matched by name brings its high-level element (H), and only through it: without
    vector entry points and PPR, H 12 is there because O 13 was named, and not when nothing is named."""
    only_names = SearchConfig(vector_top_k=0, use_ppr=False)
    r = Searcher(store, only_names).retrieve("Tell me about Country music")
    assert 13 in r.matched_names
    assert [(n.id, n.origin) for n in r.nodes] == [(13, "name"), (12, "high_level")]
    assert Searcher(store, only_names).retrieve("Tell me about country songs").nodes == []


def test_quotas_limit_each_type(store):
    cfg = SearchConfig(quotas=QuotaConfig(entities=1, relationships=0, overviews=0, others=0), vector_top_k=1)
    r = Searcher(store, cfg).retrieve("Hank Snow and Hello Love and Hawaii")
    types = [n.type for n in r.nodes]
    assert types.count(NT.N) == 1
    assert NT.R not in types and NT.O not in types
    assert sum(n.origin == "entry" for n in r.nodes) == 1
    assert sum(n.origin == "ppr" and n.type in (NT.T, NT.S, NT.A, NT.H) for n in r.nodes) == 0


def test_passage_ranking_aggregates_units_onto_chunks(store):
    # Without vector entry points the ranking comes from PPR mass of T and S nodes only.
    cfg = SearchConfig(vector_top_k=0)
    r = Searcher(store, cfg).retrieve("Pineapples from Hawaii")
    assert r.passages[0] == "p3"
    assert r.passage_scores == sorted(r.passage_scores, reverse=True)
    assert len(r.passages) == len(set(r.passages))
    # the units' mass alone (no passage mass, no dense or lexical fit): p3 still first (S5 is next to Hawaii)
    units_only = [EntryPoints(), PropagatedMass(text_weight=0.0, unit_weight=0.4), Distinct()]
    r2 = Searcher(store, cfg, stages=units_only).retrieve("Pineapples from Hawaii")
    assert r2.passages[0] == "p3"


def test_context_respects_budget_and_groups_by_type(store):
    full = Searcher(store).retrieve("Which singer recorded the album Hello Love?")
    assert full.context_tokens == count_tokens(full.context)
    assert full.context.index("## Passages") < full.context.index("## Relationships")
    for budget in (0, 12, 40, 80):
        r = Searcher(store, SearchConfig(context_tokens=budget)).retrieve("Which singer recorded Hello Love?")
        assert r.context_tokens <= budget
        assert r.context_tokens == (count_tokens(r.context) if r.context else 0)
        for nid in r.context_node_ids:
            assert f"[{nid}]" in r.context
    small = Searcher(store, SearchConfig(context_tokens=40)).retrieve("Which singer recorded Hello Love?")
    assert 0 < len(small.context_node_ids) < len(full.context_node_ids)


def test_the_line_token_cache_stays_bounded_and_changes_no_context(store, monkeypatch):
    import noderag.search.searcher as searcher_module

    qs = ["Which singer recorded Hello Love?", "Where do pineapples grow?", "Country music"]
    free = [r.to_dict() for r in Searcher(store).retrieve_many(qs)]
    monkeypatch.setattr(searcher_module, "TOKEN_CACHE_NODES", 3)
    s = Searcher(store)
    assert [s.retrieve(q).to_dict() for q in qs] == free
    assert 0 < len(s._tok_cache) <= 3


def test_retrieve_many_equals_retrieve(store):
    s = Searcher(store)
    qs = ["Which singer recorded Hello Love?", "Where do pineapples grow?", "Country music", "zzz qqq"]
    many = s.retrieve_many(qs)
    for q, r in zip(qs, many):
        assert r.to_dict() == s.retrieve(q).to_dict()


def test_no_ppr_ablation_uses_entry_points_and_names(store):
    r = Searcher(store, SearchConfig(use_ppr=False)).retrieve("Which album Hello Love was released in 1974?")
    assert r.passages[0] == "p2"
    assert {n.origin for n in r.nodes} <= {"entry", "name", "attribute", "high_level"}


def test_answer_without_llm_says_retrieval_only(store):
    with pytest.raises(LLMNotConfiguredError, match="only retrieval"):
        Searcher(store).answer("Who recorded Hello Love?")


def test_answer_cites_only_context_ids(store):
    from noderag.llm.testing import ScriptedLLM

    llm = ScriptedLLM(lambda req: {"answer": "Hank Snow", "citations": ["1", "[4]", "999"]})
    out = Searcher(store, llm=llm).answer("Who recorded Hello Love?")
    assert out.answer == "Hank Snow"
    assert set(out.cited_ids) <= set(out.retrieval.context_node_ids)
    assert 1 in out.cited_ids and 999 not in out.cited_ids
    assert llm.calls == 1


def test_bad_queries_and_config_raise_clear_errors(store):
    s = Searcher(store)
    with pytest.raises(ValueError, match="is blank"):
        s.retrieve("   ")
    with pytest.raises(TypeError, match="sequence of strings"):
        s.retrieve_many("one string")
    with pytest.raises(ValueError, match="search.rule"):
        SearchConfig(rule="bogus").validate()
    with pytest.raises(ValueError, match=r"unknown config key\(s\) \['search\."):
        SearchConfig.from_dict({"alpha": 0.5, "bogus": 1})
    with pytest.raises(ValueError, match="quotas.entities"):
        SearchConfig.from_dict({"quotas": {"entities": -1}})


def test_header_token_table_is_the_tokenizers_count():
    from noderag.search.context import HEADER_TOKENS, SECTION_ORDER, header_tokens, section_header

    assert sorted(HEADER_TOKENS) == sorted(section_header(t) for t in SECTION_ORDER)
    for text, n in HEADER_TOKENS.items():
        assert count_tokens(text) == n, text
    count = header_tokens(lambda text: -1)
    assert count("## Passages\n") == 4 and count("[3] other\n") == -1
