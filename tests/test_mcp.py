"""``noderag mcp DIR`` driven by the MCP Python SDK's own client: over stdio (the server a subprocess) it
lists and calls every tool and the stats resource, gets tool errors naming the argument for malformed
calls and keeps serving; the answer tool exists only with an LLM; streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import free_port  # noqa: E402
from doors import demo, need  # noqa: E402
from scripted_openai import ScriptedOpenAIServer  # noqa: E402

from noderag.serve.views import GraphView  # noqa: E402

QUESTION = "Who founded the Vellmar Heritage Trust?"


@pytest.fixture(scope="module")
def mcp():
    return need("mcp")


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return demo(tmp_path_factory)


def _command(index, *extra: str) -> list[str]:
    return [sys.executable, "-m", "noderag.cli", "mcp", str(index.root), *extra]


def _stdio(mcp, index, *extra: str):
    from mcp.client.stdio import stdio_client

    cmd = _command(index, *extra)
    params = mcp.StdioServerParameters(command=cmd[0], args=cmd[1:])
    # the SDK's stdio_client defaults errlog to the sys.stderr of the moment it was imported: when an earlier
    # test imported it under capsys, that is a capture stream closed since. The server's stderr goes to fd 2.
    return mcp.Client(stdio_client(params, errlog=sys.__stderr__), read_timeout_seconds=120)


def _passages(index, q, k):
    return index.retrieve(q).passages[:k]


async def _error(client, tool: str, args: dict) -> str:
    res = await client.call_tool(tool, args)
    assert res.is_error, (tool, args)
    return res.content[0].text


def test_stdio_lists_and_calls_every_tool(mcp, index):
    async def run():
        async with _stdio(mcp, index) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert set(tools) == {"retrieve", "retrieve_many", "get_node"}  # no LLM: no answer tool
            assert tools["retrieve"].input_schema["required"] == ["question"]

            r = await c.call_tool("retrieve", {"question": QUESTION, "k": 3})
            assert not r.is_error
            body = r.structured_content
            assert [p["passage_id"] for p in body["passages"]] == _passages(index, QUESTION, 3)
            assert body["passages"][0]["text"] == index.texts[body["passages"][0]["node_id"]]
            assert body["context"] == index.retrieve(QUESTION).context and body["matched"] is True
            assert json.loads(r.content[0].text)["passages"] == body["passages"]

            qs = ["Who taught navigation to Bram Ostervelt?", QUESTION]
            r = await c.call_tool("retrieve_many", {"questions": qs})
            assert not r.is_error
            assert [[p["passage_id"] for p in res["passages"]] for res in r.structured_content["results"]] == \
                [_passages(index, q, 5) for q in qs]

            node = index.nodes.column("name").to_pylist().index("Vellmar Heritage Trust")
            r = await c.call_tool("get_node", {"id": node})
            assert not r.is_error and r.structured_content == GraphView(index).node(node)
            assert r.structured_content["type"] == "N" and r.structured_content["neighbour_count"] > 0

            res = await c.list_resources()
            assert [str(x.uri) for x in res.resources] == ["noderag://stats"]
            stats = json.loads((await c.read_resource("noderag://stats")).contents[0].text)
            assert stats["generation"] == index.generation and stats["counts"] == index.manifest["counts"]

    asyncio.run(run())


def test_malformed_calls_are_tool_errors_and_the_server_keeps_serving(mcp, index):
    async def run():
        async with _stdio(mcp, index) as c:
            bad = [
                ("retrieve", {"k": 2}, "question"),
                ("retrieve", {"question": "   "}, "question: expected a non-empty string"),
                ("retrieve", {"question": QUESTION, "k": "many"}, "k"),
                ("retrieve", {"question": QUESTION, "k": 0}, "k: expected an integer from 1 to 100"),
                ("retrieve", {"question": QUESTION, "k": 1000}, "k: expected an integer from 1 to 100"),
                ("retrieve_many", {"questions": []}, "questions: expected 1 to 64"),
                ("retrieve_many", {"questions": ["ok"] * 65}, "questions: expected 1 to 64"),
                ("retrieve_many", {"questions": ["ok", ""]}, "questions[1]"),
                ("retrieve_many", {"questions": "not a list"}, "questions"),
                ("get_node", {"id": len(index) + 10}, f"node ids run from 0 to {len(index) - 1}"),
                ("get_node", {"id": -1}, "does not exist"),
                ("get_node", {"id": "abc"}, "id"),
                ("get_node", {}, "id"),
                ("answer", {"question": QUESTION}, "answer"),  # not listed without an LLM
            ]
            for tool, args, words in bad:
                msg = await _error(c, tool, args)
                assert words in msg, (tool, args, msg)
                ok = await c.call_tool("retrieve", {"question": QUESTION, "k": 1})  # still serving
                assert not ok.is_error and ok.structured_content["passages"][0]["passage_id"] == \
                    _passages(index, QUESTION, 1)[0]

    asyncio.run(run())


def test_answer_tool_only_with_an_llm(mcp, index):
    async def run(base_url):
        async with _stdio(mcp, index, "--llm", f"openai:scripted@{base_url}") as c:
            assert {t.name for t in (await c.list_tools()).tools} == {"retrieve", "retrieve_many", "get_node",
                                                                       "answer"}
            r = await c.call_tool("answer", {"question": QUESTION})
            assert not r.is_error, r.content
            body = r.structured_content
            assert body["answer"].startswith("Scripted answer:") and body["cited_ids"]
            assert [p["passage_id"] for p in body["passages"]] == index.retrieve(QUESTION).passages[:5]
            assert body["passages"][0]["title"] and body["passages"][0]["text"]
            assert "question" in await _error(c, "answer", {"question": ""})

    with ScriptedOpenAIServer() as llm:
        asyncio.run(run(llm.base_url))
        assert len(llm.requests) == 1


def test_streamable_http_on_loopback(mcp, index):
    port = free_port()
    proc = subprocess.Popen(_command(index, "--http", str(port)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                assert time.monotonic() < deadline, "the HTTP server did not start"
                time.sleep(0.3)

        async def run():
            async with mcp.Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=120) as c:
                assert {t.name for t in (await c.list_tools()).tools} == {"retrieve", "retrieve_many", "get_node"}
                r = await c.call_tool("retrieve", {"question": QUESTION, "k": 2})
                assert [p["passage_id"] for p in r.structured_content["passages"]] == _passages(index, QUESTION, 2)
                assert (await c.call_tool("get_node", {"id": -5})).is_error

        asyncio.run(run())
        assert proc.poll() is None
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def test_cli_rejects_a_bad_port(index, capsys):
    from noderag.cli import main

    need("mcp")
    assert main(["mcp", str(index.root), "--http", "70000"]) == 1
    assert "--http must be a port" in capsys.readouterr().err
