"""Text integrity: chunks never split or lose a character (property test), and text processing is linear."""

from __future__ import annotations

import gc
import random
import time

import pytest
import regex
from hypothesis import example, given, settings
from hypothesis import strategies as st

from noderag.config import NodeRAGConfig
from noderag.indexing.chunk import chunk_text
from noderag.indexing.decompose.base import ChunkInput
from noderag.indexing.decompose.nlp import NLPDecomposer
from noderag.lang.sentences import sentence_spans
from noderag.tokenize import count_tokens

_CLUSTER = regex.compile(r"\X")

# pieces of many scripts: CJK, emoji (ZWJ families, skin tones, flags, keycaps), combining marks,
# RTL (Arabic, Hebrew), Devanagari conjuncts, Hangul jamo, Thai, Latin with abbreviations
_PIECES = [
    "中文文本没有空格", "。", "！", "日本語のテキスト", "한국어", "\u1100\u1161\u11a8",
    "👨\u200d👩\u200d👧\u200d👦", "👍🏽", "🇫🇷🇩🇪", "1\ufe0f\u20e3", "🏳️\u200d🌈",
    "e\u0301", "a\u0308\u0323", "Z\u0351\u0352\u0353\u0354\u0355", "ñ",
    "مرحبا بالعالم", "שָׁלוֹם", "\u200f", "क्षत्रिय", "नमस्ते", "ภาษาไทย",
    "Dr. Smith", "U.S.", "e.g.", "Paris", "1887.", "word", "?", "!",
    " ", " ", "  ", "\n", "\n\n", "\t", "\r\n", ".", ",", "-",
]
_text = st.one_of(
    st.lists(st.sampled_from(_PIECES), max_size=120).map("".join),
    st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=300),
)


def _boundaries(text: str) -> set[int]:
    return {0} | {m.end() for m in _CLUSTER.finditer(text)}


def _positions(text: str, chunks: list[str]) -> list[tuple[int, int]]:
    """Where each chunk lies in ``text``; asserts the chunks are the text in order minus whitespace between them."""
    pos, spans = 0, []
    for c in chunks:
        while pos < len(text) and text[pos].isspace() and not text.startswith(c, pos):
            pos += 1
        assert text.startswith(c, pos), f"chunk {c!r} is not the source at {pos}: {text[pos:pos + 40]!r}"
        spans.append((pos, pos + len(c)))
        pos += len(c)
    assert text[pos:].strip() == "", f"source text after the last chunk was lost: {text[pos:pos + 40]!r}"
    return spans


@settings(max_examples=300, deadline=None)
@given(text=_text, max_tokens=st.integers(1, 48), min_tokens=st.integers(0, 16))
@example(text=" 👍🏽中文文本没有空格", max_tokens=6, min_tokens=0)  # " 👍🏽中" is 6 tokens, stripped 7
@example(text=" 👍🏽中", max_tokens=6, min_tokens=0)  # the same when the whole text fits before stripping
def test_chunks_reassemble_to_the_source_on_cluster_boundaries(text, max_tokens, min_tokens):
    chunks = chunk_text(text, max_tokens, min_tokens)
    spans = _positions(text, chunks)  # nothing lost, nothing added, order kept (whitespace between chunks aside)
    assert sum(c.count("\ufffd") for c in chunks) <= text.count("\ufffd")
    assert all(c and c == c.strip() for c in chunks)
    assert "".join("".join(c.split()) for c in chunks) == "".join(text.split())
    bounds = _boundaries(text)
    for a, b in spans:
        for cut in (a, b):
            if cut not in bounds:  # only a cluster that alone exceeds the limit may be cut inside
                cluster = next(m.group() for m in _CLUSTER.finditer(text) if m.start() < cut < m.end())
                assert count_tokens(cluster) > max_tokens, (cut, cluster)
    # over the limit only when one character (or one cluster) alone is: nothing smaller can be cut
    assert all(count_tokens(c) <= max_tokens or len(_CLUSTER.findall(c)) == 1 for c in chunks)


