"""The query tables of a segmented generation (a base and delta segments) behind one interface.

Each segment has its own memory-mapped ``query/`` tables (:class:`~noderag.search.query_index.QueryIndex`)
over a contiguous range of node ids. :class:`SegmentedTables` answers what the searcher asks of one
``QueryIndex``: the per-node columns (concatenated once at open: 17 bytes a node), texts, labels,
names (:class:`SegmentedNames`) and BM25 postings (each segment's impacts are on the scale of the whole
index, see :class:`SegmentedLexical`). A segmented build's duplicate nodes (:mod:`noderag.store.aliases`)
are inactive and their names answer their canonical node.

A query's cost should grow little with the number of segments: a name is looked up once in a directory of
every segment's hashes (:class:`_HashDirectory`, made at the first query), a term's postings over all segments
are read once and kept, BM25 sums all segments' postings in one kernel call, and texts and labels are read
with one call per segment holding some, never per node.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from functools import cached_property
from typing import Sequence

import numpy as np

from ..lang.entities import canonical_name
from .entities import _TOKEN_MEMO, MappedNames, _NameMatching, hash64, name_tokens
from .lexical import TERM_CACHE_POSTINGS, QueryPostings, passage_terms, top_scored

__all__ = ["SegmentedTables", "SegmentedNames", "SegmentedLexical", "merged_names", "merged_lexical",
           "open_segment_tables"]

#: Name tables of at least this many memory-mapped segments are looked up through directories of all their hashes
#: (:class:`_HashDirectory`: 14 bytes a name or token, made at the first query); fewer are asked one by one.
DIRECTORY_FROM = 4


class SegmentedNames(_NameMatching):
    """Name look-ups over every segment's name tables: each segment holds the names its nodes brought.

    A name is in one segment only (an insert merges a known name into the node that has it), so
    exact and phrase look-ups are unions, and names in a text are found once over all segments
    (longest span first, as in one segment). Containment lists a segment's hits after the earlier
    segments' (shortest names first within a segment); compaction makes that order exact again.
    Over memory-mapped segments a key is hashed once and looked up in one directory of every segment's
    hashes of its kind (:class:`_HashDirectory`); only the segments it names are asked to verify it.
    """

    _PART = 40  # a name of part k, position j, is known here as (k << 40) | j

    def __init__(self, parts: Sequence[_NameMatching], aliases=None) -> None:
        self.parts = list(parts)
        self.max_tokens = max((p.max_tokens for p in self.parts), default=0)
        # a segmented build's duplicates (noderag.store.aliases): a name of one answers its canonical node
        self.aliases = aliases if aliases is not None and len(aliases) else None
        self._mapped = len(self.parts) >= DIRECTORY_FROM and all(isinstance(p, MappedNames) for p in self.parts)
        self._dirs: dict[str, _HashDirectory] = {}
        self._lock = threading.Lock()
        self._hashes: dict[str, int] = {}  # key -> its hash64, as MappedNames memoises it

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def _canonical(self, ids: list[int]) -> list[int]:
        return ids if self.aliases is None else self.aliases.resolve_list(ids)

    def _node_id(self, j: int) -> int:
        nid = self.parts[j >> self._PART]._node_id(j & ((1 << self._PART) - 1))
        return nid if self.aliases is None else int(self.aliases.resolve(np.asarray([nid]))[0])

    def _hits(self, kind: str, keys: list[str]) -> list[list[tuple[int, int]]]:
        """(segment, row of its ``kind`` hashes) of each key's hash hits over all segments (not yet verified)."""
        got = self._dirs.get(kind)
        if got is None:
            with self._lock:
                got = self._dirs.get(kind)
                if got is None:
                    got = self._dirs[kind] = _HashDirectory([getattr(p, kind) for p in self.parts])
        memo = self._hashes
        if len(memo) >= _TOKEN_MEMO:
            memo = self._hashes = {}
        hashes = np.fromiter((memo[k] if k in memo else memo.setdefault(k, hash64(k)) for k in keys),
                             dtype=np.uint64, count=len(keys))
        return got.hits(hashes)

    def in_text(self, text: str) -> list[tuple[int, str]]:
        found = super().in_text(text)
        return found if self.aliases is None else list(dict.fromkeys(found))

    def _may_occur(self, words: list[str]) -> list[bool]:
        if not self._mapped:
            flags = [p._may_occur(words) for p in self.parts]
            return [any(f[i] for f in flags) for i in range(len(words))]
        if not words:
            return []
        return [" " in w or any(self.parts[k]._token_at(r) == w for k, r in hits)
                for w, hits in zip(words, self._hits("_tok_hash", words))]

    def _phrase_js_many(self, phrases: list[str]) -> list[list[int]]:
        if not self._mapped:
            per = [p._phrase_js_many(phrases) for p in self.parts]
            return [[(k << self._PART) | j for k, hits in enumerate(col) for j in hits] for col in zip(*per)]
        if not phrases:
            return []
        return [[(k << self._PART) | j for k, r in hits for j in self.parts[k]._verify_phrase(phrase, r, r + 1)]
                for phrase, hits in zip(phrases, self._hits("_phrase_hash", phrases))]

    def exact(self, entity: str) -> list[int]:
        if not self._mapped:
            return self._canonical([nid for p in self.parts for nid in p.exact(entity)])
        canon = canonical_name(entity)
        found: dict[int, list[int]] = {}  # segment -> its names of canonical form ``canon``
        for k, r in self._hits("_exact_hash", [canon])[0]:
            j = self.parts[k]._exact_at(r, canon)
            if j is not None:
                found.setdefault(k, []).append(j)
        if len(found) < len(self.parts):  # the other segments look the entity's whole-word form up, as one does
            phrase = " ".join(name_tokens(entity))
            phrased: dict[int, list[int]] = {}
            for k, r in self._hits("_phrase_hash", [phrase])[0]:
                if k not in found:
                    phrased.setdefault(k, []).extend(self.parts[k]._verify_phrase(phrase, r, r + 1))
            found.update(phrased)
        return self._canonical([self.parts[k]._node_id(j) for k in sorted(found) for j in found[k]])

    def containing(self, entity: str, limit: int) -> list[int]:
        parts = range(len(self.parts))
        if self._mapped:
            toks = sorted(set(name_tokens(entity)))
            if not toks or limit <= 0:
                return []
            holding = [{k for k, r in hits if self.parts[k]._token_at(r) == t}
                       for t, hits in zip(toks, self._hits("_tok_hash", toks))]
            parts = sorted(set.intersection(*holding))  # a segment lacking a token has no name containing them
        out: list[int] = []
        for k in parts:
            if len(out) >= limit:
                break
            out = self._canonical(out + self.parts[k].containing(entity, limit - len(out)))
        return out


