"""The ``Embedder`` protocol and helpers shared by every embedding backend."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["Embedder", "check_batch_size", "check_texts", "embed_queries", "l2_normalize", "texts_digest"]


@runtime_checkable
class Embedder(Protocol):
    """Text embedding backend: ``embed(texts)`` returns L2-normalised float32 rows.

    Attributes
    ----------
    name : str
        Stable identifier of the model (recorded in index manifests).
    dim : int
        Embedding dimension.
    """

    name: str
    dim: int

    def embed(self, texts: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
        """Return float32 of shape (len(texts), dim), rows L2-normalised; empty input gives (0, dim)."""
        ...


def embed_queries(embedder: Embedder, texts: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
    """Embed search questions: ``embedder.embed_queries`` where the model has a question side, else ``embed``.

    Asymmetric models (E5: ``"query: "`` vs ``"passage: "``) embed questions and passages
    differently; ``embed`` is always the passage (index) side. Symmetric backends need no change.
    """
    method = getattr(embedder, "embed_queries", None)
    if not callable(method):
        method = embedder.embed
    # an embedder of the protocol's minimal form takes the texts alone
    return method(texts) if batch_size is None else method(texts, batch_size=batch_size)


def check_texts(texts: object, name: str = "texts") -> list[str]:
    """Return ``texts`` as a list of str, raising TypeError naming the bad item."""
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of str, not a single {type(texts).__name__}")
    try:
        out = list(texts)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"{name} must be a sequence of str, got {type(texts).__name__}") from None
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"{name}[{i}] must be str, got {type(t).__name__}")
    return out


def check_batch_size(batch_size: object, name: str = "batch_size") -> int:
    """Return ``batch_size`` as a positive int, raising ValueError otherwise."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"{name} must be a positive int, got {batch_size!r}")
    return int(batch_size)


def thread_count(n_threads: object, cap: int | None) -> int:
    """``n_threads`` as a positive int; None picks ``min(cap, os.cpu_count())`` (every core when ``cap`` is None)."""
    if n_threads is None:
        cores = os.cpu_count() or 1
        return cores if cap is None else min(cap, cores)
    return check_batch_size(n_threads, "n_threads")


def batch_frame(texts: object, batch_size: object, default: int, dim: int) -> tuple[list[str], int, np.ndarray]:
    """The checked ``texts``, the batch size to use (``default`` for None) and a zeroed float32 output
    of shape (len(texts), dim): what every ``embed`` starts from."""
    texts = check_texts(texts)
    bs = default if batch_size is None else check_batch_size(batch_size)
    return texts, bs, np.zeros((len(texts), dim), dtype=np.float32)


def texts_digest(name: str, texts: Sequence[str], batch_size: int, mode: str = "") -> str:
    """A digest of an embedding job (embedder name, batch size, mode and every text): resumable batches
    saved under it are reused only by the same job."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{name}\x00{batch_size}\x00{len(texts)}\x00{mode}\x00".encode())
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Return float32 rows of ``x`` scaled to unit L2 norm (all-zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a (model) file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_sha256(digest: str, expected: str, what: str) -> None:
    """Raise ValueError when a file's ``digest`` is not the ``expected`` one (``what`` names the file)."""
    if digest != expected:
        raise ValueError(f"{what} has sha256 {digest}, expected {expected}")


def check_pinned(path: Path, expected: str, release: str) -> None:
    """Raise ValueError when shipped weights are not the pinned file of ``release`` (a changed package
    would silently change the vectors of an index built under the model's name)."""
    got = sha256_file(path)
    if got != expected:
        raise ValueError(f"{path}: sha256 {got} is not the pinned {expected} "
                         f"({release}); pass verify=False to use it anyway")


def shipped_file(module: str, distribution: str, relpath: str, needs: str) -> Path:
    """A file shipped inside the installed package ``module`` (pip name ``distribution``), found without
    importing (executing) it; ImportError says what to install (``needs``), FileNotFoundError names the path."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(needs)
    path = Path(next(iter(spec.submodule_search_locations))) / relpath
    if not path.is_file():
        raise FileNotFoundError(f"{distribution} is installed but {path} is missing")
    return path
