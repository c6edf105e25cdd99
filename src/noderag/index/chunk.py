"""Chunk: token-based, boundary-aware splitting (paragraph > line > sentence > word)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from .sentences import sentence_spans

__all__ = ["Chunk", "chunk_text", "chunk_documents"]


@dataclass(frozen=True)
class Chunk:
    """One text chunk: its id (global, insertion order), document id, text and token count."""

    chunk_id: int
    doc_id: int
    text: str
    n_tokens: int


_PARA = re.compile(r"\n[ \t]*\n+")
_WORD = re.compile(r"\S+\s*")


def _pieces(text: str, level: int) -> list[str]:
    """Split ``text`` at boundaries of one level, keeping separators attached to the left piece."""
    if level == 0:
        cuts = [m.end() for m in _PARA.finditer(text)]
    elif level == 1:
        cuts = [m.end() for m in re.finditer(r"\n", text)]
    elif level == 2:
        spans = sentence_spans(text)
        cuts = [b for _, b in spans[:-1]]
    else:
        cuts = [m.end() for m in _WORD.finditer(text)][:-1]
    out, s = [], 0
    for c in cuts:
        if c > s:
            out.append(text[s:c])
            s = c
    if s < len(text):
        out.append(text[s:])
    return out


def _atoms(text: str, max_tokens: int, count, level: int = 0) -> list[tuple[str, int]]:
    """Segments of ``text`` each of at most ``max_tokens`` tokens, split at the coarsest boundary."""
    n = count(text)
    if n <= max_tokens:
        return [(text, n)]
    if level > 3:  # a single "word" longer than the limit: hard cut by tokens
        from noderag.tokenize import decode, encode

        ids = encode(text)
        return [(decode(ids[i:i + max_tokens]), len(ids[i:i + max_tokens])) for i in range(0, len(ids), max_tokens)]
    parts = _pieces(text, level)
    if len(parts) <= 1:
        return _atoms(text, max_tokens, count, level + 1)
    out: list[tuple[str, int]] = []
    for p in parts:
        out.extend(_atoms(p, max_tokens, count, level + 1))
    return out


def chunk_text(text: str, max_tokens: int = 1024, min_tokens: int = 64) -> list[str]:
    """Split ``text`` into chunks of at most ``max_tokens`` tokens at natural boundaries.

    A text under the limit stays one chunk. Otherwise atoms (paragraphs, then lines,
    sentences, words) are packed greedily; a short trailing chunk (< ``min_tokens``)
    is merged into the previous one when the result still fits.
    """
    from noderag.tokenize import count_tokens

    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens!r}")
    if count_tokens(text) <= max_tokens:
        return [text.strip()] if text.strip() else []
    atoms = _atoms(text, max_tokens, count_tokens)
    chunks: list[str] = []
    cur, cur_n = "", 0
    for piece, n in atoms:
        if cur and cur_n + n > max_tokens:
            chunks.append(cur)
            cur, cur_n = "", 0
        cur += piece
        cur_n += n
    if cur.strip():
        chunks.append(cur)
    # exact re-check (BPE is not exactly additive) and merge of a short tail
    fixed: list[str] = []
    for c in chunks:
        if count_tokens(c) > max_tokens:
            fixed.extend(a for a, _ in _atoms(c, max_tokens, count_tokens, 3))
        else:
            fixed.append(c)
    if len(fixed) >= 2 and count_tokens(fixed[-1]) < min_tokens:
        merged = fixed[-2] + fixed[-1]
        if count_tokens(merged) <= max_tokens:
            fixed[-2:] = [merged]
    return [c.strip() for c in fixed if c.strip()]


def chunk_documents(texts: Sequence[str], *, first_doc_id: int = 0, first_chunk_id: int = 0,
                    max_tokens: int = 1024, min_tokens: int = 64) -> list[Chunk]:
    """Chunk every document text; ids continue from ``first_doc_id`` / ``first_chunk_id``."""
    from noderag.tokenize import count_tokens

    out: list[Chunk] = []
    cid = first_chunk_id
    for i, text in enumerate(texts):
        for c in chunk_text(text, max_tokens, min_tokens):
            out.append(Chunk(cid, first_doc_id + i, c, count_tokens(c)))
            cid += 1
    return out
