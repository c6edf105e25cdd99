"""Query entities and their matches among entity names (N) and overview titles (O).

Matching never scans the name list per query:

* exact canonical match through a dict ``canonical name -> node ids``;
* whole-word containment ("Obama" -> "Barack Obama") through an inverted index
  ``name token -> sorted name ids``: the posting lists of the entity's tokens are
  intersected (numpy, rarest first) and only those candidates are checked for the
  contiguous phrase;
* names occurring in the query text as whole-word phrases, through dict look-ups
  of the query's word n-grams (n up to the longest indexed name).

``EntityMatcher`` builds these in memory (O(names) of Python work); ``noderag build`` also
writes them as sorted hash arrays and CSR posting lists (:func:`name_index_arrays`), which
:class:`MappedNames` memory-maps so that opening an index costs nothing per name.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from ..graph.arrays import distinct, intersect_sorted
from ..lang.sentences import sentence_spans  # a pure helper: the decomposer's sentence split
from ..lang.entities import STOP, canonical_name, query_entities
from ..lang.zh import has_han, is_han_token, match_tokens, query_mentions

__all__ = ["EntityMatcher", "MappedNames", "NameMatch", "extract_query_entities", "hash64", "name_arrays", "name_index_arrays",
           "name_tokens"]


#: Longest name (in words) looked up as a phrase of the query text; longer names match through
#: the extracted query entities (exact / containment).
MAX_PHRASE_WORDS = 8
#: Query tokens whose ids (and query keys whose hashes) a mapped matcher keeps before the memo starts over.
_TOKEN_MEMO = 1 << 16
#: Names whose phrase containment is checked in one array pass (:meth:`MappedNames._with_phrase`): a match limit
#: is most often met in the first block, so a common token's long posting list is not read to its end.
_PHRASE_BLOCK = 256


def name_tokens(text: str) -> tuple[str, ...]:
    """Whole-word tokens of a name in canonical form (NFKC, case-folded)."""
    return tuple(match_tokens(canonical_name(text)))  # CJK: one token per Han character (noderag.lang.zh)


@dataclass(frozen=True)
class NameMatch:
    """One matched N or O node: its id, the query phrase it came from, and how it matched."""

    node_id: int
    phrase: str
    kind: str  # "exact" | "contains" | "in_query"


class _NameMatching:
    """Matching rules shared by the in-memory :class:`EntityMatcher` and the memory-mapped :class:`MappedNames`.

    Subclasses provide the look-ups over names ``j`` (sorted by token count, canonical name, node id).
    """

    max_tokens: int = 0

    def __len__(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def _node_id(self, j: int) -> int:
        raise NotImplementedError

    def _exact_js(self, canon: str) -> list[int] | None:
        """Names whose canonical form is ``canon`` (None: no such key)."""
        raise NotImplementedError

    def _phrase_js(self, phrase: str) -> list[int]:
        """Names whose whole-word tokens joined by one space are ``phrase``."""
        raise NotImplementedError

    def _phrase_js_many(self, phrases: list[str]) -> list[list[int]]:
        return [self._phrase_js(p) for p in phrases]

    def _posting(self, tok: str) -> np.ndarray | None:
        """Sorted names containing the token ``tok`` (None: no name has it)."""
        raise NotImplementedError

    def _query_seq(self, toks: tuple[str, ...]) -> tuple:
        """The query tokens in the form :meth:`_name_seq` compares with (all known tokens)."""
        raise NotImplementedError

    def _name_seq(self, j: int) -> tuple:
        raise NotImplementedError

    def _may_occur(self, words: list[str]) -> list[bool]:
        """Per canonical query word: False only when no name phrase can contain it as a piece."""
        return [True] * len(words)

    def exact(self, entity: str) -> list[int]:
        """Node ids whose canonical name equals the entity's (or its whole-word form)."""
        hits = self._exact_js(canonical_name(entity))
        if hits is None:
            hits = self._phrase_js(" ".join(name_tokens(entity)))
        return [self._node_id(j) for j in hits]

    def containing(self, entity: str, limit: int) -> list[int]:
        """Node ids whose name contains the entity as a whole-word phrase, shortest names first."""
        toks = name_tokens(entity)
        if not toks or limit <= 0:
            return []
        lists = []
        for tok in set(toks):
            posting = self._posting(tok)
            if posting is None:
                return []
            lists.append(posting)
        lists.sort(key=len)
        cand = lists[0]
        for other in lists[1:]:
            cand = intersect_sorted(cand, other)
            if cand.size == 0:
                return []
        return self._with_phrase(cand, toks, limit)

    def _with_phrase(self, cand: np.ndarray, toks: tuple[str, ...], limit: int) -> list[int]:
        """Node ids of the first ``limit`` names of ``cand`` (names holding every token of ``toks``) that hold
        ``toks`` as a contiguous phrase."""
        out: list[int] = []
        n = len(toks)
        seq = self._query_seq(toks)
        for j in cand.tolist():
            name = self._name_seq(j)
            if any(name[s:s + n] == seq for s in range(len(name) - n + 1)):
                out.append(self._node_id(j))
                if len(out) >= limit:
                    break
        return out

    def in_text(self, text: str) -> list[tuple[int, str]]:
        """(node id, phrase) for every name found as a whole-word phrase in ``text``.

        A span qualifies when one of its words outside :data:`noderag.lang.entities.STOP` is capitalised
        (or starts with a digit, or is a Han character) in the original text, or when all of its two or
        more words are. Spans inside a longer matched span are dropped.
        """
        surface = match_tokens(text)  # CJK: one token per Han character, so names inside unspaced text match
        toks = [canonical_name(w) for w in surface]
        spans: list[tuple[int, int, list[int]]] = []
        n_max = min(self.max_tokens, len(toks), MAX_PHRASE_WORDS)
        possible = self._may_occur(toks)
        caps = [w[:1].isupper() or w[:1].isdigit() or is_han_token(w) for w in surface]
        # prefix counts, so that each span's tests below cost O(1): impossible words, capitalised
        # words, capitalised words outside STOP
        no_c, cap_c, name_c = [0], [0], [0]
        for ok, c, t in zip(possible, caps, toks):
            no_c.append(no_c[-1] + (not ok))
            cap_c.append(cap_c[-1] + c)
            name_c.append(name_c[-1] + (c and t not in STOP))
        todo: list[tuple[int, int]] = []
        for n in range(n_max, 0, -1):
            for s in range(len(toks) - n + 1):
                e = s + n
                if no_c[e] != no_c[s]:
                    continue
                if name_c[e] == name_c[s] and not (n > 1 and cap_c[e] - cap_c[s] == n):
                    continue  # the decomposer's rule: a lone stop word is no name, "March March" is
                todo.append((s, n))
        found = self._phrase_js_many([" ".join(toks[s:s + n]) for s, n in todo])
        for (s, n), hits in zip(todo, found):  # longest spans first, as listed
            if not hits:
                continue
            if any(a <= s and s + n <= b for a, b, _ in spans):
                continue
            spans.append((s, s + n, hits))
        spans.sort()
        out: list[tuple[int, str]] = []
        for s, e, hits in spans:
            phrase = " ".join(toks[s:e])
            out.extend((self._node_id(j), phrase) for j in hits)
        return out

    def match(self, entities: Iterable[str], query: str | None = None, *, limit: int = 8) -> list[NameMatch]:
        """Exact, then whole-word containment matches per entity, then names in the query text.

        Each node appears once (its first match wins); at most ``limit`` nodes per entity.
        """
        seen: set[int] = set()
        out: list[NameMatch] = []
        for ent in entities:
            got = 0
            for nid in self.exact(ent):
                if nid not in seen and got < limit:
                    seen.add(nid)
                    out.append(NameMatch(nid, ent, "exact"))
                    got += 1
            if got < limit:
                for nid in self.containing(ent, limit + len(seen)):
                    if nid not in seen and got < limit:
                        seen.add(nid)
                        out.append(NameMatch(nid, ent, "contains"))
                        got += 1
        if query is not None:
            for nid, phrase in self.in_text(query):
                if nid not in seen:
                    seen.add(nid)
                    out.append(NameMatch(nid, phrase, "in_query"))
        return out


