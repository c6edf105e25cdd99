"""``noderag serve`` endpoints in-process (Starlette's TestClient): JSON parity with ``noderag query --json``,
node details, streaming answers, API key, and every bad-request case answering a 4xx that names the field."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from noderag.cli import main  # noqa: E402
from noderag.store.tables import IndexStore  # noqa: E402
from noderag.llm.backends.openai import OpenAIBackend, OpenAIConfig  # noqa: E402
from noderag.llm.testing import ScriptedLLM  # noqa: E402
from noderag.search import Searcher  # noqa: E402
from noderag.serve.app import ServeSettings, create_app  # noqa: E402
from noderag.serve.models import AnswerOut, NodeOut, RetrievalOut, RetrieveManyOut  # noqa: E402
from noderag.serve.stream import AnswerTextStream  # noqa: E402
from noderag.serve.views import GraphView  # noqa: E402
from noderag.serve.worker import RetrievalWorker, WorkerStopped  # noqa: E402

from scripted_openai import scripted_answer  # noqa: E402
from serve_index import QUESTION, demo_index  # noqa: E402


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return demo_index(tmp_path_factory)


@pytest.fixture(scope="module")
def store(index):
    return IndexStore.open(index)


@pytest.fixture(scope="module")
def client(store):
    with TestClient(create_app(store)) as c:
        yield c


def _events(text: str) -> list[tuple[str, dict]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def _clean(resp: httpx.Response, index) -> None:
    """No traceback and no filesystem path in an error response."""
    text = resp.text
    for bad in ("Traceback", 'File "', str(index), "/tmp", "site-packages", ".py"):
        assert bad not in text, (bad, text)


# ----------------------------------------------------------------------------- retrieval
def test_retrieve_is_the_json_of_noderag_query(client, index, capsys):
    r = client.post("/retrieve", json={"question": QUESTION})
    assert r.status_code == 200
    assert main(["query", str(index), QUESTION, "--json"]) == 0
    assert r.json() == json.loads(capsys.readouterr().out)
    RetrievalOut.model_validate(r.json())
    timing = r.headers["server-timing"]
    assert all(f"{c};dur=" in timing for c in ("queue", "embed", "handoff", "search", "serialise", "total"))


def test_retrieve_k_and_explain(client, store):
    full = client.post("/retrieve", json={"question": QUESTION, "k": None}).json()
    r = client.post("/retrieve", json={"question": QUESTION, "k": 2, "explain": True}).json()
    assert r["passages"] == full["passages"][:2] and r["passage_node_ids"] == full["passage_node_ids"][:2]
    ex = r["explain"]
    ids = {n["id"] for n in r["nodes"]}
    assert ex["seeds"] and set(ex["seeds"]) <= ids
    assert {n["origin"] for n in r["nodes"] if n["id"] in ex["seeds"]} <= {"entry", "name"}
    g = store.graph.structural
    assert ex["edges"], "the retrieved nodes of the demo question are connected"
    for u, v in ex["edges"]:
        assert u < v and u in ids and v in ids
        assert v in g.indices[g.indptr[u]:g.indptr[u + 1]].tolist()
    # every structural edge among the retrieved nodes is listed
    want = {(u, int(v)) for u in ids for v in g.indices[g.indptr[u]:g.indptr[u + 1]].tolist() if v in ids and u < v}
    assert {tuple(e) for e in ex["edges"]} == want
    assert ex["passage_texts"][0] == store.nodes.column("text")[r["passage_node_ids"][0]].as_py()
    assert len({n["type"] for n in r["nodes"]}) >= 5


def test_retrieve_many_matches_single(client, store):
    qs = [QUESTION, "Who designed Haldis Lighthouse?", "When is the Lantern Festival held?"]
    r = client.post("/retrieve_many", json={"questions": qs, "k": 3})
    assert r.status_code == 200
    RetrieveManyOut.model_validate(r.json())
    got = r.json()["results"]
    assert [g["query"] for g in got] == qs
    ref = Searcher(store).retrieve_many(qs)
    assert [[p["id"] for p in g["passages"]] for g in got] == [x.passages[:3] for x in ref]
    assert [g["context_node_ids"] for g in got] == [x.context_node_ids for x in ref]


def test_concurrent_requests_are_batched(store):
    app = create_app(store)
    worker = app.state.worker
    qs = [f"{QUESTION} {i}" for i in range(24)]
    with TestClient(app) as c:
        out: dict[int, httpx.Response] = {}

        def ask(i: int) -> None:
            out[i] = c.post("/retrieve", json={"question": qs[i]})

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(qs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    ref = Searcher(store).retrieve_many(qs)
    assert [[p["id"] for p in out[i].json()["passages"]] for i in range(len(qs))] == [r.passages[:5] for r in ref]
    assert worker.queries == len(qs)
    timings = [_timing(out[i]) for i in range(len(qs))]
    parts = [t["batch"] for t in timings]
    assert max(parts) <= worker.retrieve_batch == 2  # parts of at most 2 (that it batches: the gated test below)
    assert max(t["embed_batch"] for t in timings) <= worker.max_batch == 2
    for t in timings:  # every component is on the server's clock and they add up to at most the total
        assert t["search"] > 0 and t["embed"] > 0 and t["serialise"] > 0 and 0 < t["search_cpu"] and t["search_preempted"] >= -1
        parts_sum = t["queue"] + t["embed"] + t["handoff"] + t["search"] + t["serialise"]
        assert parts_sum <= t["total"] + 0.01


def _timing(resp: httpx.Response) -> dict[str, float]:
    """The ``Server-Timing`` header as {name: ms} (``desc`` values as numbers)."""
    out = {}
    for item in resp.headers["server-timing"].split(","):
        name, _, val = item.strip().partition(";")
        out[name] = float(val.split("=", 1)[1].strip('"'))
    return out


class _GatedEmbedder:
    """The index's embedder, but ``embed`` waits for ``gate``: requests pile up behind a held embedder."""

    def __init__(self, inner) -> None:
        self.inner, self.gate = inner, threading.Event()
        self.gate.set()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def embed(self, texts, **kw):
        assert self.gate.wait(60)
        return self.inner.embed(texts, **kw)


