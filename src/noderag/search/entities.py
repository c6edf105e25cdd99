"""Query entities and their matches among entity names (N) and overview titles (O).

Matching never scans the name list per query:

* exact canonical match through a dict ``canonical name -> node ids``;
* whole-word containment ("Obama" -> "Barack Obama") through an inverted index
  ``name token -> sorted name ids``: the posting lists of the entity's tokens are
  intersected (numpy, rarest first) and only those candidates are checked for the
  contiguous phrase;
* names occurring in the query text as whole-word phrases, through dict look-ups
  of the query's word n-grams (n up to the longest indexed name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from ..graph.keys import canonical_name
from ..lang.zh import is_han_token, match_tokens

__all__ = ["EntityMatcher", "NameMatch", "extract_query_entities", "name_tokens"]

_WORD = re.compile(r"\w+", re.UNICODE)

# Words that never start or form a query entity on their own.
STOPWORDS = frozenset(
    """a an and are as at be been but by did do does for from had has have he her his how i if in
    into is it its of on or she that the their them they this those to was were what when where which
    who whom whose why will with would you your than then there these also after before during
    between about over under most more first last many much same other another one two three""".split()
)
#: Longest name (in words) looked up as a phrase of the query text; longer names match through
#: the extracted query entities (exact / containment).
MAX_PHRASE_WORDS = 8
_CONNECTORS = frozenset("of the de la le von van der del da di du and & for on in at y".split())


def name_tokens(text: str) -> tuple[str, ...]:
    """Whole-word tokens of a name in canonical form (NFKC, case-folded)."""
    return tuple(match_tokens(canonical_name(text)))  # CJK: one token per Han character (noderag.lang.zh)


@dataclass(frozen=True)
class NameMatch:
    """One matched N or O node: its id, the query phrase it came from, and how it matched."""

    node_id: int
    phrase: str
    kind: str  # "exact" | "contains" | "in_query"


class EntityMatcher:
    """Hash-map and inverted-index matcher over the names of N and O nodes.

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
        toks = [name_tokens(str(s)) if s is not None else () for s in names]
        canon = [canonical_name(str(s)) if s is not None else "" for s in names]
        keep = [i for i, t in enumerate(toks) if t]
        # Name ids sorted by (token count, canonical name, node id): sorted posting lists
        # then list shorter (more specific) names first, deterministically.
        keep.sort(key=lambda i: (len(toks[i]), canon[i], int(node_ids[i])))
        self._node = node_ids[keep] if keep else np.zeros(0, np.int64)
        self._tokens: list[tuple[str, ...]] = [toks[i] for i in keep]
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

    def exact(self, entity: str) -> list[int]:
        """Node ids whose canonical name equals the entity's (or its whole-word form)."""
        hits = self._exact.get(canonical_name(entity))
        if hits is None:
            hits = self._phrase.get(" ".join(name_tokens(entity)), [])
        return [int(self._node[j]) for j in hits]

    def containing(self, entity: str, limit: int) -> list[int]:
        """Node ids whose name contains the entity as a whole-word phrase, shortest names first."""
        toks = name_tokens(entity)
        if not toks or limit <= 0:
            return []
        lists = []
        for tok in set(toks):
            posting = self._postings.get(tok)
            if posting is None:
                return []
            lists.append(posting)
        lists.sort(key=len)
        cand = lists[0]
        for other in lists[1:]:
            cand = np.intersect1d(cand, other, assume_unique=True)
            if cand.size == 0:
                return []
        out: list[int] = []
        n = len(toks)
        for j in cand.tolist():
            name = self._tokens[j]
            if any(name[s:s + n] == toks for s in range(len(name) - n + 1)):
                out.append(int(self._node[j]))
                if len(out) >= limit:
                    break
        return out

    def in_text(self, text: str) -> list[tuple[int, str]]:
        """(node id, phrase) for every name found as a whole-word phrase in ``text``.

        A span qualifies when one of its non-stopword words is capitalised or starts
        with a digit in the original text. Spans inside a longer matched span are dropped.
        """
        surface = match_tokens(text)  # CJK: one token per Han character, so names inside unspaced text match
        toks = [canonical_name(w) for w in surface]
        spans: list[tuple[int, int, list[int]]] = []
        n_max = min(self.max_tokens, len(toks), MAX_PHRASE_WORDS)
        for n in range(n_max, 0, -1):
            for s in range(len(toks) - n + 1):
                hits = self._phrase.get(" ".join(toks[s:s + n]))
                if not hits:
                    continue
                if not any(t not in STOPWORDS and (w[:1].isupper() or w[:1].isdigit() or is_han_token(w))
                           for t, w in zip(toks[s:s + n], surface[s:s + n])):
                    continue
                if any(a <= s and s + n <= b for a, b, _ in spans):
                    continue
                spans.append((s, s + n, hits))
        spans.sort()
        out: list[tuple[int, str]] = []
        for s, e, hits in spans:
            phrase = " ".join(toks[s:e])
            out.extend((int(self._node[j]), phrase) for j in hits)
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


_CAP_WORD = r"(?:[A-Z][\w'’.\-]*|\d[\d,.]*)"
_NAME_RE = re.compile(
    rf"{_CAP_WORD}(?:\s+(?:(?:of|the|de|la|le|von|van|der|del|da|di|du|y)\s+)*{_CAP_WORD})*"
)
_QUOTED_RE = re.compile(r"[\"“”‘'«]([^\"“”’'»]{2,80})[\"“”’'»]")


def extract_query_entities(query: str) -> list[str]:
    """Rule-based query entities: quoted titles, capitalised multi-word names, numbers and years.

    A leading question word or stopword is dropped from a name ("Who", "The"); the
    possessive "'s" is removed. Order of first appearance, duplicates removed.
    """
    found: list[str] = []
    for m in _QUOTED_RE.finditer(query):
        found.append(m.group(1).strip())
    for m in _NAME_RE.finditer(query):
        words = m.group(0).split()
        while words and (words[0].lower() in STOPWORDS or words[0].lower() in _CONNECTORS):
            words.pop(0)
        while words and words[-1].lower() in _CONNECTORS:
            words.pop()
        if not words:
            continue
        phrase = re.sub(r"(?:'s|’s|')$", "", " ".join(words)).strip(" .,;:")
        if phrase and phrase.lower() not in STOPWORDS:
            found.append(phrase)
    seen: set[str] = set()
    out: list[str] = []
    for ent in found:
        key = canonical_name(ent)
        if key and key not in seen:
            seen.add(key)
            out.append(ent)
    return out
