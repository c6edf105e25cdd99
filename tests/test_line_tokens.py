"""The context-line token counts of the query index: one encoding per batch of lines gives what line by line gives."""

from __future__ import annotations

import random

import numpy as np
import pytest

from noderag.search.query_index import line_token_counts
from noderag.tokenize import LineCounter, count_tokens, default_tokenizer, split_spans

_PIECES = ["the", "Cat", "naïve", "東京", "🙂", "'s", "'ll", "don't", "42", "1234567", "3.14", ".", ",", "!?",
           "(x)", "[7]", "--", "...", "\"q\"", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u2028", "\u3000", "\x1c",
           "\x00", "<|endoftext|>", "ﬁ", "\u200b", "e\u0301", "$", "%", "a.", "b,\n", "1\n"]


def _texts(rng: random.Random, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        k = rng.choice([0, 1, 2, 5, 12, 40])
        out.append("".join(rng.choice(_PIECES) for _ in range(k)).encode("utf-8"))
    out += [b"\x00" * 9, b"   \n\t", "".encode(), b"abc \xed\xa0\x80 def", b"\xed\xa0\x80", b"end."]
    return out


def _pages(texts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    off = np.zeros(len(texts) + 1, dtype=np.int64)
    off[1:] = np.cumsum([len(t) for t in texts])
    return off, np.frombuffer(b"".join(texts), dtype=np.uint8)


def _one_by_one(texts: list[bytes], first: int) -> list[int]:
    out = []
    for i, t in enumerate(texts):
        s = t.decode("utf-8", "surrogatepass")
        words = [] if (s[:1] == "\x00" and not s.strip("\x00")) else s.split()
        out.append(count_tokens(f"[{first + i}] " + " ".join(words) + "\n") if words else 0)
    return out


@pytest.mark.parametrize(("first", "batch"), [(0, 64), (998, 7), (999_999_990, 1000), (12_345_678_901, 64)])
def test_counts_equal_line_by_line(first: int, batch: int) -> None:
    texts = _texts(random.Random(first), 600)
    off, blob = _pages(texts)
    got = line_token_counts(off, blob, first_node=first, batch=batch)
    assert got.dtype == np.int32
    assert got.tolist() == _one_by_one(texts, first)


def test_cache_reset_changes_no_count() -> None:
    rng = random.Random(3)
    lines = [s.split() for s in ("".join(rng.choice(_PIECES) for _ in range(9)) for _ in range(300)) if s.split()]
    tok = default_tokenizer()
    small = LineCounter(tok, max_cached=5)
    got = np.concatenate([small.count(lines[i:i + 10]) for i in range(0, len(lines), 10)])
    assert got.tolist() == [tok.count_tokens(" " + " ".join(ws) + "\n") for ws in lines]
    assert len(small._word) < 60


def test_bracket_numbers() -> None:
    tok = default_tokenizer()
    ks = np.asarray([0, 7, 10, 99, 100, 999, 1000, 123456, 1234567, 10**12, 2**62], dtype=np.int64)
    assert tok.bracket_number_tokens(ks).tolist() == [tok.count_tokens(f"[{k}]") for k in ks.tolist()]


def test_python_whitespace_covers_the_pattern_whitespace() -> None:
    """The word splits rest on this: no character the tokenizer's pattern calls whitespace survives str.split."""
    import regex

    ws = regex.compile(r"\s")
    missed = [hex(c) for c in range(0x110000) if not (0xD800 <= c < 0xE000) and ws.match(chr(c)) and not chr(c).isspace()]
    assert missed == []


def test_count_tokens_lines_equals_each_alone() -> None:
    tok = default_tokenizer()
    lines = ["[1] a.\n", "[22] (x)\n", "[333] ok 's\n", "[4] 1\n", "[5] 東京🙂\n", "[6] <|endoftext|>!\n"]
    assert tok.count_tokens_lines(lines).tolist() == [tok.count_tokens(s) for s in lines]
    assert tok.count_tokens_lines([]).tolist() == []
    words = ["a.", "(x)", "'s", "42", "東京🙂", "<|endoftext|>", "e\u0301", "don't", "1234567"]
    assert tok.count_tokens_spaced(words).tolist() == [tok.count_tokens(" " + w) for w in words]


@pytest.mark.parametrize("words", [["a b"], [""], ["a\tb"]])
def test_count_tokens_spaced_needs_plain_words(words: list[str]) -> None:
    with pytest.raises(ValueError, match="non-empty and hold no whitespace"):
        default_tokenizer().count_tokens_spaced(words)


@pytest.mark.parametrize("lines", [["a\nb\n"], ["a"], ["a\r\n"]])
def test_count_tokens_lines_needs_one_break_per_line(lines: list[str]) -> None:
    with pytest.raises(ValueError, match="must end in its only line break"):
        default_tokenizer().count_tokens_lines(lines)


@pytest.mark.parametrize("odd", ["", "x\U0010fffe y"])
def test_split_spans_matches_str_split(odd: str) -> None:
    """One split for a batch (or span by span where a text holds the span mark) gives each span's words."""
    texts = [b"a  b\n c", b"", b"\x00\x00", b"\x00a\x00", b" \t ", "東京 🙂.".encode(), odd.encode(), b"z"]
    off, blob = _pages(texts)
    words, lengths = split_spans(blob, off)
    want = [[] if t and not t.strip(b"\x00") else t.decode().split() for t in texts]
    assert lengths.tolist() == [len(w) for w in want]
    assert list(words) == [w for ws in want for w in ws]
    off2, blob2 = _pages([b"pad"] + texts)
    words2, lengths2 = split_spans(blob2, off2[1:])
    assert lengths2.tolist() == lengths.tolist() and list(words2) == list(words)


def test_forked_half_gives_the_same_counts() -> None:
    """A forked child counting the second half (bytes) hands back what one process counts."""
    texts = _texts(random.Random(11), 900)
    off, blob = _pages(texts)
    one = line_token_counts(off, blob, first_node=40, batch=50, workers=1)
    two = line_token_counts(off, blob, first_node=40, batch=50, workers=2)
    assert two.tolist() == one.tolist() == _one_by_one(texts, 40)


def test_a_failed_child_is_reported() -> None:
    """Text the child cannot decode (here: in the second half only) fails the count, naming the child."""
    texts = [b"good words here"] * 400 + [b"bad \xff byte"] * 400
    off, blob = _pages(texts)
    with pytest.raises(RuntimeError, match="counting child ended with status 1"):
        line_token_counts(off, blob, batch=50, workers=2)


def test_no_fork_where_ray_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that imported Ray counts everything itself (a fork would copy Ray's threads)."""
    import os
    import sys
    import types

    def no_fork() -> int:
        raise AssertionError("forked")

    monkeypatch.setitem(sys.modules, "ray", types.ModuleType("ray"))
    monkeypatch.setattr(os, "fork", no_fork)
    texts = _texts(random.Random(5), 400)
    off, blob = _pages(texts)
    assert line_token_counts(off, blob, batch=50).tolist() == _one_by_one(texts, 0)


def test_no_fork_while_another_thread_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process with another Python thread alive counts everything itself (a lock that thread holds would stay
    held in the child)."""
    import os
    import threading

    def no_fork() -> int:
        raise AssertionError("forked")

    monkeypatch.setattr(os, "fork", no_fork)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        texts = _texts(random.Random(6), 400)
        off, blob = _pages(texts)
        assert line_token_counts(off, blob, batch=50).tolist() == _one_by_one(texts, 0)
    finally:
        stop.set()
        other.join()