def test_batched_concurrent_results_equal_index_retrieve(index, store):
    """Concurrent requests queued behind a busy embedder go through shared embedding calls and retrieve_many
    parts (with back-pressure), and each response equals ``Index.retrieve`` of its question alone."""
    import noderag

    emb = _GatedEmbedder(Searcher(store).embedder)
    app = create_app(store, settings=ServeSettings(max_batch=3, retrieve_batch=2, max_pending=1), embedder=emb)
    worker = app.state.worker
    qs = [f"{QUESTION} {i}" for i in range(16)] + ["What is a graph?", "Who wrote it?"]
    with TestClient(app) as c:
        out: dict[int, httpx.Response] = {}

        def ask(i: int) -> None:
            out[i] = c.post("/retrieve", json={"question": qs[i], "k": 5})

        emb.gate.clear()  # the first request's embedding call holds the embedder; the others queue
        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(qs))]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while worker._q.qsize() < len(qs) - 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        emb.gate.set()
        for t in threads:
            t.join()
    timings = [_timing(out[i]) for i in range(len(qs))]
    assert max(t["embed_batch"] for t in timings) == 3 and max(t["batch"] for t in timings) == 2  # it batched
    assert worker.queries == len(qs) and worker.batches < len(qs) and worker.embed_batches < len(qs)
    ref = noderag.Index.open(index)
    for i, q in enumerate(qs):
        one = ref.retrieve(q)
        got = out[i].json()
        assert [p["id"] for p in got["passages"]] == one.passages[:5], q
        assert got["context_node_ids"] == one.context_node_ids, q


def test_openapi_schema(client):
    spec = client.get("/openapi.json").json()
    for path in ("/retrieve", "/retrieve_many", "/answer", "/stats", "/nodes/{node_id}", "/health"):
        assert path in spec["paths"], path
    body = spec["components"]["schemas"]["RetrieveRequest"]
    assert body["required"] == ["question"] and body["additionalProperties"] is False
    assert body["properties"]["question"]["maxLength"] == 2000


# ----------------------------------------------------------------------------- nodes, stats, page
def test_node_details(client, store):
    types = store.types
    t_id = int((types == 0).nonzero()[0][0])
    s_id = int((types == 1).nonzero()[0][0])
    d = client.get(f"/nodes/{t_id}").json()
    NodeOut.model_validate(d)
    assert d["type"] == "T" and d["source"]["chunk_id"] == t_id and d["text"] == d["source"]["text"]
    s = client.get(f"/nodes/{s_id}").json()
    assert s["type"] == "S" and s["source"]["chunk_id"] == int(store.chunk_ids[s_id])
    assert s["source"]["title"] and s["source"]["text"]
    g = store.graph.structural
    nbs = sorted(set(g.indices[g.indptr[s_id]:g.indptr[s_id + 1]].tolist()))
    assert s["neighbour_count"] == len(nbs) and sorted(n["id"] for n in s["neighbours"]) == nbs[:50]


