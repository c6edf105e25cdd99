"""Numba radix-sort kernel of :class:`noderag.indexing.assemble.KeyIndex`, in its own module so that importing
the node table does not load Numba until an insert needs the index."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _scatter_pass(keys, order, shift, out_keys, out_order):  # pragma: no cover - compiled
    """One stable counting-sort pass by the 8 bits of each key at ``shift`` (256 output streams, which stay
    in cache where 65,536 did not)."""
    cnt = np.zeros(257, np.int64)
    for i in range(keys.shape[0]):
        cnt[np.int64((keys[i] >> shift) & np.uint64(255)) + 1] += 1
    for b in range(256):
        cnt[b + 1] += cnt[b]
    for i in range(keys.shape[0]):
        b = np.int64((keys[i] >> shift) & np.uint64(255))
        k = cnt[b]
        out_keys[k] = keys[i]
        out_order[k] = order[i]
        cnt[b] = k + 1


@njit(cache=True)
def bucket_keys(keys, bits):  # pragma: no cover - compiled
    """(bucket pointers, node order, keys in that order) of ``keys`` (uint64) bucketed stably by their top
    ``bits`` bits (a multiple of 8): least-significant-digit radix passes of 8 bits, O(n) each."""
    n = keys.shape[0]
    a_keys, a_order = keys.copy(), np.arange(n)
    b_keys, b_order = np.empty(n, np.uint64), np.empty(n, np.int64)
    for p in range(bits // 8):
        _scatter_pass(a_keys, a_order, np.uint64(64 - bits + 8 * p), b_keys, b_order)
        a_keys, b_keys = b_keys, a_keys
        a_order, b_order = b_order, a_order
    shift = np.uint64(64 - bits)
    ptr = np.zeros((1 << bits) + 1, np.int64)
    for i in range(n):
        ptr[np.int64(keys[i] >> shift) + 1] += 1
    for b in range(1 << bits):
        ptr[b + 1] += ptr[b]
    return ptr, a_order, a_keys
