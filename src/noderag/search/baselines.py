"""Passage-retrieval baselines run beside noderag in the benchmark: BM25 and exact dense cosine."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp

from ..lang.zh import lexical_tokens

__all__ = ["BM25Retriever", "DenseRetriever", "top_k_rows", "bm25_tokens"]


def bm25_tokens(text: str, cjk: str = "bigram") -> list[str]:
    """Lower-cased word tokens (no stemming, no stopword removal); Chinese text (Traditional folded to
    Simplified) as character bigrams, or segmenter words with ``cjk="segment"`` (noderag.lang.zh)."""
    return lexical_tokens(text, cjk)


def top_k_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-row top-k column indices and scores, descending (ties by lower index), of a 2-D array."""
    scores = np.atleast_2d(np.asarray(scores))
    k = min(int(k), scores.shape[1])
    if k <= 0:
        return np.zeros((scores.shape[0], 0), np.int64), np.zeros((scores.shape[0], 0), scores.dtype)
    if k < scores.shape[1]:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    else:
        part = np.broadcast_to(np.arange(scores.shape[1]), scores.shape).copy()
    vals = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -vals), axis=1)
    idx = np.take_along_axis(part, order, axis=1)
    return idx, np.take_along_axis(scores, idx, axis=1)


class BM25Retriever:
    """Okapi BM25 over a fixed passage collection, as one sparse matrix product per batch.

    Parameters
    ----------
    ids : sequence of str
        Passage ids, aligned with ``texts``.
    texts : sequence of str
        Passage texts (the benchmark passes ``title + "\\n" + text``).
    k1 : float, default=1.2
    b : float, default=0.75
    cjk : {"bigram", "segment"}, default="bigram"
        Terms of text with Han characters: overlapping character bigrams or segmenter words.
    """

    def __init__(self, ids: Sequence[str], texts: Sequence[str], *, k1: float = 1.2, b: float = 0.75,
                 cjk: str = "bigram") -> None:
        if len(ids) != len(texts):
            raise ValueError(f"ids ({len(ids)}) and texts ({len(texts)}) differ in length")
        if not k1 >= 0 or not 0 <= b <= 1:
            raise ValueError(f"need k1 >= 0 and 0 <= b <= 1, got k1={k1!r}, b={b!r}")
        if cjk not in ("bigram", "segment"):
            raise ValueError(f"cjk must be 'bigram' or 'segment', got {cjk!r}")
        self.cjk = cjk
        self.ids = list(ids)
        self.vocab: dict[str, int] = {}
        rows: list[int] = []
        cols: list[int] = []
        for d, text in enumerate(texts):
            for tok in bm25_tokens(text, cjk):
                rows.append(d)
                cols.append(self.vocab.setdefault(tok, len(self.vocab)))
        n_docs, n_terms = len(texts), len(self.vocab)
        tf = sp.csr_array(
            (np.ones(len(rows), np.float64), (np.asarray(rows, np.int64), np.asarray(cols, np.int64))),
            shape=(n_docs, n_terms),
        )
        tf.sum_duplicates()
        dl = np.asarray(tf.sum(axis=1)).ravel()
        avgdl = float(dl.mean()) if n_docs else 1.0
        df = np.bincount(tf.indices, minlength=n_terms).astype(np.float64)
        idf = np.log1p((n_docs - df + 0.5) / (df + 0.5))
        row_of = np.repeat(np.arange(n_docs), np.diff(tf.indptr))
        denom = tf.data + k1 * (1.0 - b + b * dl[row_of] / max(avgdl, 1e-9))
        data = idf[tf.indices] * tf.data * (k1 + 1.0) / denom
        self._w = sp.csr_array((data, tf.indices, tf.indptr), shape=(n_docs, n_terms)).T.tocsr()

    def _query_matrix(self, queries: Sequence[str]) -> sp.csr_array:
        rows: list[int] = []
        cols: list[int] = []
        for q, text in enumerate(queries):
            for tok in set(bm25_tokens(text, self.cjk)):
                col = self.vocab.get(tok)
                if col is not None:
                    rows.append(q)
                    cols.append(col)
        return sp.csr_array(
            (np.ones(len(rows)), (np.asarray(rows, np.int64), np.asarray(cols, np.int64))),
            shape=(len(queries), len(self.vocab)),
        )

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """BM25 score of every passage for every query, float64 of shape (n_queries, n_passages)."""
        return np.asarray((self._query_matrix(queries) @ self._w).todense())

    def search(self, queries: Sequence[str], k: int) -> list[list[str]]:
        """Top-k passage ids per query, best first."""
        idx, _ = top_k_rows(self.scores(queries), k)
        return [[self.ids[j] for j in row] for row in idx.tolist()]


class DenseRetriever:
    """Exact cosine search over L2-normalised passage vectors (numpy matrix product).

    Parameters
    ----------
    ids : sequence of str
    vectors : ndarray of shape (n_passages, dim)
        Normalised here; zero rows stay zero.
    """

    def __init__(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(ids):
            raise ValueError(f"vectors must have shape ({len(ids)}, dim), got {vectors.shape}")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        self.ids = list(ids)
        self._v = np.ascontiguousarray(vectors / np.where(norms > 0, norms, 1.0))

    def scores(self, query_vectors: np.ndarray) -> np.ndarray:
        """Cosine similarity, float32 of shape (n_queries, n_passages)."""
        q = np.atleast_2d(np.asarray(query_vectors, dtype=np.float32))
        if q.shape[1] != self._v.shape[1]:
            raise ValueError(f"query vectors have dim {q.shape[1]}, passages have {self._v.shape[1]}")
        norms = np.linalg.norm(q, axis=1, keepdims=True)
        return (q / np.where(norms > 0, norms, 1.0)) @ self._v.T

    def search(self, query_vectors: np.ndarray, k: int) -> list[list[str]]:
        """Top-k passage ids per query, best first."""
        idx, _ = top_k_rows(self.scores(query_vectors), k)
        return [[self.ids[j] for j in row] for row in idx.tolist()]
