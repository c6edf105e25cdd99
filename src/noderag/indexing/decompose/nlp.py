"""Rule-based decomposer (the default, zero LLM tokens).

Semantic units are sentences (short ones grouped with a neighbour). Entities come
from capitalised multi-word names (with "of/the/de/von ..." connectors, a leading
"The" dropped, possessives trimmed), quoted titles, years and full dates, the
passage title, and optionally spaCy NER. Relationships link entity pairs that
co-occur in a sentence, with the words between them as the relation text. A Chinese chunk
also gets segmenter entities and relations (:mod:`noderag.lang.zh`), a mixed sentence both kinds.
"""

from __future__ import annotations

import re
from typing import Sequence

from ...lang import zh as _zh
from ...lang.detect import detect_language
from ...lang.entities import CONNECT, TOKEN, Mention, canonical_name, extract_mentions, non_overlapping
from ...lang.sentences import sentence_spans
from .base import ChunkDecomposition, ChunkInput, Unit

__all__ = ["NLPDecomposer", "extract_mentions", "Mention", "unit_prefix"]  # the mention rules: noderag.lang.entities


def _unvouched_start(m: Mention, vouched: set[str], ntitle: str) -> Mention | None:
    """Drop a sentence-initial capitalised common word from a name ("Ferries of the Grey Heron Line").

    A name at the start of a sentence whose first word is never capitalised inside a
    sentence of the chunk loses that word and the connectors after it; a single such
    word is no name at all. Title matches are kept.
    """
    if m.kind != "name" or m.start != 0 or _norm(m.text) == ntitle:
        return m
    words = m.text.split(" ")
    if words[0].casefold() in vouched:
        return m
    k = 1
    while k < len(words) and words[k].casefold() in CONNECT:
        k += 1
    if k == 1 or k >= len(words):  # no connector after the first word: "Ferries Grey" is rare; drop the word
        rest = words[1:] if k == 1 else []
    else:
        rest = words[k:]
    if not rest:
        return None
    text = " ".join(rest)
    start = m.end - len(text)
    return Mention(start, m.end, text, m.kind)


def unit_prefix(title: str) -> str:
    """The "Title: " a unit is prefixed with when its text does not name its passage's title."""
    return f"{title}: "


def title_aliases(title: str) -> list[str]:
    """Other names of a passage title: without a trailing "(qualifier)" and a leading article.

    ``"The Prestige (film)"`` -> ``["Prestige"]``; the extractor finds "Prestige" in running text.
    """
    base = re.sub(r"\s*\([^()]*\)\s*$", "", title).strip()
    base = re.sub(r"^(?:the|a|an)\s+", "", base, flags=re.IGNORECASE).strip()
    return [base] if base and base.casefold() != title.casefold() and any(ch.isalpha() for ch in base) else []


def _norm(text: str) -> str:
    """Case-folded text without punctuation or spaces: "does this unit text contain the title" tests,
    not a name key (names are keyed by :func:`noderag.lang.entities.canonical_name`)."""
    return re.sub(r"[\W_]+", "", text.casefold())


_RELATION_WORD = re.compile(r"[\w’'\-]+")


def sentence_relations(sent: str, mentions: list[Mention], max_words: int) -> list[tuple[str, str, str]]:
    """(source, relation, target) for adjacent mention pairs and (first mention, later mention) pairs."""
    rels: list[tuple[str, str, str]] = []
    gaps = [_RELATION_WORD.findall(sent, mentions[k].end, mentions[k + 1].start) for k in range(len(mentions) - 1)]
    for i in range(len(mentions) - 1):
        _add_relation(rels, mentions[i], mentions[i + 1], gaps[i], max_words)
        if i == 0:
            # (first mention, later mention): the words between them only grow with the distance,
            # so the pairs stop at the first one over max_words (linear, not quadratic, per sentence)
            words = list(gaps[0])
            for j in range(2, len(mentions)):
                words.extend(gaps[j - 1])
                if len(words) > max_words:
                    break
                _add_relation(rels, mentions[0], mentions[j], words, max_words)
    return rels


def _add_relation(rels: list, ma: Mention, mb: Mention, words: list[str], max_words: int) -> None:
    """Append (ma, the words between, mb) unless both name the same thing or the words are none or too many."""
    if canonical_name(ma.text) == canonical_name(mb.text) or not words or len(words) > max_words:
        return
    rels.append((ma.text, " ".join(words), mb.text))