class EntityMatcher(_NameMatching):
    """Hash-map and inverted-index matcher over the names of N and O nodes, built in memory (O(names)).

    An index written by ``noderag build`` carries the same structures as arrays
    (:func:`name_index_arrays`, opened as :class:`MappedNames`); this class serves
    indexes without them and is the reference the mapped form is tested against.

    Parameters
    ----------
    node_ids : sequence of int
        Node ids of the named nodes (entities and overviews).
    names : sequence of str
        Their display names / titles, aligned with ``node_ids``.
    """

    def __init__(self, node_ids: Sequence[int], names: Sequence[str]) -> None:
        node_ids = np.asarray(node_ids, dtype=np.int64).ravel()
        if node_ids.shape[0] != len(names):
            raise ValueError(f"node_ids ({node_ids.shape[0]}) and names ({len(names)}) differ in length")
        canon = [canonical_name(str(s)) if s is not None else "" for s in names]
        toks = [tuple(match_tokens(c)) for c in canon]  # = name_tokens(name), canonicalised once
        keep = [i for i, t in enumerate(toks) if t]
        # Name ids sorted by (token count, canonical name, node id): sorted posting lists
        # then list shorter (more specific) names first, deterministically.
        keep.sort(key=lambda i: (len(toks[i]), canon[i], int(node_ids[i])))
        self._node = node_ids[keep] if keep else np.zeros(0, np.int64)
        self._tokens: list[tuple[str, ...]] = [toks[i] for i in keep]
        self._canon: list[str] = [canon[i] for i in keep]
        self._exact: dict[str, list[int]] = {}
        self._phrase: dict[str, list[int]] = {}
        postings: dict[str, list[int]] = {}
        for j, i in enumerate(keep):
            self._exact.setdefault(canon[i], []).append(j)
            self._phrase.setdefault(" ".join(toks[i]), []).append(j)
            for tok in set(toks[i]):
                postings.setdefault(tok, []).append(j)
        self._postings = {tok: np.asarray(js, dtype=np.int64) for tok, js in postings.items()}
        self.max_tokens = max((len(t) for t in self._tokens), default=0)

    def __len__(self) -> int:
        return int(self._node.shape[0])

    def _node_id(self, j: int) -> int:
        return int(self._node[j])

    def _exact_js(self, canon: str) -> list[int] | None:
        return self._exact.get(canon)

    def _phrase_js(self, phrase: str) -> list[int]:
        return self._phrase.get(phrase, [])

    def _posting(self, tok: str) -> np.ndarray | None:
        return self._postings.get(tok)

    def _may_occur(self, words: list[str]) -> list[bool]:
        # as MappedNames: a space-free piece of a name phrase is one of its tokens
        return [" " in w or w in self._postings for w in words]

    def _query_seq(self, toks: tuple[str, ...]) -> tuple:
        return toks

    def _name_seq(self, j: int) -> tuple:
        return self._tokens[j]


