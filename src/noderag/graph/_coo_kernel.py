"""Numba counting-sort kernel of :func:`noderag.graph.csr.csr_from_coo`, in its own module so that importing
the CSR types (every query process) does not load Numba."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _scatter(rows, to, w, cur, cols, vals):  # pragma: no cover - compiled
    """Write each entry ``rows[i] -> to[i]`` (self-loops skipped) at its row's cursor ``cur``, in input order."""
    for i in range(rows.shape[0]):
        if rows[i] != to[i]:
            k = cur[rows[i]]
            cols[k] = to[i]
            vals[k] = w[i]
            cur[rows[i]] = k + 1


@njit(cache=True)
def coo_to_csr_kernel(n, src, dst, w, symmetric):  # pragma: no cover - compiled
    """Counting sort by row, then a stable per-row sort by column and in-order duplicate sums, O(m + n)."""
    m = src.shape[0]
    ptr = np.zeros(n + 1, np.int64)
    for i in range(m):
        if src[i] != dst[i]:
            ptr[src[i] + 1] += 1
            if symmetric:
                ptr[dst[i] + 1] += 1
    for r in range(n):
        ptr[r + 1] += ptr[r]
    total = ptr[n]
    cols = np.empty(total, np.int32)
    vals = np.empty(total, np.float64)
    cur = ptr[:n].copy()
    # forward entries first, then the mirrored ones: the order a stable sort of
    # the concatenation [src->dst, dst->src] would give within each row
    _scatter(src, dst, w, cur, cols, vals)
    if symmetric:
        _scatter(dst, src, w, cur, cols, vals)
    indptr = np.zeros(n + 1, np.int64)
    out = 0
    for r in range(n):
        s = ptr[r]
        e = ptr[r + 1]
        if e - s > 32:
            order = np.argsort(cols[s:e], kind="mergesort")
            c_sorted = cols[s:e][order]
            v_sorted = vals[s:e][order]
            cols[s:e] = c_sorted
            vals[s:e] = v_sorted
        else:
            for a in range(s + 1, e):  # stable insertion sort
                c = cols[a]
                v = vals[a]
                b = a - 1
                while b >= s and cols[b] > c:
                    cols[b + 1] = cols[b]
                    vals[b + 1] = vals[b]
                    b -= 1
                cols[b + 1] = c
                vals[b + 1] = v
        a = s
        while a < e:
            c = cols[a]
            acc = vals[a]
            a += 1
            while a < e and cols[a] == c:
                acc += vals[a]
                a += 1
            cols[out] = c
            vals[out] = acc
            out += 1
        indptr[r + 1] = out
    indices = cols[:out].copy()
    weights = vals[:out].astype(np.float32)
    return indptr, indices, weights
