"""Title links: the documents whose title a passage names (query-time bridging by document title).

A multi-hop question's next passage is often the article about a place or person the first passage
names ("... a graduate of West Chicago High School" -> the article "West Chicago, Illinois"); the
entity graph misses it when the name in the passage is longer, shorter or qualified differently from
the one the article's sentences use. Titles are matched by their head (the title without a trailing
parenthesis or comma qualifier: "Brand (play)" -> "Brand", "West Chicago, Illinois" -> "West Chicago")
as whole-word phrases of the passage that start with a capitalised word (or a digit or a Han character),
case and accents folded on both sides (a question writes "Akinoshu Kenji" for the article "Akinoshū Kenji").

The phrase table is built in memory at the first query that uses it, O(documents); a look-up costs a
few dict probes per capitalised word of the text.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Any

import numpy as np

from ..lang.entities import STOP
from ..lang.zh import is_han_token, match_tokens

__all__ = ["TitleLinks", "title_head"]

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


def _key(tokens: list[str]) -> str:
    return " ".join(map(fold_token, tokens))


class TitleLinks:
    """Documents by the title heads a text names, and each document's passages (T nodes).

    Parameters
    ----------
    titles : dict of int -> str
        doc_id -> title.
    t_ids, t_docs : ndarray
        The active passages (T node ids) and their doc ids.
    """

    def __init__(self, titles: dict[int, str], t_ids: np.ndarray, t_docs: np.ndarray) -> None:
        self._heads: dict[str, list[int]] = {}
        lengths: dict[str, set[int]] = {}
        self.max_tokens = 0
        for d in sorted(titles):
            toks = match_tokens(title_head(titles[d]))
            if not toks or len(toks) > MAX_HEAD_TOKENS or (len(toks) == 1 and toks[0].casefold() in STOP):
                continue
            self._heads.setdefault(_key(toks), []).append(int(d))
            lengths.setdefault(fold_token(toks[0]), set()).add(len(toks))
            self.max_tokens = max(self.max_tokens, len(toks))
        # first token of a head -> the token counts of the heads it starts, longest first: a position
        # starting no head is skipped, and only the lengths some head has are looked up
        self._first: dict[str, tuple[int, ...]] = {w: tuple(sorted(ns, reverse=True)) for w, ns in lengths.items()}
        order = np.lexsort((t_ids, t_docs))
        self._docs = np.asarray(t_docs, np.int64)[order]
        self._ids = np.asarray(t_ids, np.int64)[order]

    @classmethod
    def of(cls, titles: dict[int, str], types: np.ndarray, doc: Any, active: Any, t_type: int) -> "TitleLinks":
        """Over the active T nodes of an index (``types``, their ``doc`` column and ``active`` flags)."""
        t_ids = np.flatnonzero((np.asarray(types) == t_type) & np.asarray(active, dtype=bool))
        return cls(titles, t_ids, np.asarray(doc)[t_ids])

    def named_docs(self, text: str) -> list[int]:
        """Documents whose title head ``text`` names, in text order, no repeats; the longest head at a
        position wins and heads inside a longer match are skipped."""
        return [d for group in self.named_groups(text) for d in group]

    def named_groups(self, text: str) -> list[list[int]]:
        """:meth:`named_docs` grouped by the title head named: one list per head, in text order (several
        documents may share a title: "Namibia" may be five articles' passages, and they name one subject)."""
        if not self._heads or not text:
            return []
        surface = match_tokens(text)
        folded = list(map(fold_token, surface))
        first, heads = self._first, self._heads
        out: list[int] = []
        groups: list[list[int]] = []
        n_tok, after = len(surface), 0  # after: the end of the last match (heads inside it are skipped)
        if text.isascii():  # a \w+ token below "Z" starts with a digit or a capital
            starts = [i for i, w in enumerate(surface) if "0" <= w[0] <= "Z" and folded[i] in first]
        else:
            starts = [i for i, (w, f) in enumerate(zip(surface, folded)) if f in first and _name_start(w)]
        for s in starts:
            if s < after:
                continue
            for n in first[folded[s]]:
                if n > n_tok - s:
                    continue
                docs = heads.get(" ".join(folded[s:s + n]))
                if docs:
                    new = [d for d in docs if d not in out]
                    if new:
                        out.extend(new)
                        groups.append(new)
                    after = s + n
                    break
        return groups

    def passages(self, doc: int) -> np.ndarray:
        """The passages (T node ids, ascending) of one document."""
        lo, hi = np.searchsorted(self._docs, [doc, doc + 1])
        return self._ids[lo:hi]
