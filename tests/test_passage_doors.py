"""Ranked passages carry their id, title, text and score together, through every door: the Python API,
``noderag query`` (plain and ``--json``), HTTP, MCP, the web page's script and the framework adapters."""

from __future__ import annotations

import asyncio
import json
import pickle
import sys
from pathlib import Path

import pytest

import noderag
from noderag.cli import main
from noderag.integrations.passages import passages as adapter_passages
from noderag.search.result import Passage

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doors import need  # noqa: E402

QUESTION = "Who founded the Grey Heron ferry line?"
CORPUS = [
    {"id": "p-heron", "title": "Grey Heron Line (ferry)", "text": "The Grey Heron Line is a ferry company founded by "
     "Oda Lindqvist in 1921. Its boats sail from Port Emmerich to the outer islands."},
    {"id": "p-oda", "title": "Oda Lindqvist", "text": "Oda Lindqvist was a shipwright and harbour master of Port "
     "Emmerich. She founded the Grey Heron Line after the storm of 1920."},
    {"id": "p-lilu", "title": "Lilu (mythology)", "text": "Lilu is a class of spirits in Mesopotamian mythology, "
     "told of in the harbour songs of the islands."},
    {"id": "p-mill", "title": None, "text": "Birch Mill grinds the grain of the northern farms and was bought by "
     "the island council in 1987."},
]


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> noderag.Index:
    root = tmp_path_factory.mktemp("passage-doors")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({k: v for k, v in row.items() if v is not None}) + "\n" for row in CORPUS),
                      encoding="utf-8")
    return noderag.build([str(corpus)], str(root / "index"), embed="hash:64", progress=False)


def _check(passage: dict, by_id: dict) -> None:
    row = by_id[passage["id"]]
    assert passage["title"] == row["title"] and passage["text"] == row["text"]
    assert isinstance(passage["score"], float) and isinstance(passage["node_id"], int)


def test_the_api_passage_is_its_id_with_title_text_and_score(index):
    res = index.retrieve(QUESTION)
    top = res.passages[0]
    assert isinstance(top, Passage) and top == "p-heron" and top.id == "p-heron"
    assert top.title == "Grey Heron Line (ferry)" and top.text == CORPUS[0]["text"]
    assert [p.score for p in res.passages] == res.passage_scores
    assert [p.node_id for p in res.passages] == res.passage_node_ids
    untitled = [p for p in res.passages if p == "p-mill"]
    assert untitled and untitled[0].title is None
    assert pickle.loads(pickle.dumps(top)).title == top.title  # a worker process hands results back
    with pytest.raises(AttributeError, match="read-only"):
        top.title = "x"
    by_id = {r["id"]: r for r in CORPUS}
    for p in res.to_dict()["passages"]:
        _check(p, by_id)


