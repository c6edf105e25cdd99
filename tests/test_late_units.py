"""Late chunking of semantic units: span pooling in the ONNX embedder, span alignment, the
resumable late embedding stage and the ``embed.late_units`` build option."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderag.config import NodeRAGConfig
from noderag.data import demo_dir
from noderag.embed.base import l2_normalize
from noderag.embed.onnx import minilm_embedder
from noderag.graph.types import NodeType
from noderag.indexing.embedding import embed_late_resumable, unit_spans
from noderag.indexing.driver import build_index
from noderag.store.tables import IndexStore

T, S = int(NodeType.T), int(NodeType.S)


@pytest.fixture(scope="module")
def minilm():
    return minilm_embedder(n_threads=2)


def _states(emb, text: str):
    """Token states and offsets of ``text`` in one run (no truncation), the reference for pooling."""
    enc = emb._full_tokenizer().encode(text)
    ids = np.asarray(enc.ids, dtype=np.int64)[None, :]
    hidden = emb._hidden(ids, np.ones_like(ids))[0]
    return hidden, np.asarray(enc.offsets), np.asarray(enc.special_tokens_mask)


def _reference_span(emb, text: str, a: int, b: int, head: int = 0) -> np.ndarray:
    hidden, offsets, special = _states(emb, text)
    content = special == 0
    in_head = content & (offsets[:, 0] < head)
    in_span = content & ~in_head & (offsets[:, 1] > a) & (offsets[:, 0] < b)
    return l2_normalize(hidden[in_head | in_span].mean(axis=0, keepdims=True))[0]


def test_text_vectors_equal_embed_and_spans_match_reference(minilm):
    texts = ["The Journal of Mathematical Physics is a peer-reviewed journal. Its editor is Jan Philip Solovej.",
             "Paris is the capital of France.  It lies on the Seine."]
    spans = [[(0, 63), (64, len(texts[0]))], [(33, len(texts[1])), (0, 31)]]
    tv, sv, covered = minilm.embed_with_spans(texts, spans)
    assert np.array_equal(tv, minilm.embed(texts))
    assert covered.all() and sv.shape == (4, minilm.dim)
    flat = [(i, a, b) for i, sp in enumerate(spans) for a, b in sp]
    for row, (i, a, b) in enumerate(flat):
        np.testing.assert_allclose(sv[row], _reference_span(minilm, texts[i], a, b), atol=1e-5)
    # a span's vector is about the span, in context: closest to its own sentence embedded alone
    alone = minilm.embed([texts[i][a:b] for i, a, b in flat])
    sims = sv @ alone.T
    assert np.array_equal(sims.argmax(axis=1), np.arange(4))


def test_head_tokens_join_every_span(minilm):
    head = "Seine: "
    text = head + "It is a river. It flows through Paris."
    a = len(head) + text[len(head):].index("It flows")
    tv, sv, covered = minilm.embed_with_spans([text], [[(a, len(text))]], heads=[len(head)])
    assert covered.all()
    assert np.array_equal(tv, minilm.embed([text]))
    np.testing.assert_allclose(sv[0], _reference_span(minilm, text, a, len(text), head=len(head)), atol=1e-5)
    _, plain, _ = minilm.embed_with_spans([text], [[(a, len(text))]])
    assert not np.allclose(plain[0], sv[0], atol=1e-3)


def test_spans_past_the_first_window(minilm):
    words = [f"Sentence {i} is about the river number {i} in the valley." for i in range(80)]
    text = " ".join(words)
    assert len(minilm._full_tokenizer().encode(text).ids) > 3 * minilm.max_length
    last = (len(text) - len(words[-1]), len(text))
    middle_at = text.index(words[40])
    middle = (middle_at, middle_at + len(words[40]))
    spans = [[(0, len(words[0])), middle, last, (0, len(text)), (5, 5)]]
    tv, sv, covered = minilm.embed_with_spans([text], spans)
    assert np.array_equal(tv, minilm.embed([text]))  # the text vector is its first window, as embed truncates
    assert covered.tolist() == [True, True, True, False, False]  # too long for a window; empty
    assert np.all(sv[~covered] == 0)
    np.testing.assert_allclose(np.linalg.norm(sv[covered], axis=1), 1.0, atol=1e-5)
    # reference: a later span is read from the window of max_length tokens that starts at its first
    # token, or from the text's last window when that would run past the end
    enc = minilm._full_tokenizer().encode(text)
    ids, offsets = np.asarray(enc.ids), np.asarray(enc.offsets)
    body, offs = ids[1:-1], offsets[1:-1]
    width = minilm.max_length - 2
    for row, (a, b) in ((1, middle), (2, last)):
        toks = np.flatnonzero((offs[:, 1] > a) & (offs[:, 0] < b))
        start = min(toks[0], body.size - width)
        window = np.concatenate([[ids[0]], body[start:start + width], [ids[-1]]])[None, :]
        hidden = minilm._hidden(window, np.ones_like(window))[0]
        want = l2_normalize(hidden[1 + toks - start].mean(axis=0, keepdims=True))[0]
        np.testing.assert_allclose(sv[row], want, atol=1e-5)


def test_embed_with_spans_input_errors(minilm):
    with pytest.raises(ValueError, match="span lists"):
        minilm.embed_with_spans(["a", "b"], [[(0, 1)]])
    with pytest.raises(ValueError, match="heads"):
        minilm.embed_with_spans(["a"], [[(0, 1)]], heads=[0, 0])
    with pytest.raises(TypeError, match=r"texts\[0\]"):
        minilm.embed_with_spans([3], [[]])
    tv, sv, covered = minilm.embed_with_spans([], [])
    assert tv.shape == (0, minilm.dim) and sv.shape == (0, minilm.dim) and covered.shape == (0,)


_WORD = st.text(alphabet="abcXYZ,.;'é", min_size=1, max_size=6)
_SPACE = st.sampled_from([" ", "  ", "\n", "\t ", " \n\n"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_WORD, _SPACE), min_size=1, max_size=30), st.data())
def test_unit_spans_recover_whitespace_collapsed_extracts(words, data):
    chunk = data.draw(_SPACE) + "".join(w + s for w, s in words)
    n = len(words)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, n - 1), max_size=5)) if n > 1 else []))
    bounds = [0, *cuts, n]
    units = [" ".join(w for w, _ in words[a:b]) for a, b in zip(bounds, bounds[1:])]
    prefix = "Title: "
    tagged = [prefix + u if k % 2 else u for k, u in enumerate(units)]
    found = unit_spans(chunk, tagged, prefix)
    for unit, span in zip(units, found):
        assert span is not None
        a, b = span
        assert " ".join(chunk[a:b].split()) == unit
        assert chunk[a:b] == chunk[a:b].strip()


def test_unit_spans_order_repeats_and_misses():
    chunk = "It rains.  It rains. Then sun."
    assert unit_spans(chunk, ["It rains.", "It rains.", "Then sun.", "Snow."]) == [(0, 9), (11, 20), (21, 30), None]
    assert unit_spans(chunk, ["Then sun.", "It rains."]) == [(21, 30), (0, 9)]  # out of order: searched again
    assert unit_spans(chunk, ["X: Then sun."], "X: ") == [(21, 30)]
    assert unit_spans(chunk, ["", "X: Snow."], "X: ") == [None, None]


class _SpanDouble:
    """Test double with the span capability: vectors are hashes of the pieces of text they cover."""

    name = "span-double"
    dim = 16

    def __init__(self, uncovered: str = "") -> None:
        self.uncovered = uncovered
        self.calls: list[str] = []

    @staticmethod
    def _vec(text: str) -> np.ndarray:
        rng = np.random.default_rng(sum(text.encode()) + 7 * len(text))
        return l2_normalize(rng.normal(size=(1, 16)))[0]

    def embed(self, texts, *, batch_size=None):
        self.calls.append("embed")
        return np.stack([self._vec("alone:" + t) for t in texts]) if texts else np.zeros((0, 16), np.float32)

    def embed_with_spans(self, texts, spans, heads=None):
        self.calls.append("spans")
        heads = heads or [0] * len(texts)
        tv = np.stack([self._vec("text:" + t) for t in texts])
        rows = [(t, h, a, b) for t, h, sp in zip(texts, heads, spans) for a, b in sp]
        sv = np.stack([self._vec(f"span:{t[:h]}|{t[a:b]}") for t, h, a, b in rows]) if rows else np.zeros((0, 16))
        covered = np.array([self.uncovered not in t[a:b] or not self.uncovered for t, h, a, b in rows], dtype=bool)
        sv[~covered] = 0
        return tv, sv.astype(np.float32), covered


def test_embed_late_resumable_routes_every_unit(tmp_path):
    chunks = ["Alpha one. Alpha two.", "Beta one.  Beta skip.", "Gamma one."]
    units = ["T2: Gamma one.", "Alpha two.", "Beta skip.", "Alpha one.", "paraphrase of beta", "Beta one."]
    unit_chunk = np.array([2, 0, 1, 0, 1, 1])
    prefixes = ["T0: ", None, "T2: "]
    emb = _SpanDouble(uncovered="skip")
    cv, uv, late = embed_late_resumable(emb, chunks, units, unit_chunk, prefixes, tmp_path / "st", batch_size=2)
    assert late == 4
    for c, p in enumerate(prefixes):
        np.testing.assert_array_equal(cv[c], emb._vec("text:" + (p or "") + chunks[c]))
    for u, (unit, c) in enumerate(zip(units, unit_chunk)):
        p = prefixes[c] or ""
        body = unit[len(p):] if p and unit.startswith(p) else unit
        if unit in ("Beta skip.", "paraphrase of beta"):  # not covered / not a span: embedded alone
            np.testing.assert_array_equal(uv[u], emb._vec("alone:" + unit))
        else:
            np.testing.assert_array_equal(uv[u], emb._vec(f"span:{p}|{body}"))
    # a rerun reuses every saved batch
    again = _SpanDouble(uncovered="skip")
    cv2, uv2, _ = embed_late_resumable(again, chunks, units, unit_chunk, prefixes, tmp_path / "st", batch_size=2)
    assert again.calls == [] and np.array_equal(cv, cv2) and np.array_equal(uv, uv2)
    with pytest.raises(ValueError, match="unit_chunk"):
        embed_late_resumable(emb, chunks, units, unit_chunk[:2], prefixes, None)


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
@pytest.mark.parametrize("late", [False, True])
def test_build_with_late_units(tmp_path, late):
    config = NodeRAGConfig().with_overrides({"embed.late_units": late, "embed.vector_dtype": "f32"})
    out = tmp_path / "idx"
    build_index([demo_dir()], out, config, progress=False)
    store = IndexStore.open(out)
    emb = minilm_embedder()
    types = np.asarray(store.types)
    t = int(np.flatnonzero(types == T)[0])
    mine = [int(s) for s in np.flatnonzero(types == S) if store.chunk_ids[s] == t]
    got = np.asarray(store.vectors.get(np.array([t, *mine], dtype=np.int64)), dtype=np.float32)
    if late:
        title = store.documents.to_pydict()["title"][store.doc_ids[t]]
        prefix = f"{title}: " if title else ""
        spans = unit_spans(store.texts[t], [store.texts[s] for s in mine], prefix or None)
        assert all(sp is not None for sp in spans)
        tv, sv, covered = emb.embed_with_spans([prefix + store.texts[t]],
                                               [[(a + len(prefix), b + len(prefix)) for a, b in spans]],
                                               [len(prefix)])
        want = np.vstack([tv, sv])
        assert covered.all()
    else:
        want = emb.embed([store.texts[i] for i in [t, *mine]])
    np.testing.assert_allclose(got, want, atol=1e-5)