def test_stats_health_page(client, store):
    h = client.get("/health").json()
    assert h == {"status": "ok", "nodes": int(store.graph.n), "llm": False, "generation": store.generation}
    s = client.get("/stats").json()
    assert s["counts"] == store.manifest["counts"] and s["llm"] is None and s["server"]["max_batch"] == 2
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "/static/app.js" in page.text and "http" not in page.text.replace("http-equiv", "")
    js = client.get("/static/app.js").text
    assert "createElementNS" in js and "//cdn" not in js and "https://" not in js


# ----------------------------------------------------------------------------- bad requests
BAD = [
    ("/retrieve", b"{bad json", 400, "body", "not valid JSON"),
    ("/retrieve", b"[1, 2]", 422, "body", "must be a JSON object"),
    ("/retrieve", b"{}", 422, "question", "'question' is required"),
    ("/retrieve", b'{"question": "x", "top": 3}', 422, "top", "unknown field 'top'"),
    ("/retrieve", b'{"question": ""}', 422, "question", "at least 1 character"),
    ("/retrieve", b'{"question": "   "}', 422, "question", "is blank: ask something with words in it"),
    ("/retrieve", json.dumps({"question": "a" * 100_000}).encode(), 422, "question", "at most 2000 characters"),
    ("/retrieve", b'{"question": "x", "k": 0}', 422, "k", "greater than or equal to 1"),
    ("/retrieve", b'{"question": "x", "k": 101}', 422, "k", "less than or equal to 100"),
    ("/retrieve", b'{"question": "x", "k": "ten"}', 422, "k", "valid integer"),
    ("/retrieve", b'{"question": 7}', 422, "question", "valid string"),
    ("/retrieve", json.dumps({"question": "x" * 300_000}).encode(), 413, "body", "over the limit"),
    ("/retrieve_many", b'{"questions": []}', 422, "questions", "at least 1 item"),
    ("/retrieve_many", json.dumps({"questions": ["q"] * 65}).encode(), 422, "questions", "at most 64 items"),
    ("/retrieve_many", b'{"questions": ["ok", " "]}', 422, "questions", "questions[1]"),
    ("/answer", b'{"question": "x", "stream": "maybe"}', 422, "stream", "valid boolean"),
    # strict types: no string, boolean or float for an integer, no string for a boolean
    ("/retrieve", b'{"question": "x", "k": "5"}', 422, "k", "k: Input should be a valid integer"),
    ("/retrieve", b'{"question": "x", "k": true}', 422, "k", "k: Input should be a valid integer"),
    ("/retrieve", b'{"question": "x", "k": 5.0}', 422, "k", "k: Input should be a valid integer"),
    ("/retrieve", b'{"question": "x", "explain": "yes"}', 422, "explain", "explain: Input should be a valid boolean"),
    ("/retrieve", b'{"question": "x", "explain": 1}', 422, "explain", "explain: Input should be a valid boolean"),
    ("/retrieve_many", b'{"questions": ["x"], "k": "2"}', 422, "k", "k: Input should be a valid integer"),
    ("/retrieve_many", b'{"questions": "x"}', 422, "questions", "questions: Input should be a valid list"),
    ("/answer", b'{"question": "x", "stream": "false"}', 422, "stream", "stream: Input should be a valid boolean"),
]


