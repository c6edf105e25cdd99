"""Deterministic feature-hashing embedder (word n-grams): a fast test aid and a lexical baseline."""

from __future__ import annotations

import hashlib
import re
import unicodedata
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
        self._buckets: dict[str, tuple[int, float]] = {}

    def _bucket(self, gram: str) -> tuple[int, float]:
        """(column, sign) of one n-gram, memoised per embedder (corpora repeat their n-grams)."""
        hit = self._buckets.get(gram)
        if hit is None:
            h = int.from_bytes(hashlib.blake2b(gram.encode(), digest_size=8, salt=self._salt).digest(), "little")
            hit = (h % self.dim, 1.0 if (h >> 63) & 1 else -1.0)
            if len(self._buckets) >= _MEMO_LIMIT:
                self._buckets.clear()
            self._buckets[gram] = hit
        return hit

    def _features(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        words = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
        grams: dict[str, int] = {}
        for n in range(1, self.ngram_max + 1):
            for i in range(len(words) - n + 1):
                g = " ".join(words[i : i + n])
                grams[g] = grams.get(g, 0) + 1
        if not grams:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        buckets = [self._bucket(g) for g in grams]
        cols = np.fromiter((c for c, _ in buckets), dtype=np.int64, count=len(buckets))
        signs = np.fromiter((sg for _, sg in buckets), dtype=np.float64, count=len(buckets))
        counts = np.fromiter(grams.values(), dtype=np.float64, count=len(grams))
        return cols, (signs * (1.0 + np.log(counts))).astype(np.float32)

    def embed(self, texts: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
        """Return float32 of shape (len(texts), dim), rows L2-normalised (``batch_size`` is unused)."""
        texts = check_texts(texts)
        if batch_size is not None:
            check_batch_size(batch_size)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            cols, vals = self._features(text)
            np.add.at(out[row], cols, vals)
        return l2_normalize(out)

    def __repr__(self) -> str:
        return f"HashEmbedder(dim={self.dim}, ngram_max={self.ngram_max}, seed={self.seed})"
