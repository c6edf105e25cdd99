"""Chinese in the zero-token default (issue 15): detection, S/T folding, Chinese entities and relations,
CJK name matching and BM25 terms, Chinese prompts per chunk."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderag.config import DecomposeConfig
from noderag.graph.keys import canonical_name
from noderag.indexing.decompose.base import ChunkInput
from noderag.indexing.decompose.nlp import NLPDecomposer
from noderag.lang import corpus_language, detect_language, fold_zh
from noderag.lang import zh
from noderag.lang.fold import fold_table
from noderag.search.baselines import BM25Retriever, bm25_tokens
from noderag.search.entities import EntityMatcher, name_tokens

# A small Chinese corpus: people, places and works, in Traditional script.
ZH_DOCS = {
    "曹雪芹": "曹雪芹是清代小說家，生於南京。他在北京西山寫成了《紅樓夢》。《紅樓夢》描寫了賈寶玉和林黛玉的故事。",
    "魯迅": "魯迅原名周樹人，出生於浙江紹興。一九一八年，魯迅在上海發表了《狂人日記》。魯迅後來在廈門大學任教。",
    "臺北": "臺北市是臺灣的政治中心。國立臺灣大學位於臺北市大安區。故宮博物院收藏了大量來自北京的文物。",
    "李白": "李白是唐代詩人，出生於碎葉城。李白與杜甫是好友，兩人曾同遊洛陽。李白的《靜夜思》流傳很廣。",
}
MIXED = "2012年，威廉·德魯里 William Drury 在倫敦出版了《紅樓夢》的英譯本。"


def _decompose(text: str, title: str | None = None):
    out = NLPDecomposer(DecomposeConfig()).decompose([ChunkInput(0, text, title)])[0]
    ents = [e for u in out.units for e in u.entities]
    rels = [r for u in out.units for r in u.relations]
    return out, ents, rels


def test_detect_language_per_text_and_corpus():
    assert detect_language(ZH_DOCS["李白"]) == "zh"
    assert detect_language(MIXED) == "zh"
    assert detect_language("Tai Chi Hero (太極英雄崛起) is a 2012 Hong Kong martial arts film directed by "
                           "Stephen Fung and starring Yuan Xiaochao.") == "en"
    assert detect_language("Paris is the capital of France.") == "en"
    mix = corpus_language(["Paris is in France."] * 3 + [ZH_DOCS["魯迅"]])
    assert (mix.documents, mix.chinese, mix.multilingual) == (4, 1, True)
    assert not corpus_language(["Paris is in France."] * 4 + [ZH_DOCS["魯迅"]]).multilingual


def test_chinese_corpus_gives_people_places_works_and_relations():
    _, ents, rels = _decompose(ZH_DOCS["曹雪芹"], "曹雪芹")
    assert {"曹雪芹", "南京", "北京", "紅樓夢", "賈寶玉", "林黛玉"} <= set(ents)
    assert ("曹雪芹", "是清代小說家生於", "南京") in rels
    assert ("賈寶玉", "和", "林黛玉") in rels
    _, ents, rels = _decompose(ZH_DOCS["魯迅"], "魯迅")
    assert {"魯迅", "周樹人", "浙江", "紹興", "上海", "狂人日記", "廈門大學"} <= set(ents)
    assert ("魯迅", "原名", "周樹人") in rels and ("上海", "發表了", "狂人日記") in rels
    _, ents, rels = _decompose(ZH_DOCS["李白"], "李白")
    assert {"李白", "杜甫", "洛陽", "靜夜思"} <= set(ents)
    assert ("李白", "與", "杜甫") in rels
    # text as written: the Traditional surface forms are stored, not the folded ones
    _, ents, _ = _decompose(ZH_DOCS["臺北"], "臺北")
    assert {"臺北市", "臺灣", "臺灣大學", "大安區", "故宮博物院"} <= set(ents)
    assert not {"台北市", "台湾"} & set(ents)


def test_mixed_sentence_yields_both_kinds():
    _, ents, rels = _decompose(MIXED)
    assert {"威廉·德魯里", "William Drury", "倫敦", "紅樓夢", "2012"} <= set(ents)
    assert ("William Drury", "在", "倫敦") in rels and ("倫敦", "出版了", "紅樓夢") in rels
    assert not any({a, b} == {"威廉·德魯里", "William Drury"} for a, _, b in rels)  # nothing between them


def test_english_chunks_never_reach_the_segmenter(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("segmenter called on an English chunk")

    monkeypatch.setattr(zh, "segment", boom)
    _, ents, rels = _decompose("Tai Chi Hero (太極英雄崛起) is a 2012 film by Stephen Fung. It was shot in Beijing.")
    assert "Stephen Fung" in ents and "Beijing" in ents
    assert not any("太" in e for e in ents)


def test_relation_words_are_counted_with_the_segmenter():
    sent = "李白在長安寫了很多很多很多很多很多很多很多很多很多很多的詩，後來到了洛陽。"
    ms = zh.extract_mentions(sent)
    assert [m.text for m in ms] == ["李白", "長安", "洛陽"]
    rels = zh.sentence_relations(sent, ms, max_words=8)
    assert ("李白", "在", "長安") in rels
    assert not any(b == "洛陽" for _, _, b in rels)  # more than 8 words away from both


def test_fold_known_pairs_and_canonical_names():
    assert fold_zh("臺灣") == fold_zh("台灣") == fold_zh("台湾") == "台湾"
    assert canonical_name("臺灣") == canonical_name("台湾") == canonical_name(" 台灣。")
    assert canonical_name("國立臺灣大學") == canonical_name("国立台湾大学")
    assert fold_zh("Barack Obama, café") == "Barack Obama, café"
    assert canonical_name("Barack  Obama") == "barack obama"


_TRAD = sorted(chr(c) for c in fold_table())


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(_TRAD + list("abc 台湾大学,。")), max_size=30))
def test_fold_is_idempotent_length_preserving_and_script_blind(text):
    once = fold_zh(text)
    assert len(once) == len(text)
    assert fold_zh(once) == once
    assert canonical_name(once) == canonical_name(text)  # either script finds the other


def test_every_table_entry_folds_to_a_fixed_point():
    table = fold_table()
    assert len(table) > 4000
    assert all(ord(v) not in table for v in table.values())


def test_match_tokens_split_han_and_keep_english():
    assert zh.match_tokens("Who founded 臺灣大學 in 1928?") == ["Who", "founded", "臺", "灣", "大", "學", "in", "1928"]
    assert zh.match_tokens("Barack Obama's 2nd term") == ["Barack", "Obama", "s", "2nd", "term"]
    assert name_tokens("臺灣大學") == ("台", "湾", "大", "学")


def test_entity_matcher_finds_names_inside_unspaced_queries_in_either_script():
    names = ["臺灣大學", "臺北市", "馬祖列島", "Barack Obama", "北京"]
    m = EntityMatcher(list(range(10, 15)), names)
    got = {nid: kind for nid, _, kind in ((x.node_id, x.phrase, x.kind) for x in m.match([], "国立台湾大学位于哪个城市？"))}
    assert got == {10: "in_query"}
    got = {x.node_id for x in m.match([], "馬祖列島和臺北市之間的航班")}
    assert got == {11, 12}
    assert [x.node_id for x in m.match(["Obama"], "Who is Barack Obama?")] == [13]
    assert m.exact("台湾大学") == [10]
    assert m.containing("台北", limit=5) == [11]


def test_bm25_chinese_terms_bigrams_and_segmenter():
    assert bm25_tokens("臺灣大學 Taipei") == ["台湾", "湾大", "大学", "taipei"]
    assert bm25_tokens("The Cat sat") == ["the", "cat", "sat"]
    assert "台湾大学" in bm25_tokens("臺灣大學", "segment")
    ids = list(ZH_DOCS)
    texts = [f"{t}\n{x}" for t, x in ZH_DOCS.items()]
    for cjk in ("bigram", "segment"):
        bm = BM25Retriever(ids, texts, cjk=cjk)
        assert bm.search(["周树人出生在哪里？", "静夜思是谁写的"], 1) == [["魯迅"], ["李白"]]
    with pytest.raises(ValueError, match="cjk must be"):
        BM25Retriever(ids, texts, cjk="whitespace")


def test_llm_decomposer_picks_chinese_prompts_per_chunk():
    from noderag.indexing.decompose.llm import LLMDecomposer
    from noderag.llm.prompts import SYSTEM_PROMPTS
    from noderag.llm.testing import ScriptedLLM

    seen: dict[str, str] = {}

    def respond(req):
        seen[req.id] = req.messages[0]["content"]
        return {"units": [{"text": "x", "entities": [], "relations": []}]}

    dec = LLMDecomposer(ScriptedLLM(respond), DecomposeConfig(method="llm"))
    dec.decompose([ChunkInput(0, ZH_DOCS["魯迅"], "魯迅"), ChunkInput(1, "Paris is the capital of France.", "Paris"),
                   ChunkInput(2, MIXED, None)])
    assert seen == {"chunk-0": SYSTEM_PROMPTS["zh"]["decompose"], "chunk-1": SYSTEM_PROMPTS["en"]["decompose"],
                    "chunk-2": SYSTEM_PROMPTS["zh"]["decompose"]}
