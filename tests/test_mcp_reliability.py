"""Issue 44, fault 3: ``noderag mcp`` follows the live generation, takes strictly typed and bounded
arguments, and answers every malformed line, batch array or lone surrogate with a JSON-RPC error."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doors import need  # noqa: E402

from noderag.config import NodeRAGConfig  # noqa: E402
from noderag.indexing.driver import build_index  # noqa: E402
from noderag.indexing.update.delete import delete_documents  # noqa: E402
from noderag.integrations.mcp import MAX_QUESTION_CHARS  # noqa: E402
from noderag.integrations.mcp_stdio import INVALID_REQUEST, MAX_LINE_BYTES, PARSE_ERROR, check_line  # noqa: E402
from noderag.store.generations import current_generation, generation_numbers, remove_old_generations  # noqa: E402

QUESTION = "Which harbour was built by Engineer Mcp3?"


@pytest.fixture(scope="module")
def mcp():
    return need("mcp")


def _rows(prefix: str, n: int) -> list[dict]:
    return [{"id": f"{prefix}-{i}", "title": f"{prefix} {i}",
             "text": f"{prefix.title()} Harbour {i} was built by Engineer {prefix.title()}{i} in {1800 + i}. "
                     f"Ships from {prefix.title()} Harbour {i} sail to the island Quell{prefix}{i}."}
            for i in range(n)]


def _cfg() -> NodeRAGConfig:
    return NodeRAGConfig().with_overrides({"embed.spec": "hash:32", "update.compaction": "off"})


@pytest.fixture()
def root(tmp_path) -> Path:
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in _rows("mcp", 10)), encoding="utf-8")
    build_index([src], tmp_path / "idx", _cfg(), progress=False)
    return tmp_path / "idx"


def _client(mcp, root: Path):
    from mcp.client.stdio import stdio_client

    params = mcp.StdioServerParameters(command=sys.executable, args=["-m", "noderag.cli", "mcp", str(root)])
    return mcp.Client(stdio_client(params, errlog=sys.__stderr__), read_timeout_seconds=120)


def test_it_follows_the_live_generation_and_lets_go_of_the_old_one(mcp, root):
    async def run():
        async with _client(mcp, root) as c:
            first = await c.call_tool("retrieve", {"question": QUESTION, "k": 3})
            assert first.structured_content["passages"][0]["passage_id"] == "mcp-3"
            gen = current_generation(root)
            delete_documents(root, ["mcp-3"], config=_cfg())
            deadline = time.monotonic() + 60
            while True:
                r = await c.call_tool("retrieve", {"question": QUESTION, "k": 5})
                if r.structured_content["generation"] == gen + 1:
                    break
                assert time.monotonic() < deadline, "the MCP server never served the new generation"
                await asyncio.sleep(0.3)
            assert "mcp-3" not in [p["passage_id"] for p in r.structured_content["passages"]]
            stats = json.loads((await c.read_resource("noderag://stats")).contents[0].text)
            assert stats["generation"] == gen + 1
            await asyncio.sleep(1.5)  # the superseded generation was released: gc can remove it
            removed, left = remove_old_generations(root)
            assert left == [] and generation_numbers(root) == [gen + 1], (removed, left)

    asyncio.run(run())


def test_arguments_are_strict_and_bounded(mcp, root):
    async def run():
        async with _client(mcp, root) as c:
            for tool, args, words in [
                ("retrieve", {"question": QUESTION, "k": "5"}, "k"),
                ("retrieve", {"question": QUESTION, "k": True}, "k"),
                ("retrieve", {"question": QUESTION, "k": 5.0}, "k"),
                ("retrieve", {"question": 5}, "question"),
                ("retrieve", {"question": "x" * (MAX_QUESTION_CHARS + 1)}, f"at most {MAX_QUESTION_CHARS}"),
                ("retrieve_many", {"questions": [QUESTION, 7]}, "questions"),
                ("retrieve_many", {"questions": [QUESTION], "k": "2"}, "k"),
                ("get_node", {"id": "5"}, "id"),
                ("get_node", {"id": True}, "id"),
            ]:
                res = await c.call_tool(tool, args)
                assert res.is_error and words in res.content[0].text, (tool, args, res.content)
            ok = await c.call_tool("retrieve", {"question": QUESTION, "k": 2})
            assert not ok.is_error and len(ok.structured_content["passages"]) == 2
            assert not (await c.call_tool("get_node", {"id": 5})).is_error

    asyncio.run(run())


def test_check_line_answers_what_is_malformed():
    ok, err = check_line(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n')
    assert ok is not None and err is None
    assert check_line(b"  \n") == (None, None)
    cases = [
        (b"not json\n", None, PARSE_ERROR),
        (b"\xff\xfe{}\n", None, PARSE_ERROR),
        (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]\n', None, INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {"q": "\\ud800"}}\n', 4, INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": "a", "nomethod": 1}\n', "a", INVALID_REQUEST),
        (b'{"jsonrpc": "1.0", "id": 5, "method": "ping"}\n', 5, INVALID_REQUEST),
        (b'"a string"\n', None, INVALID_REQUEST),
    ]
    for raw, rid, code in cases:
        line, err = check_line(raw)
        assert line is None and err["jsonrpc"] == "2.0" and err["id"] == rid and err["error"]["code"] == code, \
            (raw, err)
    assert check_line(b"", too_long=True)[1]["error"]["code"] == INVALID_REQUEST


def test_every_malformed_line_gets_a_reply_over_stdio(root):
    need("mcp")
    proc = subprocess.Popen([sys.executable, "-m", "noderag.cli", "mcp", str(root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ})

    def send(data: bytes) -> None:
        proc.stdin.write(data)
        proc.stdin.flush()

    def reply() -> dict:
        line = proc.stdout.readline()
        assert line, "the server closed stdout"
        return json.loads(line)

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
             .encode() + b"\n")
        assert reply()["id"] == 1
        send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        for raw, rid, code in [
            (b"{not json\n", None, PARSE_ERROR),
            (b'[{"jsonrpc": "2.0", "id": 2, "method": "ping"}]\n', None, INVALID_REQUEST),
            (b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "retrieve", '
             b'"arguments": {"question": "\\udc80"}}}\n', 3, INVALID_REQUEST),
            (b"\xc3\x28\n", None, PARSE_ERROR),
            (b'{"jsonrpc": "2.0", "id": 9}\n', 9, INVALID_REQUEST),
            (b'{"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "retrieve", '
             b'"arguments": {"question": "' + b"q" * (MAX_LINE_BYTES + 10) + b'"}}}\n', None, INVALID_REQUEST),
        ]:
            send(raw)
            got = reply()
            assert got.get("id") == rid and got["error"]["code"] == code, (raw[:80], got)
        send(json.dumps({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {
            "name": "retrieve", "arguments": {"question": QUESTION, "k": 1}}}).encode() + b"\n")
        got = reply()
        assert got["id"] == 11 and not got["result"].get("isError"), got
        assert got["result"]["structuredContent"]["passages"][0]["passage_id"] == "mcp-3"
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
