"""Search on small indexes built by the real pipeline (nlp mode, ``hash:64`` embedder), API and CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import noderag
from noderag.graph.types import NodeType as NT
from noderag.search import SearchConfig
from noderag.search.cli import format_result
from noderag.search.searcher import LLMNotConfiguredError

from conftest import build_passages

PASSAGES = [
    ("p-snow", "Hank Snow", "Hank Snow was a Canadian-American country music singer. Hank Snow died in "
     "Madison, Tennessee in 1999."),
    ("p-love", "Hello Love", "Hello Love is an album by Hank Snow. Hello Love was released by RCA Victor in 1974."),
    ("p-tenn", "Tennessee", "Tennessee is a state in the Southeastern United States. North Carolina borders "
     "Tennessee to the east."),
    ("p-publix", "Publix", "Publix is a supermarket chain. Publix operates 35 stores in North Carolina."),
    ("p-pine", "Pineapple", "The pineapple is a tropical plant. Dole Food Company grows pineapples in Hawaii."),
    ("p-hawaii", "Hawaii", "Hawaii is a state of the United States in the Pacific Ocean. Honolulu is the capital "
     "of Hawaii."),
    ("p-jmp", "Journal of Mathematical Physics", "The Journal of Mathematical Physics is a peer-reviewed journal "
     "published by the American Institute of Physics."),
    ("p-aip", "American Institute of Physics", "The American Institute of Physics was founded in 1931 in "
     "New York City."),
]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return build_passages(tmp_path_factory.mktemp("search_index"), PASSAGES)


def test_retrieve_on_built_index_ranks_the_named_passages(index):
    r = index.retrieve("Where did the singer of Hello Love die?")
    assert set(r.passages) <= {p[0] for p in PASSAGES}
    assert "p-love" in r.passages[:3]
    assert r.context_tokens <= SearchConfig().context_tokens
    assert any(index.nodes.column("type")[i].as_py() == int(NT.N) for i in r.matched_names)
    r2 = index.retrieve("In which year was the publisher of the Journal of Mathematical Physics founded?")
    assert {"p-jmp", "p-aip"} <= set(r2.passages[:4])


def test_retrieve_many_equals_retrieve_on_built_index(index):
    qs = ["Where did the singer of Hello Love die?", "Who grows pineapples in Hawaii?",
          "How many Publix stores are in North Carolina?"]
    many = index.retrieve_many(qs)
    assert [r.to_dict() for r in many] == [index.retrieve(q).to_dict() for q in qs]


def test_answer_without_llm_is_retrieval_only(index):
    with pytest.raises(LLMNotConfiguredError, match="only retrieval"):
        index.answer("Who sang Hello Love?")


def test_format_result_is_readable(index):
    r = index.retrieve("Who grows pineapples in Hawaii?")
    text = format_result(r, passages=3)
    assert text.startswith("Q: Who grows pineapples in Hawaii?")
    assert "top passages" in text and r.passages[0] in text
    assert f"context {r.context_tokens} tokens" in text


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run the ``noderag`` command in-process; (exit code, stdout, stderr)."""
    from noderag.cli import main

    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_query_readable_and_json(index, capsys):
    code, out, err = _cli(capsys, "query", str(index.root), "Who grows pineapples in Hawaii?", "--k", "2")
    assert code == 0, err
    assert "Q: Who grows pineapples in Hawaii?" in out
    assert "p-pine" in out
    code, out, err = _cli(capsys, "query", str(index.root), "Who grows pineapples in Hawaii?", "Who sang Hello Love?",
                          "--json", "--top-k", "3")
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["query"] for r in rows] == ["Who grows pineapples in Hawaii?", "Who sang Hello Love?"]
    assert sum(n["origin"] == "entry" for n in rows[0]["nodes"]) <= 3
    assert "p-pine" in [p["id"] for p in rows[0]["passages"][:3]]


def test_cli_query_answer_without_llm_says_so(index, capsys):
    code, out, err = _cli(capsys, "query", str(index.root), "Who sang Hello Love?", "--answer")
    assert code != 0
    assert "only retrieval" in err
    assert "Q: Who sang Hello Love?" in out  # the retrieval is still printed


def test_cli_query_bad_input_is_a_clear_error(index, tmp_path, capsys):
    code, _, err = _cli(capsys, "query", str(tmp_path / "nope"), "anything")
    assert code != 0 and "nope" in err
    code, _, err = _cli(capsys, "query", str(index.root), "   ")
    assert code != 0 and "is blank" in err
    code, _, err = _cli(capsys, "query", str(index.root), "q", "--top-k", "-1")
    assert code != 0 and "vector_top_k" in err


