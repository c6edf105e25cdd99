"""OpenAI-compatible /v1/embeddings client against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from noderag.embed import HashEmbedder, make_embedder
from noderag.embed.openai import EmbeddingServerError, OpenAIEmbedConfig, OpenAIEmbedder

_REF = HashEmbedder(48)


class _State:
    def __init__(self) -> None:
        self.batches: list[int] = []
        self.auth: list[str | None] = []
        self.fail_first = 0
        self.fail_status = 500
        self.always_status: int | None = None
        self.malformed = False
        self.lock = threading.Lock()


def _make_handler(state: _State):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep pytest output clean
            pass

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):  # noqa: N802 - http.server API
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.auth.append(self.headers.get("Authorization"))
                if self.path != "/v1/embeddings":
                    return self._send(404, {"error": "not found"})
                if body.get("model") != "hash-48":
                    return self._send(400, {"error": f"unknown model {body.get('model')}"})
                if state.always_status is not None:
                    return self._send(state.always_status, {"error": "down"})
                if state.fail_first > 0:
                    state.fail_first -= 1
                    return self._send(state.fail_status, {"error": "transient"})
                texts = body["input"]
                state.batches.append(len(texts))
            if state.malformed:
                return self._send(200, {"data": [{"index": 0}]})
            vecs = _REF.embed(texts) * 3.0  # unnormalised on purpose
            data = [{"object": "embedding", "index": i, "embedding": vecs[i].tolist()} for i in range(len(texts))]
            data.reverse()  # servers may answer out of order; the client sorts by index
            return self._send(200, {"object": "list", "data": data, "model": "hash-48"})

    return Handler


@pytest.fixture()
def server():
    state = _State()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(state))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        yield state, url, httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _client(url: str, **kw) -> OpenAIEmbedder:
    kw.setdefault("backoff_base_s", 0.01)
    kw.setdefault("backoff_max_s", 0.05)
    kw.setdefault("timeout_s", 5.0)
    return make_embedder(f"openai:hash-48@{url}", **kw)  # type: ignore[return-value]


TEXTS = [f"text number {i} about topic {i % 3}" for i in range(7)]


def test_batching_order_and_normalisation(server):
    state, url, _ = server
    with _client(url, batch_size=3, api_key="sk-test") as emb:
        assert emb.dim == 48  # probe request
        state.batches.clear()
        v = emb.embed(TEXTS)
        assert state.batches == [3, 3, 1]
        np.testing.assert_allclose(v, _REF.embed(TEXTS), atol=1e-6)
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-6)
        assert emb.embed(TEXTS, batch_size=5).shape == (7, 48)
        assert state.batches[-2:] == [5, 2]
        assert emb.embed([]).shape == (0, 48)
    assert set(state.auth) == {"Bearer sk-test"}


def test_retry_on_500_then_success(server):
    state, url, _ = server
    state.fail_first = 2
    with _client(url, batch_size=10, dim=48, max_retries=3) as emb:
        v = emb.embed(TEXTS[:2])
        assert emb.retries == 2 and emb.requests == 3
    np.testing.assert_allclose(v, _REF.embed(TEXTS[:2]), atol=1e-6)


def test_retry_on_429(server):
    state, url, _ = server
    state.fail_first, state.fail_status = 1, 429
    with _client(url, dim=48) as emb:
        assert emb.embed(["x"]).shape == (1, 48)
        assert emb.retries == 1


def test_persistent_failure_is_a_clear_error(server):
    state, url, _ = server
    state.always_status = 503
    with _client(url, dim=48, max_retries=2) as emb:
        with pytest.raises(EmbeddingServerError, match=r"failed after 3 attempt\(s\): HTTP 503"):
            emb.embed(["x"])
        assert emb.requests == 3


def test_client_error_is_not_retried(server):
    _, url, _ = server
    emb = make_embedder(f"openai:other-model@{url}", dim=48, backoff_base_s=0.01)
    with pytest.raises(EmbeddingServerError, match=r"after 1 attempt\(s\): HTTP 400.*unknown model"):
        emb.embed(["x"])


def test_malformed_response(server):
    state, url, _ = server
    state.malformed = True
    with _client(url, dim=48) as emb, pytest.raises(EmbeddingServerError, match="malformed"):
        emb.embed(["a", "b"])


def test_stopped_server_connection_error(server):
    _, url, httpd = server
    httpd.shutdown()
    httpd.server_close()
    with _client(url, dim=48, max_retries=1, connect_timeout_s=1.0) as emb:
        with pytest.raises(EmbeddingServerError, match=r"after 2 attempt\(s\): Connect"):
            emb.embed(["x"])


def test_config_from_environment(monkeypatch, server):
    _, url, _ = server
    monkeypatch.setenv("NODERAG_EMBED_MODEL", "hash-48")
    monkeypatch.setenv("NODERAG_EMBED_BASE_URL", url)
    monkeypatch.setenv("NODERAG_EMBED_API_KEY", "k")
    emb = make_embedder("openai:")
    assert emb.name == "openai:hash-48" and emb.dim == 48
    monkeypatch.delenv("NODERAG_EMBED_MODEL")
    with pytest.raises(ValueError, match="NODERAG_EMBED_MODEL"):
        make_embedder("openai:")


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [("batch_size", 0, "batch_size"), ("max_retries", -1, "max_retries"), ("timeout_s", 0, "timeout_s"),
     ("base_url", "127.0.0.1:80", "http")],
)
def test_config_validation(field, value, match):
    cfg = OpenAIEmbedConfig(model="m", base_url="http://127.0.0.1:1/v1")
    setattr(cfg, field, value)
    with pytest.raises(ValueError, match=match):
        cfg.resolved()