def test_query_plain_shows_titles_and_text_and_json_carries_them(index, capsys):
    assert main(["query", str(index.root), QUESTION, "--k", "2"]) == 0
    out = capsys.readouterr().out
    assert "top passages (2 of" in out
    assert "1. Grey Heron Line (ferry) [p-heron]  score" in out
    assert "The Grey Heron Line is a ferry company founded by" in out
    assert main(["query", str(index.root), QUESTION, "--k", "2", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert len(got["passages"]) == len(got["passage_scores"]) == len(got["passage_node_ids"]) == 2
    by_id = {r["id"]: r for r in CORPUS}
    for p in got["passages"]:
        _check(p, by_id)
    assert got["passages"][0]["id"] == "p-heron"


def test_http_retrieve_answers_passages_with_titles(index):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from noderag.serve.app import create_app
    from noderag.serve.models import RetrievalOut

    with TestClient(create_app(noderag.Index.open(index.root))) as client:
        body = client.post("/retrieve", json={"question": QUESTION, "k": 3}).json()
    RetrievalOut.model_validate(body)
    assert len(body["passages"]) == 3 and body["passages"][0]["title"] == "Grey Heron Line (ferry)"
    by_id = {r["id"]: r for r in CORPUS}
    for p in body["passages"]:
        _check(p, by_id)


def test_mcp_retrieve_answers_passages_with_titles(index):
    mcp = need("mcp")
    from noderag.integrations.mcp import create_server

    async def run():
        async with mcp.Client(create_server(index)) as c:
            r = await c.call_tool("retrieve", {"question": QUESTION, "k": 2})
            assert not r.is_error
            return r.structured_content["passages"]

    got = asyncio.run(run())
    assert [p["passage_id"] for p in got] == index.retrieve(QUESTION).passages[:2]
    assert got[0]["title"] == "Grey Heron Line (ferry)" and got[0]["text"] == CORPUS[0]["text"]


def test_adapters_carry_the_passage_title_and_text(index):
    docs = adapter_passages(index, index.retrieve(QUESTION), 2)
    assert docs[0]["text"] == CORPUS[0]["text"] and docs[0]["metadata"]["title"] == "Grey Heron Line (ferry)"
    assert docs[0]["metadata"]["passage_id"] == "p-heron"
    need("langchain_core")
    from noderag.integrations import langchain as lc

    got = lc.NodeRAGRetriever(index=index, k=2).invoke(QUESTION)
    assert got[0].metadata["title"] == "Grey Heron Line (ferry)" and got[0].page_content == CORPUS[0]["text"]


def test_the_page_lists_each_passage_by_title_with_its_text():
    """The page's passage list reads the passage records (title, id, text, score, node id) the HTTP answer
    carries, not the parallel id lists (the browser test in test_serve_process renders it)."""
    js = (Path(noderag.__file__).parent / "serve" / "static" / "app.js").read_text(encoding="utf-8")
    body = js[js.index("function showPassages"):js.index("// ----", js.index("function showPassages"))]
    for field in ("p.title", "p.id", "p.text", "p.score", "p.node_id"):
        assert field in body, field
    assert "passage_scores" not in body and "passage_texts" not in body


def test_repr_is_one_short_line(index):
    res = index.retrieve(QUESTION)
    text = repr(res)
    assert "\n" not in text and len(text) < 400, text
    assert text.startswith("RetrievalResult(query='Who founded the Grey Heron ferry line?'")
    assert "p-heron (Grey Heron Line (ferry))" in text and res.context[:60] not in text


@pytest.mark.parametrize("k", ["0", "-1", "two"])
def test_query_k_below_one_is_a_usage_error(index, capsys, k):
    assert main(["query", str(index.root), QUESTION, "--k", k]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("noderag query: error: argument --k: ")
    assert "1 or more" in err and k in err


def test_the_old_passages_flag_is_gone(index, capsys):
    assert main(["query", str(index.root), QUESTION, "--passages", "2"]) == 2
    assert "unrecognized arguments: --passages" in capsys.readouterr().err


def test_dir_lists_the_api_and_a_closed_index_refuses_to_search(index):
    names = dir(noderag)
    assert {"build", "Index", "SearchConfig", "NodeRAGConfig", "load_config", "IndexClosedError"} <= set(names)
    assert "Any" not in names and "annotations" not in names
    for name in noderag.__all__:
        assert getattr(noderag, name) is not None
    ix = noderag.Index.open(index.root)
    assert ix.retrieve(QUESTION).passages[0] == "p-heron"
    ix.close()
    for call in (lambda: ix.retrieve(QUESTION), lambda: ix.retrieve_many([QUESTION]), lambda: ix.searcher()):
        with pytest.raises(noderag.IndexClosedError, match=r"is closed: open it again with noderag\.Index\.open"):
            call()


def test_a_blank_question_and_bad_json_read_as_sentences(index, tmp_path, capsys):
    assert main(["query", str(index.root), "   "]) == 1
    assert capsys.readouterr().err.strip() == \
        "noderag query: error: question 1 of 1 is blank: ask something with words in it"
    with pytest.raises(ValueError, match=r"^the question is blank: ask something with words in it$"):
        index.retrieve(" ")
    bad = tmp_path / "c.jsonl"
    bad.write_text('{"id": "a", "text": "ok"}\n{"id": "b", "text": "no end\n', encoding="utf-8")
    assert main(["build", str(bad), "--index", str(tmp_path / "ix"), "--no-progress"]) == 1
    assert capsys.readouterr().err.strip() == \
        f"noderag build: error: {bad}:2: malformed JSON (unterminated string starting at column 21)"
