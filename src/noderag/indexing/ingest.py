"""Ingest: files, folders and JSONL corpora into document records (content-hash deduplicated).

Input rules (docs/build.md, "Inputs"): files are UTF-8, or UTF-8/UTF-16/UTF-32 with a byte-order
mark; a NUL character anywhere (raw or as a JSON ``\\u0000`` escape) is an error naming the
file and line, as is an unpaired surrogate escape; line breaks become ``\\n`` (``\\r\\n``,
``\\r``, vertical tab, form feed and NEL included); the other control characters (U+0001-U+0008,
U+000E-U+001F, U+007F-U+009F) are removed. Tabs stay. Two documents with the same id and
different content are an error naming both origins.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from ..jsonl import json_objects
from ..errors import NodeRAGError

__all__ = ["Document", "IngestError", "ingest", "iter_documents", "content_hash", "SUPPORTED_SUFFIXES"]

SUPPORTED_SUFFIXES = (".txt", ".md", ".markdown", ".jsonl")


class IngestError(NodeRAGError, ValueError):
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
    origin : str
        Where it was read: ``path:line`` for a JSONL line, the path for a file (for messages).
    """

    source: str
    title: str | None
    text: str
    content_hash: str
    origin: str = ""


def content_hash(title: str | None, text: str) -> str:
    """Stable 128-bit hex digest of a document's title and text."""
    h = hashlib.blake2b(digest_size=16)
    h.update((title or "").encode("utf-8"))
    h.update(b"\x00")
    h.update(text.encode("utf-8"))
    return h.hexdigest()


