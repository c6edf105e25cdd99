"""Answers for ``POST /answer``: the LLM's tokens as they arrive, then the checked answer and citations.

A backend that streams (``astream``: the OpenAI-compatible one asks its server with ``stream: true``) has
the characters of the JSON answer's ``"answer"`` string forwarded as they decode. Other backends (vLLM,
llama.cpp in-process, test doubles), a server that refuses streaming, or a streamed output that fails
validation go through the normal batched path (with its retries), and the answer arrives as one token event.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any, AsyncIterator

from ..llm.answer import answer_many, parse_answer, retrieval_context
from ..llm.prompts import answer_request
from ..llm.types import StreamUnavailable

__all__ = ["AnswerTextStream", "answer_events", "sse"]

_ANSWER_KEY = re.compile(r'"answer"\s*:\s*"')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def sse(event: str, data: Any) -> bytes:
    """One server-sent event with a JSON payload."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class AnswerTextStream:
    """Decode the ``"answer"`` string of a JSON object incrementally, from text arriving in pieces."""

    def __init__(self) -> None:
        self.buf = ""
        self._i: int | None = None
        self.done = False

    def feed(self, piece: str) -> str:
        """Add ``piece``; return the answer characters it completed (escapes decoded)."""
        self.buf += piece
        if self.done:
            return ""
        if self._i is None:
            m = _ANSWER_KEY.search(self.buf)
            if m is None:
                return ""
            self._i = m.end()
        out: list[str] = []
        buf, i = self.buf, self._i
        while i < len(buf):
            c = buf[i]
            if c == '"':
                self.done = True
                break
            if c != "\\":
                out.append(c)
                i += 1
                continue
            if i + 1 >= len(buf):
                break  # the escape continues in the next piece
            e = buf[i + 1]
            if e != "u":
                out.append(_ESCAPES.get(e, e))
                i += 2
                continue
            if i + 6 > len(buf):
                break
            cp = int(buf[i + 2:i + 6], 16) if re.fullmatch(r"[0-9a-fA-F]{4}", buf[i + 2:i + 6]) else 0xFFFD
            if 0xD800 <= cp < 0xDC00:  # high surrogate: needs its low half
                if i + 12 > len(buf):
                    break
                low = buf[i + 8:i + 12]
                if buf[i + 6:i + 8] == "\\u" and re.fullmatch(r"[0-9a-fA-F]{4}", low):
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (int(low, 16) - 0xDC00)
                    i += 6
                else:
                    cp = 0xFFFD
            out.append(chr(cp))
            i += 6
        self._i = i
        return "".join(out)


def _answer_payload(answer: str, cited: list[str], error: str | None, usage: dict[str, Any]) -> dict[str, Any]:
    return {"answer": answer, "cited_ids": [int(c) for c in cited if str(c).lstrip("-").isdigit()], "error": error,
            "usage": usage}


async def answer_events(llm: Any, query: str, retrieval: Any) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """``("token", {"text"})`` events while the LLM writes, then one ``("answer", {...})`` event.

    The answer event carries what ``noderag query --answer --json`` reports (answer, cited_ids, error,
    usage); it is authoritative (the streamed text is a preview of it).
    """
    ctx = retrieval_context(retrieval)
    ctx_ids = [cid for cid, _ in ctx]
    if callable(getattr(llm, "astream", None)):
        req = answer_request(query, ctx)
        dec = AnswerTextStream()
        t0 = time.perf_counter()
        try:
            async for piece in llm.astream(req):
                shown = dec.feed(piece)
                if shown:
                    yield "token", {"text": shown}
            wall = time.perf_counter() - t0
            res = llm.streamed_result(req, dec.buf, wall)
            answer, cited, _invalid, err = parse_answer(res, ctx_ids)
            if err is None:
                llm.ledger.record("answer", [res], wall)
                yield "answer", _answer_payload(answer, cited, None, {"wall_s": round(wall, 4), "streamed": True})
                return
        except StreamUnavailable:
            pass
    t0 = time.perf_counter()
    out = (await asyncio.to_thread(answer_many, llm, [(query, ctx)], stage="answer"))[0]
    wall = time.perf_counter() - t0
    if out.answer:
        yield "token", {"text": out.answer}
    usage = {"prompt_tokens": out.usage.prompt, "completion_tokens": out.usage.completion, "wall_s": round(wall, 4),
             "cached": out.cached, "attempts": out.attempts, "streamed": False}
    yield "answer", _answer_payload(out.answer, out.cited, out.error, usage)
