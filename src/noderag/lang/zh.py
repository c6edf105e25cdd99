"""Chinese text: segmentation, entity mentions, sentence relations and lexical tokens.

Segmentation and part-of-speech tags come from ``rjieba`` (jieba-rs: jieba's dictionary and HMM,
compiled; on DRCD's 790 passages 0.30 s against 18.8 s for the pure-Python ``jieba.posseg`` with
the same entities). jieba's dictionary is Simplified, so text is folded to Simplified first
(:func:`noderag.lang.fold.fold_zh`, one character for one, offsets kept) and every mention is cut
from the text as written. Entities are the proper-name tags (person ``nr``/``nrt``/``nrfg``,
place ``ns``, organisation ``nt``, other proper name ``nz``), transliterated names joined by a
middle dot (威廉·德魯里), and titles of works in 《》〈〉. Relationships link co-occurring
mentions of one sentence, with the words between them as the relation text, as for English.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from .detect import HAN, has_han
from .entities import canonical_name
from .fold import fold_zh

__all__ = [
    "NAME_TAGS",
    "ZhMention",
    "add_mentions",
    "bigram_tokens",
    "extract_mentions",
    "is_han_token",
    "lexical_tokens",
    "match_tokens",
    "segment",
    "sentence_relations",
]

#: jieba part-of-speech tags of proper names.
NAME_TAGS = frozenset({"nr", "nrt", "nrfg", "ns", "nt", "nz"})
_DOTS = "·‧・•．"
# a transliterated name: Han runs joined by middle dots ("威廉·德魯里", "約翰‧甘迺迪")
_DOTTED = re.compile(f"[{HAN}]+(?:[{_DOTS}][{HAN}]+)+")
# titles of works (books, films, songs, laws) and corner-bracket quotes
_TITLE = re.compile(r"[《〈]([^《》〈〉\n]{1,40})[》〉]")
_CORNER = re.compile(r"[「『]([^「」『』\n，。！？；]{2,20})[」』]")
_HAN_CHAR = re.compile(f"[{HAN}]")
# a match token: one Han character, or a run of other word characters (what r"\w+" gives English)
_MATCH_TOKEN = re.compile(f"[{HAN}]|(?:(?![{HAN}])\\w)+")
_WORD = re.compile(r"\w+")
_WORDISH = re.compile(r"\w")


@dataclass(frozen=True)
class ZhMention:
    """One mention in a sentence: character span, surface text (as written) and kind.

    Shaped like :class:`noderag.indexing.decompose.nlp.Mention` (start, end, text, kind), so the two
    kinds of mention of a mixed sentence are merged and related together.
    """

    start: int
    end: int
    text: str
    kind: str  # "zh_name" | "zh_title" | "zh_quote"


@lru_cache(maxsize=1)
def _jieba():
    """The shared rjieba segmenter (its dictionary is compiled into the extension: no file, no download)."""
    import rjieba

    return rjieba.Jieba()


def segment(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, tag)`` of every segmenter token of ``text``, covering it without gaps."""
    folded = fold_zh(text)
    out: list[tuple[int, int, str]] = []
    pos = 0
    for word, tag in _jieba().tag(folded):
        end = pos + len(word)
        out.append((pos, end, tag))
        pos = end
    if pos != len(text):  # rjieba returns the whole input; a mismatch would shift every span
        raise RuntimeError(f"segmenter covered {pos} of {len(text)} characters of {text[:40]!r}")
    return out


def _valid_name(text: str) -> bool:
    han = len(_HAN_CHAR.findall(text))
    return han >= 2 and len(text) <= 40


def extract_mentions(sent: str) -> list[ZhMention]:
    """Chinese entity mentions of one sentence, non-overlapping, ordered by position.

    Titles of works first, then dotted transliterated names, corner-bracket quotes, and
    proper-name tokens of the segmenter; a mention needs two Han characters.
    """
    if not has_han(sent):
        return []
    cands: list[ZhMention] = []
    for m in _TITLE.finditer(sent):
        inner = m.group(1).strip()
        if inner and _WORDISH.search(inner):
            a = m.start(1) + (len(m.group(1)) - len(m.group(1).lstrip()))
            cands.append(ZhMention(a, a + len(inner), inner, "zh_title"))
    for m in _DOTTED.finditer(sent):
        cands.append(ZhMention(m.start(), m.end(), m.group(0), "zh_name"))
    for m in _CORNER.finditer(sent):
        cands.append(ZhMention(m.start(1), m.end(1), m.group(1), "zh_quote"))
    n_struct = len(cands)
    for a, b, tag in segment(sent):
        if tag in NAME_TAGS and _valid_name(sent[a:b]):
            cands.append(ZhMention(a, b, sent[a:b], "zh_name"))
    # structural mentions (titles, dotted names, quotes) win over segmenter names inside them
    order = sorted(range(len(cands)), key=lambda i: (i >= n_struct, -(cands[i].end - cands[i].start), cands[i].start))
    taken: list[ZhMention] = []
    for i in order:
        m = cands[i]
        if all(m.end <= t.start or m.start >= t.end for t in taken):
            taken.append(m)
    taken.sort(key=lambda m: m.start)
    return taken