def test_cli_main_subprocess_entry_point(index):
    out = subprocess.run([sys.executable, "-m", "noderag.cli", "query", str(index.root), "Who sang Hello Love?",
                          "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["query"] == "Who sang Hello Love?"


def test_demo_builds_and_retrieves(tmp_path, capsys):
    from noderag.data import demo_questions

    code, out, err = _cli(capsys, "demo", "--embed", "hash:64", "--no-progress", "--index", str(tmp_path / "demo"))
    assert code == 0, err
    for q in demo_questions():
        assert f"Q: {q['question']}" in out
    assert "supporting documents in the top 3" in out
    assert "questions retrieved in" in out


# ------------------------------------------------------------------ odd queries (issue 14 item 6)
def test_lone_surrogate_query_is_a_clear_value_error(index):
    with pytest.raises(ValueError, match=r"not valid Unicode: lone surrogate U\+D800 at character 4"):
        index.retrieve("Who \ud800 sang Hello Love?")
    with pytest.raises(ValueError, match=r"question 2 of 2 is not valid Unicode"):
        index.retrieve_many(["Who sang Hello Love?", "bad \udcff"])


def test_cli_lone_surrogate_is_one_line_error(index, capsys):
    # an undecodable argv byte arrives as a lone surrogate (surrogateescape)
    code, out, err = _cli(capsys, "query", str(index.root), "Who sang \udcff?")
    assert code == 1
    assert err.strip().count("\n") == 0 and "lone surrogate U+DCFF" in err
    assert "Traceback" not in err


def test_matched_signal_on_real_and_junk_queries(index):
    real = index.retrieve("Who sang Hello Love?")
    assert real.matched and real.matched_names
    assert real.best_similarity is not None and real.min_similarity == SearchConfig().min_similarity
    junk = index.retrieve("?!?! ... ;;; ---")
    assert not junk.matched and not junk.matched_names
    assert junk.best_similarity is not None and junk.best_similarity < junk.min_similarity
    d = junk.to_dict()
    assert d["matched"] is False and d["best_similarity"] == pytest.approx(junk.best_similarity, abs=1e-6)
    # a threshold the real query's best similarity passes marks it matched without names too
    cfg = SearchConfig(entity_source="none", min_similarity=-1.0)
    res = index.searcher(cfg).retrieve("?!?! ... ;;; ---")
    assert res.matched and not res.matched_names


def test_cli_says_no_confident_match(index, capsys):
    code, out, err = _cli(capsys, "query", str(index.root), "?!?! ... ;;; ---")
    assert code == 0, err
    assert "no confident match" in out
    code, out, err = _cli(capsys, "query", str(index.root), "Who sang Hello Love?")
    assert code == 0 and "no confident match" not in out
    code, out, err = _cli(capsys, "query", str(index.root), "?!?! ... ;;; ---", "--json")
    row = json.loads(out)
    assert row["matched"] is False and "best_similarity" in row and row["min_similarity"] == 0.3


# ------------------------------------------------------------------ one-time preparation (issue 11)
def test_eight_threads_prepare_the_searcher_once(index, monkeypatch):
    import threading
    import time

    from noderag.search import searcher as searcher_mod

    queries = ["Who sang Hello Love?", "Who grows pineapples in Hawaii?", "Where did Hank Snow die?",
               "Who founded the American Institute of Physics?"]
    expected = [r.to_dict() for r in noderag.Index.open(index.root).retrieve_many(queries)]
    calls = []
    original = searcher_mod.Searcher.__init__

    def counting_init(self, *args, **kwargs):
        calls.append(threading.get_ident())
        time.sleep(0.2)  # widen the race window: without the lock every thread would get here
        original(self, *args, **kwargs)

    monkeypatch.setattr(searcher_mod.Searcher, "__init__", counting_init)
    fresh = noderag.Index.open(index.root)
    barrier = threading.Barrier(8)
    results: dict[int, list] = {}
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            barrier.wait()
            results[i] = [fresh.retrieve(q).to_dict() for q in queries]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(calls) == 1
    assert len({id(s) for s in fresh._search.searchers.values()}) == 1
    for i in range(8):
        assert results[i] == expected


def test_index_surface_is_defined_in_its_class_body():
    """One public Index class: its methods live in the class body (visible to type checkers), none attached."""
    import ast
    import inspect

    import noderag.api

    tree = ast.parse(inspect.getsource(noderag.api))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Index")
    own = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert {"retrieve", "retrieve_many", "answer", "insert", "delete", "stats", "searcher"} <= own
    assert callable(noderag.Index.open)  # inherited from the store: opening is the store's job
    assert "attach" not in inspect.getsource(noderag.api)


def test_index_stats(index):
    s = index.stats()
    assert s["generation"] == index.generation and s["path"] == str(index.root)
    assert s["counts"]["nodes"]["text"] > 0 and s["bytes_total"] > 0 and "decompose" in s["stages"]


def test_one_config_error_type_names_the_key():
    """Every section, search and importance included, raises the one ConfigError naming its key."""
    from noderag.config import ConfigError, NodeRAGConfig
    from noderag.graph.importance import ImportanceConfig

    with pytest.raises(ConfigError, match=r"^search\.alpha must be a number in \[0, 1\], got 2\.0"):
        NodeRAGConfig().with_overrides({"search.alpha": 2.0})
    with pytest.raises(ConfigError, match=r"^importance\.betweenness_pivots must be a positive integer"):
        NodeRAGConfig().with_overrides({"importance.betweenness_pivots": 0})
    with pytest.raises(ConfigError, match=r"^search\.expansion_search must be an int >= 1"):
        SearchConfig(expansion_search=0).validate()
    with pytest.raises(ConfigError, match=r"^importance\.min_mentions must be an integer"):
        ImportanceConfig(min_mentions="x")


def test_lexical_tables_are_written_at_build_and_equal_an_in_memory_build(index):
    import numpy as np

    from noderag.search.lexical import LexicalIndex
    from noderag.search.searcher import Searcher, passage_texts

    mapped = index.query_index.lexical
    assert mapped is not None
    s = Searcher(index)
    t_ids = np.flatnonzero(np.asarray(s.types) == int(NT.T))
    fresh = LexicalIndex.from_texts(t_ids, passage_texts(index, s.tables, t_ids))
    for q in ("Publix stores", "pineapple Dole", "Journal of Mathematical Physics founded 1931"):
        a, b = mapped.scores(q), fresh.scores(q)
        assert a[0].tolist() == b[0].tolist()
        np.testing.assert_allclose(a[1], b[1], rtol=1e-6)


def test_lexical_entry_point_alone_finds_the_passage_sharing_a_rare_word(index):
    only_lexical = SearchConfig(vector_top_k=0, use_ppr=False, entity_source="none", bridging=False, min_passages=0)
    r = index.searcher(only_lexical).retrieve("which company grows pineapples")
    assert r.passages[0] == "p-pine"
    none = index.searcher(only_lexical.replace(lexical_top_k=0)).retrieve(
        "which company grows pineapples")
    assert none.passages == []


def test_every_query_returns_min_passages_when_the_corpus_has_them(index):
    few = SearchConfig(vector_top_k=1, lexical_top_k=1, use_ppr=False, bridging=False)
    for q in ("Publix", "zzz unknown words only", "Where did the singer of Hello Love die?"):
        r = index.searcher(few).retrieve(q)
        assert len(r.passages) == len(PASSAGES)  # 10 wanted, the corpus holds 8
        assert len(set(r.passages)) == len(r.passages)
        assert all(a >= b for a, b in zip(r.passage_scores, r.passage_scores[1:]))
        assert len(index.searcher(few.replace(min_passages=3)).retrieve(q).passages) >= 3
    assert len(index.searcher(few.replace(min_passages=0)).retrieve("Publix").passages) < len(PASSAGES)


def test_bridging_brings_the_passage_about_an_entity_of_the_best_passage(index):
    q = "Where did the singer of Hello Love die?"
    base = SearchConfig(vector_top_k=1, lexical_top_k=1, use_ppr=False, min_passages=0, entity_source="none")
    alone = index.searcher(base.replace(bridging=False)).retrieve(q)
    assert alone.passages[0] == "p-love" and "p-snow" not in alone.passages
    bridged = index.searcher(base).retrieve(q)
    assert set(bridged.passages[:2]) == {"p-love", "p-snow"}  # "Hank Snow", named in p-love, is what p-snow is about


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_chinese_query_word_finds_a_longer_indexed_name(tmp_path):
    rows = [("zh-1", "馬祖列島", "馬祖列島位於臺灣海峽北部，由南竿、北竿等島嶼組成。馬祖列島冬季風大。"),
            ("zh-2", "新北市", "新北市是臺灣人口最多的城市，環繞臺北市。"),
            ("zh-3", "下薩克森", "下薩克森是德國的一個州，首府為漢諾威。")]
    idx = build_passages(tmp_path, rows)
    r = idx.retrieve("為何馬祖地區冬季風速最大？")
    names = [idx.names[i] for i in r.matched_names]
    assert "馬祖列島" in names
    assert r.passages[0] == "zh-1"