def test_long_unspaced_chinese_and_emoji_keep_every_character():
    rng = random.Random(7)
    zh = "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(20000))
    emoji = "👨\u200d👩\u200d👧🇫🇷e\u0301👍🏽" * 2000
    for text, limit in ((zh, 1024), (zh, 37), (emoji, 100)):
        chunks = chunk_text(text, limit, 8)
        assert "".join(chunks) == text
        assert not any("\ufffd" in c for c in chunks)
        assert max(count_tokens(c) for c in chunks) <= limit
        bounds = _boundaries(text)
        pos = 0
        for c in chunks[:-1]:
            pos += len(c)
            assert pos in bounds


def _one_line(n_chars: int, seed: int = 0) -> str:
    """A one-line multilingual text of ``n_chars`` characters: sentences with abbreviations, names, CJK, emoji."""
    rng = random.Random(seed)
    words = ("the of and in was built by river museum company song written Paris London John Smith "
             "Dr. Brown U.S. e.g. St. Mary 1887 19 May 1901 \"Blue Moon\" Bank of England").split(" ")
    parts, size = [], 0
    while size < n_chars:
        r = rng.random()
        if r < 0.8:
            s = " ".join(rng.choice(words) for _ in range(rng.randint(4, 18))).capitalize() + rng.choice(".!?") + " "
        elif r < 0.95:
            s = "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(rng.randint(5, 40))) + "。"
        else:
            s = "👨\u200d👩\u200d👧 caf\u00e9 e\u0301t\u00e9 " * rng.randint(1, 4)
        parts.append(s)
        size += len(s)
    return "".join(parts)[:n_chars]


def _best_time(fn, text: str, repeats: int) -> float:
    """The least CPU time (of this process: other processes on the machine do not count) of ``repeats`` runs,
    with the garbage collector off as ``timeit`` does."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            t0 = time.process_time()
            fn(text)
            best = min(best, time.process_time() - t0)
        finally:
            gc.enable()
    return best


@pytest.mark.slow
def test_text_processing_is_linear_in_length():
    """Sentence splitting, chunking and the nlp decomposer: time(4 MB) / time(1 MB) near 4 (not 16), one line each."""
    dec = NLPDecomposer(NodeRAGConfig().decompose)
    stages = {
        "sentences": sentence_spans,
        "chunk": lambda t: chunk_text(t, 1024, 64),
        "nlp": lambda t: dec.decompose([ChunkInput(0, t, "Title")]),
    }
    small, large = _one_line(1 << 20), _one_line(4 << 20, seed=1)
    assert "\n" not in large
    count_tokens("warm up")
    # quadratic work gives ~16 and n^1.5 gives 8; every bound is below 8. Alone, sentences and chunking
    # measure 4.0-4.4 and the nlp decomposer 4.0-4.65 (per-chunk sorts of its mentions are n log n). Late in
    # the full suite on the shared 2-core machine, sentences measured 5.4 and 5.8 (two CI runs, best of 15),
    # while a 1/2/4/8 MB series run alone gave 8 MB / 2 MB ratios from 2.5 to 5.2: timing noise of ~30% on
    # 0.1-0.5 s runs, not growth. The bounds leave that room and still fail anything superlinear beyond
    # n log n by a wide margin (the 4.5 is inside the noise; said in the closing notes).
    limits = {"sentences": 7.0, "chunk": 5.5, "nlp": 6.0}
    # best of 3 each, the sizes interleaved, so a burst of noise on the shared machine hits both alike; a stage
    # over its bound is measured again (up to 3 rounds: CI once saw sentences at 5.8 under load), which a linear
    # stage passes at once and a quadratic one (~16) never does
    best = {name: [float("inf"), float("inf")] for name in stages}
    ratios: dict[str, float] = {}
    for _round in range(3):
        pending = [name for name in stages if ratios.get(name, float("inf")) > limits[name]]
        if not pending:
            break
        for _ in range(3):
            for name in pending:
                best[name][0] = min(best[name][0], _best_time(stages[name], small, 1))
                best[name][1] = min(best[name][1], _best_time(stages[name], large, 1))
        ratios = {name: large_s / small_s for name, (small_s, large_s) in best.items()}
    assert all(ratios[name] <= limits[name] for name in ratios), ratios
