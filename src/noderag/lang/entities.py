"""Entity names: the one canonical form, the rule-based mention extractor and its word lists.

Indexing (the ``nlp`` decomposer, :func:`noderag.indexing.assemble.link_known_names`, node keys) and
query matching (:mod:`noderag.search.entities`) both use this module, so a name the index extracts
from a text is extracted and keyed identically when the same text appears in a query.
It sits in :mod:`noderag.lang`, below ``graph``, ``index`` and ``search``, which all import it.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from .fold import fold_zh

__all__ = ["CONNECT", "LEAD", "STOP", "TOKEN", "Mention", "canonical_name", "canonical_token", "extract_mentions",
           "non_overlapping", "query_entities", "same_name", "strip_edges"]

_WS = re.compile(r"\s+")
# Punctuation (Unicode category P*) and symbols trimmed from both ends of a name.
_EDGE_CHARS = "".join(
    chr(c) for c in range(0x20, 0x3000) if unicodedata.category(chr(c))[0] in "PSZ"
) + "\u3000\u3001\u3002\uff0c\uff0e\uff1a\uff1b\uff01\uff1f\u300c\u300d\u300e\u300f\uff08\uff09"


_EDGE_SET = frozenset(_EDGE_CHARS)
# Brackets and quotes that pair: one at an edge stays when its partner is kept inside the name
# ("Lilu (mythology)"). ASCII "'" is not among them: at an edge it is an apostrophe ("the Beatles'").
_OPENS = {"(": ")", "[": "]", "{": "}", "\u201c": "\u201d", "\u2018": "\u2019", "\u00ab": "\u00bb",
          "\uff08": "\uff09", "\u3010": "\u3011", "\u300a": "\u300b", "\u3008": "\u3009",
          "\u300c": "\u300d", "\u300e": "\u300f"}
_CLOSES = {c: o for o, c in _OPENS.items()}
_SYMMETRIC = frozenset('"')  # one character opens and closes: pairs are the 1st and 2nd, the 3rd and 4th, ...
_PAIRED = frozenset(_OPENS) | frozenset(_CLOSES) | _SYMMETRIC


def _partner(text: str, i: int, lo: int, hi: int) -> int:
    """Index in ``text[lo:hi]`` of the bracket or quote that pairs with ``text[i]``, or -1."""
    c = text[i]
    if c in _SYMMETRIC:
        at = [k for k in range(lo, hi) if text[k] == c]
        mate = at.index(i) ^ 1
        return at[mate] if mate < len(at) else -1
    if c in _OPENS:
        other, step, stop = _OPENS[c], 1, hi
    else:
        other, step, stop = _CLOSES[c], -1, lo - 1
    depth = 0
    for k in range(i, stop, step):
        if text[k] == c:
            depth += 1
        elif text[k] == other:
            depth -= 1
            if depth == 0:
                return k
    return -1


def strip_edges(text: str, chars: frozenset[str] | str = _EDGE_SET) -> str:
    """``text.strip(chars)``, except that a bracket or quote whose partner stays inside the text stays too.

    "Lilu (mythology)." keeps its ")" and "\"Heroes\" (song)" its quotes; a pair around the whole text
    goes ("(Lilu)" is "Lilu"), as does one without a partner ("Smith)" is "Smith").
    """
    lo, hi = 0, len(text)
    while True:
        start = (lo, hi)
        while lo < hi and text[lo] in chars:
            if text[lo] in _PAIRED:
                p = _partner(text, lo, lo, hi)
                if p == hi - 1 and p > lo:  # the pair wraps the whole text
                    hi -= 1
                elif p >= 0:
                    break
            lo += 1
        while lo < hi and text[hi - 1] in chars:
            if text[hi - 1] in _PAIRED:
                p = _partner(text, hi - 1, lo, hi)
                if p == lo and p < hi - 1:
                    lo += 1
                elif p >= 0:
                    break
            hi -= 1
        if (lo, hi) == start:
            return text[lo:hi]


def canonical_name(text: str) -> str:
    """NFKC, case-folded, Traditional Chinese folded to Simplified, whitespace collapsed, surrounding
    punctuation stripped except brackets and quotes paired inside (:func:`strip_edges`; so 臺灣, 台灣 and 台湾 are one name; the text as written is stored elsewhere).

    The one normalisation of names: node keys, name links at build time and query matching all use it.
    """
    if text.isascii():  # NFKC leaves ASCII as it is and fold_zh has nothing to fold: ~0.2 us less a name
        text = text.casefold()
    else:
        text = fold_zh(unicodedata.normalize("NFKC", text).casefold())
    if not text.isalnum():  # a letters-and-digits word holds no whitespace: skip the regex (~0.4 us)
        text = _WS.sub(" ", text)
    if text and (text[0] in _EDGE_SET or text[-1] in _EDGE_SET):  # strip() rebuilds its char set per call
        text = strip_edges(text)
    return text


def canonical_token(token: str) -> str:
    """:func:`canonical_name` of one word token: an ASCII letters-and-digits word is its lower case
    (nothing to normalise, fold or strip; ~5x faster than the cached call), others are cached."""
    return token.lower() if token.isascii() and token.isalnum() else _canonical_token_cached(token)


@lru_cache(maxsize=1 << 16)
def _canonical_token_cached(token: str) -> str:
    return canonical_name(token)


def same_name(a: str, b: str) -> bool:
    """True when two surface forms are one entity (equal canonical names)."""
    return canonical_name(a) == canonical_name(b)


#: Capitalised words that start sentences or clauses but are not names on their own (nor query phrases).
STOP = frozenset("""
a an the and or but nor so yet for of in on at to by with from into onto upon about above after
against along among around as before behind below beneath beside besides between beyond
during except inside near off over past since through throughout till toward towards under
until unlike up via within without despite following according regarding concerning
he she it they we i you his her its their our my your him them us me one ones this that these
those there here who whom whose which what when where why how while although though because
if unless whether however therefore thus hence also then later meanwhile moreover furthermore
nevertheless instead otherwise indeed still today yesterday tomorrow now once again soon
all any both each either every few many more most much neither no none other others several
some such another same first second third last next new old early late many
is was are were be been being has have had do does did will would shall should may might can
could must not yes oh mr mrs ms dr st
january february march april may june july august september october november december
monday tuesday wednesday thursday friday saturday sunday
""".split())

#: Stop words that are stripped from the front of a multi-word name ("The Beatles", "In Paris").
LEAD = frozenset("""
a an the and or but nor so yet for of in on at to by with from into onto upon about above after
against along among around as before behind below during since through under until unlike via within
without despite following according he she it they we i you his her its their our my your this that
these those there here who which what when where why how while although though because if unless
however therefore thus also then later meanwhile moreover furthermore nevertheless instead today
all any both each either every few many most some several another is was are were
""".split())

#: Lower-case words allowed inside a capitalised name ("Bank of England", "Ludwig van Beethoven").
CONNECT = frozenset("of the de du des la le von van der den di da del dos das y for upon al el bin ibn zu et".split())
# "for" joins a name only after these heads ("Institute for Advanced Study", not "Kessel for Port Emmerich").
_FOR_HEADS = frozenset("""institute institution centre center society association council committee foundation
school college academy museum office department ministry league union fund commission organization organisation
agency board party movement alliance campaign coalition federation trust prize award medal secretary minister
bureau court hospital network""".split())
_MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|December|"
           "Jan\\.|Feb\\.|Mar\\.|Apr\\.|Jun\\.|Jul\\.|Aug\\.|Sep\\.|Sept\\.|Oct\\.|Nov\\.|Dec\\.")
_DATE = re.compile(
    rf"\b(?:\d{{1,2}}\s+(?:{_MONTHS})\s+\d{{3,4}}"
    rf"|(?:{_MONTHS})\s+\d{{1,2}},?\s+\d{{3,4}}"
    rf"|(?:{_MONTHS})\s+\d{{4}}"
    r"|(?<![\d.,])(?:1[0-9]{3}|20[0-9]{2})(?:s\b)?(?![\d.,]\d))"
)
_NUMBER = re.compile(
    r"(?<![\w.])\d+(?:[.,]\d+)*(?:\s+(?:million|billion|thousand|percent|per cent|km|kilometres|kilometers|"
    r"miles|metres|meters|feet|people|inhabitants|residents|votes|copies|seats|episodes))\b"
)
_QUOTED = re.compile(r"[\"“«]([^\"“”«»\n]{2,80})[\"”»]")
TOKEN = re.compile(r"[^\W_](?:[\w&]|[’'.\-](?=\w))*\.?")
_POSSESSIVE = re.compile(r"(?:['’]s|['’])$")


@dataclass(frozen=True)
class Mention:
    """One entity mention: character span inside the sentence and its surface text."""

    start: int
    end: int
    text: str
    kind: str  # "name" | "quote" | "date" | "number" | "ner"


def _name_mentions(sent: str) -> list[Mention]:
    toks = [(m.start(), m.end(), m.group(0)) for m in TOKEN.finditer(sent)]
    out: list[Mention] = []
    i, n = 0, len(toks)
    while i < n:
        s, e, t = toks[i]
        if not t[0].isupper():
            i += 1
            continue
        # grow the name: capitalised tokens, connectors between them, numerals after a word
        j = i + 1
        last_cap = i
        while j < n:
            s2, e2, t2 = toks[j]
            gap = sent[toks[j - 1][1]:s2]
            if gap.strip() not in ("", "-", "&"):  # punctuation breaks a name
                break
            if t2[0].isupper():
                last_cap = j
                j += 1
            elif t2.lower() in CONNECT and (t2.lower() != "for" or toks[j - 1][2].lower() in _FOR_HEADS):
                j += 1
            elif t2[0].isdigit() and len(t2) <= 4 and j == last_cap + 1 and not re.fullmatch(r"1[0-9]{3}|20[0-9]{2}", t2):
                last_cap = j
                j += 1
            else:
                break
        span = toks[i:last_cap + 1]
        # drop leading stop words / articles ("The Beatles" -> "Beatles", "In Paris" -> "Paris")
        k = 0
        while k < len(span) and (span[k][2].lower() in LEAD or span[k][2].lower() in CONNECT):
            k += 1
        span = span[k:]
        if len(span) == 1 and span[0][2].lower().rstrip(".") in STOP:
            span = []
        if span:
            a, b = span[0][0], span[-1][1]
            text = sent[a:b]
            if text.endswith(".") and not re.search(r"\b[A-Z]\.$", text):
                text = text[:-1]
                b -= 1
            m = _POSSESSIVE.search(text)
            if m:
                text = text[:m.start()]
                b = a + len(text)
            if len(text) >= 2 and not text.isdigit() and any(ch.isalpha() for ch in text):
                out.append(Mention(a, b, text, "name"))
        i = last_cap + 1
    return out


def extract_mentions(sent: str, *, dates: bool = True, numbers: bool = False) -> list[Mention]:
    """Entity mentions of one sentence, non-overlapping, ordered by position."""
    cands: list[Mention] = []
    for m in _QUOTED.finditer(sent):
        inner = m.group(1).strip()
        if 1 <= len(inner.split()) <= 12 and any(ch.isalpha() for ch in inner):
            cands.append(Mention(m.start(1), m.end(1), inner, "quote"))
    if dates:
        for m in _DATE.finditer(sent):
            cands.append(Mention(m.start(), m.end(), m.group(0), "date"))
    if numbers:
        for m in _NUMBER.finditer(sent):
            cands.append(Mention(m.start(), m.end(), m.group(0), "number"))
    cands.extend(_name_mentions(sent))
    # priority: quotes, dates, numbers, then names; keep non-overlapping, longer first within a kind
    prio = {"quote": 0, "ner": 1, "date": 2, "number": 3, "name": 4}
    cands.sort(key=lambda m: (prio[m.kind], -(m.end - m.start), m.start))
    return non_overlapping(cands, len(sent))


def non_overlapping(cands: list[Mention], length: int) -> list[Mention]:
    """The candidates, in order, that overlap none kept before them; sorted by position.

    An occupancy map of the sentence makes this linear in the candidates' total length
    (candidates of one kind never overlap each other, so that total is a few sentence lengths).
    """
    occupied = bytearray(length)
    taken: list[Mention] = []
    for m in cands:
        if occupied.find(1, m.start, m.end) < 0:
            occupied[m.start:m.end] = b"\x01" * (m.end - m.start)
            taken.append(m)
    taken.sort(key=lambda m: m.start)
    return taken


def query_entities(query: str) -> list[str]:
    """Entities of a query: the mentions :func:`extract_mentions` finds in it (quotes, dates, names).

    The decomposer's rules, so a mention indexed from a text is found again when that text is asked;
    order of first appearance, one per canonical name.
    """
    seen: set[str] = set()
    out: list[str] = []
    for m in extract_mentions(query, dates=True, numbers=False):
        key = canonical_name(m.text)
        if key and key not in seen:
            seen.add(key)
            out.append(m.text)
    return out
