"""Embeddings from a sentence-transformers model by name or local path (optional extra ``st``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import check_batch_size, check_texts, l2_normalize

__all__ = ["SentenceTransformerEmbedder"]


class SentenceTransformerEmbedder:
    """Wrap ``sentence_transformers.SentenceTransformer`` (imported only when constructed).

    Parameters
    ----------
    model : str
        Model name (resolved by sentence-transformers, possibly from its local cache)
        or a local directory.
    device : str or None, default=None
    batch_size : int, default=64
    """

    def __init__(self, model: str, *, device: str | None = None, batch_size: int = 64) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty str, got {model!r}")
        self.batch_size = check_batch_size(batch_size)
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ImportError(
                "the 'st:' embedder needs sentence-transformers (pip install 'noderag[st]')"
            ) from exc
        self._model = SentenceTransformer(model, device=device)
        get_dim = getattr(self._model, "get_sentence_embedding_dimension", None)
        dim = get_dim() if get_dim is not None else None
        if dim is None:
            dim = int(self._encode(["dimension probe"], 1).shape[1])
        self.dim = int(dim)
        self.name = f"st:{model}"

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        vecs = self._model.encode(
            texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=False,
            show_progress_bar=False,
        )
        return l2_normalize(np.asarray(vecs, dtype=np.float32).reshape(len(texts), -1))

    def embed(self, texts: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
        """Return float32 of shape (len(texts), dim), rows L2-normalised."""
        texts = check_texts(texts)
        bs = self.batch_size if batch_size is None else check_batch_size(batch_size)
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        return self._encode(texts, bs)

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder(name={self.name!r}, dim={self.dim})"
