"""The delta insert's key map (``build.assemble.KeyIndex``) against a dict, on random and adversarial keys."""

from __future__ import annotations

import numpy as np
import pytest

from noderag.build.assemble import KeyIndex


def _reference(keys: np.ndarray) -> dict[int, int]:
    ref: dict[int, int] = {}
    for i, k in enumerate(keys.tolist()):
        ref.setdefault(k, i)  # equal keys: the lowest id
    return ref


@pytest.mark.parametrize("seed", range(5))
def test_lookups_equal_a_dict_with_the_lowest_id_of_equal_keys(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5000))
    keys = rng.integers(0, 2 ** 64, size=n, dtype=np.uint64)
    keys[rng.integers(0, n, size=n // 10)] = keys[rng.integers(0, n, size=n // 10)]  # repeats
    # a crowded bucket (same top 16 bits) and the ends of the range
    keys[: min(n, 50)] = (np.uint64(0xABCD) << np.uint64(48)) + rng.integers(0, 2 ** 48, size=min(n, 50), dtype=np.uint64)
    keys[-1] = np.uint64(2 ** 64 - 1)
    ref = _reference(keys)
    index = KeyIndex(keys)
    for k, i in ref.items():
        assert index.get(k) == i and index[k] == i
    absent = rng.integers(0, 2 ** 64, size=2000, dtype=np.uint64)
    for k in absent.tolist():
        assert index.get(k) == ref.get(k)
    missing = next(k for k in range(2 ** 63, 2 ** 64) if k not in ref)
    with pytest.raises(KeyError):
        index[missing]
    index[missing] = n  # added later: found from then on
    assert index.get(missing) == n


def test_an_empty_index_finds_nothing():
    index = KeyIndex(np.zeros(0, np.uint64))
    assert index.get(12345) is None and index.get(0, -1) == -1
