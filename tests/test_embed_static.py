"""The static embedders (``static:wordllama``, ``static:DIR``): a token table, mean-pooled.

Checked against an independent NumPy reference of the same weights (the table read by the
``safetensors`` library, a padded masked mean in float64), across processes, and with downloads
blocked."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from noderag.embed import make_embedder, parse_embed_spec
from noderag.embed.static import (
    WORDLLAMA_NAME,
    StaticEmbedder,
    load_safetensors_table,
    wordllama_paths,
)

pytest.importorskip("wordllama", reason="the static extra (wordllama) is not installed")

TEXTS = [
    "Adults need about 50 grams of protein a day, more when they train hard.",
    "The Eiffel Tower is a wrought-iron lattice tower in Paris, finished in 1889.",
    "Hank Snow was a Canadian country music artist.",
    "Who directed the film that won the award in 1997?",
    "",
    "   ",
    "a",
    "x " * 700,  # long: no truncation
]


@pytest.fixture(scope="module")
def wl():
    return make_embedder("static:wordllama")


def numpy_reference(texts: list[str]) -> np.ndarray:
    """WordLlama's pipeline written out independently: the safetensors library's table, the tokenizer padded
    (as WordLlama pads), a masked mean in float64, L2 norm."""
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    weights, tok_path = wordllama_paths()
    table = load_file(str(weights))["embedding.weight"].astype(np.float64)
    tok = Tokenizer.from_file(str(tok_path))
    tok.enable_padding()
    encs = tok.encode_batch(texts, add_special_tokens=False)
    ids = np.clip(np.array([e.ids for e in encs]), 0, table.shape[0] - 1)
    mask = np.array([e.attention_mask for e in encs], dtype=np.float64)
    pooled = (table[ids] * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return np.divide(pooled, norms, out=np.zeros_like(pooled), where=norms > 0)


def test_spec_and_name(wl):
    assert parse_embed_spec("static:wordllama") == ("static", "wordllama", None)
    with pytest.raises(ValueError, match="static needs a model name or path"):
        parse_embed_spec("static")
    assert isinstance(wl, StaticEmbedder)
    assert wl.name == WORDLLAMA_NAME and wl.dim == 256 and wl.table.shape == (32000, 256)


def test_vectors_match_numpy_reference(wl):
    got = wl.embed(TEXTS)
    ref = numpy_reference(TEXTS)
    assert got.shape == (len(TEXTS), 256) and got.dtype == np.float32
    nonempty = np.linalg.norm(ref, axis=1) > 0
    assert nonempty.tolist() == [True, True, True, True, False, True, True, True]  # "   " is one token
    cos = (got[nonempty] * ref[nonempty]).sum(axis=1)
    assert cos.min() >= 0.999, cos
    np.testing.assert_array_equal(got[~nonempty], 0.0)  # no tokens: a zero row, as the protocol says
    np.testing.assert_allclose(np.linalg.norm(got[nonempty], axis=1), 1.0, atol=1e-5)


def test_batch_invariant_and_semantic(wl):
    v = wl.embed(TEXTS)
    np.testing.assert_array_equal(v, np.vstack([wl.embed([t]) for t in TEXTS]))
    np.testing.assert_array_equal(v, wl.embed(TEXTS, batch_size=3))
    assert wl.embed([]).shape == (0, 256)
    q = wl.embed(["how much protein should an adult eat", "when was the tower in Paris built"])
    sims = q @ v[:3].T
    assert sims[0].argmax() == 0 and sims[1].argmax() == 1


_CHILD = """
import sys, numpy as np
from noderag.embed import make_embedder
texts = [l for l in sys.stdin.read().split("\\x1e")]
sys.stdout.buffer.write(make_embedder("static:wordllama").embed(texts).tobytes())
"""


def _embed_in_child(texts: list[str], env: dict[str, str], prelude: str = "") -> np.ndarray:
    out = subprocess.run([sys.executable, "-c", prelude + _CHILD], input="\x1e".join(texts).encode(),
                         capture_output=True, env={**os.environ, **env}, check=False)
    assert out.returncode == 0, out.stderr.decode()
    return np.frombuffer(out.stdout, dtype=np.float32).reshape(len(texts), 256)


def test_identical_across_processes(wl):
    a = _embed_in_child(TEXTS, {"PYTHONHASHSEED": "1"})
    b = _embed_in_child(TEXTS, {"PYTHONHASHSEED": "2", "RAYON_NUM_THREADS": "1"})
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, wl.embed(TEXTS))


_NO_NETWORK = """
import socket
def _refuse(*args, **kwargs):
    raise OSError("network blocked by the test")
