"""A scripted OpenAI-compatible chat server on 127.0.0.1 for tests (a test double; never for real use).

``POST /v1/chat/completions`` answers the answer prompt with ``{"answer": ..., "citations": [...]}`` built
from the context it was sent: the answer quotes the first context item and cites the first two ids. With
``"stream": true`` the JSON arrives as server-sent events in pieces of ``piece`` characters, the way
OpenAI-compatible servers stream tokens. Requests are recorded in ``requests``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ScriptedOpenAIServer", "scripted_answer"]

_CTX = re.compile(r"^\[(\w+)\] (.*)$", re.M)


def scripted_answer(messages: list[dict]) -> dict[str, Any]:
    """The scripted reply to an answer prompt: quote the first context item, cite the first two ids."""
    user = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
    items = _CTX.findall(user)
    if not items:
        return {"answer": "No context was given.", "citations": []}
    first = " ".join(items[0][1].split()[:8])
    return {"answer": f"Scripted answer: \"{first}\" — see the cited nodes.", "citations": [i for i, _ in items[:2]]}


class ScriptedOpenAIServer:
    """Serve the scripted chat endpoint on ``127.0.0.1:<free port>``; ``base_url`` ends in ``/v1``."""

    def __init__(self, *, piece: int = 5, delay_s: float = 0.002) -> None:
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                outer.requests.append(body)
                if self.path != "/v1/chat/completions":
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                text = json.dumps(scripted_answer(body.get("messages", [])), ensure_ascii=False)
                if not body.get("stream"):
                    data = json.dumps({"id": "x", "object": "chat.completion", "model": body.get("model"),
                                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                    "finish_reason": "stop"}],
                                       "usage": {"prompt_tokens": 10, "completion_tokens": len(text.split())}}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunks = [text[i:i + piece] for i in range(0, len(text), piece)]
                for c in chunks:
                    ev = {"id": "x", "object": "chat.completion.chunk",
                          "choices": [{"index": 0, "delta": {"content": c}, "finish_reason": None}]}
                    self._chunk(f"data: {json.dumps(ev, ensure_ascii=False)}\n\n".encode())
                    time.sleep(delay_s)
                self._chunk(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                import sys

                if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
                    super().handle_error(request, client_address)  # a client hanging up is not an error

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "ScriptedOpenAIServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