# byte-order marks, longest first (the UTF-32-LE mark starts with the UTF-16-LE one)
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"), (codecs.BOM_UTF8, "utf-8"),
         (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
_CRLF = re.compile("\r\n?")
_LINE_BREAKS = re.compile("\r\n?|[\x0b\x0c\x85]")
_CONTROL = re.compile("[\x01-\x08\x0e-\x1f\x7f-\x84\x86-\x9f]")


def _line_col(text: str, pos: int) -> tuple[int, int]:
    """1-based line and column of position ``pos`` of ``text``."""
    return text.count("\n", 0, pos) + 1, pos - (text.rfind("\n", 0, pos) + 1) + 1


def _looks_utf16(raw: bytes) -> bool:
    """True when NUL bytes fill most even or most odd positions of the head: UTF-16 text without a BOM."""
    head = raw[:4096]
    if len(head) < 8:
        return False
    even, odd = head[0::2].count(0), head[1::2].count(0)
    half = len(head) // 2
    return max(even, odd) > 0.4 * half and min(even, odd) < 0.1 * half


def _decode(path: Path) -> str:
    """The text of ``path``: decoded by its byte-order mark (else UTF-8), NUL refused, CR LF and CR as ``\\n``."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise IngestError(f"{path}: cannot read file ({exc.strerror or exc})") from None
    encoding, skip = "utf-8", 0
    for bom, enc in _BOMS:
        if raw.startswith(bom):
            encoding, skip = enc, len(bom)
            break
    if skip == 0 and b"\x00" in raw and _looks_utf16(raw):
        raise IngestError(f"{path}: looks like UTF-16 without a byte-order mark (or a binary file); "
                          "save it as UTF-8 (or UTF-16 with a BOM)")
    try:
        text = raw[skip:].decode(encoding)
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1 if encoding == "utf-8" else None
        at = f"line {line}, byte {exc.start}" if line is not None else f"byte {exc.start}"
        raise IngestError(f"{path}: not valid {encoding.upper()} ({at})") from None
    text = _CRLF.sub("\n", text)
    nul = text.find("\x00")
    if nul >= 0:
        line, col = _line_col(text, nul)
        raise IngestError(f"{path}:{line}: NUL character at column {col}: looks like a binary file; "
                          "expected UTF-8 text")
    return text


def _clean(text: str) -> str:
    """``text`` under the input rules: line breaks as ``\\n``, the other control characters (not tab) removed."""
    return _CONTROL.sub("", _LINE_BREAKS.sub("\n", text))


def _read_text(path: Path) -> str:
    return _clean(_decode(path))


def _check_field(path: Path, lineno: int, name: str, value: str) -> str:
    """A JSONL string field under the input rules; NUL and unpaired surrogates (JSON escapes) are errors."""
    nul = value.find("\x00")
    if nul >= 0:
        raise IngestError(f"{path}:{lineno}: field {name!r} contains a NUL character (\\u0000) at offset {nul}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise IngestError(f"{path}:{lineno}: field {name!r} contains an unpaired surrogate "
                          f"(\\u{ord(value[exc.start]):04x}) at offset {exc.start}: not valid Unicode") from None
    return _clean(value)


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
    text = _decode(path)  # fields are cleaned one by one: a form feed must not split a JSON line
    for lineno, obj in json_objects(text.split("\n"), path, IngestError):
        body = obj.get("text")
        if not isinstance(body, str):
            raise IngestError(f"{path}:{lineno}: missing string field 'text'")
        body = _check_field(path, lineno, "text", body)
        title = obj.get("title")
        if title is not None and not isinstance(title, str):
            raise IngestError(f"{path}:{lineno}: field 'title' must be a string, got {type(title).__name__}")
        if title is not None:
            title = _check_field(path, lineno, "title", title)
        ident = obj.get("id")
        if ident is None:
            source = f"{path}:{lineno}"
        elif isinstance(ident, (str, int)) and not isinstance(ident, bool):
            source = _check_field(path, lineno, "id", ident) if isinstance(ident, str) else str(ident)
        else:
            raise IngestError(f"{path}:{lineno}: field 'id' must be a string or int, got {type(ident).__name__}")
        title = title.strip() if title and title.strip() else None
        if not body.strip():
            continue
        yield Document(source, title, body, content_hash(title, body), f"{path}:{lineno}")


def _expand(inputs: Iterable[str | os.PathLike], on_skip: Callable[[str], None] | None = None) -> list[Path]:
    files: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            found, skipped = [], []
            for q in p.rglob("*"):
                if not q.is_file() or any(part.startswith(".") for part in q.relative_to(p).parts):
                    continue
                (found if q.suffix.lower() in SUPPORTED_SUFFIXES else skipped).append(q)
            files.extend(sorted(found))
            if skipped and on_skip is not None:
                on_skip(skipped_note(p, skipped))
        elif p.is_file():
            if p.suffix.lower() not in SUPPORTED_SUFFIXES:
                raise IngestError(f"{p}: unsupported file type {p.suffix!r}; expected one of {SUPPORTED_SUFFIXES}")
            files.append(p)
        elif p.exists():
            raise IngestError(f"{p}: not a regular file or directory")
        else:
            raise IngestError(f"{p}: no such file or directory")
    return files


def skipped_note(folder: Path, skipped: Sequence[Path]) -> str:
    """One line naming the files of unsupported types a folder held (the first few, by name)."""
    names = sorted(str(q.relative_to(folder)) for q in skipped)
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (f"{folder}: skipped {len(names)} file{'s' if len(names) != 1 else ''} of unsupported type ({shown}); "
            f"read are {', '.join(SUPPORTED_SUFFIXES)}")


def iter_documents(inputs: Sequence[str | os.PathLike], *,
                   on_skip: Callable[[str], None] | None = None) -> Iterator[Document]:
    """Yield documents of every input in order (directories recursively, sorted), not deduplicated.

    ``on_skip`` is told, one line per folder, which of its files were skipped for their type."""
    for path in _expand(inputs, on_skip):
        if path.suffix.lower() == ".jsonl":
            yield from _iter_jsonl(path)
        else:
            text = _read_text(path)
            if not text.strip():
                continue
            title = _md_title(text) if path.suffix.lower() in (".md", ".markdown") else None
            yield Document(str(path), title, text, content_hash(title, text), str(path))


def ingest(inputs: Sequence[str | os.PathLike], *, known_hashes: Iterable[str] = (),
           on_skip: Callable[[str], None] | None = None) -> tuple[list[Document], int]:
    """Read all inputs; return (new unique documents, number of duplicates skipped).

    ``on_skip``: told which files of a folder were skipped for their type (one line per folder).

    Documents whose content hash is in ``known_hashes`` (already indexed) or seen
    earlier in this call are skipped. Two documents of this call with the same source id
    and different content raise :class:`IngestError` naming both origins.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    if not inputs:
        raise IngestError("no input paths given")
    seen = set(known_hashes)
    docs: list[Document] = []
    by_source: dict[str, Document] = {}
    dupes = 0
    for doc in iter_documents(inputs, on_skip=on_skip):
        first = by_source.setdefault(doc.source, doc)
        if first.content_hash != doc.content_hash:
            raise IngestError(f"{doc.origin}: document id {doc.source!r} was already read from {first.origin} "
                              "with different content; give each document its own id")
        if doc.content_hash in seen:
            dupes += 1
            continue
        seen.add(doc.content_hash)
        docs.append(doc)
    return docs, dupes
