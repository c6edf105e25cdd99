"""NodeVectors: sparse-by-id vector rows against a dense reference array."""

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderag.indexing.node_vectors import NodeVectors


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 300), min_size=0, max_size=40, unique=True), min_size=1, max_size=8),
       st.integers(0, 2**31))
def test_matches_a_dense_array(batches, seed):
    rng = np.random.default_rng(seed)
    dense = np.zeros((301, 3), np.float32)
    seen = np.zeros(301, bool)
    vec = NodeVectors(3)
    for ids in batches:
        vals = rng.standard_normal((len(ids), 3)).astype(np.float32)
        vec[ids] = vals
        dense[ids] = vals
        seen[ids] = True
    ids = np.flatnonzero(seen)
    np.testing.assert_array_equal(vec[ids], dense[ids])
    np.testing.assert_array_equal(vec[ids[::-1]], dense[ids[::-1]])
    assert len(vec) == ids.size


def test_unassigned_ids_and_bad_shapes_are_errors():
    vec = NodeVectors(2)
    vec[[5, 1]] = np.ones((2, 2))
    with pytest.raises(KeyError, match=r"\[3\]"):
        vec[[1, 3]]
    with pytest.raises(KeyError, match=r"\[99\]"):
        vec[[99]]
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        vec[[1, 2]] = np.ones((2, 3))
    assert vec[[]].shape == (0, 2)
    assert vec.nbytes < 6 * 1024 * 2 * 4 + 64  # rows for the assigned ids only (plus initial capacity)


def test_view_is_a_view_for_consecutive_rows_and_a_copy_otherwise():
    vec = NodeVectors(3)
    ids = np.array([10, 11, 12, 40])
    vec[ids] = np.arange(12, dtype=np.float32).reshape(4, 3)
    v = vec.view(ids)
    assert np.shares_memory(v, vec._data)
    np.testing.assert_array_equal(v, vec[ids])
    w = vec.view(np.array([40, 10]))  # rows out of order: a copy with the same values
    assert not np.shares_memory(w, vec._data)
    np.testing.assert_array_equal(w, vec[np.array([40, 10])])
    assert vec.view(np.array([], dtype=np.int64)).shape == (0, 3)


def test_float16_storage_rounds_like_numpy_and_reads_float32():
    rng = np.random.default_rng(3)
    vec = NodeVectors(4, np.float16)
    vals = rng.standard_normal((5, 4)).astype(np.float32)
    vec[[7, 2, 9, 4, 0]] = vals
    got = vec[[7, 2, 9, 4, 0]]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, vals.astype(np.float16).astype(np.float32))
    assert vec.nbytes < 1024 * 4 * 2 + 64
    with pytest.raises(ValueError, match="float32 or float16"):
        NodeVectors(4, np.int8)


def test_slots_are_writable_rows_of_new_ids():
    vec = NodeVectors(2, np.float16)
    vec[[3]] = np.ones((1, 2))
    rows = vec.slots(np.array([10, 5, 8]))
    rows[:] = np.arange(6).reshape(3, 2)
    np.testing.assert_array_equal(vec[[5, 10, 8, 3]], [[2, 3], [0, 1], [4, 5], [1, 1]])
    with pytest.raises(ValueError, match="new, distinct"):
        vec.slots(np.array([3]))
    with pytest.raises(ValueError, match="new, distinct"):
        vec.slots(np.array([20, 20]))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(-2**40, 2**40), max_size=60))
def test_distinct_equals_numpy_unique(values):
    from noderag.graph.arrays import distinct

    x = np.asarray(values, dtype=np.int64)
    got = distinct(x)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, np.unique(x))


def _resident_kb(path) -> int:
    """Resident KiB of this process's mappings of ``path`` (from /proc/self/smaps)."""
    total, current = 0, None
    with open("/proc/self/smaps", encoding="ascii", errors="replace") as fh:
        for line in fh:
            parts = line.split()
            if "-" in parts[0] and not parts[0].endswith(":"):
                current = parts[5] if len(parts) > 5 else None
            elif parts[0] == "Rss:" and current == str(path):
                total += int(parts[1])
    return total


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc are Linux")


@linux_only
def test_drop_resident_only_touches_shared_file_mappings(tmp_path):
    """A shared file mapping leaves the resident set and reads back the same data; memory of any other kind
    (an ordinary array, a copy-on-write mapping with a private change) is left exactly as it was."""
    from noderag.graph.arrays import drop_resident

    path = tmp_path / "m.npy"
    data = np.arange(2_000_000, dtype=np.float32).reshape(-1, 4)
    mapped = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=data.shape)
    mapped[:] = data
    before = _resident_kb(path)
    assert before > 7000
    assert drop_resident(mapped[1000:400_000:3])  # a strided view: the pages under its extent go
    assert 0 < _resident_kb(path) < before
    assert drop_resident(mapped)
    assert _resident_kb(path) == 0
    np.testing.assert_array_equal(mapped, data)  # read back from the page cache / file
    plain = data.copy()
    assert not drop_resident(plain)
    np.testing.assert_array_equal(plain, data)
    private = np.load(path, mmap_mode="c")
    private[0] = -1.0
    assert not drop_resident(private)
    assert float(private[0, 0]) == -1.0


@linux_only
def test_file_backed_vectors_hold_only_what_is_read(tmp_path):
    """``share_file``: the rows stay readable and assignable while the process keeps none of the file's pages
    resident, neither after an assignment (it drops what it wrote) nor after ``drop_resident``."""
    vec = NodeVectors(64, np.float16)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20_000, 64)).astype(np.float32)
    vec.reserve(20_100)
    vec.share_file(tmp_path / "v.npy")
    for b in range(0, 20_000, 1024):  # batch by batch, as the embed stage fills it
        vec[np.arange(b, min(b + 1024, 20_000))] = x[b:b + 1024]
    assert _resident_kb(tmp_path / "v.npy") == 0
    np.testing.assert_array_equal(vec.view(np.arange(20_000)), x.astype(np.float16))
    vec.drop_resident()
    assert _resident_kb(tmp_path / "v.npy") == 0
    np.testing.assert_allclose(vec[np.arange(0, 20_000, 7)], x[::7].astype(np.float16).astype(np.float32))
    vec[np.array([20_050])] = x[:1]
    assert vec.file == tmp_path / "v.npy"
    vec.drop_resident()
    np.testing.assert_array_equal(vec[np.array([20_050])], x[:1].astype(np.float16).astype(np.float32))


@linux_only
def test_reads_of_file_backed_rows_map_none_of_the_file(tmp_path):
    """Scattered, repeated and consecutive reads of file-backed rows (by ``preadv``) equal the data and leave
    none of the file resident, also for rows written after the pages were dropped."""
    vec = NodeVectors(512, np.float32)
    vec.reserve(4000)
    vec.share_file(tmp_path / "v.npy")
    x = np.random.default_rng(1).standard_normal((4000, 512)).astype(np.float32)
    vec[np.arange(3000)] = x[:3000]
    vec.drop_resident()
    vec[np.arange(3000, 4000)] = x[3000:]  # written through the mapping after the drop: read back by preadv
    vec.drop_resident()
    rng = np.random.default_rng(2)
    for ids in (rng.permutation(4000)[:700], np.array([5, 5, 9, 6, 7, 8, 3999, 0]), np.arange(100, 2100)):
        np.testing.assert_array_equal(vec[ids], x[ids])
        assert _resident_kb(tmp_path / "v.npy") == 0
    np.testing.assert_array_equal(vec.view(np.array([7, 3, 3900])), x[[7, 3, 3900]])
