"""Tests for the offline cl100k_base tokenizer."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderag import tokenize as tk
from noderag.tokenize import Tokenizer


def test_known_cl100k_ids():
    # Reference ids from tiktoken's own README / cl100k_base.
    assert tk.encode("hello world") == [15339, 1917]
    assert tk.encode("tiktoken is great!") == [83, 1609, 5963, 374, 2294, 0]
    assert tk.count_tokens("hello world") == 2
    assert tk.count_tokens("") == 0
    assert tk.default_tokenizer().n_vocab == 100277


def test_special_token_text_is_plain_text():
    ids = tk.encode("a <|endoftext|> b")
    assert 100257 not in ids
    assert tk.decode(ids) == "a <|endoftext|> b"


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_roundtrip_and_truncate_prefix(text):
    ids = tk.encode(text)
    assert tk.decode(ids) == text
    assert tk.count_tokens(text) == len(ids)
    for k in (0, 1, 3, len(ids) // 2, len(ids)):
        out = tk.truncate(text, k)
        assert text.startswith(out)
        assert tk.count_tokens(out) <= k
    assert tk.truncate(text, len(ids)) == text


def test_truncate_multibyte_drops_partial_character():
    text = "世界🎉" * 4
    for k in range(0, tk.count_tokens(text) + 1):
        out = tk.truncate(text, k)
        assert text.startswith(out)
        assert "\ufffd" not in out
        assert tk.count_tokens(out) <= k
    assert tk.truncate("one two three four", 2) == "one two"


def test_batch_matches_single_and_threads():
    texts = ["alpha beta", "", "NodeRAG 图谱", "x" * 1000]
    serial = Tokenizer(n_threads=1)
    threaded = Tokenizer(n_threads=2)
    expected = [len(serial.encode(t)) for t in texts]
    assert serial.count_tokens_batch(texts) == expected
    assert threaded.count_tokens_batch(texts) == expected
    assert tk.count_tokens_batch(texts) == expected


def test_argument_errors():
    with pytest.raises(TypeError, match="text must be str"):
        tk.count_tokens(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"texts\[1\] must be str"):
        tk.count_tokens_batch(["a", 3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="sequence of str"):
        tk.count_tokens_batch("abc")
    with pytest.raises(ValueError, match="max_tokens"):
        tk.truncate("abc", -1)
    with pytest.raises(ValueError, match=r"ids\[1\]=-5"):
        tk.decode([1, -5])
    with pytest.raises(ValueError, match="n_threads"):
        Tokenizer(n_threads=0)
    with pytest.raises(FileNotFoundError, match="bpe_path"):
        Tokenizer("/nonexistent/file.tiktoken")


def test_custom_bpe_file_and_hash_check(tmp_path):
    # A tiny byte-level rank file: every single byte is a token, plus one merge "ab".
    lines = [f"{base64.b64encode(bytes([b])).decode()} {b}" for b in range(256)]
    lines.append(f"{base64.b64encode(b'ab').decode()} 256")
    path = tmp_path / "tiny.tiktoken"
    path.write_text("\n".join(lines) + "\n")
    tok = Tokenizer(path)
    assert tok.encode("abab") == [256, 256]
    assert tok.decode([256, 99]) == "abc"
    with pytest.raises(ValueError, match="sha256"):
        Tokenizer(path, expected_sha256="0" * 64)
    bad = tmp_path / "bad.tiktoken"
    bad.write_text("YQ== 0\nnot-a-pair\n")
    with pytest.raises(ValueError, match=r"bad.tiktoken:2"):
        Tokenizer(bad)
    for line in ("Y*== 1", "YQ==YQ== 1", "YQ== one"):  # not base64 (strict), data after padding, a bad rank
        bad.write_text(f"YQ== 0\n{line}\n")
        with pytest.raises(ValueError, match=r"bad.tiktoken:2: cannot parse"):
            Tokenizer(bad)


def test_loads_from_installed_package_without_network_or_cache(tmp_path):
    # Fresh interpreter with no proxy/network settings and an unwritable cache dir:
    # the BPE file must come from the installed package and nothing may be cached.
    cache = tmp_path / "cache"
    code = textwrap.dedent(
        """
        import socket
        def _no_net(*a, **k):
            raise RuntimeError("network access attempted")
        socket.socket.connect = _no_net
        socket.create_connection = _no_net
        from noderag import tokenize
        assert tokenize.count_tokens("hello world") == 2
        print(tokenize.default_tokenizer().path)
        """
    )
    env = {"PATH": os.environ.get("PATH", ""), "TIKTOKEN_CACHE_DIR": str(cache), "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("cl100k_base.tiktoken")
    assert "site-packages" in out.stdout or "tiktoken_ext" in out.stdout
    assert not cache.exists()
