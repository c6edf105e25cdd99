"""Ingest: files, folders and JSONL corpora into document records (content-hash deduplicated)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

__all__ = ["Document", "IngestError", "ingest", "iter_documents", "content_hash", "SUPPORTED_SUFFIXES"]

SUPPORTED_SUFFIXES = (".txt", ".md", ".markdown", ".jsonl")


class IngestError(ValueError):
    """An input cannot be read; the message names the file (and line)."""


@dataclass(frozen=True)
class Document:
    """One input document.

    Attributes
    ----------
    source : str
        Source id: the JSONL line's ``id`` (else ``path:line``) or the file path.
    title : str or None
        JSONL ``title``, or a Markdown file's first ``#`` heading.
    text : str
    content_hash : str
        blake2b-128 hex of (title, text); equal hashes are duplicates.
    """

    source: str
    title: str | None
    text: str
    content_hash: str


def content_hash(title: str | None, text: str) -> str:
    """Stable 128-bit hex digest of a document's title and text."""
    h = hashlib.blake2b(digest_size=16)
    h.update((title or "").encode("utf-8"))
    h.update(b"\x00")
    h.update(text.encode("utf-8"))
    return h.hexdigest()


def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise IngestError(f"{path}: cannot read file ({exc.strerror or exc})") from None
    if b"\x00" in raw[:8192]:
        raise IngestError(f"{path}: looks like a binary file (NUL byte); expected UTF-8 text")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise IngestError(f"{path}: not valid UTF-8 (line {line}, byte {exc.start})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _md_title(text: str) -> str | None:
    for line in text.split("\n", 40)[:40]:
        s = line.strip()
        if not s:
            continue
        if s.startswith("# "):
            return s[2:].strip() or None
        return None
    return None


def _iter_jsonl(path: Path) -> Iterator[Document]:
    text = _read_text(path)
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise IngestError(f"{path}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise IngestError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        body = obj.get("text")
        if not isinstance(body, str):
            raise IngestError(f"{path}:{lineno}: missing string field 'text'")
        title = obj.get("title")
        if title is not None and not isinstance(title, str):
            raise IngestError(f"{path}:{lineno}: field 'title' must be a string, got {type(title).__name__}")
        ident = obj.get("id")
        if ident is None:
            source = f"{path}:{lineno}"
        elif isinstance(ident, (str, int)) and not isinstance(ident, bool):
            source = str(ident)
        else:
            raise IngestError(f"{path}:{lineno}: field 'id' must be a string or int, got {type(ident).__name__}")
        title = title.strip() if title and title.strip() else None
        if not body.strip():
            continue
        yield Document(source, title, body, content_hash(title, body))


def _expand(inputs: Iterable[str | os.PathLike]) -> list[Path]:
    files: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            found = sorted(
                q for q in p.rglob("*")
                if q.is_file() and q.suffix.lower() in SUPPORTED_SUFFIXES
                and not any(part.startswith(".") for part in q.relative_to(p).parts)
            )
            files.extend(found)
        elif p.is_file():
            if p.suffix.lower() not in SUPPORTED_SUFFIXES:
                raise IngestError(f"{p}: unsupported file type {p.suffix!r}; expected one of {SUPPORTED_SUFFIXES}")
            files.append(p)
        elif p.exists():
            raise IngestError(f"{p}: not a regular file or directory")
        else:
            raise IngestError(f"{p}: no such file or directory")
    return files


def iter_documents(inputs: Sequence[str | os.PathLike]) -> Iterator[Document]:
    """Yield documents of every input in order (directories recursively, sorted), not deduplicated."""
    for path in _expand(inputs):
        if path.suffix.lower() == ".jsonl":
            yield from _iter_jsonl(path)
        else:
            text = _read_text(path)
            if not text.strip():
                continue
            title = _md_title(text) if path.suffix.lower() in (".md", ".markdown") else None
            yield Document(str(path), title, text, content_hash(title, text))


def ingest(inputs: Sequence[str | os.PathLike], *, known_hashes: Iterable[str] = ()) -> tuple[list[Document], int]:
    """Read all inputs; return (new unique documents, number of duplicates skipped).

    Documents whose content hash is in ``known_hashes`` (already indexed) or seen
    earlier in this call are skipped.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    if not inputs:
        raise IngestError("no input paths given")
    seen = set(known_hashes)
    docs: list[Document] = []
    dupes = 0
    for doc in iter_documents(inputs):
        if doc.content_hash in seen:
            dupes += 1
            continue
        seen.add(doc.content_hash)
        docs.append(doc)
    return docs, dupes
