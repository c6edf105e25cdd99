"""OpenAI-compatible backend against httpx.MockTransport (bodies, dialects, retries, concurrency, cache)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import httpx
import pytest

from noderag.llm import CachedBackend, LLMCache, LLMError, LLMRequest, Sampling, make_llm
from noderag.llm.backends.openai import OpenAIBackend, OpenAIConfig, build_chat_body, parse_chat_response
from conftest import free_port

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}


def req(i: int, schema=SCHEMA) -> LLMRequest:
    return LLMRequest([{"role": "system", "content": "static"}, {"role": "user", "content": f"item {i}"}],
                      schema, Sampling(max_tokens=16), id=str(i))


def reply(content, usage=True, finish="stop"):
    body = {"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": finish}]}
    if usage:
        body["usage"] = {"prompt_tokens": 11, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 8}}
    return body


def item_of(body) -> int:
    return int(body["messages"][-1]["content"].split()[1])


def backend(handler, **kw) -> OpenAIBackend:
    opts = dict(model="m", base_url="http://mock/v1", backoff_base_s=0.001, backoff_max_s=0.01)
    opts.update(kw)
    return OpenAIBackend(OpenAIConfig(**opts), transport=httpx.MockTransport(handler))


def test_build_body_for_every_dialect():
    r = req(1)
    b = build_chat_body(r, model="m", dialect="json_schema")
    assert b["response_format"]["type"] == "json_schema"
    assert b["response_format"]["json_schema"]["schema"] == SCHEMA and b["response_format"]["json_schema"]["strict"]
    assert b["seed"] == 0 and b["max_tokens"] == 16 and b["temperature"] == 0.0
    assert build_chat_body(r, model="m", dialect="json_object")["response_format"] == {"type": "json_object", "schema": SCHEMA}
    v = build_chat_body(r, model="m", dialect="vllm")
    assert v["structured_outputs"] == {"json": SCHEMA} and "response_format" not in v
    n = build_chat_body(r, model="m", dialect="none", send_seed=False, extra_body={"top_k": 1})
    assert "response_format" not in n and "seed" not in n and n["top_k"] == 1
    assert "response_format" not in build_chat_body(req(1, schema=None), model="m", dialect="json_schema")
    with pytest.raises(LLMError, match="dialect"):
        build_chat_body(r, model="m", dialect="grammar")


def test_parse_chat_response_usage_and_errors():
    out = parse_chat_response(reply('{"n": 1}'))
    assert out.text == '{"n": 1}' and out.usage.prompt == 11 and out.usage.cached == 8 and not out.usage.estimated
    assert parse_chat_response(reply("x", usage=False)).usage.estimated
    assert "malformed" in parse_chat_response({"choices": []}).error
    assert "empty message content" in parse_chat_response(reply(None)).error


def test_config_from_env_and_errors(monkeypatch):
    monkeypatch.setenv("NODERAG_LLM_MODEL", "envmodel")
    monkeypatch.setenv("NODERAG_LLM_BASE_URL", "http://127.0.0.1:9/v1/")
    monkeypatch.delenv("NODERAG_LLM_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    c = OpenAIConfig().resolved()
    assert (c.model, c.base_url, c.api_key) == ("envmodel", "http://127.0.0.1:9/v1", "sk-test")
    monkeypatch.delenv("NODERAG_LLM_MODEL")
    with pytest.raises(LLMError, match="NODERAG_LLM_MODEL"):
        OpenAIConfig().resolved()
    with pytest.raises(LLMError, match="max_concurrency"):
        OpenAIConfig(model="m", max_concurrency=0).resolved()
    with pytest.raises(LLMError, match="base_url"):
        OpenAIConfig(model="m", base_url="ftp://x").resolved()
    with pytest.raises(TypeError, match="unknown option"):
        OpenAIBackend(OpenAIConfig(model="m"), bogus=1)


def test_validates_retries_and_keeps_order():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert request.headers["authorization"] == "Bearer k"
        i = item_of(body)
        seen.append((i, body["seed"], body["temperature"]))
        if i == 1 and body["seed"] == 0:
            return httpx.Response(200, json=reply('{"n": "bad"}'))  # invalid once
        if i == 2:
            return httpx.Response(200, json=reply('{"n": 2', finish="length"))  # always truncated
        return httpx.Response(200, json=reply(json.dumps({"n": i})))

    llm = backend(handler, api_key="k", max_validation_retries=1)
    out = llm.run([req(i) for i in range(4)], stage="query")
    assert [r.id for r in out] == ["0", "1", "2", "3"]
    assert out[1].value == {"n": 1} and out[1].attempts == 2 and out[1].usage.prompt == 22
    assert out[2].error and "max_tokens=16" in out[2].error and out[2].attempts == 2
    assert (1, 0, 0.0) in seen and (1, 1, 0.3) in seen  # the retry shifted the seed, left greedy decoding
    st = llm.ledger.stages["query"]
    assert st.requests == 4 and st.failures == 1 and st.cached_tokens == 8 * 6


def test_transient_errors_are_retried_with_backoff_then_reported():
    counts = {"n": 0}

    def handler(request):
        counts["n"] += 1
        if item_of(json.loads(request.content)) == 0:
            return httpx.Response(503, text="overloaded")  # never recovers
        if counts["n"] < 4:
            return httpx.Response(429, text="slow down", headers={"retry-after": "0"})
        return httpx.Response(200, json=reply('{"n": 1}'))

    llm = backend(handler, max_retries=3, max_concurrency=1)
    out = llm.run([req(0), req(1)], stage="query")
    assert out[0].error and "after 4 attempts" in out[0].error and "503" in out[0].error
    assert out[1].ok
    assert llm.http_calls == counts["n"] >= 5


def test_client_errors_are_not_retried():
    def handler(request):
        return httpx.Response(400, text="unsupported response_format")

    llm = backend(handler, max_retries=3, dialect="json_schema")
    out = llm.run([req(0)], stage="query")
    assert "HTTP 400" in out[0].error and "unsupported response_format" in out[0].error
    assert llm.http_calls == 1


def test_bad_request_is_not_retried():
    llm = backend(lambda request: httpx.Response(404, text="no such model"), max_retries=3)
    out = llm.run([req(0)], stage="query")
    assert "HTTP 404" in out[0].error and "not retried" in out[0].error and llm.http_calls == 1


LLAMA_500 = ('{"error":{"message":"[{\'type\': \'literal_error\', \'loc\': (\'body\', \'response_format\', '
             '\'type\'), \'msg\': \"Input should be \'text\' or \'json_object\'\"}]"}} '
             "response_format.type: Input should be 'text' or 'json_object'")


def test_auto_dialect_switches_once_to_json_object(caplog):
    seen = []

    def handler(request):
        body = json.loads(request.content)
        seen.append(body["response_format"]["type"])
        if body["response_format"]["type"] == "json_schema":
            return httpx.Response(500, text=LLAMA_500)
        assert body["response_format"]["schema"] == SCHEMA  # the schema travels with json_object
        return httpx.Response(200, json=reply(json.dumps({"n": item_of(body)})))

    llm = backend(handler, max_concurrency=1)
    assert llm.config.dialect == "auto" and llm.dialect == "json_schema"
    with caplog.at_level("WARNING", logger="noderag.llm"):
        out = llm.run([req(i) for i in range(4)], stage="decompose")
    assert [r.value for r in out] == [{"n": i} for i in range(4)]
    assert seen == ["json_schema"] + ["json_object"] * 4  # detected once, then every request in json_object
    assert llm.dialect == "json_object" and "response_format" in llm.dialect_switch
    assert sum("using json_object" in r.message for r in caplog.records) == 1


def test_fixed_dialect_500_naming_a_field_is_permanent():
    llm = backend(lambda request: httpx.Response(500, text=LLAMA_500), dialect="json_schema", max_retries=4)
    out = llm.run([req(0)], stage="query")
    assert "HTTP 500" in out[0].error and llm.http_calls == 1 and llm.dialect == "json_schema"


def test_plain_500_is_still_retried():
    llm = backend(lambda request: httpx.Response(500, text="Internal Server Error"), max_retries=2)
    out = llm.run([req(0)], stage="query")
    assert "after 3 attempts" in out[0].error and llm.http_calls == 3


def test_500_naming_a_request_field_is_permanent():
    from noderag.llm.backends.openai import is_permanent_http_error

    body = {"model": "m", "messages": [], "max_tokens": 5, "response_format": {}}
    assert is_permanent_http_error(500, "max_tokens: Input should be a valid integer", body)
    assert is_permanent_http_error(500, "1 validation error: 'messages' Field required", body)
    assert not is_permanent_http_error(500, "CUDA error: out of memory", body)
    assert not is_permanent_http_error(503, "model is loading: retry", body)
    assert is_permanent_http_error(401, "bad key", body) and not is_permanent_http_error(429, "slow down", body)


def test_concurrency_stays_within_bound():
    state = {"now": 0, "peak": 0}

    async def handler(request):
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        await asyncio.sleep(0.02)
        state["now"] -= 1
        return httpx.Response(200, json=reply(json.dumps({"n": item_of(json.loads(request.content))})))

    llm = backend(handler, max_concurrency=3)
    out = llm.run([req(i) for i in range(12)], stage="query")
    assert all(r.ok for r in out) and [r.value["n"] for r in out] == list(range(12))
    assert state["peak"] == 3 and llm.peak_in_flight == 3  # bound reached, never exceeded


def test_run_inside_running_loop_and_arun():
    def handler(request):
        return httpx.Response(200, json=reply('{"n": 5}', usage=False))

    llm = backend(handler)

    async def main():
        a = llm.run([req(0)], stage="answer")  # sync call from inside a loop: own thread
        b = await llm.arun([req(1)], stage="answer")
        return a, b

    a, b = asyncio.run(main())
    assert a[0].value == b[0].value == {"n": 5}
    assert a[0].usage.estimated and a[0].usage.prompt > 0  # counted offline when the server omits usage
    assert llm.ledger.stages["answer"].requests == 2


def test_unreachable_server_gives_clear_error_in_bounded_time():
    port = free_port()
    llm = make_llm(f"openai:m@http://127.0.0.1:{port}/v1", max_retries=2, backoff_base_s=0.01, connect_timeout_s=1.0)
    t0 = time.perf_counter()
    out = llm.run([req(0), req(1)], stage="decompose")
    assert time.perf_counter() - t0 < 10
    for r in out:
        assert r.error and "connection error" in r.error and "after 3 attempts" in r.error
        assert f"127.0.0.1:{port}" in r.error


def test_killed_build_reuses_every_finished_call(tmp_path):
    """A process killed mid-stage has committed each finished request; the rerun asks only the rest."""
    db = tmp_path / "cache.sqlite"
    child = textwrap.dedent(
        """
        import asyncio, json, sys, httpx
        from noderag.llm import CachedBackend, LLMCache, LLMRequest, Sampling
        from noderag.llm.backends.openai import OpenAIBackend, OpenAIConfig
        async def handler(request):
            i = int(json.loads(request.content)["messages"][-1]["content"].split()[1])
            await asyncio.sleep(0.05 if i < 6 else 60)  # the tail never finishes
            return httpx.Response(200, json={"choices": [{"message": {"content": json.dumps({"n": i})}}],
                                            "usage": {"prompt_tokens": 9, "completion_tokens": 4}})
        llm = CachedBackend(OpenAIBackend(OpenAIConfig(model="m", base_url="http://mock/v1", max_concurrency=2),
                                          transport=httpx.MockTransport(handler)), LLMCache(sys.argv[1]))
        schema = json.loads(sys.argv[2])
        llm.run([LLMRequest([{"role": "system", "content": "static"}, {"role": "user", "content": f"item {i}"}],
                            schema, Sampling(max_tokens=16), id=str(i)) for i in range(10)], stage="decompose")
        """
    )
    p = subprocess.Popen([sys.executable, "-c", child, str(db), json.dumps(SCHEMA)])
    try:
        deadline = time.monotonic() + 60
        done = 0
        while time.monotonic() < deadline:
            if db.exists():
                with LLMCache(db) as c:
                    done = len(c)
                if done >= 6:
                    break
            time.sleep(0.1)
        assert done >= 6, f"child committed only {done} results"
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    asked = []

    def handler(request):
        i = item_of(json.loads(request.content))
        asked.append(i)
        return httpx.Response(200, json=reply(json.dumps({"n": i})))

    llm = CachedBackend(backend(handler), LLMCache(db))
    out = llm.run([req(i) for i in range(10)], stage="decompose")
    assert sorted(asked) == [6, 7, 8, 9]
    assert [r.value["n"] for r in out] == list(range(10))
    assert llm.ledger.stages["decompose"].cache_hits == 6
    llm.close()


def test_unexpected_exception_fails_one_item_not_the_batch():
    def handler(request):
        if item_of(json.loads(request.content)) == 1:
            raise ValueError("handler exploded")
        return httpx.Response(200, json=reply('{"n": 0}'))

    out = backend(handler).run([req(0), req(1), req(2)], stage="query")
    assert out[0].ok and out[2].ok
    assert "handler exploded" in out[1].error
