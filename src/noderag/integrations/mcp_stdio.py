"""The stdio transport of ``noderag mcp``: every line a client sends is answered.

The SDK's own stdio reader hands a line it cannot parse to the session as an exception, which logs it and
answers nothing, so a client that sent it waits forever. Here each line is checked first (:func:`check_line`)
and a malformed one gets a JSON-RPC error reply on the wire at once, with the request's ``id`` where one can
be read (else ``null``): not UTF-8 or not JSON (-32700, parse error); a batch array (batches are not part of
MCP), a value that is no JSON-RPC 2.0 message, a string holding a lone surrogate, or a line over
:data:`MAX_LINE_BYTES` (-32600, invalid request). Well-formed lines go to the SDK unchanged.

While serving, fd 0 reads the null device and fd 1 writes to stderr (as the SDK's own transport does), so stray
output of a library cannot corrupt the wire, which keeps private duplicates of both.
"""

from __future__ import annotations

import json
import os
from typing import Any, BinaryIO

__all__ = ["MAX_LINE_BYTES", "PARSE_ERROR", "INVALID_REQUEST", "check_line", "run_stdio"]

#: The longest message line accepted (a question is limited to far less: ``noderag.integrations.mcp``).
MAX_LINE_BYTES = 1 << 20
PARSE_ERROR = -32700
INVALID_REQUEST = -32600


def _reply(rid: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def _usable_id(msg: dict) -> Any:
    """The message's ``id`` when it is one a reply can carry (an integer or a clean string), else None."""
    rid = msg.get("id")
    if isinstance(rid, bool) or not isinstance(rid, (int, str)):
        return None
    if isinstance(rid, str):
        try:
            rid.encode("utf-8")
        except UnicodeEncodeError:
            return None
    return rid


def check_line(raw: bytes, too_long: bool = False) -> tuple[str | None, dict[str, Any] | None]:
    """(the line for the SDK, None), (None, the JSON-RPC error reply) or (None, None) for a blank line."""
    import mcp_types
    from pydantic import ValidationError

    if too_long:
        return None, _reply(None, INVALID_REQUEST, f"message line over {MAX_LINE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, _reply(None, PARSE_ERROR, f"parse error: not UTF-8 (byte {exc.start} of the line)")
    if not text.strip():
        return None, None
    try:
        msg = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return None, _reply(None, PARSE_ERROR, f"parse error: not JSON ({str(exc)[:120]})")
    if isinstance(msg, list):
        return None, _reply(None, INVALID_REQUEST, "invalid request: batch arrays are not supported; send one "
                                                   "JSON-RPC message per line")
    if not isinstance(msg, dict):
        return None, _reply(None, INVALID_REQUEST, "invalid request: expected a JSON-RPC message object")
    rid = _usable_id(msg)
    try:
        json.dumps(msg, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return None, _reply(rid, INVALID_REQUEST, "invalid request: a string holds a lone surrogate (a \\ud800-"
                                                  "\\udfff escape without its pair)")
    try:
        mcp_types.jsonrpc_message_adapter.validate_python(msg, by_name=False)
    except ValidationError as exc:
        where = ".".join(str(x) for x in (exc.errors()[0].get("loc") or ())) if exc.errors() else ""
        return None, _reply(rid, INVALID_REQUEST, "invalid request: not a JSON-RPC 2.0 request, notification or "
                                                  f"response{f' (at {where})' if where else ''}")
    return text, None


def _read_line(fh: BinaryIO) -> tuple[bytes, bool]:
    """(one line, whether it ran over :data:`MAX_LINE_BYTES`: the rest of it is read and dropped); b"" at EOF."""
    line = fh.readline(MAX_LINE_BYTES + 1)
    if len(line) <= MAX_LINE_BYTES or line.endswith(b"\n"):
        return line, False
    while True:
        rest = fh.readline(1 << 16)
        if not rest or rest.endswith(b"\n"):
            return b"", True


class _Wire:
    """The protocol's stdout: one whole message per write, the SDK's and the error replies never interleaved."""

    def __init__(self, fh: BinaryIO) -> None:
        import anyio

        self._fh = fh
        self._lock = anyio.Lock()

    async def write(self, text: str) -> None:
        import anyio

        data = text.encode("utf-8")
        async with self._lock:
            await anyio.to_thread.run_sync(self._put, data)

    def _put(self, data: bytes) -> None:
        self._fh.write(data)
        self._fh.flush()

    async def flush(self) -> None:
        return None

    async def reply(self, msg: dict[str, Any]) -> None:
        await self.write(json.dumps(msg, ensure_ascii=False) + "\n")


class _Lines:
    """The well-formed lines of the protocol's stdin, as the SDK reads them; a malformed one is answered here."""

    def __init__(self, fh: BinaryIO, wire: _Wire) -> None:
        self._fh = fh
        self._wire = wire

    def __aiter__(self) -> "_Lines":
        return self

    async def __anext__(self) -> str:
        import anyio

        while True:
            raw, too_long = await anyio.to_thread.run_sync(_read_line, self._fh, abandon_on_cancel=True)
            if not raw and not too_long:
                raise StopAsyncIteration
            line, error = check_line(raw, too_long)
            if error is not None:
                await self._wire.reply(error)
            elif line is not None:
                return line


def _divert() -> tuple[int, int]:
    """Private duplicates of fds 0 and 1 (the wire); fd 0 then reads the null device and fd 1 writes to stderr."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return wire_in, wire_out


async def run_stdio(server) -> None:
    """Serve ``server`` (an ``MCPServer``) over the process's stdin and stdout until the client closes stdin."""
    from mcp.server.stdio import stdio_server

    lowlevel = getattr(server, "_lowlevel_server", None)  # what MCPServer.run_stdio_async runs
    if lowlevel is None:
        raise RuntimeError("this MCP SDK's MCPServer has no _lowlevel_server: update noderag.integrations.mcp_stdio")
    wire_in, wire_out = _divert()
    with os.fdopen(wire_in, "rb", buffering=1 << 16) as fin, os.fdopen(wire_out, "wb") as fout:
        wire = _Wire(fout)
        async with stdio_server(stdin=_Lines(fin, wire), stdout=wire) as (read, write):
            await lowlevel.run(read, write, lowlevel.create_initialization_options())
