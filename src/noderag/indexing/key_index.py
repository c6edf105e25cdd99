"""The key -> id map a delta insert merges new nodes with: the keys of each segment of the index it builds
on, plus a dict of the keys added since, at the cost of what the insert adds.

A large segment stores its keys sorted (``node_keys_sorted.npy``, with ``node_key_order.npy``: the ids in
that order, see :meth:`noderag.graph.hetero.HeteroGraph.save`); a look-up is a binary search in the
memory-mapped file, so an insert reads a few pages of it instead of sorting every key. A smaller
segment's keys are bucketed in memory.
Of equal keys the lowest id is found, as a stable sort gives.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..store.layout import NODE_KEY_ORDER as KEY_ORDER, NODE_KEYS_SORTED as KEYS_SORTED

__all__ = ["KeyIndex", "SortedKeys", "BucketedKeys", "segment_keys", "stores_sorted_keys"]


class BucketedKeys:
    """One segment's keys ordered by their top 16 bits in memory; a look-up scans one bucket (n / 65,536
    keys: they are 64-bit hashes, uniform over their range). Numpy's stable radix argsort up to
    :data:`NUMBA_FROM` keys, a Numba radix kernel from there (:func:`~noderag.graph._key_kernel.bucket_keys`:
    0.9 s at 21M keys against numpy's 3.3 s, whose import, ~0.5 s, costs more below)."""

    BITS = 16
    NUMBA_FROM = 1 << 23

    def __init__(self, keys: np.ndarray) -> None:
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        if keys.size >= self.NUMBA_FROM:
            from ..graph._key_kernel import bucket_keys

            self._ptr, self._order, self._keys = bucket_keys(keys, self.BITS)
        else:
            bucket = (keys >> np.uint64(64 - self.BITS)).astype(np.uint16)
            self._order = np.argsort(bucket, kind="stable")
            self._keys = keys[self._order]
            self._ptr = np.zeros((1 << self.BITS) + 1, dtype=np.int64)
            np.cumsum(np.bincount(bucket, minlength=1 << self.BITS), out=self._ptr[1:])

    def get(self, key: int) -> int | None:
        """The segment-local id of ``key``, or None."""
        b = int(key) >> (64 - self.BITS)
        lo, hi = int(self._ptr[b]), int(self._ptr[b + 1])
        if lo == hi:
            return None
        hit = np.flatnonzero(self._keys[lo:hi] == np.uint64(key))
        return int(self._order[lo + hit[0]]) if hit.size else None


class SortedKeys:
    """One segment's stored sorted keys and their ids (memory-mapped); a look-up is one binary search.

    A hit is checked against the segment's own keys (``keys[id] == key``), so a damaged sorted file can
    fail a look-up (reported as damage of ``where``) but never merge a node into the wrong one."""

    def __init__(self, sorted_keys: np.ndarray, order: np.ndarray, keys: np.ndarray, where: str = KEY_ORDER,
                 gone: np.ndarray | None = None) -> None:
        n = keys.shape[0]
        if sorted_keys.shape != (n,) or order.shape != (n,):
            raise ValueError(f"{where}: {sorted_keys.shape[0]} sorted keys and {order.shape[0]} ids "
                             f"for {n} nodes")
        self._sorted, self._order, self._keys, self._where = sorted_keys, order, keys, where
        self._gone = gone  # sorted ids a delete in place scrubbed: stored under their old keys, never found

    def get(self, key: int) -> int | None:
        """The segment-local id of ``key``, or None."""
        k = np.uint64(key)
        pos = int(np.searchsorted(self._sorted, k))
        if pos == self._sorted.shape[0] or self._sorted[pos] != k:
            return None
        nid = int(self._order[pos])
        if self._gone is not None and self._gone.size:
            at = int(np.searchsorted(self._gone, nid))
            if at < self._gone.size and int(self._gone[at]) == nid:
                return None
        if not 0 <= nid < self._keys.shape[0] or self._keys[nid] != k:
            raise ValueError(f"{self._where}: the sorted keys do not match node_keys.npy at node {nid} "
                             f"(damaged index: run `noderag verify`)")
        return nid


def stores_sorted_keys(folder: Path) -> bool:
    """Whether the segment in ``folder`` stores its keys sorted (both files)."""
    return (folder / KEYS_SORTED).is_file() and (folder / KEY_ORDER).is_file()


def segment_keys(folder: Path, keys: np.ndarray, gone: np.ndarray | None = None) -> SortedKeys | BucketedKeys:
    """The look-up of one segment whose keys (memory-mapped) are ``keys``: its stored sorted keys when it
    has them, else bucketed in memory. ``gone``: the sorted ids a delete in place scrubbed, whose stored
    sorted keys are their old ones (``keys`` holds their tombstones)."""
    from ..graph.keys import KEY_DTYPE
    from ..graph.storage import load_npy

    if stores_sorted_keys(folder):
        n = keys.shape[0]
        sorted_keys = np.asarray(load_npy(folder / KEYS_SORTED, True, dtype=KEY_DTYPE, shape=(n,)))
        order = np.asarray(load_npy(folder / KEY_ORDER, True, dtype=np.int32, shape=(n,)))
        return SortedKeys(sorted_keys, order, keys, str(folder / KEY_ORDER), gone)
    return BucketedKeys(keys)


class KeyIndex:
    """key -> node id over segments (each one's look-up with its first node id, in id order) and the keys
    added since; it answers ``get``, ``[key]`` and ``[key] = id`` as the node table's dict does."""

    def __init__(self, keys: np.ndarray | None = None, *, segments=()) -> None:
        self._segments: list[tuple[int, SortedKeys | BucketedKeys]] = list(segments)
        if keys is not None:
            self._segments.append((0, BucketedKeys(keys)))
        self._added: dict[int, int] = {}

    def get(self, key: int, default=None):
        hit = self._added.get(key)
        if hit is not None:
            return hit
        for first, seg in self._segments:
            local = seg.get(key)
            if local is not None:
                return first + local
        return default

    def __getitem__(self, key: int) -> int:
        got = self.get(key)
        if got is None:
            raise KeyError(key)
        return got

    def __setitem__(self, key: int, nid: int) -> None:
        self._added[key] = nid