def query_mentions(query: str) -> list[str]:
    """Chinese entity mentions of a query, each followed by its dictionary sub-words of two or more Han
    characters (the segmenter's search mode), longest first.

    A question names a place or person in the words it happens to use: "馬祖地區" asks about what the
    index holds as "馬祖列島". The sub-word "馬祖" finds that longer name through whole-word containment.
    """
    out: list[str] = []
    seen: set[str] = set()
    for m in extract_mentions(query):
        subs = [w for w in _jieba().cut_for_search(fold_zh(m.text)) if len(_HAN_CHAR.findall(w)) >= 2]
        for w in [m.text, *sorted(subs, key=len, reverse=True)]:
            if w not in seen:
                seen.add(w)
                out.append(w)
    return out


def add_mentions(sent: str, mentions: Sequence) -> list:
    """The English-rule ``mentions`` of ``sent`` plus its Chinese mentions that overlap none of them.

    English quotes, dates and Latin names keep their spans (a Chinese sentence with "William Drury"
    in it yields both kinds); the result is ordered by position.
    """
    zh = extract_mentions(sent)
    if not zh:
        return list(mentions)
    out = list(mentions)
    for m in zh:
        if all(m.end <= t.start or m.start >= t.end for t in out):
            out.append(m)
    out.sort(key=lambda m: m.start)
    return out


def _relation_text(between: str, max_words: int) -> str | None:
    """The words between two mentions (punctuation dropped), or None when none or more than ``max_words``."""
    kept = "".join(ch if not unicodedata.category(ch).startswith(("P", "S")) else " " for ch in between)
    kept = " ".join(kept.split())
    if not kept:
        return None
    n_words = sum(1 for a, b, _ in segment(kept) if _WORDISH.search(kept, a, b) is not None)
    if n_words == 0 or n_words > max_words:
        return None
    # Han next to Han needs no space: "出版 了" -> "出版了"; Latin words keep theirs
    return re.sub(f"(?<=[{HAN}]) (?=[{HAN}])", "", kept)


def sentence_relations(sent: str, mentions: Sequence, max_words: int) -> list[tuple[str, str, str]]:
    """(source, relation, target) for adjacent mention pairs and (first mention, later mention) pairs.

    The pairs of :func:`noderag.indexing.decompose.nlp.sentence_relations`; words are counted with the
    segmenter, so a relation spans at most ``max_words`` Chinese or English words.
    """
    rels: list[tuple[str, str, str]] = []
    seen: set[tuple[int, int]] = set()
    for i in range(len(mentions) - 1):
        pairs = [(i, i + 1)]
        if i == 0:
            pairs += [(0, j) for j in range(2, len(mentions))]
        for a, b in pairs:
            if (a, b) in seen:
                continue
            seen.add((a, b))
            ma, mb = mentions[a], mentions[b]
            if canonical_name(ma.text) == canonical_name(mb.text):
                continue
            between = " ".join(sent[mentions[k].end:mentions[k + 1].start] for k in range(a, b))
            rel = _relation_text(between, max_words)
            if rel is not None:
                rels.append((ma.text, rel, mb.text))
    return rels


# ---- lexical matching

def is_han_token(token: str) -> bool:
    """True for a match token that is a Han character (it counts as name-like in query matching)."""
    return len(token) == 1 and _HAN_CHAR.match(token) is not None


def match_tokens(text: str) -> list[str]:
    """Tokens for name matching: word runs as ``\\w+`` gives them, but one token per Han character.

    Names and queries tokenised alike make "a name inside a query without spaces" a contiguous token
    n-gram of the query, found by dict look-ups of its n-grams (no scan of the names). Characters are
    used rather than segmenter words because the segmenter may cut a name differently inside a
    sentence than alone. Text without Han characters gives exactly ``re.findall(r"\\w+", text)``.
    """
    if text.isascii() or _HAN_CHAR.search(text) is None:
        return _WORD.findall(text)
    return _MATCH_TOKEN.findall(text)


def bigram_tokens(text: str) -> list[str]:
    """BM25 terms: lower-cased word runs, and for each Han run its overlapping character bigrams
    (a lone Han character stays a unigram); folded to Simplified."""
    text = fold_zh(text.lower())
    out: list[str] = []
    for run in _WORD.findall(text):
        if _HAN_CHAR.search(run) is None:
            out.append(run)
            continue
        for piece in re.findall(f"[{HAN}]+|(?:(?![{HAN}])\\w)+", run):
            if _HAN_CHAR.match(piece) is None:
                out.append(piece)
            elif len(piece) == 1:
                out.append(piece)
            else:
                out.extend(piece[i:i + 2] for i in range(len(piece) - 1))
    return out


def segment_tokens(text: str) -> list[str]:
    """BM25 terms from the segmenter's search mode (words and their dictionary sub-words), folded."""
    text = fold_zh(text.lower())
    return [w for w in _jieba().cut_for_search(text) if _WORDISH.search(w)]


def lexical_tokens(text: str, mode: str = "bigram") -> list[str]:
    """BM25 terms of ``text``: ``r"\\w+"`` words of lower-cased text when it has no Han character,
    else :func:`bigram_tokens` (``mode="bigram"``) or :func:`segment_tokens` (``mode="segment"``)."""
    if text.isascii() or _HAN_CHAR.search(text) is None:
        return _WORD.findall(text.lower())
    if mode == "bigram":
        return bigram_tokens(text)
    if mode == "segment":
        return segment_tokens(text)
    raise ValueError(f"mode must be 'bigram' or 'segment', got {mode!r}")
