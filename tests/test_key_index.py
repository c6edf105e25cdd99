"""The delta insert's key map (``build.key_index.KeyIndex``) against a dict, on random and adversarial keys."""

from __future__ import annotations

import numpy as np
import pytest

from noderag.indexing.key_index import BucketedKeys, KeyIndex, SortedKeys


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


def _segments(rng, sizes, stored):
    """Random keys cut into segments; the segments in ``stored`` keep their keys sorted as a large one does."""
    keys = rng.integers(0, 2 ** 64, size=sum(sizes), dtype=np.uint64)
    keys[rng.integers(0, keys.size, size=keys.size // 8)] = keys[rng.integers(0, keys.size, size=keys.size // 8)]
    segs, first = [], 0
    for k, size in enumerate(sizes):
        part = keys[first:first + size]
        if k in stored:
            order = np.argsort(part, kind="stable").astype(np.int32)
            segs.append((first, SortedKeys(part[order], order, part)))
        else:
            segs.append((first, BucketedKeys(part)))
        first += size
    return keys, segs


@pytest.mark.parametrize("seed", range(4))
def test_segments_stored_or_bucketed_answer_as_one_dict(seed):
    rng = np.random.default_rng(seed)
    sizes = [int(s) for s in rng.integers(1, 3000, size=int(rng.integers(1, 5)))]
    keys, segs = _segments(rng, sizes, stored={0, 2})
    ref = _reference(keys)
    index = KeyIndex(segments=segs)
    for k, i in ref.items():
        assert index.get(k) == i
    for k in rng.integers(0, 2 ** 64, size=500, dtype=np.uint64).tolist():
        assert index.get(k) == ref.get(k)


def test_a_damaged_sorted_file_fails_the_look_up_instead_of_merging_into_another_node():
    keys = np.array([30, 10, 20], np.uint64)
    order = np.array([1, 2, 0], np.int32)
    assert SortedKeys(keys[order], order, keys).get(20) == 2
    wrong = np.array([1, 0, 2], np.int32)  # ids swapped: 20 would land on node 0
    with pytest.raises(ValueError, match="do not match node_keys.npy at node 0"):
        SortedKeys(keys[order], wrong, keys, "seg/node_key_order.npy").get(20)
    with pytest.raises(ValueError, match="seg/node_key_order.npy: 2 sorted keys"):
        SortedKeys(keys[order][:2], order, keys, "seg/node_key_order.npy")