# ----------------------------------------------------------------------------- array form
def hash64(text: str) -> int:
    """Stable 64-bit hash of a string (blake2b of its UTF-8 bytes), the key of the name index arrays."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def _blob(strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets of length len + 1, uint8 UTF-8 bytes) of a list of strings."""
    data = [s.encode("utf-8", "surrogatepass") for s in strings]
    off = np.zeros(len(data) + 1, np.int64)
    if data:
        np.cumsum([len(b) for b in data], out=off[1:])
    return off, np.frombuffer(b"".join(data), dtype=np.uint8).copy()


def _sorted_by_hash(keys: Sequence[str], values: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(hashes sorted ascending, values in the same order; ties by value)."""
    h = np.asarray([hash64(k) for k in keys], dtype=np.uint64)
    v = np.asarray(values, dtype=np.int64)
    order = np.lexsort((v, h))
    return h[order], v[order]


#: Array names of the name index (see :func:`name_index_arrays`).
NAME_ARRAYS = ("name_node", "name_tok_ptr", "name_tok", "name_canon_off", "name_canon", "exact_hash", "exact_name",
               "phrase_hash", "phrase_name", "tok_hash", "tok_off", "tok", "post_ptr", "post_name")


def name_index_arrays(matcher: EntityMatcher) -> tuple[dict[str, np.ndarray], int]:
    """The matcher's look-up structures as flat arrays (and its ``max_tokens``), for :class:`MappedNames`.

    Names ``j`` keep the matcher's order. Tokens get ids in (hash, string) order; ``tok_off``/``tok``
    hold their strings and ``post_ptr``/``post_name`` their sorted posting lists (CSR). ``name_tok``
    (CSR by ``name_tok_ptr``) is each name's token-id sequence, ``name_canon`` its canonical form.
    ``exact_hash``/``phrase_hash`` are the sorted hashes of the canonical names and token phrases,
    with the names they point to in ``exact_name``/``phrase_name``. Every hash hit is verified
    against the stored strings, so a collision cannot produce a false match.
    """
    m = matcher
    vocab = sorted(m._postings, key=lambda t: (hash64(t), t))
    tid = {t: i for i, t in enumerate(vocab)}
    tok_off, tok = _blob(vocab)
    tok_hash = np.asarray([hash64(t) for t in vocab], dtype=np.uint64)
    post_ptr = np.zeros(len(vocab) + 1, np.int64)
    if vocab:
        np.cumsum([m._postings[t].shape[0] for t in vocab], out=post_ptr[1:])
    post_name = (np.concatenate([m._postings[t] for t in vocab]) if vocab else np.zeros(0, np.int64))
    seqs = [[tid[t] for t in toks] for toks in m._tokens]
    name_tok_ptr = np.zeros(len(seqs) + 1, np.int64)
    if seqs:
        np.cumsum([len(s) for s in seqs], out=name_tok_ptr[1:])
    name_tok = np.asarray([t for s in seqs for t in s], dtype=np.int32)
    canon_off, canon = _blob(m._canon)
    js = list(range(len(m._canon)))
    exact_hash, exact_name = _sorted_by_hash(m._canon, js)
    phrase_hash, phrase_name = _sorted_by_hash([" ".join(t) for t in m._tokens], js)
    arrays = {"name_node": np.asarray(m._node, np.int64), "name_tok_ptr": name_tok_ptr, "name_tok": name_tok,
              "name_canon_off": canon_off, "name_canon": canon, "exact_hash": exact_hash, "exact_name": exact_name,
              "phrase_hash": phrase_hash, "phrase_name": phrase_name, "tok_hash": tok_hash, "tok_off": tok_off,
              "tok": tok, "post_ptr": post_ptr, "post_name": post_name.astype(np.int64)}
    return arrays, int(m.max_tokens)


def _string_ranks(strings: list[str]) -> np.ndarray:
    """Rank of each string in sorted order (equal strings share a rank), for ``np.lexsort`` keys."""
    order = sorted(range(len(strings)), key=strings.__getitem__)
    ranks = np.zeros(len(strings), np.int64)
    r, prev = -1, None
    for q in order:
        s = strings[q]
        if s != prev:
            r, prev = r + 1, s
        ranks[q] = r
    return ranks


def _flat_tokens(names: Sequence[str | None]) -> tuple:
    """(token -> id in order of first sight, canonical names, token phrases, every kept name's token ids name
    after name, token counts, input positions of the names with tokens), as flat buffers."""
    from array import array

    first_id: dict[str, int] = {}
    canon: list[str] = []
    phrase: list[str] = []
    flat, lens, keep = array("i"), array("i"), array("q")
    for i, name in enumerate(names):
        c = canonical_name(str(name)) if name is not None else ""
        toks = match_tokens(c)
        if not toks:
            continue
        keep.append(i)
        canon.append(c)
        phrase.append(" ".join(toks))
        lens.append(len(toks))
        for t in toks:
            k = first_id.get(t)
            if k is None:
                k = first_id[t] = len(first_id)
            flat.append(k)
    return first_id, canon, phrase, flat, lens, keep


def name_arrays(node_ids: Sequence[int], names: Sequence[str | None]) -> tuple[dict[str, np.ndarray], int]:
    """``name_index_arrays(EntityMatcher(node_ids, names))`` without building the matcher.

    The same arrays, made from flat integer buffers: the matcher's per-name tuples, dicts and one
    posting array per token held ~1 KB a name (0.6 GB for 680k names) just to be flattened.
    """
    node_ids = np.asarray(node_ids, dtype=np.int64).ravel()
    if node_ids.shape[0] != len(names):
        raise ValueError(f"node_ids ({node_ids.shape[0]}) and names ({len(names)}) differ in length")
    first_id, canon, phrase, flat, lens, keep = _flat_tokens(names)
    kept_nodes = node_ids[np.frombuffer(keep, dtype=np.int64)] if keep else np.zeros(0, np.int64)
    ln = np.frombuffer(lens, dtype=np.int32).astype(np.int64) if lens else np.zeros(0, np.int64)
    # name order j: by (token count, canonical name, node id), as the matcher sorts them
    order_a = np.lexsort((kept_nodes, _string_ranks(canon), ln)).astype(np.int64)
    order = order_a.tolist()
    vocab = list(first_id)
    del first_id
    vocab_hash = np.asarray([hash64(t) for t in vocab], dtype=np.uint64)
    by_hash_a = np.lexsort((_string_ranks(vocab), vocab_hash)).astype(np.int64)  # by (hash, token)
    by_hash = by_hash_a.tolist()
    rank = np.zeros(len(vocab), np.int32)
    rank[by_hash_a] = np.arange(len(vocab), dtype=np.int32)
    starts = np.zeros(ln.size + 1, np.int64)
    np.cumsum(ln, out=starts[1:])
    new_len = ln[order_a]
    name_tok_ptr = np.zeros(ln.size + 1, np.int64)
    np.cumsum(new_len, out=name_tok_ptr[1:])
    gather = np.repeat(starts[:-1][order_a] - name_tok_ptr[:-1], new_len) + np.arange(int(name_tok_ptr[-1]))
    flat_a = np.frombuffer(flat, dtype=np.int32) if flat else np.zeros(0, np.int32)
    name_tok = rank[flat_a[gather]].astype(np.int32)
    # postings: the names of each token, once per name, ascending (CSR by token id)
    name_of = np.repeat(np.arange(ln.size, dtype=np.int64), new_len)
    pairs = distinct(name_tok.astype(np.int64) * max(ln.size, 1) + name_of)
    post_tok = pairs // max(ln.size, 1)
    post_ptr = np.zeros(len(vocab) + 1, np.int64)
    np.cumsum(np.bincount(post_tok, minlength=len(vocab)), out=post_ptr[1:])
    vocab_sorted = [vocab[k] for k in by_hash]
    tok_off, tok = _blob(vocab_sorted)
    tok_hash = vocab_hash[by_hash_a]
    canon_j = [canon[q] for q in order]
    del canon
    js = list(range(len(canon_j)))
    canon_off, canon_blob = _blob(canon_j)
    exact_hash, exact_name = _sorted_by_hash(canon_j, js)
    del canon_j
    phrase_hash, phrase_name = _sorted_by_hash([phrase[q] for q in order], js)
    del phrase
    arrays = {"name_node": kept_nodes[order_a], "name_tok_ptr": name_tok_ptr, "name_tok": name_tok,
              "name_canon_off": canon_off, "name_canon": canon_blob, "exact_hash": exact_hash,
              "exact_name": exact_name, "phrase_hash": phrase_hash, "phrase_name": phrase_name,
              "tok_hash": tok_hash, "tok_off": tok_off, "tok": tok, "post_ptr": post_ptr,
              "post_name": (pairs % max(ln.size, 1)).astype(np.int64)}
    return arrays, int(ln.max()) if ln.size else 0


class MappedNames(_NameMatching):
    """The name matcher over the arrays of :func:`name_index_arrays` (memory-mapped: O(1) to open).

    Same results as :class:`EntityMatcher` over the same names; a look-up hashes the key, binary-searches
    the sorted hashes and verifies the strings of the few hits.
    """

    def __init__(self, arrays: dict[str, np.ndarray], max_tokens: int) -> None:
        missing = [k for k in NAME_ARRAYS if k not in arrays]
        if missing:
            raise ValueError(f"name index arrays missing: {missing}")
        for k in NAME_ARRAYS:
            setattr(self, "_" + k, arrays[k])
        self.max_tokens = int(max_tokens)
        self._tids: dict[str, int] = {}  # token -> its id (-1: none), see _tid
        self._hashes: dict[str, np.uint64] = {}  # query-side key -> its hash, see _key_hash

    def __len__(self) -> int:
        return int(self._name_node.shape[0])

    def _key_hash(self, text: str) -> np.uint64:
        """:func:`hash64` of a query-side key (a word, a phrase, a canonical name), memoised per matcher: queries
        repeat the same few thousand words, and a blake2b digest costs about a microsecond."""
        memo = self._hashes
        got = memo.get(text)
        if got is None:
            if len(memo) >= _TOKEN_MEMO:
                memo.clear()
            got = memo[text] = np.uint64(hash64(text))
        return got

    def _range(self, hashes: np.ndarray, key: str) -> tuple[int, int]:
        h = self._key_hash(key)
        lo = hi = int(hashes.searchsorted(h))  # one binary search; equal hashes (collisions) are next to it
        while hi < hashes.shape[0] and hashes[hi] == h:
            hi += 1
        return lo, hi

    @staticmethod
    def _str(off: np.ndarray, data: np.ndarray, i: int) -> str:
        return bytes(data[int(off[i]):int(off[i + 1])]).decode("utf-8", "surrogatepass")

    def _tid(self, tok: str) -> int:
        """The id of a name token (-1: no name has it), memoised per matcher (a query asks for its tokens several
        times, and queries share their words)."""
        memo = self._tids
        got = memo.get(tok)
        if got is None:
            got = -1
            lo, hi = self._range(self._tok_hash, tok)
            for p in range(lo, hi):
                if self._str(self._tok_off, self._tok, p) == tok:
                    got = p
                    break
            if len(memo) >= _TOKEN_MEMO:
                memo.clear()
            memo[tok] = got
        return got

    def _node_id(self, j: int) -> int:
        return int(self._name_node[j])

    def _token_at(self, p: int) -> str:
        """Name token ``p`` (in ``tok_hash`` order): what a hash hit on it is verified against."""
        return self._str(self._tok_off, self._tok, p)

    def _exact_at(self, p: int, canon: str) -> int | None:
        """The name of ``exact_hash`` row ``p`` when its canonical form is ``canon`` (a verified hash hit), else None."""
        j = int(self._exact_name[p])
        return j if self._str(self._name_canon_off, self._name_canon, j) == canon else None

    def _exact_js(self, canon: str) -> list[int] | None:
        lo, hi = self._range(self._exact_hash, canon)
        js = [j for j in self._exact_name[lo:hi].tolist()
              if self._str(self._name_canon_off, self._name_canon, j) == canon]
        return js or None

    def _phrase_js(self, phrase: str) -> list[int]:
        lo, hi = self._range(self._phrase_hash, phrase)
        return self._verify_phrase(phrase, lo, hi)

    def _phrase_js_many(self, phrases: list[str]) -> list[list[int]]:
        if not phrases:
            return []
        h = np.asarray([self._key_hash(p) for p in phrases], dtype=np.uint64)  # one binary search for all
        lo = np.searchsorted(self._phrase_hash, h, side="left").tolist()
        hi = np.searchsorted(self._phrase_hash, h, side="right").tolist()
        return [self._verify_phrase(p, a, b) if b > a else [] for p, a, b in zip(phrases, lo, hi)]

    def _verify_phrase(self, phrase: str, lo: int, hi: int) -> list[int]:
        return [j for j in self._phrase_name[lo:hi].tolist()
                if " ".join(self._str(self._tok_off, self._tok, t) for t in self._name_seq(j)) == phrase]

    def _posting(self, tok: str) -> np.ndarray | None:
        t = self._tid(tok)
        if t < 0:
            return None
        return np.asarray(self._post_name[int(self._post_ptr[t]):int(self._post_ptr[t + 1])])

    def token_ids(self, tokens) -> np.ndarray:
        """Sorted ids of those ``tokens`` that some name holds (one binary search for all of them)."""
        words = sorted(set(tokens))
        if not words or not len(self):
            return np.zeros(0, np.int64)
        h = np.asarray([self._key_hash(w) for w in words], dtype=np.uint64)
        lo = np.searchsorted(self._tok_hash, h, side="left").tolist()
        hi = np.searchsorted(self._tok_hash, h, side="right").tolist()
        out = [p for w, a, b in zip(words, lo, hi) for p in range(a, b) if self._str(self._tok_off, self._tok, p) == w]
        return np.unique(np.asarray(out, dtype=np.int64))

    def _query_seq(self, toks: tuple[str, ...]) -> tuple:
        return tuple(self._tid(t) for t in toks)

    def _may_occur(self, words: list[str]) -> list[bool]:
        # a name phrase is its tokens joined by single spaces: a space-free piece of it is a known token
        if not words:
            return []
        h = np.asarray([self._key_hash(w) for w in words], dtype=np.uint64)
        lo = np.searchsorted(self._tok_hash, h, side="left").tolist()
        hi = np.searchsorted(self._tok_hash, h, side="right").tolist()
        return [" " in w or any(self._str(self._tok_off, self._tok, p) == w for p in range(a, b))
                for w, a, b in zip(words, lo, hi)]

    def _name_seq(self, j: int) -> tuple:
        return tuple(self._name_tok[int(self._name_tok_ptr[j]):int(self._name_tok_ptr[j + 1])].tolist())

    def _with_phrase(self, cand: np.ndarray, toks: tuple[str, ...], limit: int) -> list[int]:
        # every candidate holds each token: a one-token phrase is in all of them; longer phrases are checked at
        # every start of a block of candidates at once, block after block until ``limit`` names are found
        if len(toks) == 1:
            return self._name_node[cand[:limit]].tolist()
        if cand.size <= _PHRASE_BLOCK // 4:  # a few names: one by one costs less than the array set-up
            return super()._with_phrase(cand, toks, limit)
        seq = np.asarray(self._query_seq(toks), dtype=np.int64)
        ptr, out = self._name_tok_ptr, []
        for lo in range(0, cand.size, _PHRASE_BLOCK):
            block = cand[lo:lo + _PHRASE_BLOCK]
            start = ptr[block]
            n_at = np.maximum(ptr[block + 1] - start - seq.size + 1, 0)
            owner = np.repeat(np.arange(block.size), n_at)
            at = start[owner] + np.arange(owner.size) - np.repeat(np.cumsum(n_at) - n_at, n_at)
            ok = np.ones(owner.size, bool)
            for k, t in enumerate(seq.tolist()):
                ok &= self._name_tok[at + k] == t
            hit = np.zeros(block.size, bool)
            hit[owner[ok]] = True
            out.extend(self._name_node[block[hit][:limit - len(out)]].tolist())
            if len(out) >= limit:
                break
        return out


def extract_query_entities(query: str) -> list[str]:
    """Rule-based query entities: the index's own mention rules (:func:`noderag.lang.entities.query_entities`)
    per sentence, as the ``nlp`` decomposer applies them, so a name it extracted from a text is found again
    in a query containing that text; Chinese sentences add the segmenter's names and their sub-words
    (:func:`noderag.lang.zh.query_mentions`). Order of first appearance, one per canonical name."""
    seen: set[str] = set()
    out: list[str] = []
    for a, b in sentence_spans(query):
        for ent in query_entities(query[a:b]) + (query_mentions(query[a:b]) if has_han(query[a:b]) else []):
            key = canonical_name(ent)
            if key not in seen:
                seen.add(key)
                out.append(ent)
    return out
