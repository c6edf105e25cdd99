"""The KeyIndex's radix bucketing equals numpy's stable argsort by the keys' top 16 bits, and look-ups find
the lowest id of a key."""

from __future__ import annotations

import numpy as np
import pytest

from noderag.indexing.key_index import BucketedKeys, KeyIndex
from noderag.graph._key_kernel import bucket_keys


@pytest.mark.parametrize("seed", range(6))
def test_bucket_keys_match_a_stable_argsort(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 5000))
    keys = rng.integers(0, 2**63, size=n, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, size=n, dtype=np.uint64)
    if n > 20:  # repeated keys and crowded buckets
        keys[rng.integers(0, n, 10)] = keys[0]
        keys[: n // 4] &= np.uint64(0xFFFF_0000_0000_00FF)
    ptr, order, out = bucket_keys(keys, 16)
    bucket = (keys >> np.uint64(48)).astype(np.uint16)
    want = np.argsort(bucket, kind="stable")
    assert np.array_equal(order, want) and np.array_equal(out, keys[want])
    assert ptr[0] == 0 and np.array_equal(ptr[1:], np.cumsum(np.bincount(bucket, minlength=1 << 16)))
    for numba_from in (0, 1 << 23):  # both ways of bucketing
        monkeypatch.setattr(BucketedKeys, "NUMBA_FROM", numba_from)
        index = KeyIndex(keys)
        for i in rng.integers(0, max(n, 1), 50).tolist() if n else []:
            assert index.get(int(keys[i])) == int(np.flatnonzero(keys == keys[i])[0])
        assert index.get(12345678901) in (None, *np.flatnonzero(keys == np.uint64(12345678901)).tolist()[:1])
