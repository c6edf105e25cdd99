"""Enrich: embed T, S, A, H nodes in large batches (resumable per batch) and build the semantic kNN layer."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Sequence

import numpy as np

from noderag.graph.storage import atomic_save_npy, atomic_write_json, load_npy, read_json

__all__ = ["embed_texts_resumable", "semantic_layer", "load_vectors", "build_vector_index"]


def _texts_digest(name: str, texts: Sequence[str], batch_size: int) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{name}\x00{batch_size}\x00{len(texts)}\x00".encode())
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


def embed_texts_resumable(embedder, texts: Sequence[str], stage_dir: Path | None, *, batch_size: int = 1024,
                          progress=None) -> np.ndarray:
    """Embed ``texts`` in batches of ``batch_size``; with ``stage_dir`` each batch is saved atomically.

    A rerun after a kill reuses the saved batches (checked against a digest of all texts,
    the batch size and the embedder name). Returns float32 of shape (len(texts), dim).
    """
    texts = list(texts)
    dim = int(embedder.dim)
    out = np.zeros((len(texts), dim), dtype=np.float32)
    if not texts:
        return out
    digest = _texts_digest(getattr(embedder, "name", type(embedder).__name__), texts, batch_size)
    if stage_dir is not None:
        stage_dir = Path(stage_dir)
        meta_path = stage_dir / "meta.json"
        meta = read_json(meta_path) if meta_path.is_file() else None
        if not isinstance(meta, dict) or meta.get("digest") != digest:
            if stage_dir.exists():
                shutil.rmtree(stage_dir)
            stage_dir.mkdir(parents=True)
            atomic_write_json(meta_path, {"digest": digest, "n": len(texts), "dim": dim})
    for b, start in enumerate(range(0, len(texts), batch_size)):
        stop = min(start + batch_size, len(texts))
        part = None if stage_dir is None else stage_dir / f"part-{b:06d}.npy"
        if part is not None and part.is_file():
            try:
                vec = np.asarray(load_npy(part, mmap=False, dtype=np.float32, shape=(stop - start, dim)))
            except ValueError:
                vec = None
        else:
            vec = None
        if vec is None:
            vec = np.asarray(embedder.embed(texts[start:stop]), dtype=np.float32)
            if vec.shape != (stop - start, dim):
                raise ValueError(f"embedder {getattr(embedder, 'name', embedder)!r} returned shape {vec.shape}, "
                                 f"expected ({stop - start}, {dim})")
            if part is not None:
                atomic_save_npy(part, vec)
        out[start:stop] = vec
        if progress is not None:
            progress.update(stop - start)
    return out


def build_vector_index(ids: np.ndarray, vectors: np.ndarray, dim: int, dtype: str = "i8",
                       connectivity: int | None = None):
    """HNSW index of ``vectors`` keyed by node id, built with one thread (identical file every run)."""
    from noderag.graph.vectors import VectorIndex

    index = VectorIndex(dim, metric="cos", dtype=dtype, connectivity=connectivity)
    if ids.size:
        index.add(np.asarray(ids, dtype=np.int64), np.asarray(vectors, dtype=np.float32), threads=1)
    return index


def semantic_layer(n: int, ids: np.ndarray, vectors: np.ndarray, k: int, index=None):
    """kNN semantic layer (CSR over ``n`` nodes, weight = cosine similarity > 0) among ``ids``."""
    from noderag.graph.csr import CSR
    from noderag.graph.vectors import knn_csr

    if ids.size < 2:
        return CSR.empty(n)
    return knn_csr(n, np.asarray(ids, dtype=np.int64), np.asarray(vectors, dtype=np.float32),
                   k=min(k, ids.size - 1), index=index if ids.size >= 4096 else None)


def load_vectors(path: Path, ids: np.ndarray, dim: int) -> np.ndarray:
    """Unit-norm vectors of ``ids`` stored in a saved ``vectors.usearch`` (float32 (len(ids), dim))."""
    from noderag.graph.vectors import VectorIndex

    if ids.size == 0:
        return np.zeros((0, dim), np.float32)
    arr = np.asarray(VectorIndex.load(path, view=True).get(np.asarray(ids, dtype=np.int64)), dtype=np.float32)
    if arr.shape != (ids.size, dim):
        raise ValueError(f"{path}: stored vectors have shape {arr.shape}, expected ({ids.size}, {dim})")
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    return arr / np.maximum(norms, 1e-12)