class NLPDecomposer:
    """Rule-based decomposer; pure per chunk, deterministic, zero LLM tokens.

    Parameters
    ----------
    config : DecomposeConfig
    """

    name = "nlp"

    def __init__(self, config) -> None:
        self.config = config
        self._nlp = None
        if config.use_spacy:
            try:
                import spacy  # optional

                self._nlp = spacy.load(config.spacy_model, disable=["parser", "lemmatizer"])
            except (ImportError, OSError) as exc:
                raise RuntimeError(
                    f"decompose.use_spacy is set but spaCy model {config.spacy_model!r} cannot be loaded: {exc}"
                ) from None

    def _units_of(self, text: str, title: str | None = None) -> list[list[tuple[int, int]]]:
        """Group sentence spans into units (short sentences join a neighbour)."""
        from ...tokenize import count_tokens

        spans = []
        ntitle = _norm(title) if title else None
        for a, b in sentence_spans(text):
            m = re.match(r"#{1,6}\s+", text[a:b])  # Markdown heading marker
            if m:
                a += m.end()
                if ntitle is not None and _norm(text[a:b]) == ntitle:
                    continue  # the title heading itself: the title is an entity of every unit anyway
            if b > a:
                spans.append((a, b))
        groups: list[list[tuple[int, int]]] = []
        cur: list[tuple[int, int]] = []
        cur_n = 0
        lo, hi = self.config.unit_min_tokens, self.config.unit_max_tokens
        for a, b in spans:
            n = count_tokens(text[a:b])
            if cur and (cur_n >= lo or cur_n + n > hi):
                groups.append(cur)
                cur, cur_n = [], 0
            cur.append((a, b))
            cur_n += n
        if cur:
            if groups and cur_n < lo:
                last_n = sum(count_tokens(text[a:b]) for a, b in groups[-1])
                if last_n + cur_n <= hi:
                    groups[-1].extend(cur)
                    cur = []
            if cur:
                groups.append(cur)
        return groups

    def _decompose_one(self, chunk: ChunkInput) -> ChunkDecomposition:
        cfg = self.config
        text = chunk.text
        title = chunk.title if cfg.title_entity else None
        ntitle = _norm(title) if title else ""
        aliases = title_aliases(title) if title else []
        groups = self._units_of(text, title)
        zh_chunk = detect_language(text) == "zh"  # noderag.lang: per chunk, by the share of Han letters
        # capitalised words seen inside sentences (not first word) vouch for sentence-initial ones
        vouched: set[str] = set()
        for group in groups:
            for a, b in group:
                toks = TOKEN.findall(text, a, b)
                vouched.update(t.casefold() for t in toks[1:] if t[0].isupper())
        units: list[Unit] = []
        for group in groups:
            ents: list[str] = []
            rels: list[tuple[str, str, str]] = []
            for a, b in group:
                sent = text[a:b]
                mentions = extract_mentions(sent, dates=cfg.dates, numbers=cfg.numbers)
                mentions = [_unvouched_start(m, vouched, ntitle) for m in mentions]
                mentions = [m for m in mentions if m is not None]
                if self._nlp is not None:
                    mentions = self._merge_ner(sent, mentions)
                if zh_chunk:  # Chinese (or mixed) chunk: add segmenter entities, relate both kinds
                    mentions = _zh.add_mentions(sent, mentions)
                    rels.extend(_zh.sentence_relations(sent, mentions, cfg.max_relation_words))
                else:
                    rels.extend(sentence_relations(sent, mentions, cfg.max_relation_words))
                ents.extend(m.text for m in mentions)
            utext = " ".join(" ".join(text[a:b].split()) for a, b in group)
            if title:
                inside = ntitle in _norm(utext)
                if not inside or not any(_norm(e) == ntitle for e in ents):
                    ents.append(title)
                for alias in aliases:
                    if not any(_norm(e) == _norm(alias) for e in ents):
                        ents.append(alias)
                if cfg.title_prefix and not inside:
                    utext = unit_prefix(title) + utext
            units.append(Unit(utext, ents, rels))
        return ChunkDecomposition(chunk.chunk_id, units, None)

    def _merge_ner(self, sent: str, mentions: list[Mention]) -> list[Mention]:
        doc = self._nlp(sent)
        extra = [Mention(e.start_char, e.end_char, e.text, "ner") for e in doc.ents
                 if e.label_ in ("PERSON", "ORG", "GPE", "LOC", "NORP", "FAC", "EVENT", "WORK_OF_ART", "PRODUCT", "LAW")]
        allm = sorted(extra + mentions, key=lambda m: (0 if m.kind == "ner" else 1, m.start))
        return non_overlapping(allm, len(sent))

    def decompose(self, chunks: Sequence[ChunkInput]) -> list[ChunkDecomposition]:
        """Decompose every chunk (one result per chunk, in order)."""
        return [self._decompose_one(c) for c in chunks]
