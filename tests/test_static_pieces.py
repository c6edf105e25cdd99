"""A static model's chunk and unit vectors from one tokenizer pass (``StaticEmbedder.embed_with_pieces``,
``embed_pieces_resumable``): bit for bit the vectors of embedding every text on its own."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from noderag.config import NodeRAGConfig
from noderag.data import demo_dir
from noderag.embed import make_embedder
from noderag.embed.static import splits_at_spaces, wordllama_paths
from noderag.graph.types import NodeType
from noderag.indexing.driver import build_index
from noderag.indexing.embedding import embed_pieces_resumable
from noderag.store.tables import IndexStore

pytest.importorskip("wordllama", reason="the static extra (wordllama) is not installed")

T, S = int(NodeType.T), int(NodeType.S)


@pytest.fixture(scope="module")
def wl():
    return make_embedder("static:wordllama")


def test_splits_at_spaces_holds_for_wordllama_only_as_configured(wl):
    spec = json.loads(wordllama_paths()[1].read_text(encoding="utf-8"))
    assert splits_at_spaces(spec) and wl.splits_at_spaces
    assert not splits_at_spaces({**spec, "pre_tokenizer": {"type": "Whitespace"}})
    assert not splits_at_spaces({**spec, "normalizer": {"type": "Lowercase"}})
    merges = list(spec["model"]["merges"]) + ["a \u2581b"]  # a merge across a word start
    assert not splits_at_spaces({**spec, "model": {**spec["model"], "merges": merges}})


def test_pieces_give_the_vectors_of_each_text_alone(wl):
    texts = ["Alpha one. Beta two. Gamma three.", "Head line\nSecond  part. Third.", "Glued.Next one.",
             "<s> special. Plain tail.", ""]
    spans = [[(0, 10), (11, 20), (21, 33)], [(10, 16), (24, 30), (0, 4)], [(0, 6), (7, 15)], [(12, 24)], []]
    heads = [["", "Title: ", ""], ["", "", "Doc (x): "], ["", ""], [""], []]
    tv, sv, covered = wl.embed_with_pieces(texts, spans, heads)
    assert np.array_equal(tv, wl.embed(texts))
    # "Second" follows a newline, "Third." ends the text: no cut before "Second"; "Glued." is not followed
    # by a space; a text holding an added token ("<s>") is never cut
    assert covered.tolist() == [True, True, True, False, True, True, False, False, False]
    flat = [(t, a, b, h) for t, sp, hd in zip(texts, spans, heads) for (a, b), h in zip(sp, hd)]
    want = wl.embed([h + t[a:b] for t, a, b, h in flat])
    assert np.array_equal(sv[covered], want[covered])
    assert not sv[~covered].any()
    with pytest.raises(ValueError, match="2 texts, 1 span lists"):
        wl.embed_with_pieces(texts[:2], spans[:1], heads[:2])


def test_pieces_token_ids_equal_tokenizing_alone_on_random_texts(wl):
    rng = random.Random(7)
    words = ["the", "The", "Paris,", "1889.", "naïve", "東京", "x", "(film)", "don't", "--", "\u2581", "a.b",
             "Über", "™", "well-known", "\t", "e.g."]
    seps = [" ", " ", " ", "  ", "\n", ""]
    checked = 0
    for _ in range(300):
        toks = [rng.choice(words) for _ in range(rng.randint(1, 12))]
        text, bounds = "", []
        for k, w in enumerate(toks):
            if k:
                text += rng.choice(seps)
            bounds.append((len(text), len(text) + len(w)))
            text += w
        i, j = sorted(rng.sample(range(len(bounds)), 2)) if len(bounds) > 1 else (0, 0)
        span = (bounds[i][0], bounds[j][1])
        head = rng.choice(["", "Title: ", "T (x): ", "bad  "])
        _, sv, covered = wl.embed_with_pieces([text], [[span]], [[head]])
        if covered[0]:
            assert np.array_equal(sv[0], wl.embed([head + text[span[0]:span[1]]])[0]), (text, span, head)
            checked += 1
    assert checked > 60


def test_embed_pieces_resumable_matches_embedding_every_text(wl, tmp_path):
    chunks = ["Alpha one. Alpha two.", "Beta one.  Beta skip.", "Gamma one. Gamma two."]
    units = ["T2: Gamma one.", "Alpha two.", "Beta skip.", "Alpha one.", "paraphrase of beta", "Beta one.",
             "Gamma two."]
    unit_chunk = np.array([2, 0, 1, 0, 1, 1, 2])
    prefixes = ["T0: ", None, "T2: "]
    cv, uv, pooled = embed_pieces_resumable(wl, chunks, units, unit_chunk, prefixes, tmp_path / "st", batch_size=2)
    assert pooled == 5  # not "Beta skip." (after two spaces) nor the paraphrase: embedded alone
    assert np.array_equal(cv, wl.embed(chunks)) and np.array_equal(uv, wl.embed(units))
    cv2, uv2, again = embed_pieces_resumable(wl, chunks, units, unit_chunk, prefixes, tmp_path / "st", batch_size=2)
    assert again == 0 and np.array_equal(cv, cv2) and np.array_equal(uv, uv2)  # every batch reused
    c_out, u_out = np.full((3, wl.dim), 9, np.float16), np.full((7, wl.dim), 9, np.float16)
    got = embed_pieces_resumable(wl, chunks, units, unit_chunk, prefixes, None, batch_size=2,
                                 chunk_out=c_out, unit_out=u_out)
    assert got[0] is c_out and got[1] is u_out and got[2] == 5  # rows written in place, no float32 copy
    assert np.array_equal(c_out, cv.astype(np.float16)) and np.array_equal(u_out, uv.astype(np.float16))
    with pytest.raises(ValueError, match="unit_chunk"):
        embed_pieces_resumable(wl, chunks, units, unit_chunk[:2], prefixes, None)


def test_build_with_static_model_stores_each_texts_own_vector(tmp_path):
    config = NodeRAGConfig().with_overrides({"embed.spec": "static:wordllama", "embed.vector_dtype": "f32"})
    out = tmp_path / "idx"
    build_index([demo_dir()], out, config, progress=False)
    store = IndexStore.open(out)
    types = np.asarray(store.types)
    ids = np.flatnonzero(np.isin(types, (T, S)))
    got = np.asarray(store.vectors.get(ids.astype(np.int64)), dtype=np.float32)
    want = make_embedder("static:wordllama").embed([store.texts[i] for i in ids.tolist()])
    assert (types[ids] == S).sum() > 10
    np.testing.assert_allclose(got, want, atol=1e-6)
