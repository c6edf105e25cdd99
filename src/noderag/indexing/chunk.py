"""Chunk: token-based, boundary-aware splitting (paragraph > line > sentence > word > grapheme).

Every cut falls between two grapheme clusters (user-perceived characters: a letter with its
combining marks, an emoji ZWJ sequence, a flag), so no chunk starts with a detached accent and
no character is split or lost. Chunk texts are slices of the source; nothing is re-decoded from
tokens, so no U+FFFD can appear that was not in the source. Work is linear in the text length.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Sequence

import regex

from ..lang.sentences import sentence_spans

__all__ = ["Chunk", "chunk_text", "chunk_documents", "chunk_stage"]


@dataclass(frozen=True)
class Chunk:
    """One text chunk: its id (global, insertion order), document id, text and token count."""

    chunk_id: int
    doc_id: int
    text: str
    n_tokens: int


_PARA = re.compile(r"\n[ \t]*\n+")
_WORD = re.compile(r"\S+\s*")
_GRAPHEME = regex.compile(r"\X")
# characters that join the cluster before them (Unicode grapheme break rules GB9, GB9a)
_JOINS_PREVIOUS = regex.compile(r"[\p{Grapheme_Cluster_Break=Extend}\p{Grapheme_Cluster_Break=ZWJ}"
                                r"\p{Grapheme_Cluster_Break=SpacingMark}]")


def _joins_previous(text: str, i: int) -> bool:
    """True when ``text[i]`` continues the grapheme cluster of ``text[i - 1]`` (a combining mark, ZWJ...).

    Exact for the cuts of :func:`_pieces`, which follow a newline, whitespace or sentence
    punctuation: after those only GB9/GB9a can join the next character to the cluster.
    """
    return 0 < i < len(text) and not text[i].isascii() and text[i - 1] != "\n" \
        and _JOINS_PREVIOUS.match(text, i) is not None


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
        if c > s and not _joins_previous(text, c):
            out.append(text[s:c])
            s = c
    if s < len(text):
        out.append(text[s:])
    return out


def _atoms(text: str, max_tokens: int, count, level: int = 0, n: int | None = None) -> list[tuple[str, int]]:
    """Segments of ``text`` each of at most ``max_tokens`` tokens, split at the coarsest boundary.

    ``n`` is the token count of ``text`` when the caller knows it (each level counts the text once).
    """
    if n is None:
        n = count(text)
    if n <= max_tokens:
        return [(text, n)]
    if level > 3:  # a single "word" longer than the limit: cut between grapheme clusters
        return _hard_cut(text, max_tokens, count)
    parts = _pieces(text, level)
    if len(parts) <= 1:
        return _atoms(text, max_tokens, count, level + 1, n)
    out: list[tuple[str, int]] = []
    for p in parts:
        out.extend(_atoms(p, max_tokens, count, level + 1))
    return out


def _chars_in_bytes(text: str, nbytes: int) -> int:
    """The number of whole characters of ``text`` in its first ``nbytes`` UTF-8 bytes."""
    raw = text.encode("utf-8", errors="surrogatepass")
    while 0 < nbytes < len(raw) and (raw[nbytes] & 0xC0) == 0x80:  # inside a character: back to its start
        nbytes -= 1
    return len(raw[:nbytes].decode("utf-8", errors="surrogatepass"))


def _hard_cut(text: str, max_tokens: int, count) -> list[tuple[str, int]]:
    """Consecutive slices of ``text`` of at most ``max_tokens`` tokens each, cut between grapheme clusters.

    Each slice ends at the last cluster boundary before the token that would exceed the
    limit (found from the token byte lengths of one encoded window), then its count is
    checked exactly and it shrinks by a cluster while over. Windows are sized from the
    previous slice, so the text is encoded about twice in all: linear time. A single
    cluster longer than the limit (hundreds of stacked combining marks) is cut between
    code points, the only case where a cut falls inside a cluster.
    """
    from ..tokenize import default_tokenizer

    enc = default_tokenizer()._enc
    out: list[tuple[str, int]] = []
    s, n_text = 0, len(text)
    width = 4 * max_tokens + 16
    while s < n_text:
        window = text[s:s + width]
        ids = enc.encode_ordinary(window)
        if len(ids) <= max_tokens:
            if s + width >= n_text:  # the rest fits
                out.append((window, len(ids)))
                break
            width *= 2
            continue
        c = _chars_in_bytes(window, sum(len(b) for b in enc.decode_tokens_bytes(ids[:max_tokens])))
        ends = [m.end() for m in _GRAPHEME.finditer(window)]  # s is a cluster boundary: exact inside
        k = bisect.bisect_right(ends, c) - 1  # the last cluster end <= c
        e = ends[k] if k >= 0 else max(c, 1)
        n = count(window[:e])
        while n > max_tokens and e > 1:
            k -= 1
            e = ends[k] if k >= 0 else e - 1
            n = count(window[:e])
        out.append((window[:e], n))
        s += e
        width = 2 * e + 16
    return out


def chunk_text(text: str, max_tokens: int = 1024, min_tokens: int = 64) -> list[str]:
    """Split ``text`` into chunks of at most ``max_tokens`` tokens at natural boundaries.

    A text under the limit stays one chunk. Otherwise atoms (paragraphs, then lines,
    sentences, words) are packed greedily; a short trailing chunk (< ``min_tokens``)
    is merged into the previous one when the result still fits.
    """
    from ..tokenize import count_tokens

    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens!r}")
    n = count_tokens(text)
    if n <= max_tokens:
        return _stripped_within(text, max_tokens, count_tokens)
    atoms = _atoms(text, max_tokens, count_tokens, 0, n)
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
    return [s for c in fixed for s in _stripped_within(c, max_tokens, count_tokens)]


def _stripped_within(chunk: str, max_tokens: int, count) -> list[str]:
    """``chunk`` (within the limit, or one cluster) stripped, and cut again if stripping put it over.

    BPE is not monotonic: " 👍🏽中" is 6 tokens and "👍🏽中" 7, so the stripped text is counted
    again whenever stripping removed something.
    """
    text = chunk.strip()
    if not text or len(text) == len(chunk) or count(text) <= max_tokens:
        return [text] if text else []
    parts = [a for a, _ in _atoms(text, max_tokens, count, 3)]
    if len(parts) == 1:  # one cluster over the limit: nothing smaller to cut
        return [text]
    return [s for p in parts for s in _stripped_within(p, max_tokens, count)]


def chunk_texts(texts: Sequence[str], max_tokens: int, min_tokens: int) -> list[list[str]]:
    """``chunk_text`` of each text (one batch of a parallel chunk stage)."""
    return [chunk_text(t, max_tokens, min_tokens) for t in texts]


def chunk_documents(texts: Sequence[str], *, first_doc_id: int = 0, first_chunk_id: int = 0,
                    max_tokens: int = 1024, min_tokens: int = 64) -> list[Chunk]:
    """Chunk every document text; ids continue from ``first_doc_id`` / ``first_chunk_id``."""
    from ..tokenize import count_tokens

    out: list[Chunk] = []
    cid = first_chunk_id
    for i, text in enumerate(texts):
        for c in chunk_text(text, max_tokens, min_tokens):
            out.append(Chunk(cid, first_doc_id + i, c, count_tokens(c)))
            cid += 1
    return out


# ----------------------------------------------------------------------------- the stage

def chunk_stage(docs: list, first_doc: int, chunk, bars, *, workers: int = 1,
                min_docs_for_workers: int = 8192) -> list[list]:
    """``[chunk id, doc id, text]`` rows of the documents ``docs`` (doc ids from ``first_doc``), cut as the
    ``[chunk]`` section ``chunk`` says.

    Large corpora are chunked by ``workers`` forked worker processes (``executor.workers``); rows come
    back in document order either way.
    """
    from .executor.local import fork_map

    rows: list[list] = []
    texts = [d.text for d in docs]
    step = 2048  # documents per batch
    batches = [(texts[b:b + step], chunk.max_tokens, chunk.min_tokens) for b in range(0, len(texts), step)]
    workers = workers if len(texts) >= min_docs_for_workers else 1
    with bars.bar(len(docs), "chunk") as bar:
        i = 0
        for pieces in fork_map(chunk_texts, batches, workers):
            for doc_pieces in pieces:
                for piece in doc_pieces:
                    rows.append([len(rows), first_doc + i, piece])
                i += 1
            bar.update(len(pieces))
    return rows