socket.socket.connect = _refuse
socket.socket.connect_ex = _refuse
socket.create_connection = _refuse
socket.getaddrinfo = _refuse
"""


def test_loads_offline_with_downloads_blocked(wl, tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HOME": str(tmp_path),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    got = _embed_in_child(TEXTS[:3], env, prelude=_NO_NETWORK)
    np.testing.assert_array_equal(got, wl.embed(TEXTS[:3]))
    assert not (tmp_path / ".cache").exists() and not (tmp_path / "cache").exists()  # nothing fetched or cached


def test_changed_weights_are_refused(tmp_path):
    weights, tok = wordllama_paths()
    bad = tmp_path / "l2_supercat_256.safetensors"
    shutil.copyfile(weights, bad)
    with open(bad, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    from noderag.embed.static import WORDLLAMA_SHA256

    with pytest.raises(ValueError, match="is not the pinned"):
        StaticEmbedder(bad, tok, name="x", weights_sha256=WORDLLAMA_SHA256)


def _write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    header, blobs, offset = {}, [], 0
    for key, arr in tensors.items():
        raw = np.ascontiguousarray(arr).tobytes()
        header[key] = {"dtype": {"float16": "F16", "float32": "F32"}[arr.dtype.name], "shape": list(arr.shape),
                       "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def _word_tokenizer(path: Path, vocab: list[str]) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(path))


def test_static_dir_model(tmp_path):
    vocab = ["[UNK]", "red", "green", "blue"]
    table = np.array([[0, 0, 1], [1, 0, 0], [0, 1, 0], [1, 1, 0]], dtype=np.float16)
    _write_safetensors(tmp_path / "model.safetensors", {"embeddings": table})
    _word_tokenizer(tmp_path / "tokenizer.json", vocab)
    emb = make_embedder(f"static:{tmp_path}")
    assert emb.name == f"static:{tmp_path.name}" and emb.dim == 3
    got = emb.embed(["red green", "blue blue red", "mauve"])
    want = np.array([[0.5, 0.5, 0], [1, 2 / 3, 0], [0, 0, 1]])
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, atol=1e-6)
    with pytest.raises(FileNotFoundError, match="not a directory with model.safetensors"):
        make_embedder(f"static:{tmp_path / 'missing'}")


def test_malformed_safetensors_named(tmp_path):
    p = tmp_path / "m.safetensors"
    p.write_bytes(b"\x04")
    with pytest.raises(ValueError, match=r"m\.safetensors: not a safetensors file"):
        load_safetensors_table(p)
    _write_safetensors(p, {"b": np.zeros((3,), np.float32), "a": np.ones((2, 2), np.float32)})
    with pytest.raises(ValueError, match=r"expected one tensor, found \['a', 'b'\]"):
        load_safetensors_table(p)
    with pytest.raises(ValueError, match="has shape \\[3\\]; expected a 2-D table"):
        load_safetensors_table(p, "b")
    np.testing.assert_array_equal(load_safetensors_table(p, "a"), np.ones((2, 2), np.float32))
    raw = bytearray(p.read_bytes())
    p.write_bytes(bytes(raw[:-4]))  # truncated data
    with pytest.raises(ValueError, match="tensor 'a' data .* does not match its shape"):
        load_safetensors_table(p, "a")
