"""Rule-based sentence splitting (Latin and CJK punctuation, abbreviations, initials)."""

from __future__ import annotations

import re

__all__ = ["split_sentences", "sentence_spans"]

# Words that end with a period without ending a sentence (compared case-insensitively, no dot).
_ABBREV = frozenset("""
mr mrs ms dr prof st jr sr sen rep gov gen col lt sgt capt cmdr adm maj rev fr hon pres
vs etc e.g i.e cf al approx dept est fig inc ltd co corp no nos vol vols pp ed eds mt ft ave
jan feb mar apr jun jul aug sep sept oct nov dec u.s u.k u.n a.d b.c ca c op
""".split())

# A sentence end: terminal punctuation, optional closing quotes/brackets, then whitespace.
_LATIN_END = re.compile(r"[.!?…]+[\"'”’)\]]*(?=\s+|$)")
_CJK_END = re.compile(r"[。！？；]+[」』”’）]*")
_WORD_PUNCT = frozenset(".'’-")
_INITIALS = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")


def _word_before(text: str, dot: int) -> str:
    """The run of word characters, dots, apostrophes and hyphens that ends at ``dot``.

    Scans backwards from ``dot`` (``\\w`` is ``str.isalnum()`` or ``_``), so the cost is the
    length of the run, not of the text before it: a sentence end is followed by whitespace,
    which stops the next scan, so all scans of a line together are linear in its length.
    """
    i = dot
    while i > 0:
        ch = text[i - 1]
        if ch.isalnum() or ch == "_" or ch in _WORD_PUNCT:
            i -= 1
        else:
            break
    return text[i:dot]


def _is_abbrev(text: str, dot: int) -> bool:
    """True when the period at ``dot`` ends an abbreviation or an initial, not a sentence."""
    if text[dot] != ".":
        return False
    word = _word_before(text, dot)
    if not word:
        return False
    low = word.lower().rstrip(".")
    if low in _ABBREV:
        return True
    if len(word) == 1 and word.isalpha() and word.isupper():  # initial: "J. R. R. Tolkien"
        return True
    if _INITIALS.fullmatch(word):  # "U.S", "e.g"
        return True
    return False


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of the sentences of ``text`` (whitespace trimmed).

    Lines are split at newlines; inside a line, at ``. ! ? …`` followed by space
    and a non-lowercase start (abbreviations and initials excepted), and after
    CJK ``。！？；``.
    """
    spans: list[tuple[int, int]] = []
    pos = 0
    for line in text.split("\n"):
        start = pos
        end_line = pos + len(line)
        pos = end_line + 1
        cuts: list[int] = []
        for m in _LATIN_END.finditer(text, start, end_line):
            e = m.end()
            # next non-space char must not be lowercase
            j = e
            while j < end_line and text[j].isspace():
                j += 1
            if j < end_line and text[j].islower():
                continue
            if m.group(0).startswith(".") and len(m.group(0).rstrip("\"'”’)]")) == 1 and _is_abbrev(text, m.start()):
                continue
            cuts.append(e)
        for m in _CJK_END.finditer(text, start, end_line):
            cuts.append(m.end())
        cuts = sorted(set(c for c in cuts if start < c < end_line)) + [end_line]
        s = start
        for c in cuts:
            a, b = s, c
            while a < b and text[a].isspace():
                a += 1
            while b > a and text[b - 1].isspace():
                b -= 1
            if b > a:
                spans.append((a, b))
            s = c
    return spans


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` as strings (see :func:`sentence_spans`)."""
    return [text[a:b] for a, b in sentence_spans(text)]
