"""Title links over hashed heads (noderag.search.titles) against the dict reference they replaced."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import example, given, settings, strategies as st

from noderag.lang.entities import STOP
from noderag.lang.zh import match_tokens
from noderag.search.titles import (MAX_HEAD_TOKENS, TitleLinks, title_table, _ascii_keys, _name_start, fold_token, head_hash,
                                   title_head, title_key, token_hash)


class DictLinks:
    """The reference: a dict of every title head (the former TitleLinks)."""

    def __init__(self, titles: dict[int, str]) -> None:
        self.heads: dict[str, list[int]] = {}
        lengths: dict[str, set[int]] = {}
        for d in sorted(titles):
            toks = match_tokens(title_head(titles[d]))
            if not toks or len(toks) > MAX_HEAD_TOKENS or (len(toks) == 1 and toks[0].casefold() in STOP):
                continue
            self.heads.setdefault(" ".join(map(fold_token, toks)), []).append(int(d))
            lengths.setdefault(fold_token(toks[0]), set()).add(len(toks))
        self.first = {w: tuple(sorted(ns, reverse=True)) for w, ns in lengths.items()}

    def named_groups(self, text: str) -> list[list[int]]:
        if not self.heads or not text:
            return []
        surface = match_tokens(text)
        folded = list(map(fold_token, surface))
        out, groups, after = [], [], 0
        starts = [i for i, (w, f) in enumerate(zip(surface, folded)) if f in self.first and _name_start(w)]
        for s in starts:
            if s < after:
                continue
            for n in self.first[folded[s]]:
                if n > len(surface) - s:
                    continue
                docs = self.heads.get(" ".join(folded[s:s + n]))
                if docs:
                    new = [d for d in docs if d not in out]
                    if new:
                        out.extend(new)
                        groups.append(new)
                    after = s + n
                    break
        return groups


_WORDS = ["West", "Chicago", "Illinois", "the", "The", "of", "Brand", "play", "A", "b_c", "X1", "1999", "Snow",
          "Hank", "Nashville", "Tennessee", "Akinoshū", "Kenji", "馬祖", "列島", "river", "River", "Tekezé", "and"]
_PUNCT = [" ", "  ", ", ", " (", ")", "(", ",", "'", "-", " - ", ".", "\t", "\n"]
_piece = st.one_of(st.sampled_from(_WORDS), st.sampled_from(_PUNCT), st.text(max_size=3))
_title = st.lists(_piece, max_size=8).map("".join)


def _ascii_reference(title: str) -> tuple[int, int, int]:
    key = title_key(title)
    if key is None:
        return 0, 0, 0
    hashes = [token_hash(t) for t in key]
    return head_hash(hashes), hashes[0], len(key)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30) | _title.filter(
    lambda t: all(0x20 <= ord(c) <= 0x7E for c in t)), max_size=12))
@example(["Brand (play)", "West Chicago, Illinois", "(x)", " ( a ) ", "a,b,(c)", "The", "x (y) (z)", ", a", ""])
def test_ascii_keys_match_the_reference(titles):
    arr = pa.array(titles, type=pa.large_string())
    off = np.frombuffer(arr.buffers()[1], dtype=np.int64)[: len(titles) + 1]
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    head, first, ntok = _ascii_keys(off, data[: int(off[-1])])
    for i, t in enumerate(titles):
        want = _ascii_reference(t)
        if want[2] == 0:  # no head, too long a head, or one stop word (the caller drops the last two)
            toks = match_tokens(title_head(t))
            assert ntok[i] == len(toks), t
            assert not toks or len(toks) > MAX_HEAD_TOKENS or toks[0].casefold() in STOP, t
            continue
        assert (int(head[i]), int(first[i]), int(ntok[i])) == want, t


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(0, 40), _title, max_size=15), st.lists(_piece, max_size=25).map("".join))
@example({0: "West Chicago, Illinois", 1: "Chicago", 2: "The (band)", 3: "West Chicago High School"},
         "He went to West Chicago High School in Chicago. Born in West Chicago.")
@example({0: "Akinoshū Kenji", 1: "Tekeze River", 2: "馬祖列島"}, "Akinoshu Kenji 馬祖列島 Tekezé River")
def test_named_groups_match_the_dict_reference(titles, text):
    docs = np.asarray(sorted(titles), dtype=np.int64)
    links = TitleLinks(titles, docs + 100, docs)
    assert links.named_groups(text) == DictLinks(titles).named_groups(text)
    named = " ".join(titles.values())  # every title named: its own heads are found
    assert links.named_groups(named) == DictLinks(titles).named_groups(named)


def test_from_arrow_skips_null_and_empty_titles():
    arr = pa.chunked_array([pa.array(["Hank Snow", None, "", "Nashville, Tennessee"])])
    links = TitleLinks.from_arrow(np.array([3, 4, 5, 6]), arr, np.array([10, 11]), np.array([3, 6]))
    assert links.named_groups("Hank Snow sang in Nashville.") == [[3], [6]]
    assert links.passages(6).tolist() == [11]


def test_from_arrow_reads_sliced_null_and_dictionary_columns():
    sliced = pa.chunked_array([pa.array(["x", "Hank Snow", "Paris (city)"])]).slice(1)
    links = TitleLinks.from_arrow(np.array([7, 8]), sliced, np.array([1, 2]), np.array([7, 8]))
    assert links.named_groups("Hank Snow went to Paris.") == [[7], [8]]
    coded = pa.array(["Paris", "Nashville, Tennessee"]).dictionary_encode()
    assert TitleLinks.from_arrow(np.array([0, 1]), coded, np.array([0]), np.array([0])).named_docs(
        "From Nashville to Paris") == [1, 0]
    empty = TitleLinks.from_arrow(np.array([0, 1]), pa.array([None, None], type=pa.null()), np.array([0]), np.array([0]))
    assert empty.named_groups("Paris") == []


def test_table_links_skip_deleted_passages():
    titles = pa.array(["Hank Snow", "Nashville, Tennessee"])
    table = title_table(np.array([3, 6]), titles, np.array([10, 11, 12]), np.array([3, 6, 6]))
    active = np.ones(13, bool)
    assert TitleLinks.from_table(table, active).passages(6).tolist() == [11, 12]
    active[11] = False  # deleted since the table was written
    links = TitleLinks.from_table(table, active)
    assert links.passages(6).tolist() == [12]
    assert links.named_groups("Hank Snow sang in Nashville.") == [[3], [6]]


def _candidates_reference(hashes, can_start, first, first_mask, heads, max_tokens):
    """Every (start, length, lo, hi) whose head hash is in ``heads``, by start, longest first: Python ints."""
    out = []
    for s in range(len(hashes)):
        if not can_start[s] or hashes[s] not in first:
            continue
        mask = first_mask[first.index(hashes[s])]
        for n in range(min(max_tokens, len(hashes) - s), 0, -1):
            h = head_hash(hashes[s:s + n]) if n > 1 else hashes[s]
            if mask >> n & 1 and h in heads:
                out.append((s, n, heads.index(h), len(heads) - heads[::-1].index(h)))
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=30), st.lists(st.booleans(), min_size=30, max_size=30),
       st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=4), max_size=12), st.integers(1, 4))
def test_title_candidates_match_a_reference(tokens, can_start, titles, max_tokens):
    """The core's candidates over token hashes (a few distinct tokens: heads recur, and repeat in the table)
    against a scan of every start and length."""
    from noderag._core import title_candidates
    from noderag.search.titles import _Q

    value = [token_hash(f"w{t}") for t in range(6)]
    hashes = [value[t] for t in tokens]
    heads = sorted(head_hash([value[t] for t in title]) for title in titles)
    masks: dict[int, int] = {}
    for title in titles:
        masks[value[title[0]]] = masks.get(value[title[0]], 0) | 1 << len(title)
    first = sorted(masks)
    first_mask = [masks[h] for h in first]
    got = title_candidates(np.asarray(hashes, np.uint64), np.asarray(can_start[:len(hashes)], bool),
                           np.asarray(first, np.uint64), np.asarray(first_mask, np.int64),
                           np.asarray(heads, np.uint64), max_tokens, _Q)
    want = _candidates_reference(hashes, can_start, first, first_mask, heads, max_tokens)
    assert list(zip(*(c.tolist() for c in got))) == want


def test_a_hash_proposes_and_the_title_decides():
    """A head whose hash is found but whose title's own tokens differ (a collision, forced here) is passed
    over for the next shorter head at the same place."""
    titles = {0: "West Chicago High School", 1: "West Chicago"}
    docs = np.asarray(sorted(titles), dtype=np.int64)
    links = TitleLinks(titles, docs + 100, docs)
    text = "He went to West Chicago High School."
    assert links.named_groups(text) == [[0]]
    row = int(np.flatnonzero(np.asarray(links._hdoc) == 0)[0])
    links._keys[row] = ("east", "chicago", "high", "school")  # as if another title bore this hash
    assert links.named_groups(text) == [[1]]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=40), st.lists(st.integers(0, 7), max_size=8),
       st.lists(st.integers(0, 39), max_size=10))
def test_passages_of_several_documents_concatenate_each_ones_passages_in_order(doc_of, asked, deleted):
    """passages_of(docs) == the per-document passages joined in the order asked (deleted passages left out)."""
    pids = np.arange(100, 100 + len(doc_of))
    order = np.argsort(doc_of, kind="stable")  # the table keeps passages by (document, id)
    table = title_table(np.arange(8), pa.array([f"Title {d}" for d in range(8)]), pids[order],
                        np.asarray(doc_of)[order])
    active = np.ones(200, bool)
    active[pids[[i for i in deleted if i < len(doc_of)]]] = False
    links = TitleLinks.from_table(table, active)
    want = [p for d in asked for p in links.passages(d).tolist()]
    assert links.passages_of(asked).tolist() == want
    assert want == [int(p) for d in asked for p in sorted(pids[np.asarray(doc_of) == d]) if active[p]]
