"""Title links: the documents whose title a passage names (query-time bridging by document title).

A multi-hop question's next passage is often the article about a place or person the first passage
names ("... a graduate of West Chicago High School" -> the article "West Chicago, Illinois"); the
entity graph misses it when the name in the passage is longer, shorter or qualified differently from
the one the article's sentences use. Titles are matched by their head (the title without a trailing
parenthesis or comma qualifier: "Brand (play)" -> "Brand", "West Chicago, Illinois" -> "West Chicago")
as whole-word phrases of the passage that start with a capitalised word (or a digit or a Han character),
case and accents folded on both sides (a question writes "Akinoshu Kenji" for the article "Akinoshū Kenji").

The phrase table is written at build time (``query/title_*``, :func:`title_table`) or, for an index without
it, built in memory at the first query that uses it, O(documents); a text's look-up is one call of the core
(:func:`noderag._core.title_candidates`: a binary search per capitalised word and head length).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Any, Sequence

import numpy as np

from .._core import title_candidates
from ..lang.entities import STOP
from ..lang.zh import is_han_token, match_tokens

__all__ = ["TitleLinks", "title_head", "title_table", "TITLE_ARRAYS"]

_PAREN = re.compile(r"\s*\([^()]*\)\s*$")
_COMMA = re.compile(r"\s*,[^,]*$")
#: Longest title head (in match tokens) looked up.
MAX_HEAD_TOKENS = 8


def title_head(title: str) -> str:
    """A title without its trailing qualifier: a final "(...)", then a final ", ..." ("Brand (play)" -> "Brand")."""
    t = _PAREN.sub("", title.strip())
    return _COMMA.sub("", t) or t or title.strip()


@lru_cache(maxsize=1 << 16)
def fold_token(token: str) -> str:
    """A match token case-folded and without accents ("Akinoshū" -> "akinoshu"): questions often spell a name
    without the diacritics of the article's title. ASCII tokens are only lower-cased. Memoised: a Chinese text
    is one token per character, and the same few thousand characters recur in every passage."""
    if token.isascii():
        return token.lower()
    return "".join(c for c in unicodedata.normalize("NFKD", token) if not unicodedata.combining(c)).casefold()


@lru_cache(maxsize=1 << 16)
def _name_start(token: str) -> bool:
    """Whether a match token may start a title head in a text: capitalised, a digit or a Han character.
    Memoised like :func:`fold_token` (a Chinese text is one token per character)."""
    return token[:1].isupper() or token[:1].isdigit() or is_han_token(token)


def title_key(title: str) -> tuple[str, ...] | None:
    """The folded match tokens of a title's head (what a text must name to name the title); None when the head
    has no token, more than :data:`MAX_HEAD_TOKENS`, or is one stop word. The reference of the vectorised
    :func:`_ascii_keys`."""
    toks = match_tokens(title_head(title))
    if not toks or len(toks) > MAX_HEAD_TOKENS or (len(toks) == 1 and toks[0].casefold() in STOP):
        return None
    return tuple(map(fold_token, toks))


_M = (1 << 64) - 1
_P = 0x100000001B3  # byte multiplier of a token's hash (FNV's prime)
_Q = 0x9E3779B97F4A7C15  # token multiplier of a head's hash (odd)


@lru_cache(maxsize=1 << 16)
def token_hash(token: str) -> int:
    """64-bit polynomial hash of a folded token's UTF-8 bytes: sum((b + 1) * P**(L-1-i)) mod 2**64 (the same
    sums :func:`_ascii_keys` makes over byte arrays)."""
    h = 0
    for b in token.encode("utf-8", "surrogatepass"):
        h = (h * _P + b + 1) & _M
    return h


@lru_cache(maxsize=1 << 16)
def folded_hash(token: str) -> int:
    """:func:`token_hash` of a text's match token once folded (:func:`fold_token`): what a head's tokens are
    hashed from. Memoised like the two."""
    return token_hash(fold_token(token))


def head_hash(hashes) -> int:
    """A head's hash from its tokens' :func:`token_hash` values: sum(h_j * Q**(n-1-j)) mod 2**64 (one token: its
    own hash)."""
    h = 0
    for t in hashes:
        h = (h * _Q + t) & _M
    return h


def _powers(base: int, n: int) -> np.ndarray:
    out, p = [], 1
    for _ in range(max(n, 1)):
        out.append(p)
        p = (p * base) & _M
    return np.asarray(out, dtype=np.uint64)


def _index_dtype(size: int) -> type:
    """int32 byte indices while they fit (half the memory traffic of int64 over every title byte)."""
    return np.int32 if size < 2**31 - 2 else np.int64


def _last_upto(mask: np.ndarray) -> np.ndarray:
    """For every byte index j: the largest index <= j where ``mask`` holds (-1: none)."""
    if not mask.size:
        return np.zeros(0, np.int64)
    idx = np.arange(mask.size, dtype=_index_dtype(mask.size))
    return np.maximum.accumulate(np.where(mask, idx, idx.dtype.type(-1)))


def _next_from(mask: np.ndarray) -> np.ndarray:
    """For every byte index j: the smallest index >= j where ``mask`` holds (``mask.size``: none)."""
    if not mask.size:
        return np.zeros(0, np.int64)
    idx = np.arange(mask.size, dtype=_index_dtype(mask.size))
    return np.minimum.accumulate(np.where(mask, idx, idx.dtype.type(mask.size))[::-1])[::-1]


def _before(last: np.ndarray, j: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """``last[j]`` where ``j >= lo`` and it is ``>= lo`` (inside the string that starts at ``lo``), else -1."""
    got = last[np.clip(j, 0, max(last.size - 1, 0))] if last.size else np.full(j.shape, -1)
    return np.where((j >= lo) & (got >= lo), got, -1)


def _heads_of(off: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Byte bounds of :func:`title_head` of printable-ASCII strings (``data[off[i]:off[i+1]]``): strip, then a
    final "(...)" and a final ", ..." cut with the spaces before them, as the regular expressions do."""
    start, end = off[:-1], off[1:]
    nonsp = data != 0x20
    lns = _last_upto(nonsp)
    nxt = _next_from(nonsp)
    s0 = np.where(start < end, nxt[np.clip(start, 0, max(data.size - 1, 0))] if data.size else end, end)
    s0 = np.minimum(s0, end)
    blank = s0 >= end
    e0 = _before(lns, end - 1, start) + 1
    s0, e0 = np.where(blank, start, s0), np.where(blank, start, e0)

    def cut(p: np.ndarray) -> np.ndarray:  # the string cut before p, without the spaces before p
        q = _before(lns, p - 1, s0)
        return np.where(q >= 0, q + 1, s0)

    close = (e0 > s0) & (data[np.clip(e0 - 1, 0, max(data.size - 1, 0))] == 0x29) if data.size else blank & False
    op = _before(_last_upto(data == 0x28), e0 - 2, s0)
    cl = _before(_last_upto(data == 0x29), e0 - 2, s0)
    paren = close & (op >= 0) & (cl < op)
    t1 = np.where(paren, cut(op), e0)
    comma = _before(_last_upto(data == 0x2C), t1 - 1, s0)
    r1 = np.where(comma >= 0, cut(comma), t1)
    return s0, np.where(r1 > s0, r1, np.where(t1 > s0, t1, e0))


