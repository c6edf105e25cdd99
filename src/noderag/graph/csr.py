"""Compressed sparse row adjacency: the array form every graph kernel takes.

Dtypes are fixed across the project: ``indptr`` int64, ``indices`` int32,
``weights`` float32. Layers are symmetric, without self-loops, and hold each
(undirected) edge once per direction with duplicate edges summed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .arrays import distinct, out_of_range

INDPTR_DTYPE = np.dtype(np.int64)
INDEX_DTYPE = np.dtype(np.int32)
WEIGHT_DTYPE = np.dtype(np.float32)


@dataclass(frozen=True)
class CSR:
    """A square sparse matrix in CSR form over ``n`` nodes.

    Attributes
    ----------
    indptr : ndarray of shape (n + 1,), int64
    indices : ndarray of shape (nnz,), int32, column ids, sorted within each row
    weights : ndarray of shape (nnz,), float32
    """

    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray

    @property
    def n(self) -> int:
        return int(self.indptr.shape[0]) - 1

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    def degree(self) -> np.ndarray:
        """Number of stored neighbours per node, int64 of shape (n,)."""
        return np.diff(self.indptr)

    def strength(self) -> np.ndarray:
        """Sum of edge weights per node, float64 of shape (n,)."""
        rows = np.repeat(np.arange(self.n), self.degree())
        return np.bincount(rows, weights=self.weights, minlength=self.n)

    @classmethod
    def empty(cls, n: int = 0) -> "CSR":
        return cls(np.zeros(n + 1, INDPTR_DTYPE), np.zeros(0, INDEX_DTYPE), np.zeros(0, WEIGHT_DTYPE))

    def to_scipy(self):
        """Return a ``scipy.sparse.csr_array`` view-copy of this matrix."""
        import scipy.sparse as sp

        return sp.csr_array((self.weights, self.indices, self.indptr), shape=(self.n, self.n))


def validate_csr(indptr, indices, weights=None, *, n: int | None = None, name: str = "csr") -> CSR:
    """Convert to the fixed dtypes (C-contiguous) and check the CSR invariants.

    Raises ``ValueError`` naming the argument and the bad value.
    """
    indptr = np.asarray(indptr)
    indices = np.asarray(indices)
    if indptr.ndim != 1 or indptr.shape[0] < 1:
        raise ValueError(f"{name}.indptr must be 1-D with length n + 1 >= 1, got shape {indptr.shape}")
    if indices.ndim != 1:
        raise ValueError(f"{name}.indices must be 1-D, got shape {indices.shape}")
    if not np.issubdtype(indptr.dtype, np.integer):
        raise ValueError(f"{name}.indptr must be integer, got dtype {indptr.dtype}")
    if not np.issubdtype(indices.dtype, np.integer):
        raise ValueError(f"{name}.indices must be integer, got dtype {indices.dtype}")
    n_rows = indptr.shape[0] - 1
    if n is not None and n_rows != n:
        raise ValueError(f"{name}.indptr has length {indptr.shape[0]}, expected n + 1 = {n + 1}")
    if indptr[0] != 0:
        raise ValueError(f"{name}.indptr[0] must be 0, got {indptr[0]}")
    if indptr[-1] != indices.shape[0]:
        raise ValueError(f"{name}.indptr[-1] = {indptr[-1]} must equal len(indices) = {indices.shape[0]}")
    steps = np.diff(indptr)
    if steps.size and steps.min() < 0:
        bad = int(np.argmax(steps < 0))
        raise ValueError(f"{name}.indptr must be non-decreasing; indptr[{bad + 1}] = {indptr[bad + 1]} < indptr[{bad}] = {indptr[bad]}")
    bad = out_of_range(indices, n_rows) if indices.size else None
    if bad is not None:
        raise ValueError(f"{name}.indices must lie in [0, {n_rows}), found {bad}")
    if weights is None:
        weights = np.ones(indices.shape[0], WEIGHT_DTYPE)
    weights = np.asarray(weights)
    if weights.shape != indices.shape:
        raise ValueError(f"{name}.weights must have shape {indices.shape} like indices, got {weights.shape}")
    if not np.issubdtype(weights.dtype, np.floating) and not np.issubdtype(weights.dtype, np.integer):
        raise ValueError(f"{name}.weights must be numeric, got dtype {weights.dtype}")
    if weights.size and not np.all(np.isfinite(weights)):
        raise ValueError(f"{name}.weights must be finite")
    if weights.size and weights.min() < 0:
        raise ValueError(f"{name}.weights must be non-negative, found {weights.min()}")
    return CSR(
        np.ascontiguousarray(indptr, INDPTR_DTYPE),
        np.ascontiguousarray(indices, INDEX_DTYPE),
        np.ascontiguousarray(weights, WEIGHT_DTYPE),
    )


def csr_from_coo(n: int, src, dst, weights=None, *, symmetric: bool = True) -> CSR:
    """Build a CSR over ``n`` nodes from COO edge arrays in O(m + n) (Numba counting sort).

    Self-loops are dropped; with ``symmetric`` every edge is stored in both
    directions; duplicate (row, col) pairs have their weights summed. Columns
    are sorted within each row, so equal inputs give byte-identical arrays.
    """
    src = np.asarray(src, dtype=np.int64).ravel()
    dst = np.asarray(dst, dtype=np.int64).ravel()
    if src.shape != dst.shape:
        raise ValueError(f"src and dst must have the same length, got {src.shape[0]} and {dst.shape[0]}")
    w = np.ones(src.shape[0], np.float64) if weights is None else np.asarray(weights, dtype=np.float64).ravel()
    if w.shape != src.shape:
        raise ValueError(f"weights must have the same length as src ({src.shape[0]}), got {w.shape[0]}")
    for name, arr in (("src", src), ("dst", dst)):
        if arr.size and (arr.min() < 0 or arr.max() >= n):
            bad = arr.min() if arr.min() < 0 else arr.max()
            raise ValueError(f"{name} ids must lie in [0, {n}), found {bad}")
    if w.size and (not np.all(np.isfinite(w)) or w.min() < 0):
        raise ValueError("weights must be finite and non-negative")
    from ._coo_kernel import coo_to_csr_kernel  # Numba: loaded by the build, not by opening an index

    indptr, indices, summed = coo_to_csr_kernel(n, src, dst, w, symmetric)
    return CSR(indptr, indices, summed)


def induced_csr(csr: CSR, nodes) -> tuple[CSR, np.ndarray]:
    """The subgraph of a validated ``csr`` induced by ``nodes``: (CSR relabelled 0..m-1 in id order, sorted member ids).

    ``nodes`` may hold repeats; ids are checked against ``csr.n`` with a ValueError naming the bad id.
    """
    n = csr.n
    members = np.asarray(nodes)
    if members.ndim != 1 or not (np.issubdtype(members.dtype, np.integer) or members.size == 0):
        raise ValueError(f"nodes must be a 1-D array of integer ids, got shape {members.shape} dtype {members.dtype}")
    members = distinct(members.astype(np.int64))
    if members.size and (members[0] < 0 or members[-1] >= n):
        bad = members[0] if members[0] < 0 else members[-1]
        raise ValueError(f"nodes must lie in [0, {n}), found {bad}")
    local = np.full(n, -1, np.int64)
    local[members] = np.arange(members.size)
    rows = local[np.repeat(np.arange(n), np.diff(csr.indptr))]
    cols = local[csr.indices]
    keep = (rows >= 0) & (cols >= 0)
    sub = csr_from_coo(int(members.size), rows[keep], cols[keep], csr.weights[keep], symmetric=False)
    return sub, members
