"""Numba kernels of :mod:`noderag.graph.hetero` (merging layers, checking a layer's structure), in their own
module so that opening an index and querying it do not load Numba."""

from __future__ import annotations

import numpy as np
from numba import njit

@njit(cache=True)
def merge_csr_kernel(ia, ja, wa, sa, ib, jb, wb, sb):  # pragma: no cover - compiled
    """Row-wise merge of two CSRs with sorted columns: ``sa * A + sb * B`` in O(nnz)."""
    n = ia.shape[0] - 1
    indptr = np.zeros(n + 1, np.int64)
    for r in range(n):
        p = ia[r]
        pe = ia[r + 1]
        q = ib[r]
        qe = ib[r + 1]
        c = 0
        while p < pe and q < qe:
            if ja[p] < jb[q]:
                p += 1
            elif ja[p] > jb[q]:
                q += 1
            else:
                p += 1
                q += 1
            c += 1
        indptr[r + 1] = indptr[r] + c + (pe - p) + (qe - q)
    nnz = indptr[n]
    indices = np.empty(nnz, np.int32)
    weights = np.empty(nnz, np.float32)
    for r in range(n):
        p = ia[r]
        pe = ia[r + 1]
        q = ib[r]
        qe = ib[r + 1]
        k = indptr[r]
        while p < pe and q < qe:
            if ja[p] < jb[q]:
                indices[k] = ja[p]
                weights[k] = sa * np.float64(wa[p])
                p += 1
            elif ja[p] > jb[q]:
                indices[k] = jb[q]
                weights[k] = sb * np.float64(wb[q])
                q += 1
            else:
                indices[k] = ja[p]
                weights[k] = sa * np.float64(wa[p]) + sb * np.float64(wb[q])
                p += 1
                q += 1
            k += 1
        while p < pe:
            indices[k] = ja[p]
            weights[k] = sa * np.float64(wa[p])
            p += 1
            k += 1
        while q < qe:
            indices[k] = jb[q]
            weights[k] = sb * np.float64(wb[q])
            q += 1
            k += 1
    return indptr, indices, weights


@njit(cache=True)
def layer_structure_kernel(indptr, indices, weights):  # pragma: no cover - compiled
    """Check sorted unique columns, no self-loops and symmetry (binary search per entry).

    Returns (0, 0, 0) or (code, row, col): 1 unsorted/duplicate, 2 self-loop, 3 asymmetric.
    """
    n = indptr.shape[0] - 1
    for r in range(n):
        s = indptr[r]
        e = indptr[r + 1]
        for k in range(s, e):
            c = indices[k]
            if k > s and indices[k - 1] >= c:
                return 1, r, c
            if c == r:
                return 2, r, c
            lo = indptr[c]
            hi = indptr[c + 1]
            while lo < hi:
                mid = (lo + hi) // 2
                if indices[mid] < r:
                    lo = mid + 1
                else:
                    hi = mid
            if lo == indptr[c + 1] or indices[lo] != r or weights[lo] != weights[k]:
                return 3, r, c
    return 0, 0, 0