@pytest.mark.parametrize("path,body,status,field,words", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_request_names_the_field_and_server_keeps_serving(client, index, path, body, status, field, words):
    r = client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()
    assert err["field"] == field and words in err["error"], err
    _clean(r, index)
    assert client.post("/retrieve", json={"question": QUESTION}).status_code == 200


@pytest.mark.parametrize("path,status,field,words", [
    ("/nodes/999999", 404, "path.node_id", "does not exist"),
    ("/nodes/-1", 404, "path.node_id", "does not exist"),
    ("/nodes/abc", 422, "path.node_id", "valid integer"),
    ("/no/such/thing", 404, None, "no such endpoint"),
])
def test_bad_get(client, index, path, status, field, words):
    r = client.get(path)
    assert r.status_code == status and r.json()["field"] == field and words in r.json()["error"], r.text
    _clean(r, index)
    assert client.get("/nodes/0").status_code == 200


def test_chunked_body_over_the_limit(store, index):
    with TestClient(create_app(store, settings=ServeSettings(max_body_bytes=1000))) as c:
        def gen():
            yield b'{"question": "'
            yield b"x" * 2000
            yield b'"}'

        r = c.post("/retrieve", content=gen(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and r.json()["field"] == "body"
        _clean(r, index)
        assert c.post("/retrieve", json={"question": QUESTION}).status_code == 200


def test_answer_without_llm_is_a_4xx(client, index):
    r = client.post("/answer", json={"question": QUESTION})
    assert r.status_code == 400 and r.json()["field"] == "llm"
    assert "only retrieval is available" in r.json()["error"]
    _clean(r, index)


def test_internal_error_is_a_plain_500_and_the_server_keeps_serving(store, index, monkeypatch, caplog):
    def boom(self, ids):
        raise RuntimeError(f"secret detail in {index}")

    with TestClient(create_app(store), raise_server_exceptions=False) as c:
        monkeypatch.setattr(GraphView, "edges", boom)
        r = c.post("/retrieve", json={"question": QUESTION, "explain": True})
        assert r.status_code == 500 and r.json() == {"error": "internal error (logged on the server)", "field": None}
        _clean(r, index)
        assert "secret detail" in caplog.text  # the details go to the server's log
        monkeypatch.undo()
        assert c.post("/retrieve", json={"question": QUESTION, "explain": True}).status_code == 200


def test_api_key(store, index):
    with TestClient(create_app(store, settings=ServeSettings(api_key="s3cret"))) as c:
        assert c.get("/").status_code == 200 and c.get("/static/app.js").status_code == 200
        for path in ("/health", "/stats", "/openapi.json", "/nodes/0"):
            r = c.get(path)
            assert r.status_code == 401 and "missing API key" in r.json()["error"], path
        r = c.post("/retrieve", json={"question": QUESTION}, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401 and "wrong API key" in r.json()["error"]
        _clean(r, index)
        assert c.get("/health", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        r = c.post("/retrieve", json={"question": QUESTION}, headers={"X-API-Key": "s3cret"})
        assert r.status_code == 200 and r.json()["query"] == QUESTION


# ----------------------------------------------------------------------------- answers
def _sse_transport(calls: list[dict], *, stream_ok: bool = True) -> httpx.MockTransport:
    """An OpenAI-compatible endpoint inside httpx: streams the scripted answer (or garbage) as SSE."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls.append(body)
        text = json.dumps(scripted_answer(body["messages"]))
        if not body.get("stream"):
            return httpx.Response(200, json={"choices": [{"message": {"content": text}, "finish_reason": "stop"}],
                                             "usage": {"prompt_tokens": 5, "completion_tokens": 5}})
        if not stream_ok:
            text = "this is not JSON"
        events = "".join(f"data: {json.dumps({'choices': [{'delta': {'content': text[i:i + 3]}}]})}\n\n"
                         for i in range(0, len(text), 3)) + "data: [DONE]\n\n"
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=events.encode())

    return httpx.MockTransport(handler)


def _openai(calls, **kw) -> OpenAIBackend:
    return OpenAIBackend(OpenAIConfig(model="scripted", base_url="http://llm.invalid/v1"),
                         transport=_sse_transport(calls, **kw), max_retries=0)


def test_answer_streams_tokens_from_an_openai_compatible_server(store):
    calls: list[dict] = []
    with TestClient(create_app(store, llm=_openai(calls))) as c:
        assert c.get("/health").json()["llm"] is True
        r = c.post("/answer", json={"question": QUESTION})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        ev = _events(r.text)
    kinds = [k for k, _ in ev]
    assert kinds[0] == "retrieval" and kinds[-2:] == ["answer", "done"] and kinds.count("token") > 5
    retrieval = ev[0][1]
    RetrievalOut.model_validate(retrieval)
    assert retrieval["explain"]["edges"]
    streamed = "".join(d["text"] for k, d in ev if k == "token")
    final = ev[-2][1]
    assert final["answer"] == streamed and final["answer"].startswith("Scripted answer")
    assert final["error"] is None and final["usage"]["streamed"] is True
    assert final["cited_ids"] == retrieval["context_node_ids"][:2]
    assert len(calls) == 1 and calls[0]["stream"] is True


def test_answer_falls_back_when_the_stream_is_not_valid(store):
    calls: list[dict] = []
    with TestClient(create_app(store, llm=_openai(calls, stream_ok=False))) as c:
        ev = _events(c.post("/answer", json={"question": QUESTION}).text)
    final = dict(ev)["answer"]
    assert final["error"] is None and final["answer"].startswith("Scripted answer")
    assert final["usage"]["streamed"] is False
    assert [b.get("stream", False) for b in calls] == [True, False]


def test_answer_with_a_test_double_and_without_streaming(store):
    llm = ScriptedLLM(lambda req: scripted_answer(req.messages))
    with TestClient(create_app(store, llm=llm)) as c:
        ev = _events(c.post("/answer", json={"question": QUESTION}).text)
        assert [k for k, _ in ev] == ["retrieval", "token", "answer", "done"]
        assert ev[1][1]["text"] == ev[2][1]["answer"]
        r = c.post("/answer", json={"question": QUESTION, "stream": False})
    assert r.status_code == 200
    d = r.json()
    AnswerOut.model_validate(d)
    assert d["answer"].startswith("Scripted answer") and d["error"] is None
    assert d["cited_ids"] == d["retrieval"]["context_node_ids"][:2]
    assert d["retrieval"]["query"] == QUESTION


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=40), st.lists(st.integers(1, 7), max_size=30))
def test_answer_text_stream_decodes_any_split(answer, cuts):
    text = json.dumps({"answer": answer, "citations": ["1"]}, ensure_ascii=bool(len(answer) % 2))
    dec = AnswerTextStream()
    out, i = [], 0
    for c in cuts:
        out.append(dec.feed(text[i:i + c]))
        i += c
    out.append(dec.feed(text[i:]))
    assert "".join(out) == answer and dec.done


# ----------------------------------------------------------------------------- generations
def test_a_new_generation_is_served_without_a_restart(index, tmp_path):
    import shutil

    import noderag

    live = tmp_path / "live"
    shutil.copytree(index, live)
    doc = tmp_path / "new" / "13_quarrow_bell.md"
    doc.parent.mkdir()
    doc.write_text("# Quarrow Bell\nThe Quarrow Bell is a bronze bell cast in 1702 by the founder Edda Quarrow "
                   "for the harbour chapel of Port Emmerich.\n", encoding="utf-8")
    question = "Who cast the Quarrow Bell?"
    with TestClient(create_app(live, settings=ServeSettings(reload_s=0.2))) as c:
        gen0 = c.get("/health").json()["generation"]
        before = c.post("/retrieve", json={"question": question}).json()["passages"]
        assert not any(p["id"].endswith("13_quarrow_bell.md") for p in before)
        noderag.Index.open(live).insert([str(doc)])
        deadline = time.monotonic() + 60
        while c.get("/health").json()["generation"] == gen0:
            assert time.monotonic() < deadline, "the server did not pick up the new generation within 60 s"
            assert c.post("/retrieve", json={"question": QUESTION}).status_code == 200  # serving meanwhile
            time.sleep(0.1)
        after = c.post("/retrieve", json={"question": question, "explain": True}).json()
        stats = c.get("/stats").json()
    assert after["passages"][0]["id"].endswith("13_quarrow_bell.md") and after["passages"][0]["title"] == "Quarrow Bell"
    assert stats["counts"]["documents"] == 13 and stats["server"]["generation_reloads"] == 1
    assert stats["generation"] > gen0


# ----------------------------------------------------------------------------- command line
def test_serve_command_errors(tmp_path, index, capsys):
    assert main(["serve", str(tmp_path / "missing")]) == 1
    assert "not an index directory" in capsys.readouterr().err
    assert main(["serve", str(index), "--port", "70000"]) == 1
    assert "--port must be 0..65535" in capsys.readouterr().err
    assert main(["serve", str(index), "--llm", "nosuch:model"]) == 1
    assert "unknown backend 'nosuch'" in capsys.readouterr().err


def test_the_command_line_does_not_import_the_serve_extra():
    import subprocess
    import sys

    code = ("import sys, noderag.cli; noderag.cli._parser(); "
            "print(sorted(m for m in ('fastapi', 'uvicorn', 'starlette', 'pydantic') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


# ----------------------------------------------------------------------------- worker
def test_worker_isolates_a_failing_job_and_stops_cleanly(store):
    w = RetrievalWorker(Searcher(store), max_batch=4, retrieve_batch=2, max_pending=1)

    def bad(res, ctx):
        raise ValueError("finish failed")

    futs = [w.submit(QUESTION), w.submit(QUESTION, bad), w.submit(QUESTION, lambda r, ctx: r.query)]
    res, timing = futs[0].result(30)
    assert res.query == QUESTION and timing.batch_size >= 1 and timing.search_s > 0
    with pytest.raises(ValueError, match="finish failed"):
        futs[1].result(30)
    assert futs[2].result(30)[0] == QUESTION
    w.close()
    with pytest.raises(WorkerStopped):
        w.submit(QUESTION).result(1)
    with pytest.raises(ValueError, match="max_batch"):
        RetrievalWorker(Searcher(store), max_batch=0)
