"""Tests for the embedding protocol, the offline default (MiniLM ONNX), hashing and spec parsing."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from noderag.embed import HashEmbedder, make_embedder, parse_embed_spec
from noderag.embed.onnx import MINILM_NAME, OnnxEmbedder, minilm_model_path, minilm_tokenizer_path


@pytest.fixture(scope="module")
def minilm():
    return make_embedder("default", n_threads=1)


def test_default_shape_norm_and_empty(minilm):
    assert minilm.name == MINILM_NAME
    assert minilm.dim == 384
    v = minilm.embed(["hello world", "", "NodeRAG builds a heterograph."])
    assert v.shape == (3, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    empty = minilm.embed([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32
    # the Embedder protocol's batch_size keyword: the same rows (to padding noise) one text per batch
    np.testing.assert_allclose(minilm.embed(["hello world", "", "NodeRAG builds a heterograph."], batch_size=1), v,
                               atol=1e-4)


def test_default_deterministic_and_order_preserving(minilm):
    texts = ["short", "a much longer sentence about rivers and mountains in Norway", "mid length text here"]
    a = minilm.embed(texts)
    np.testing.assert_array_equal(a, minilm.embed(texts))
    # batch_size=1 (default): a text's vector does not depend on the other texts.
    np.testing.assert_array_equal(a[::-1], minilm.embed(texts[::-1]))
    np.testing.assert_array_equal(a[1:2], minilm.embed(texts[1:2]))
    threaded = make_embedder("default", n_threads=2).embed(texts)
    np.testing.assert_array_equal(a, threaded)
    # Larger batches: int8 activations are quantised per run, vectors move only slightly.
    b = minilm.embed(texts, batch_size=3)
    assert np.min(np.sum(a * b, axis=1)) > 0.995
    np.testing.assert_array_equal(b, minilm.embed(texts, batch_size=3))


def test_default_semantics(minilm):
    v = minilm.embed(
        [
            "A man is playing a guitar.",
            "Someone plays a musical instrument.",
            "The stock market fell sharply today.",
            "Which river flows through Paris?",
            "The Seine runs through the French capital.",
        ]
    )
    s = v @ v.T
    assert s[0, 1] > s[0, 2] + 0.2
    assert s[3, 4] > s[3, 2] + 0.2
    assert s[3, 4] > s[3, 0]


def test_default_truncates_long_text(minilm):
    long = "word " * 5000
    assert minilm.token_lengths([long, "hi"]).tolist() == [256, 3]
    assert minilm.embed([long]).shape == (1, 384)


def test_default_input_errors(minilm):
    with pytest.raises(TypeError, match="sequence of str"):
        minilm.embed("not a list")
    with pytest.raises(TypeError, match=r"texts\[1\] must be str"):
        minilm.embed(["ok", None])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="batch_size"):
        minilm.embed(["x"], batch_size=0)


def test_onnx_file_checks(tmp_path):
    with pytest.raises(FileNotFoundError, match="model_path"):
        OnnxEmbedder(tmp_path / "missing.onnx", minilm_tokenizer_path())
    with pytest.raises(ValueError, match="sha256"):
        OnnxEmbedder(minilm_model_path(), minilm_tokenizer_path(), tokenizer_sha256="0" * 64)
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not an onnx model")
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match="tokenizer"):
        make_embedder(f"onnx:{tmp_path}")
    with pytest.raises(FileNotFoundError, match="not a directory"):
        make_embedder(f"onnx:{tmp_path / 'nope'}")


def test_hash_embedder_properties():
    e = make_embedder("hash:512")
    assert isinstance(e, HashEmbedder) and e.dim == 512 and e.name == "hash-512-n2-s0"
    texts = ["The quick brown fox", "the QUICK brown fox!", "quantum chromodynamics lecture", "", "…"]
    v = e.embed(texts)
    assert v.shape == (5, 512) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v[:3], axis=1), 1.0, atol=1e-6)
    assert not v[3].any() and not v[4].any()  # no words -> zero row
    np.testing.assert_allclose(v[0], v[1])  # case-folded, punctuation ignored
    assert v[0] @ v[2] < 0.5
    np.testing.assert_array_equal(v, HashEmbedder(512).embed(texts))
    np.testing.assert_array_equal(e.embed(texts, batch_size=2), v)  # the protocol's batch_size keyword
    assert not np.array_equal(HashEmbedder(512, seed=1).embed(texts[:1]), v[:1])
    assert e.embed([]).shape == (0, 512)
    with pytest.raises(ValueError, match="dim"):
        HashEmbedder(0)


def test_hash_embedder_stable_across_processes():
    import subprocess

    code = "from noderag.embed import HashEmbedder; print(HashEmbedder(32).embed(['stable key text']).tobytes().hex())"
    outs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={"PYTHONHASHSEED": str(seed), "PATH": ""}).stdout
        for seed in (1, 2)
    }
    assert len(outs) == 1
    assert outs.pop().strip() == HashEmbedder(32).embed(["stable key text"]).tobytes().hex()


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("default", ("default", None, None)),
        (" minilm ", ("default", None, None)),
        ("hash", ("hash", None, None)),
        ("hash:64", ("hash", "64", None)),
        ("st:sentence-transformers/all-MiniLM-L6-v2", ("st", "sentence-transformers/all-MiniLM-L6-v2", None)),
        ("openai:text-embedding-3-small@https://api.example/v1", ("openai", "text-embedding-3-small", "https://api.example/v1")),
        ("openai:bge@http://127.0.0.1:8000/v1", ("openai", "bge", "http://127.0.0.1:8000/v1")),
        ("openai:http://127.0.0.1:8000/v1", ("openai", None, "http://127.0.0.1:8000/v1")),
        ("openai:", ("openai", None, None)),
        ("vllm:/models/e5", ("vllm", "/models/e5", None)),
        ("onnx:/models/x", ("onnx", "/models/x", None)),
    ],
)
def test_parse_spec(spec, expected):
    assert parse_embed_spec(spec) == expected


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("", "non-empty"),
        ("bert:foo", "unknown backend 'bert'"),
        ("hash:0", "positive integer"),
        ("hash:abc", "positive integer"),
        ("default:x", "takes no argument"),
        ("st:", "needs a model"),
        ("vllm:", "needs a model"),
        ("openai:m@ftp://x", "http"),
    ],
)
def test_parse_spec_errors(spec, match):
    with pytest.raises(ValueError, match=match):
        make_embedder(spec)


def test_st_and_vllm_missing_extras(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match=r"noderag\[st\]"):
        make_embedder("st:all-MiniLM-L6-v2")
    with pytest.raises(ImportError, match=r"noderag\[vllm\]"):
        make_embedder("vllm:/models/e5")


def test_unknown_override_is_an_error():
    with pytest.raises(TypeError):
        make_embedder("hash:8", bogus=1)
