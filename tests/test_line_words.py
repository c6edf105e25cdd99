"""The compiled core's context-line counts (``LineCounter.count_spans``): the same words and counts as the Python
path (``split_spans`` + ``count_flat``), whatever the whitespace, erased texts, lone surrogates or cache size."""

from __future__ import annotations

import random

import numpy as np
import pytest

from noderag._core import LineWords
from noderag.tokenize import LineCounter, default_tokenizer, split_spans

#: Every character ``str.split()`` splits at, and some it does not.
_SPACES = [chr(c) for c in range(0x110000) if chr(c).isspace()]
_OTHER = ["a", "Zürich", "東京", "🙂", "\u200b", "\x00", "\ufeff", "\u180e", "'s", ".", "1234", "\udc80", "\x7f",
          "\u2027", "\u202e", "\u205e", "\u3001", "\xa1", "\x84", "\x86"]


def _blob(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    data = [t.encode("utf-8", "surrogatepass") for t in texts]
    off = np.zeros(len(data) + 1, dtype=np.int64)
    off[1:] = np.cumsum([len(b) for b in data])
    return np.frombuffer(b"".join(data), dtype=np.uint8).copy(), off


def _texts(rng: random.Random, n: int) -> list[str]:
    pieces = _SPACES + _OTHER
    out = ["".join(rng.choice(pieces) for _ in range(rng.choice([0, 1, 3, 8, 30]))) for _ in range(n)]
    return out + ["\x00" * 7, "", " ", "\x00 \x00", "end"]


def test_there_are_29_split_characters():
    assert len(_SPACES) == 29  # what csrc/line_words.cpp recognises


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_count_spans_equals_the_python_path(seed):
    texts = _texts(random.Random(seed), 400)
    blob, off = _blob(texts)
    tok = default_tokenizer()
    words, lengths = split_spans(blob, off)
    want = LineCounter(tok).count_flat(words, lengths)
    counter = LineCounter(tok)
    for lo, hi in ((0, 150), (150, 151), (151, len(texts))):  # the cache carried from call to call
        got, got_len = counter.count_spans(blob, off[lo:hi + 1])
        assert got_len.tolist() == lengths[lo:hi].tolist()
        assert got.tolist() == want[lo:hi].tolist()


def test_a_small_cache_changes_no_count():
    texts = _texts(random.Random(7), 300)
    blob, off = _blob(texts)
    tok = default_tokenizer()
    want = LineCounter(tok).count_spans(blob, off)[0]
    small = LineCounter(tok, max_cached=5)
    got = np.concatenate([small.count_spans(blob, off[a:a + 11])[0] for a in range(0, len(texts), 10)])
    assert got.tolist() == want.tolist()
    assert len(small._native) < 80


def test_line_words_checks_its_input():
    lw = LineWords(10)
    blob = np.frombuffer(b"ab cd", dtype=np.uint8)
    with pytest.raises(ValueError, match="offsets must rise within the blob's 5 bytes"):
        lw.missing(blob, np.array([0, 6], dtype=np.int64))
    with pytest.raises(ValueError, match="offsets must rise"):
        lw.count(blob, np.array([3, 1], dtype=np.int64))
    with pytest.raises(RuntimeError, match="a word without a cached count"):
        lw.count(blob, np.array([0, 5], dtype=np.int64))
    assert lw.missing(blob, np.array([0, 5], dtype=np.int64)) == ([b"ab", b"cd"], [b"cd"])
    with pytest.raises(TypeError):
        lw.missing(blob.astype(np.int64), np.array([0, 5], dtype=np.int64))  # no silent conversion
