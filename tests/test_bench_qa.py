"""benchmarks/bench_qa.py against a scripted OpenAI-compatible HTTP server on 127.0.0.1 (no model needed).

The server answers with the gold answer when the context holds it, so the scores are known in advance;
a second run must be served from the LLM cache without one HTTP call.
"""

from __future__ import annotations

import importlib.util
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

CORPUS = [
    {"id": "p1", "title": "Haldis Lighthouse", "text": "The Haldis Lighthouse was designed by Bram Ostervelt in 1688."},
    {"id": "p2", "title": "Bram Ostervelt", "text": "Bram Ostervelt was an engineer born in Kessel."},
    {"id": "p3", "title": "Skarn", "text": "Skarn is a granite island that supplied stone for harbours."},
    {"id": "p4", "title": "Kessel", "text": "Kessel is a port city on the northern coast."},
    {"id": "p5", "title": "Grey Heron Line", "text": "The Grey Heron Line is a ferry company founded in 1902."},
]
QUESTIONS = [
    {"id": "q1", "question": "Who designed the Haldis Lighthouse?", "answer": "Bram Ostervelt",
     "answer_aliases": ["Ostervelt"], "supporting_ids": ["p1"]},
    {"id": "q2", "question": "Where was Bram Ostervelt born?", "answer": "Kessel", "supporting_ids": ["p2"]},
    {"id": "q3", "question": "When was the Grey Heron Line founded?", "answer": "1902", "supporting_ids": ["p5"]},
]
GOLD = {q["question"]: q["answer"] for q in QUESTIONS}


class _Handler(BaseHTTPRequestHandler):
    calls: list[dict] = []

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls.append(body)
        user = body["messages"][-1]["content"]
        if body["response_format"]["json_schema"]["name"] == "judgement":
            pred = user.rsplit("Predicted answer: ", 1)[1]
            gold = re.search(r"Gold answer: (.*)", user).group(1)
            content = {"verdict": "correct" if pred.strip().lower() == gold.lower() else "incorrect"}
        else:
            q = user.rsplit("Question: ", 1)[1]
            ids = re.findall(r"^\[(\w+)\] (.*)$", user, re.M)
            hit = [i for i, text in ids if GOLD[q] in text]
            content = {"answer": GOLD[q], "citations": hit[:1] + ["999"]} if hit else {"answer": "unknown",
                                                                                      "citations": []}
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": json.dumps(content)},
                                        "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": len(user.split()), "completion_tokens": 7}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture()
def fake_server():
    _Handler.calls = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    finally:
        srv.shutdown()
        srv.server_close()


def _bench():
    spec = importlib.util.spec_from_file_location("bench_qa", REPO / "benchmarks" / "bench_qa.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_qa_scores_records_and_resumes(fake_server, tmp_path):
    data = tmp_path / "sample"
    data.mkdir()
    (data / "corpus.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CORPUS))
    (data / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    out = tmp_path / "qa.json"
    argv = ["--data", str(data), "--llm", f"openai:fake@{fake_server}", "--judge", f"openai:judge@{fake_server}",
            "--index", str(tmp_path / "index"), "--out", str(out), "--context-tokens", "300"]
    bench = _bench()
    assert bench.main(argv) == 0
    res = json.loads(out.read_text())
    assert set(res["methods"]) == {"noderag", "dense"} and len(res["records"]) == 6
    for r in res["records"]:
        assert r["context_tokens"] <= 300 and r["prompt_tokens"] > 0 and r["completion_tokens"] == 7
        assert "999" in r["invalid_citations"] or r["answer"] == "unknown"
        if r["answer"] != "unknown":
            assert r["em"] == 1.0 and r["f1"] == 1.0 and r["judge"] == 1.0 and len(r["cited"]) == 1
        else:
            assert r["em"] == 0.0 and r["judge"] == 0.0
    dense = res["methods"]["dense"]
    # 5 short passages fit in 300 tokens: dense sees every gold answer
    assert dense["exact_match"] == 1.0 and dense["judge_accuracy"] == 1.0 and dense["cache_hits"] == 0
    assert res["ledger"]["answer:dense"]["requests"] == 3 and res["ledger"]["judge:noderag"]["requests"] == 3
    calls = len(_Handler.calls)
    # 2 methods x 3 answers, 3 judgements: both methods gave the same answers, so the judge cache served the second
    assert calls == 9 and res["ledger"]["judge:dense"]["cache_hits"] == 3
    md = out.with_suffix(".md").read_text()
    assert "| dense | 3 | 1.0 | 1.0 | 1.0 |" in md

    # rerun: everything from the LLM cache, same records
    assert _bench().main(argv) == 0
    res2 = json.loads(out.read_text())
    assert len(_Handler.calls) == calls
    assert all(r["cached"] for r in res2["records"])
    assert [(r["answer"], r["em"]) for r in res2["records"]] == [(r["answer"], r["em"]) for r in res["records"]]
    assert res2["methods"]["dense"]["completion_tokens_per_s"] is None  # no call made


def test_bench_qa_rejects_unknown_method(tmp_path, capsys):
    with pytest.raises(SystemExit):
        _bench().main(["--data", str(tmp_path), "--llm", "openai:m@http://127.0.0.1:1/v1", "--methods", "bm25"])
    assert "--methods: unknown ['bm25']" in capsys.readouterr().err
