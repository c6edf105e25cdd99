"""The lexical entry point: Okapi BM25 over source passages, as impact-ordered postings.

Dense similarity misses what a question shares with a passage word for word (rare names, numbers,
Chinese terms the embedder does not know); BM25 finds it. Every passage (T node) is indexed with
its document title; terms are language-aware (:func:`noderag.lang.zh.lexical_tokens`: words for
text without Han characters, the segmenter's words for Chinese). A term's BM25 impact on a passage,
``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``, is computed at build time, so a
query only sums the impacts of its terms' postings.

Arrays (``query/lex_*.npy``, memory-mapped at open):

    lex_term_hash    uint64 (V,)    sorted 64-bit term hashes (:func:`noderag.search.entities.hash64`)
    lex_post_ptr     int64 (V + 1,) CSR pointers into the postings
    lex_post_node    int32 (P,)     passage node ids, per term by impact descending (ties by id)
    lex_post_weight  float32 (P,)   BM25 impacts

Postings are impact-ordered so that a query reads at most ``max_postings`` of each term: the
passages a very common word adds beyond those gain at most that many times the smallest impact
read, which for such a word (low idf) is close to nothing; a query's cost is bounded by its number
of terms, not by the corpus. A term is known by its hash alone: two terms of one corpus share a
64-bit hash with probability ~V^2 / 2^65 (1e-8 at a million terms).
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

import numpy as np
import scipy.sparse as sp

from .._core import sum_postings as _sum_postings
from .._core import run_impacts as _run_impacts
from .._core import sum_runs as _sum_runs
from ..lang.zh import lexical_tokens
from .entities import hash64

__all__ = ["LEX_ARRAYS", "LexicalIndex", "lexical_arrays", "passage_terms", "sum_postings", "titled", "top_scored"]

LEX_ARRAYS = ("lex_term_hash", "lex_post_ptr", "lex_post_node", "lex_post_weight")
#: Chinese text is cut into the segmenter's words (search mode: words and their dictionary sub-words).
CJK_MODE = "segment"


def passage_terms(text: str) -> list[str]:
    """BM25 terms of a passage or a query (the same rules on both sides)."""
    return lexical_tokens(text, CJK_MODE)


def titled(text: str | None, title: str | None) -> str:
    """A passage as BM25 indexes it: its document title, then its text."""
    return f"{title}\n{text or ''}" if title else (text or "")


def _term_counts(texts: Iterable[str], block: int) -> tuple[dict[str, int], np.ndarray, np.ndarray, np.ndarray, int]:
    """(term -> column, row of each (passage, term) pair, its column, its count as float64, passages), the
    pairs gathered ``block`` passages at a time."""
    vocab: dict[str, int] = {}
    parts_r: list[np.ndarray] = []
    parts_c: list[np.ndarray] = []
    parts_tf: list[np.ndarray] = []
    rows: list[int] = []
    cols: list[int] = []
    tfs: list[int] = []
    n_docs = 0

    def flush() -> None:
        parts_r.append(np.asarray(rows, np.int32))
        parts_c.append(np.asarray(cols, np.int32))
        parts_tf.append(np.asarray(tfs, np.float32))
        rows.clear()
        cols.clear()
        tfs.clear()

    for text in texts:
        for term, count in Counter(passage_terms(text or "")).items():
            rows.append(n_docs)
            cols.append(vocab.setdefault(term, len(vocab)))
            tfs.append(count)
        n_docs += 1
        if n_docs % block == 0:
            flush()
    flush()
    return (vocab, np.concatenate(parts_r), np.concatenate(parts_c), np.concatenate(parts_tf).astype(np.float64),
            n_docs)


def lexical_arrays(node_ids: np.ndarray, texts: Iterable[str], *, k1: float = 1.2, b: float = 0.75,
                   block: int = 65536, background=None) -> dict[str, np.ndarray]:
    """BM25 impact postings of the passages ``node_ids`` (their texts, title included, in ``texts``).

    ``background``: (passages elsewhere, ``term hashes -> their document frequencies there``): the
    idf counts those passages too (a delta segment's impacts on the scale of the whole index).
    Deterministic: the same texts give the same arrays in any process. Memory stays near one copy
    of the postings (term counts are gathered ``block`` passages at a time).
    """
    node_ids = np.asarray(node_ids, dtype=np.int64)
    vocab, r, c, tf, n_docs = _term_counts(texts, block)
    if n_docs != node_ids.shape[0]:
        raise ValueError(f"{n_docs} texts for {node_ids.shape[0]} passage ids")
    n_terms = len(vocab)
    dl = np.bincount(r, weights=tf, minlength=n_docs)
    avgdl = float(dl.mean()) if n_docs else 1.0
    df = np.bincount(c, minlength=n_terms).astype(np.float64)
    term_hash = np.fromiter((hash64(t) for t in vocab), dtype=np.uint64, count=n_terms)
    del vocab
    n_all = n_docs
    if background is not None:
        n_other, df_of = background
        n_all += int(n_other)
        df += np.asarray(df_of(term_hash), dtype=np.float64)
    idf = np.log1p((n_all - df + 0.5) / (df + 0.5))
    impact = (idf[c] * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl[r] / max(avgdl, 1e-9)))).astype(np.float32)
    del tf, dl
    # term-major, terms in hash order, postings by impact descending then node id
    rank_of_term = np.empty(n_terms, np.int64)
    by_hash = np.argsort(term_hash, kind="stable")
    rank_of_term[by_hash] = np.arange(n_terms)
    node = node_ids[r].astype(np.int32)
    order = np.lexsort((node, -impact, rank_of_term[c]))
    counts = np.bincount(rank_of_term[c], minlength=n_terms)
    ptr = np.zeros(n_terms + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    return {"lex_term_hash": term_hash[by_hash], "lex_post_ptr": ptr,
            "lex_post_node": np.ascontiguousarray(node[order]),
            "lex_post_weight": np.ascontiguousarray(impact[order])}


#: Posting lists at least this long keep their passage ordinals, sorted, after a query
#: (:meth:`LexicalIndex._term_ordinals`).
TERM_CACHE_FROM = 1024
#: At most this many postings are kept so (a 4-byte ordinal and a 4-byte impact each: 32 MB); past it the kept
#: lists are dropped and kept anew.
TERM_CACHE_POSTINGS = 1 << 22
#: Query terms whose hashes a lexical index keeps (a query's terms are hashed once for all its look-ups).
HASH_CACHE = 1 << 16


class LexicalIndex:
    """BM25 search over the postings of :func:`lexical_arrays` (memory-mapped or in memory).

    Parameters
    ----------
    arrays : dict of ndarray
        The four ``lex_*`` arrays.
    max_postings : int, default=4096
        Postings read per query term (its highest impacts).
    """

    def __init__(self, arrays: dict[str, np.ndarray], max_postings: int = 4096) -> None:
        self._hash = arrays["lex_term_hash"]
        self._ptr = arrays["lex_post_ptr"]
        self._node = arrays["lex_post_node"]
        self._weight = arrays["lex_post_weight"]
        self.max_postings = int(max_postings)
        self._passages: np.ndarray | None = None  # sorted ids of every passage a posting may name
        self._ordinal = np.zeros(0, np.int32)  # node id -> its rank in _passages (written at the passages only)
        self._term_cache: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}  # (start, end) -> ordinals, impacts
        self._term_cached = 0  # postings held by _term_cache
        self._hashes: dict[str, int] = {}  # query term -> its hash (a term recurs across a query's look-ups)

    def _term_hashes(self, terms) -> np.ndarray:
        """:func:`~noderag.search.entities.hash64` of each term, memoised (at most :data:`HASH_CACHE` terms)."""
        memo = self._hashes
        if len(memo) > HASH_CACHE:
            memo = self._hashes = {}
        out = np.empty(len(terms), dtype=np.uint64)
        for i, t in enumerate(terms):
            h = memo.get(t)
            if h is None:
                h = memo[t] = hash64(t)
            out[i] = h
        return out

    def bind_passages(self, ids: np.ndarray) -> None:
        """Give the node ids that postings name (every T node): queries then read their postings as runs of
        passage ordinals (:meth:`query_postings`) instead of sorting the postings (``np.unique``).

        Costs an int32 map over node ids up to the largest passage id (4 bytes a node; only the passages' entries
        are written, so making it is one scatter, not a fill of every node's: 0.12 s at 10^6 passages; an entry
        elsewhere is checked against the passage it would name, :func:`passage_ordinals`).
        """
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if ids.size > 1 and not bool(np.all(ids[1:] > ids[:-1])):  # already sorted and unique: no O(n log n) pass
            ids = np.unique(ids)
        ordinal = np.empty(int(ids[-1]) + 1 if ids.size else 0, np.int32)
        ordinal[ids] = np.arange(ids.size, dtype=np.int32)
        self._passages, self._ordinal = ids, ordinal
        self._term_cache, self._term_cached = {}, 0

    @classmethod
    def from_texts(cls, node_ids: np.ndarray, texts: Iterable[str], **kw) -> "LexicalIndex":
        """Built in memory (an index written before the lexical tables: O(corpus) at open)."""
        return cls(lexical_arrays(node_ids, texts))

    @property
    def n_terms(self) -> int:
        return int(self._hash.shape[0])

    def document_frequencies(self, hashes: np.ndarray) -> np.ndarray:
        """Passages holding each term (by hash; 0 for a term this index lacks): its posting count."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        pos = np.minimum(np.searchsorted(self._hash, hashes), max(self._hash.shape[0] - 1, 0))
        out = np.zeros(hashes.shape[0], np.int64)
        if self._hash.shape[0]:
            hit = self._hash[pos] == hashes
            out[hit] = self._ptr[pos[hit] + 1] - self._ptr[pos[hit]]
        return out

    def scores(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """BM25 score of every passage that shares a term with ``query``: (node ids sorted, int64; scores, float64).

        A query term counts once (as in the benchmark's BM25 baseline).
        """
        return self.term_scores(set(passage_terms(query)))

    def term_scores(self, terms: set[str] | frozenset[str]) -> tuple[np.ndarray, np.ndarray]:
        """BM25 score of every passage that shares one of ``terms`` (already :func:`passage_terms`):
        (node ids sorted, int64; scores, float64)."""
        if not terms or self._hash.shape[0] == 0:
            return np.zeros(0, np.int64), np.zeros(0)
        postings = self.query_postings(terms)
        if postings is not None:
            ords, sums = postings.scores()
            return postings.ids(ords), sums
        hashes = self._term_hashes(sorted(terms))
        pos = np.searchsorted(self._hash, hashes)
        inside = pos < self._hash.shape[0]
        pos, hashes = pos[inside], hashes[inside]
        pos = pos[self._hash[pos] == hashes]
        if not pos.size:
            return np.zeros(0, np.int64), np.zeros(0)
        starts = self._ptr[pos]
        ends = np.minimum(self._ptr[pos + 1], starts + self.max_postings)
        nodes = np.concatenate([self._node[s:e] for s, e in zip(starts.tolist(), ends.tolist())])
        weights = np.concatenate([self._weight[s:e] for s, e in zip(starts.tolist(), ends.tolist())])
        uniq, inv = np.unique(nodes, return_inverse=True)
        return uniq.astype(np.int64), np.bincount(inv, weights=weights.astype(np.float64), minlength=uniq.shape[0])

    def query_postings(self, terms) -> "QueryPostings | None":
        """The postings of ``terms`` (bound passages), read once per query: each found term's passage ordinals
        ascending with their impacts, one run after another; a query sums them (:meth:`QueryPostings.scores`) and
        reads them for its candidates (:meth:`QueryPostings.impacts`). None when the passages are not bound or a
        posting names a node outside them (the callers fall back)."""
        if self._passages is None:
            return None
        key = tuple(sorted(terms))
        hashes = self._term_hashes(key)
        pos = np.minimum(np.searchsorted(self._hash, hashes), max(self._hash.shape[0] - 1, 0))
        found = np.flatnonzero(self._hash[pos] == hashes) if self._hash.shape[0] else np.zeros(0, np.int64)
        starts = self._ptr[pos[found]]
        ends = np.minimum(self._ptr[pos[found] + 1], starts + self.max_postings)
        runs = [self._term_ordinals(a, b) for a, b in zip(starts.tolist(), ends.tolist())]
        if any(run is None for run in runs):
            return None
        return QueryPostings(key, found, runs, self._passages, self._ordinal)

    def term_impacts(self, terms: list[str], ids: np.ndarray) -> np.ndarray:
        """BM25 impact of each of ``terms`` on each passage of ``ids`` (node ids): float64 (len(terms), len(ids)),
        0 where the passage lacks the term (or holds it past the term's ``max_postings`` read). Summed over the
        terms, a column is the passage's :meth:`term_scores` over ``terms``.

        With bound passages a term's postings are scattered into the thread's scratch accumulator and the
        ``ids`` gathered from it (the postings' ordinals are cached as for :meth:`term_scores`); otherwise each
        term's postings are looked up among the sorted ``ids``."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.zeros((len(terms), ids.shape[0]))
        if not terms or not ids.size or self._hash.shape[0] == 0:
            return out
        postings = self.query_postings(terms)
        got = postings.impacts(terms, ids) if postings is not None else None
        if got is not None:
            return got
        hashes = self._term_hashes(terms)
        pos = np.minimum(np.searchsorted(self._hash, hashes), self._hash.shape[0] - 1)
        found = np.flatnonzero(self._hash[pos] == hashes)
        starts = self._ptr[pos[found]]
        ends = np.minimum(self._ptr[pos[found] + 1], starts + self.max_postings)
        uniq, inverse = np.unique(ids, return_inverse=True)
        per_id = np.zeros((len(terms), uniq.shape[0]))
        for row, a, b in zip(found.tolist(), starts.tolist(), ends.tolist()):
            nodes = np.asarray(self._node[a:b], dtype=np.int64)
            at = np.minimum(np.searchsorted(uniq, nodes), uniq.size - 1)
            hit = uniq[at] == nodes
            per_id[row, at[hit]] = self._weight[a:b][hit]
        return per_id[:, inverse.ravel()]

    def _gather(self, starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """Passage ordinals and impacts of the postings ``starts[i]:starts[i] + lens[i]``, one list after another, in
        one gather (ordinals None when a posting names a node outside the bound passages): the read of an index
        over several of these (:class:`~noderag.search.segments.SegmentedLexical`)."""
        total = int(lens.sum())
        if not total:
            return np.zeros(0, np.int32), np.asarray(self._weight[:0])
        at = np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(total, dtype=np.int64)
        nodes = self._node[at]
        ords = self._ordinals_of(nodes)
        return (None, nodes) if ords is None else (ords, self._weight[at])

    def _ordinals_of(self, nodes: np.ndarray) -> np.ndarray | None:
        """The bound passage ordinal (int32) of each posting's node, or None when one names no bound passage."""
        ords = passage_ordinals(nodes, self._passages, self._ordinal)
        return None if int(ords.min(initial=0)) < 0 else ords.astype(np.int32)

    def _term_ordinals(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The passage ordinals of the postings ``start:end``, ascending, and their impacts; None when a posting
        names a node outside the bound passages (the caller falls back). Long lists (the common words most queries
        share) are kept, up to :data:`TERM_CACHE_POSTINGS` postings in all: their gather from the node-id map and
        their sort are most of a query's BM25 cost."""
        got = self._term_cache.get((start, end))
        if got is not None:
            return got
        ords = self._ordinals_of(np.asarray(self._node[start:end]))
        if ords is None:
            return None
        order = np.argsort(ords, kind="stable")
        out = ords[order], np.asarray(self._weight[start:end])[order]
        if ords.size >= TERM_CACHE_FROM:
            for a in out:
                a.flags.writeable = False
            if self._term_cached + ords.size > TERM_CACHE_POSTINGS:
                self._term_cache, self._term_cached = {}, 0
            self._term_cache[(start, end)] = out
            self._term_cached += ords.size
        return out

    def search(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best passages of ``query``: (node ids int64, BM25 scores float64), best first, ties by id."""
        return top_scored(*self.scores(query), k)


class QueryPostings:
    """One query's postings (:meth:`LexicalIndex.query_postings`): ``terms`` (sorted), the rows of those the index
    holds (``found``), and each found term's passage ordinals (ascending) and impacts, one run after another;
    ``passages`` are the bound passage ids (ascending: an id's ordinal is its position), ``ordinal_map`` node id ->
    ordinal where the index keeps one (its entries checked against ``passages``).

    Its scores are keyed by passage ordinal: reading back the node id of every touched passage (tens of
    thousands at 10^6 passages, scattered over megabytes) cost more than the sums; a query maps to ids only the
    few passages it keeps (:meth:`ids`) and its candidates to ordinals (:meth:`ordinals`)."""

    def __init__(self, terms: tuple[str, ...], found: np.ndarray, runs: list[tuple[np.ndarray, np.ndarray]],
                 passages: np.ndarray, ordinal_map: np.ndarray | None = None) -> None:
        self.terms, self.passages, self._map = terms, passages, ordinal_map
        self._terms = frozenset(terms)
        self._row = {terms[i]: j for j, i in enumerate(found.tolist())}  # term -> its run
        self.bounds = np.zeros(len(runs) + 1, np.int64)
        np.cumsum([o.shape[0] for o, _ in runs], out=self.bounds[1:])
        self.ords = np.concatenate([o for o, _ in runs]) if runs else np.zeros(0, np.int32)
        self.weights = np.concatenate([w for _, w in runs]) if runs else np.zeros(0, np.float32)

    def scores(self) -> tuple[np.ndarray, np.ndarray]:
        """BM25 of every passage holding a term: (their ordinals ascending, int64; float64 sums of the terms'
        impacts added term after term in sorted order). :meth:`ids` gives the node ids of ordinals."""
        return sum_runs(self.ords, self.weights, self.bounds, n_pass=self.passages.shape[0])

    def ids(self, ordinals: np.ndarray) -> np.ndarray:
        """The node ids of passage ordinals."""
        return self.passages[np.asarray(ordinals, dtype=np.int64)]

    def ordinals(self, ids: np.ndarray) -> np.ndarray:
        """The ordinal of each node id, -1 for one that is no bound passage."""
        return passage_ordinals(ids, self.passages, self._map)

    def holds(self, terms) -> bool:
        """Whether every one of ``terms`` is one of this query's."""
        return self._terms.issuperset(terms)

    def impacts(self, terms, ids: np.ndarray) -> np.ndarray | None:
        """Each of ``terms``' impact on each of ``ids`` (node ids): float64 (len(terms), len(ids)), 0 where absent;
        None when an id is not a bound passage or a term is not one of this query's."""
        if not self.holds(terms) or not self.passages.size:
            return None
        targets = self.ordinals(ids)
        if int(targets.min(initial=0)) < 0:
            return None
        out = np.zeros((len(terms), ids.shape[0]))
        rows = [(i, self._row[t]) for i, t in enumerate(terms) if t in self._row]
        if rows:
            at = np.asarray([j for _, j in rows], dtype=np.int64)
            got = _run_impacts(self.ords, self.weights, self.bounds[at], self.bounds[at + 1],
                               np.ascontiguousarray(targets, dtype=np.int32))
            out[[i for i, _ in rows]] = got
        return out


def passage_ordinals(ids: np.ndarray, passages: np.ndarray, ordinal_map: np.ndarray | None = None) -> np.ndarray:
    """The ordinal of each node id among the ascending ``passages`` (int64), -1 for one that is none of them: read
    from ``ordinal_map`` (node id -> ordinal, written at the passages only) where given, else a binary search; every
    entry is checked against the passage it names."""
    ids = np.asarray(ids, dtype=np.int64)
    out = np.full(ids.shape[0], -1, np.int64)
    n = passages.shape[0]
    if not ids.size or not n:
        return out
    if ordinal_map is not None:
        inside = (ids >= 0) & (ids < ordinal_map.shape[0])
        pos = np.zeros(ids.shape[0], np.int64)
        pos[inside] = ordinal_map[ids[inside]]
        pos = np.where((pos >= 0) & (pos < n), pos, 0)
    else:
        pos = np.minimum(np.searchsorted(passages, ids), n - 1)
    hit = passages[pos] == ids
    out[hit] = pos[hit]
    return out


def _check_arrays(caller: str, arrays, optional: tuple[str, ...] = ("ids",)) -> None:
    """TypeError naming the first of ``arrays`` ((name, array, "dtype or dtype"); those named in ``optional`` may be
    None) that is not a C-contiguous array of one of its dtypes: the kernels take mapped arrays as they are, never
    a converted copy."""
    for name, a, want in arrays:
        if a is None and name in optional:
            continue
        dtype = getattr(a, "dtype", None)
        if not isinstance(a, np.ndarray) or dtype.name not in want.split(" or ") or not a.flags.c_contiguous:
            got = f"{'a strided ' if dtype is not None and not a.flags.c_contiguous else ''}{dtype or type(a).__name__}"
            raise TypeError(f"{caller}: {name} must be a C-contiguous {want} array, got {got}")


def sum_postings(ords: np.ndarray, weights: np.ndarray, acc: np.ndarray, marks: np.ndarray,
                 ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``weights`` summed per passage ordinal ``ords`` in the zeroed scratch ``acc`` (one entry a passage) and
    ``marks`` (a bit a passage), both left zeroed: (touched ordinals ascending, or ``ids[touched]``; their sums),
    the float sums of ``np.add.at`` (postings added in the given order).

    The native kernel (:func:`noderag._core.sum_postings`) takes the arrays as they are (no copy of mapped
    impacts), so their dtypes are checked here; it checks the shapes and raises ``ValueError`` for an ordinal
    outside the scratch (a damaged posting list)."""
    _check_arrays("sum_postings", (("ords", ords, "int32"), ("weights", weights, "float32 or float64"),
                                   ("acc", acc, "float64"), ("marks", marks, "uint64"), ("ids", ids, "int64")))
    return _sum_postings(ords, weights, acc, marks, ids)


def sum_runs(ords: np.ndarray, weights: np.ndarray, bounds: np.ndarray, ids: np.ndarray | None = None, *,
             n_pass: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The impacts of runs of postings (``bounds``: run ``j`` is ``[bounds[j], bounds[j + 1])``, its ``ords``
    ascending) summed per passage ordinal: (``ids[touched]`` ascending, or the touched ordinals of ``n_pass``
    passages without ``ids``; their sums), the float sums of :func:`sum_postings` over the same postings in the
    same order. The native kernel (:func:`noderag._core.sum_runs`) sweeps the runs together a block of passages
    at a time in a small accumulator that stays in cache: no scratch entry a passage to scatter into (megabytes,
    cold between a query's BM25 look-ups on a large index). Dtypes are checked here; the kernel raises
    ``ValueError`` for an ordinal outside the passages or a run out of order."""
    _check_arrays("sum_runs", (("ords", ords, "int32"), ("weights", weights, "float32 or float64"),
                               ("bounds", bounds, "int64"), ("ids", ids, "int64")))
    if ids is None:
        if n_pass is None:
            raise TypeError("sum_runs: give ids or n_pass")
        return _sum_runs(ords, weights, bounds, int(n_pass), None)
    return _sum_runs(ords, weights, bounds, ids.shape[0], ids)


def top_scored(ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` highest ``scores`` with their ``ids``, best first, ties by lower id (those tied with the ``k``-th
    score too: which of them make the list does not depend on how a selection algorithm orders its input)."""
    k = min(int(k), ids.shape[0])
    if k <= 0:
        return np.zeros(0, np.int64), np.zeros(0)
    if k < ids.shape[0]:
        ids, scores = _at_least_kth(ids, scores, k)
        kth = np.partition(scores, scores.shape[0] - k)[scores.shape[0] - k]
        above, tied = np.flatnonzero(scores > kth), np.flatnonzero(scores == kth)
        top = np.concatenate([above, tied[np.argsort(ids[tied], kind="stable")[:k - above.size]]])
    else:
        top = np.arange(ids.shape[0])
    top = top[np.lexsort((ids[top], -scores[top]))]
    return ids[top], scores[top]


def _at_least_kth(ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The entries whose score is at least the ``k``-th largest (ties included), found without selecting over all
    of them: the ``k``-th largest of every 16th score is no higher than the ``k``-th largest of all, and a
    comparison with it keeps a few times ``k`` entries of a query's tens of thousands."""
    n = scores.shape[0]
    if n < 64 * k:
        return ids, scores
    sample = scores[::16]
    floor = np.partition(sample, sample.shape[0] - k)[sample.shape[0] - k]
    keep = np.flatnonzero(scores >= floor)
    return ids[keep], scores[keep]


def csr_of(arrays: dict[str, np.ndarray], n_nodes: int) -> sp.csr_array:
    """The postings as a (terms x nodes) sparse matrix, for tests and exports."""
    return sp.csr_array((arrays["lex_post_weight"], arrays["lex_post_node"], arrays["lex_post_ptr"]),
                        shape=(arrays["lex_term_hash"].shape[0], n_nodes))