def _ascii_keys(off: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(head hash, first token's hash, tokens) of each printable-ASCII string, as :func:`title_key`,
    :func:`token_hash` and :func:`head_hash` give them (tokens 0: no token), in byte arrays: no Python per title."""
    n = off.size - 1
    it = _index_dtype(data.size)
    hs, he = (b.astype(it) for b in _heads_of(off, data))
    owner = np.repeat(np.arange(n, dtype=it), off[1:] - off[:-1])
    idx = np.arange(data.size, dtype=it)
    word = ((data >= 48) & (data <= 57)) | ((data >= 65) & (data <= 90)) | ((data >= 97) & (data <= 122)) | (data == 95)
    hs_b, he_b = hs[owner], he[owner]
    w = word & (idx >= hs_b) & (idx < he_b)
    prev = np.r_[False, w[:-1]] & (idx != hs_b)
    nxt = np.r_[w[1:], False] & (idx + 1 != he_b)
    del hs_b, he_b, idx
    wb = np.flatnonzero(w)
    t_start = np.flatnonzero(~prev[wb])  # token starts, in the compacted word bytes
    t_end = np.flatnonzero(~nxt[wb]) + 1
    ntok = np.bincount(owner[wb[t_start]], minlength=n) if t_start.size else np.zeros(n, np.int64)
    head, first = np.zeros(n, np.uint64), np.zeros(n, np.uint64)
    if not t_start.size:
        return head, first, ntok
    marks = np.zeros(wb.size, it)
    marks[t_start] = 1
    tok = np.cumsum(marks, dtype=it) - 1  # token of each word byte
    byte = data[wb].astype(np.uint64)
    byte += np.where((byte >= 65) & (byte <= 90), np.uint64(32), np.uint64(0)) + np.uint64(1)
    pw = _powers(_P, int((t_end - t_start).max()))
    th = np.add.reduceat(byte * pw[t_end.astype(it)[tok] - 1 - np.arange(wb.size, dtype=it)], t_start)
    t_owner = owner[wb[t_start]]
    k_start = np.flatnonzero(np.r_[True, t_owner[1:] != t_owner[:-1]])
    local = np.arange(t_owner.size) - np.repeat(k_start, np.diff(np.r_[k_start, t_owner.size]))
    qw = _powers(_Q, int(ntok.max()))
    keyed = t_owner[k_start]
    head[keyed] = np.add.reduceat(th * qw[ntok[t_owner] - 1 - local], k_start)
    first[keyed] = th[k_start]
    return head, first, ntok


#: The title table's arrays (:func:`title_table`), written into ``query/`` at build time.
TITLE_ARRAYS = ("title_head", "title_doc", "title_off", "title", "title_first", "title_mask", "title_pdoc",
                "title_pid")


def _arrow_bytes(titles: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any]:
    """(offsets, UTF-8 bytes, validity, the large-string array) of a pyarrow string column, from its buffers
    (pyarrow's to_numpy imports pandas)."""
    import pyarrow as pa

    arr = titles.combine_chunks() if isinstance(titles, pa.ChunkedArray) else titles
    arr = arr.cast(pa.large_string()) if arr.type != pa.large_string() else arr
    n = len(arr)
    bufs = arr.buffers()
    valid = np.ones(n, bool)
    if arr.null_count:  # the validity bitmap
        bits = np.unpackbits(np.frombuffer(bufs[0], dtype=np.uint8), bitorder="little")
        valid = bits[arr.offset:arr.offset + n].astype(bool)
    off = np.frombuffer(bufs[1], dtype=np.int64)[arr.offset:arr.offset + n + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    data = data[int(off[0]):int(off[-1])] if n else data[:0]
    return off - (off[0] if n else 0), data, valid, arr


def _gather(off: np.ndarray, data: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The strings ``rows`` of the blob (off, data) as a new blob, in that order."""
    lens = off[rows + 1] - off[rows]
    new_off = np.zeros(rows.size + 1, np.int64)
    np.cumsum(lens, out=new_off[1:])
    idx = np.repeat(off[rows] - new_off[:-1], lens) + np.arange(int(new_off[-1]), dtype=np.int64)
    return new_off, data[idx]


def title_table(doc_ids: np.ndarray, titles: Any, t_ids: np.ndarray, t_docs: np.ndarray) -> dict[str, np.ndarray]:
    """The arrays :class:`TitleLinks` looks titles up in, from a documents table's ``doc_id`` and ``title`` columns
    (pyarrow strings; null or empty: no title) and the passages (T node ids) with their doc ids: O(title bytes)
    numpy, and Python only for non-ASCII titles. Keys as :data:`TITLE_ARRAYS`: the head hashes, sorted (ties by
    doc), with their documents and titles (a blob: a hash proposes, the title decides); the first tokens' hashes,
    sorted, with the mask of head lengths each starts; the passages sorted by (doc, id)."""
    doc_ids = np.asarray(doc_ids, dtype=np.int64)
    off, data, valid, arr = _arrow_bytes(titles)
    bad = (data < 0x20) | (data > 0x7E)
    cs = np.r_[0, np.cumsum(bad)]
    simple = (cs[off[1:]] - cs[off[:-1]] == 0) & valid
    head, first, ntok = _ascii_keys(off, data)
    ntok = np.where(simple, ntok, 0)
    single = np.flatnonzero(simple & (ntok == 1))
    stop = single[np.isin(first[single], np.asarray([token_hash(w) for w in STOP], dtype=np.uint64))]
    for i in stop.tolist():  # a lone stop word is no title (verified: hashes only propose)
        if title_key(arr[i].as_py()) is None:
            ntok[i] = 0
    for i in np.flatnonzero(~simple & valid).tolist():
        key = title_key(arr[i].as_py())
        if key is not None:
            hashes = [token_hash(t) for t in key]
            head[i], first[i], ntok[i] = head_hash(hashes), hashes[0], len(key)
    keep = np.flatnonzero((ntok > 0) & (ntok <= MAX_HEAD_TOKENS))
    order = keep[np.lexsort((doc_ids[keep], head[keep]))]
    t_off, t_bytes = _gather(off, data, order)
    f_order = keep[np.argsort(first[keep], kind="stable")]
    fh = first[f_order]
    lead = np.flatnonzero(np.r_[True, fh[1:] != fh[:-1]]) if fh.size else np.zeros(0, np.int64)
    masks = np.bitwise_or.reduceat(np.left_shift(1, ntok[f_order]), lead) if lead.size else lead
    p_order = np.lexsort((np.asarray(t_ids), np.asarray(t_docs)))
    return {"title_head": head[order], "title_doc": doc_ids[order], "title_off": t_off, "title": t_bytes,
            "title_first": fh[lead], "title_mask": np.asarray(masks, dtype=np.int64),
            "title_pdoc": np.asarray(t_docs, np.int64)[p_order], "title_pid": np.asarray(t_ids, np.int64)[p_order]}


class TitleLinks:
    """Documents by the title heads a text names, and each document's passages (T nodes).

    Over the sorted arrays of :func:`title_table`: the heads' 64-bit hashes (:func:`head_hash`) with their documents
    and titles, and the first tokens' hashes with a bit mask of the head lengths they start; a text's look-ups are a
    few binary searches of all its words at once, and a hit is verified against the title itself. The arrays are
    written at build time (``query/title_*``, memory-mapped: free at open); without them they are made at the first
    bridging query (:meth:`from_arrow`), O(title bytes) numpy: 0.2-0.6 s for 10^5 documents, several seconds for
    10^6 (benchmarks/results/search_cost.md).

    Parameters
    ----------
    titles : dict of int -> str
        doc_id -> title.
    t_ids, t_docs : ndarray
        The active passages (T node ids) and their doc ids.
    """

    def __init__(self, titles: dict[int, str], t_ids: np.ndarray, t_docs: np.ndarray) -> None:
        import pyarrow as pa

        docs = sorted(titles)
        raw = [titles[d].encode("utf-8", "surrogatepass") for d in docs]
        off = np.zeros(len(raw) + 1, np.int64)
        np.cumsum([len(b) for b in raw], out=off[1:])
        arr = pa.LargeStringArray.from_buffers(len(raw), pa.py_buffer(off), pa.py_buffer(b"".join(raw)))
        self._use(title_table(np.asarray(docs, dtype=np.int64), arr, t_ids, t_docs))  # not pa.array: imports pandas

    @classmethod
    def from_arrow(cls, doc_ids: np.ndarray, titles: Any, t_ids: np.ndarray, t_docs: np.ndarray) -> "TitleLinks":
        """Over a documents table's ``doc_id`` and ``title`` columns (a pyarrow string array; null or empty: no
        title)."""
        return cls.from_table(title_table(doc_ids, titles, t_ids, t_docs))

    @classmethod
    def from_table(cls, arrays: dict[str, np.ndarray], active: np.ndarray | None = None) -> "TitleLinks":
        """Over the arrays of :func:`title_table` (the build's, memory-mapped); ``active``: node flags, when the
        passages listed may have been deleted since."""
        obj = cls.__new__(cls)
        obj._use(arrays, active)
        return obj

    @classmethod
    def of(cls, titles: Any, types: np.ndarray, doc: Any, active: Any, t_type: int) -> "TitleLinks":
        """Over the active T nodes of an index (``types``, their ``doc`` column and ``active`` flags);
        ``titles`` is doc_id -> title, or ``(doc_ids, pyarrow title array)``."""
        t_ids = np.flatnonzero((np.asarray(types) == t_type) & np.asarray(active, dtype=bool))
        t_docs = np.asarray(doc)[t_ids]
        if isinstance(titles, dict):
            return cls(titles, t_ids, t_docs)
        return cls.from_arrow(titles[0], titles[1], t_ids, t_docs)

    def _use(self, a: dict[str, np.ndarray], active: np.ndarray | None = None) -> None:
        self._hdoc = a["title_doc"]
        self._toff, self._tbytes = a["title_off"], a["title"]
        # as the core takes them (the build writes these dtypes: no copy of a mapped table)
        self._head = np.ascontiguousarray(a["title_head"], dtype=np.uint64)
        self._first = np.ascontiguousarray(a["title_first"], dtype=np.uint64)
        self._fmask = np.ascontiguousarray(a["title_mask"], dtype=np.int64)
        self._docs, self._ids = a["title_pdoc"], a["title_pid"]
        self._active = active
        self._keys: dict[int, tuple[str, ...] | None] = {}

    def _key_of(self, row: int) -> tuple[str, ...] | None:
        got = self._keys.get(row, ())
        if got == ():
            raw = bytes(self._tbytes[int(self._toff[row]):int(self._toff[row + 1])])
            got = self._keys[row] = title_key(raw.decode("utf-8", "surrogatepass"))
        return got

    def named_docs(self, text: str) -> list[int]:
        """Documents whose title head ``text`` names, in text order, no repeats; the longest head at a
        position wins and heads inside a longer match are skipped."""
        return [d for group in self.named_groups(text) for d in group]

    def named_groups(self, text: str) -> list[list[int]]:
        """:meth:`named_docs` grouped by the title head named: one list per head, in text order (several
        documents may share a title: "Namibia" may be five articles' passages, and they name one subject).

        The core proposes every (start, length) whose head hash is a title's (:func:`noderag._core.title_candidates`:
        a binary search per start and length); each is then checked against the title's own folded tokens."""
        if not self._head.size or not text:
            return []
        surface = match_tokens(text)
        if not surface:
            return []
        hashes = np.fromiter(map(folded_hash, surface), np.uint64, len(surface))
        starts = np.fromiter(map(_name_start, surface), np.bool_, len(surface))
        cand = title_candidates(hashes, starts, self._first, self._fmask, self._head, MAX_HEAD_TOKENS, _Q)
        out: list[int] = []
        groups: list[list[int]] = []
        after = 0  # the end of the last match (heads inside it, and shorter ones at its start, are skipped)
        for s, n, lo, hi in zip(*(c.tolist() for c in cand)):
            if s < after:
                continue
            key = tuple(map(fold_token, surface[s:s + n]))  # a hash proposes, the title's own head decides
            docs = [int(self._hdoc[i]) for i in range(lo, hi) if self._key_of(i) == key]
            if docs:
                new = [d for d in docs if d not in out]
                if new:
                    out.extend(new)
                    groups.append(new)
                after = s + n
        return groups

    def passages(self, doc: int) -> np.ndarray:
        """The passages (T node ids, ascending) of one document (the active ones)."""
        return self.passages_of([doc])

    def passages_of(self, docs: Sequence[int]) -> np.ndarray:
        """The active passages of several documents, document by document in the order given (each ascending):
        one look-up for all of them (a title many documents bear names hundreds)."""
        d = np.asarray(docs, dtype=np.int64)
        lo = np.searchsorted(self._docs, d)
        n = np.searchsorted(self._docs, d + 1) - lo
        total = int(n.sum())
        if total == 0:
            return np.zeros(0, np.asarray(self._ids).dtype)
        if d.size == 1:
            ids = self._ids[int(lo[0]):int(lo[0]) + total]
        else:  # the rows lo[i] .. lo[i] + n[i] - 1 of every document, in order
            ids = self._ids[np.repeat(lo - np.cumsum(n) + n, n) + np.arange(total)]
        return ids if self._active is None else ids[self._active[ids]]
