"""Deterministic feature-hashing embedder (word n-grams): a fast test aid and a lexical baseline."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

import numpy as np

from .base import check_batch_size, check_texts, l2_normalize

__all__ = ["HashEmbedder"]

_WORD = re.compile(r"\w+", re.UNICODE)
_MEMO_LIMIT = 1 << 20  # n-grams whose bucket is remembered (~100 MB at most)


class HashEmbedder:
    """Signed feature hashing of word n-grams with sublinear term frequency, L2-normalised.

    Identical in every process and on every machine (blake2b, never Python ``hash()``).
    A text without any word gives an all-zero row.

    Parameters
    ----------
    dim : int, default=256
    ngram_max : int, default=2
        Word n-grams of length 1..ngram_max are hashed.
    seed : int, default=0
        Mixed into the hash, so different seeds give independent projections.
    """

    def __init__(self, dim: int = 256, *, ngram_max: int = 2, seed: int = 0) -> None:
        self.dim = check_batch_size(dim, "dim")
        self.ngram_max = check_batch_size(ngram_max, "ngram_max")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        self.seed = seed
        self.name = f"hash-{self.dim}-n{self.ngram_max}-s{seed}"
        self._salt = seed.to_bytes(8, "little")
        self._buckets: dict[str, int] = {}

    def _code(self, gram: str) -> int:
        """Signed column of one n-gram: ``col + 1`` or ``-(col + 1)``, memoised (corpora repeat their n-grams)."""
        h = int.from_bytes(hashlib.blake2b(gram.encode(), digest_size=8, salt=self._salt).digest(), "little")
        code = h % self.dim + 1
        if not (h >> 63) & 1:
            code = -code
        if len(self._buckets) >= _MEMO_LIMIT:
            self._buckets.clear()
        self._buckets[gram] = code
        return code

    def _grams(self, text: str) -> Counter:
        """Word n-gram counts of ``text``, n = 1..ngram_max, in order of first appearance."""
        words = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
        grams = Counter(words)
        for n in range(2, self.ngram_max + 1):
            grams.update(map(" ".join, zip(*(words[i:] for i in range(n)))))
        return grams

    def embed(self, texts: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
        """Return float32 of shape (len(texts), dim), rows L2-normalised (``batch_size`` is unused)."""
        texts = check_texts(texts)
        if batch_size is not None:
            check_batch_size(batch_size)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        memo, code_of = self._buckets, self._code
        codes: list[int] = []
        counts: list[int] = []
        sizes: list[int] = []
        for text in texts:
            grams = self._grams(text)
            codes.extend([memo.get(g) or code_of(g) for g in grams])
            counts.extend(grams.values())
            sizes.append(len(grams))
        if codes:
            code = np.asarray(codes, dtype=np.int64)
            vals = (np.where(code > 0, 1.0, -1.0) * (1.0 + np.log(np.asarray(counts, dtype=np.float64))))
            flat = np.repeat(np.arange(len(texts), dtype=np.int64) * self.dim, sizes) + np.abs(code) - 1
            np.add.at(out.reshape(-1), flat, vals.astype(np.float32))  # in n-gram order: the same sums every run
        return l2_normalize(out)

    def __repr__(self) -> str:
        return f"HashEmbedder(dim={self.dim}, ngram_max={self.ngram_max}, seed={self.seed})"
