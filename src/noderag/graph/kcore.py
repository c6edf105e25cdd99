"""k-core decomposition (core numbers) by the Batagelj–Zaversnik O(m) bucket algorithm.

The kernel is a Numba ``@njit(cache=True)`` function over the CSR arrays. The
degree of a node is its number of stored neighbours (``indptr[v + 1] - indptr[v]``),
which is the number of distinct neighbours because a project CSR has no
self-loops and no duplicate entries. Edge weights are ignored.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .csr import CSR, validate_csr

__all__ = ["core_numbers"]


@njit(cache=True, nogil=True)
def _core_numbers_kernel(indptr, indices):
    """Core number of every node; ``indptr`` int64 (n + 1,), ``indices`` int32 (nnz,)."""
    n = indptr.shape[0] - 1
    deg = np.empty(n, np.int32)
    max_deg = 0
    for v in range(n):
        d = np.int32(indptr[v + 1] - indptr[v])
        deg[v] = d
        if d > max_deg:
            max_deg = d
    # bin[d] = start of the block of nodes with current degree d in ``vert``
    bin_start = np.zeros(max_deg + 1, np.int64)
    for v in range(n):
        bin_start[deg[v]] += 1
    start = 0
    for d in range(max_deg + 1):
        count = bin_start[d]
        bin_start[d] = start
        start += count
    pos = np.empty(n, np.int64)
    vert = np.empty(n, np.int32)
    for v in range(n):
        p = bin_start[deg[v]]
        pos[v] = p
        vert[p] = v
        bin_start[deg[v]] += 1
    for d in range(max_deg, 0, -1):
        bin_start[d] = bin_start[d - 1]
    if max_deg >= 0 and n > 0:
        bin_start[0] = 0
    for i in range(n):
        v = vert[i]
        dv = deg[v]
        for j in range(indptr[v], indptr[v + 1]):
            u = indices[j]
            du = deg[u]
            if du > dv:
                # move u to the front of its bin, then shrink its degree by one
                pu = pos[u]
                pw = bin_start[du]
                w = vert[pw]
                if u != w:
                    pos[u] = pw
                    vert[pu] = w
                    pos[w] = pu
                    vert[pw] = u
                bin_start[du] += 1
                deg[u] = du - 1
    return deg


def core_numbers(csr: CSR) -> np.ndarray:
    """Core number of every node of an undirected CSR graph, int32 of shape (n,).

    Equal to ``networkx.core_number`` on the same simple graph; isolated nodes
    have core number 0. Runs in O(n + nnz).
    """
    if not isinstance(csr, CSR):
        raise TypeError(f"csr must be a noderag.graph.csr.CSR, got {type(csr).__name__}")
    checked = validate_csr(csr.indptr, csr.indices, csr.weights, name="csr")
    return _core_numbers_kernel(checked.indptr, checked.indices)
