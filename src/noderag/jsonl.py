"""JSON Lines reading shared by the build's ingest and the evaluation's loaders: one object a line, errors
naming the file and line."""

from __future__ import annotations

import json
from typing import Iterable, Iterator

__all__ = ["json_objects", "json_problem"]


def json_problem(exc: json.JSONDecodeError) -> str:
    """The decoder's message with its column, read as a phrase: "unterminated string starting at column 31",
    "expecting value at column 1" (the message of some errors already ends in "at")."""
    msg = exc.msg[:1].lower() + exc.msg[1:]
    return f"{msg} column {exc.colno}" if msg.endswith(" at") else f"{msg} at column {exc.colno}"


def json_objects(lines: Iterable[str], where: object, error: type[Exception]) -> Iterator[tuple[int, dict]]:
    """(line number, object) of every non-blank line; ``error`` names ``where`` and the line of a malformed
    line or of a value that is not a JSON object."""
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{where}:{lineno}: malformed JSON ({json_problem(exc)})") from None
        if not isinstance(obj, dict):
            raise error(f"{where}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        yield lineno, obj