class _HashDirectory:
    """Several segments' sorted hash arrays of one kind in one sorted array, each hash with its segment and its row
    there (equal hashes in segment order): a key is looked up once for all segments (14 bytes a hash; built at
    the first query that needs it)."""

    def __init__(self, arrays: Sequence[np.ndarray]) -> None:
        hashes = [np.asarray(a, dtype=np.uint64) for a in arrays]
        sizes = [h.shape[0] for h in hashes]
        flat = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
        order = np.argsort(flat, kind="stable")
        self.hash = flat[order]
        self.part = np.repeat(np.arange(len(hashes), dtype=np.int16), sizes)[order]
        self.row = (np.arange(flat.shape[0], dtype=np.int64)
                    - np.repeat(np.cumsum(sizes) - sizes, sizes))[order].astype(np.int32)

    def hits(self, hashes: np.ndarray) -> list[list[tuple[int, int]]]:
        """(segment, row) of every entry of each of ``hashes``, in segment order."""
        lo = self.hash.searchsorted(hashes, side="left").tolist()
        hi = self.hash.searchsorted(hashes, side="right").tolist()
        return [list(zip(self.part[a:b].tolist(), self.row[a:b].tolist())) if b > a else [] for a, b in zip(lo, hi)]


class SegmentedLexical:
    """BM25 over every segment's postings: a passage's score comes from the segment that holds it.

    With bound passages a query's terms not read before are looked up in each segment (one binary search for
    all of them), read in one gather per segment, put into one ordinal space (segments are contiguous id ranges
    in order, so global ordinal order is id order) and sorted by it. A term's postings over all segments are
    kept (as one segment keeps its long lists), and a query's are read once as one index's are
    (:class:`~noderag.search.lexical.QueryPostings`: summed by one kernel call, read for candidates by another).
    A passage's impacts all come from its own segment and are added in term order, as there: its float sum is
    the one segment's bit for bit.
    """

    def __init__(self, parts: Sequence, starts: np.ndarray) -> None:
        self.parts = list(parts)
        self._starts = np.asarray(starts, dtype=np.int64)
        self._passages: np.ndarray | None = None  # every bound passage id, ascending (the global ordinals)
        self._offsets: list[np.int32] = []  # per segment: the global ordinal of its first bound passage
        self._kept: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # term hash -> its global ordinals (sorted), impacts
        self._kept_postings = 0

    @property
    def max_postings(self) -> int:
        return self.parts[0].max_postings

    @max_postings.setter
    def max_postings(self, value: int) -> None:
        for p in self.parts:
            p.max_postings = int(value)
        self._kept, self._kept_postings = {}, 0

    @property
    def n_terms(self) -> int:
        return sum(p.n_terms for p in self.parts)

    def bind_passages(self, ids: np.ndarray) -> None:
        """Give each segment the passage ids of its own range (and this index their global ordinals)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if ids.size > 1 and not bool(np.all(ids[1:] > ids[:-1])):
            ids = np.unique(ids)
        bounds = np.searchsorted(ids, self._starts[1:])
        for p, part in zip(self.parts, np.split(ids, bounds)):
            p.bind_passages(part)
        self._passages = ids
        self._offsets = [np.int32(b) for b in np.concatenate([[0], bounds]).tolist()]
        self._kept, self._kept_postings = {}, 0

    def scores(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """(node ids ascending, BM25 scores) of every passage sharing a term with ``query``, all segments."""
        return self.term_scores(set(passage_terms(query)))

    def term_scores(self, terms: set[str] | frozenset[str]) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`scores` of already tokenised ``terms``, all segments."""
        if not terms:
            return np.zeros(0, np.int64), np.zeros(0)
        postings = self.query_postings(terms)
        if postings is None:
            got = [p.term_scores(terms) for p in self.parts]
            return np.concatenate([g[0] for g in got]), np.concatenate([g[1] for g in got])
        ords, sums = postings.scores()
        return postings.ids(ords), sums

    def query_postings(self, terms) -> QueryPostings | None:
        """The postings of ``terms`` over all segments, read once per query; None when the passages are not bound
        or a posting names no bound passage."""
        key = tuple(sorted(terms))
        lists = self._lists(list(key))
        return None if lists is None else QueryPostings(key, np.arange(len(key)), lists, self._passages)

    def term_impacts(self, terms: list[str], ids: np.ndarray) -> np.ndarray:
        """Per-term BM25 impacts on ``ids`` (float64 (len(terms), len(ids))), each id read from the segment whose
        id range holds it: from the terms' postings over all segments (a binary search per term and id), else
        segment by segment."""
        ids = np.asarray(ids, dtype=np.int64)
        if not terms or not ids.size:
            return np.zeros((len(terms), ids.shape[0]))
        postings = self.query_postings(terms)
        got = postings.impacts(terms, ids) if postings is not None else None
        return got if got is not None else self._term_impacts_by_part(terms, ids)

    def _term_impacts_by_part(self, terms: list[str], ids: np.ndarray) -> np.ndarray:
        """:meth:`term_impacts` segment by segment (unbound passages, or ids that are none)."""
        out = np.zeros((len(terms), ids.shape[0]))
        seg = np.searchsorted(self._starts, ids, side="right") - 1
        for i, part in enumerate(self.parts):
            mine = np.flatnonzero(seg == i)
            if mine.size:
                out[:, mine] = part.term_impacts(terms, ids[mine])
        return out

    def _lists(self, terms: list[str]) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """Each term's postings over all segments (global ordinals int32, impacts; segment after segment, each
        segment's ``max_postings`` best), kept ones as kept; None when a posting names no bound passage."""
        if self._passages is None:
            return None
        hashes = self.parts[0]._term_hashes(terms)
        kept = self._kept
        out = [kept.get(h) for h in hashes.tolist()]
        missing = [i for i, got in enumerate(out) if got is None]
        if missing:
            read = self._read(hashes[missing])
            if read is None:
                return None
            if self._kept_postings > TERM_CACHE_POSTINGS:
                self._kept, self._kept_postings, kept = {}, 0, {}
            for i, got in zip(missing, read):
                out[i] = kept[int(hashes[i])] = got
                self._kept_postings += max(got[0].shape[0], 1)
        return out

    def _read(self, hashes: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """:meth:`_lists` of terms not kept: each segment's postings of them in one gather (a binary search of its
        terms for all of them first), then reordered term after term."""
        got = [self._read_part(k, hashes) for k in range(len(self.parts))]
        if any(g is None for g in got):
            return None
        got = [g for g in got if g[0].size]
        if not got:
            empty = np.zeros(0, np.int32), np.zeros(0, np.float32)
            return [empty] * hashes.shape[0]
        term = np.concatenate([g[0] for g in got])  # the entries (term, segment) in the order they were read
        lens = np.concatenate([g[1] for g in got])
        starts = np.cumsum(lens) - lens  # where each entry's postings start in the read
        order = np.argsort(term, kind="stable")  # term after term, each term's segments in order
        lens = lens[order]
        take = np.repeat(starts[order] - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))
        ords = np.concatenate([g[2] for g in got])[take]
        weights = np.concatenate([g[3] for g in got])[take]
        ends = np.cumsum(np.bincount(term[order], weights=lens, minlength=hashes.shape[0]).astype(np.int64)).tolist()
        out = []
        for a, b in zip([0] + ends[:-1], ends):  # each term's postings sorted by ordinal (kept so)
            order = np.argsort(ords[a:b], kind="stable")
            run = ords[a:b][order], weights[a:b][order]
            for x in run:
                x.flags.writeable = False
            out.append(run)
        return out

    def _read_part(self, k: int, hashes: np.ndarray) -> tuple[np.ndarray, ...] | None:
        """Segment ``k``'s postings of the terms ``hashes``: (the terms it holds, their postings read, their global
        ordinals, impacts); None when a posting names no bound passage."""
        p = self.parts[k]
        if not p._hash.shape[0]:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32)
        pos = np.minimum(np.searchsorted(p._hash, hashes), p._hash.shape[0] - 1)
        found = np.flatnonzero(p._hash[pos] == hashes)
        starts = np.asarray(p._ptr[pos[found]], dtype=np.int64)
        lens = np.minimum(np.asarray(p._ptr[pos[found] + 1], dtype=np.int64) - starts, p.max_postings)
        ords, weights = p._gather(starts, lens)
        if ords is None:
            return None
        return found, lens, ords + self._offsets[k] if self._offsets[k] else ords, weights

    def search(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        return top_scored(*self.scores(query), k)


def merged_names(parts: Sequence) -> _NameMatching:
    """One in-memory matcher over the names of several segments' :class:`MappedNames` (their canonical forms:
    canonicalising is idempotent, so it matches as they do)."""
    import pyarrow as pa

    from .entities import EntityMatcher

    ids, names = [], []
    for p in parts:
        off = np.asarray(p._name_canon_off, dtype=np.int64)
        blob = pa.LargeStringArray.from_buffers(off.shape[0] - 1, pa.py_buffer(off),
                                                pa.py_buffer(np.asarray(p._name_canon, dtype=np.uint8)))
        ids.append(np.asarray(p._name_node, dtype=np.int64))
        names.extend(blob.to_pylist())
    return EntityMatcher(np.concatenate(ids) if ids else np.zeros(0, np.int64), names)


def merged_lexical(parts: Sequence):
    """One in-memory BM25 index over the postings of several segments (impacts kept; per term by impact, then id)."""
    from .lexical import LexicalIndex

    h = np.concatenate([np.repeat(np.asarray(p._hash), np.diff(np.asarray(p._ptr))) for p in parts])
    node = np.concatenate([np.asarray(p._node) for p in parts])
    w = np.concatenate([np.asarray(p._weight) for p in parts])
    order = np.lexsort((node, -w, h))
    h, node, w = h[order], node[order], w[order]
    terms, starts = np.unique(h, return_index=True)
    ptr = np.append(starts, h.shape[0]).astype(np.int64)
    return LexicalIndex({"lex_term_hash": terms, "lex_post_ptr": ptr, "lex_post_node": np.ascontiguousarray(node),
                         "lex_post_weight": np.ascontiguousarray(w)}, max_postings=parts[0].max_postings)


class SegmentedTables:
    """The query tables of every segment of a generation, answering as one :class:`QueryIndex` does.

    The deltas of inserts (small, possibly many) have their names and postings merged into one part at open;
    the segments of a segment-parallel build (an alias table; few, each large) stay apart, as merging them would
    cost O(their names) Python objects at every open (:attr:`MERGE_PARTS` forces it): their names are found
    through hash directories over all of them, their postings read once a term and kept.
    """

    MERGE_PARTS: bool | None = None  # None: merge the deltas of inserts, not a segmented build's segments

    def __init__(self, parts: Sequence, aliases=None) -> None:
        self.parts = list(parts)
        self._starts = np.asarray([p.first for p in self.parts], dtype=np.int64)
        self._first = self._starts.tolist()
        end = 0
        for p in self.parts:
            if p.first != end:
                raise ValueError(f"{p.folder}: its nodes start at {p.first}, the segments before end at {end}")
            end += p.n
        self.n = end
        self.first = 0
        self.chunk = np.concatenate([np.asarray(p.chunk) for p in self.parts])
        self.doc = np.concatenate([np.asarray(p.doc) for p in self.parts])
        self.active = np.concatenate([np.asarray(p.active) for p in self.parts])
        if aliases is not None and len(aliases):  # a duplicate stands aside for its canonical node, unless
            aliases = aliases.where(self.active[aliases.canon])  # a delete in place made that one inactive
            self.active[aliases.dup] = False
        lines = [getattr(p, "line_tokens", None) for p in self.parts]
        self.line_tokens = None if any(x is None for x in lines) else np.concatenate([np.asarray(x) for x in lines])
        # the deltas' names and postings are merged once into one in-memory part (O(their size)): a query
        # then looks up two parts, however many deltas there are
        merge = len(self.parts) > 2 and (aliases is None if self.MERGE_PARTS is None else self.MERGE_PARTS)
        names = [p.names for p in self.parts]
        self.names = SegmentedNames(names[:1] + [merged_names(names[1:])] if merge else names, aliases)
        lex = [p.lexical for p in self.parts]
        if all(x is not None for x in lex):
            merged = lex[:1] + [merged_lexical(lex[1:])] if merge else lex
            self.lexical = SegmentedLexical(merged, self._starts[:len(merged)])
        else:
            self.lexical = None

    def _part_of(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._starts, ids, side="right") - 1

    def _by_part(self, ids: np.ndarray, read) -> list:
        """``read(part, its ids)`` (a list per id) of each segment's share of ``ids``, put back in the order of ``ids``:
        one call per segment holding some, none per id."""
        which = self._part_of(ids)
        if not which.size or bool((which == which[0]).all()):
            return read(self.parts[int(which[0])], ids) if which.size else []
        order = np.argsort(which, kind="stable")
        ranked = which[order]
        cuts = (np.flatnonzero(ranked[1:] != ranked[:-1]) + 1).tolist()
        got: list = []
        for a, b in zip([0] + cuts, cuts + [ids.shape[0]]):
            got.extend(read(self.parts[int(ranked[a])], ids[order[a:b]]))
        values = np.empty(len(got), dtype=object)
        values[:] = got  # element by element: no numpy string array (it would drop trailing NULs)
        out = np.empty(ids.shape[0], dtype=object)
        out[order] = values
        return out.tolist()

    def texts(self, ids) -> list[str]:
        """Display texts of some nodes, each read from its own segment."""
        ids = np.asarray(ids if isinstance(ids, np.ndarray) else list(ids), dtype=np.int64).reshape(-1)
        return self._by_part(ids, lambda part, mine: part.texts(mine))

    def label(self, node: int) -> str | None:
        if not 0 <= node < self.n:
            return None
        return self.parts[bisect_right(self._first, node) - 1].label(node)

    def labels(self, nodes) -> list[str | None]:
        """:meth:`label` of many nodes, each segment's asked once for its own."""
        nodes = np.asarray(nodes if isinstance(nodes, np.ndarray) else list(nodes), dtype=np.int64).reshape(-1)
        inside = (nodes >= 0) & (nodes < self.n)
        if bool(inside.all()):
            return self._by_part(nodes, lambda part, mine: part.labels(mine))
        out: list[str | None] = [None] * nodes.shape[0]
        at = np.flatnonzero(inside)
        for i, label in zip(at.tolist(), self._by_part(nodes[at], lambda part, mine: part.labels(mine))):
            out[i] = label
        return out

    @cached_property
    def _doc_firsts(self) -> list[int] | None:
        """The first document id of each segment's labels when the segments' document ids are ascending, disjoint
        ranges (a segmented build's are): a document's label is then looked up in one segment only."""
        firsts, last = [], -1
        for p in self.parts:
            ids = p._a["doclabel_id"]
            if not ids.shape[0]:
                firsts.append(last + 1)  # an empty segment holds no range; bisect never picks it over the next
                continue
            if int(ids[0]) <= last:
                return None
            firsts.append(int(ids[0]))
            last = int(ids[-1])
        return firsts

    def doc_label(self, doc: int) -> str:
        firsts = self._doc_firsts
        parts = self.parts if firsts is None else self.parts[max(bisect_right(firsts, doc) - 1, 0):][:1]
        for p in parts:
            ids = p._a["doclabel_id"]
            pos = int(np.searchsorted(ids, doc))
            if pos < ids.shape[0] and int(ids[pos]) == doc:
                return p._text("doclabel", pos)
        return f"doc:{doc}"


def open_segment_tables(store):
    """The query tables of an opened store: its generation's ``query/`` (memory-mapped), or one table over every
    segment when it has deltas (with the alias table of a segmented build); None for an index without them."""
    from ..store.aliases import read_aliases
    from .query_index import open_query_index

    if not getattr(store, "deltas", None):
        return open_query_index(store.path)
    parts = [open_query_index(f) for f in store.segment_folders]
    if not all(p is not None for p in parts):
        return None
    return SegmentedTables(parts, read_aliases(store.path, sum(p.n for p in parts)))
