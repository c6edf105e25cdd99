"""``TypedColumn`` (read-only leading parts, appended rows) behaves as one list of its rows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from noderag.graph.storage import atomic_save_npy, load_npy
from noderag.store.typed_column import TypedColumn

_DT = {"B": np.uint8, "q": np.int64, "Q": np.uint64}
_HI = {"B": 255, "q": 2 ** 40, "Q": 2 ** 63}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["B", "q", "Q"]), st.lists(st.lists(st.integers(0, 255), max_size=6), max_size=4),
       st.lists(st.integers(0, 255), max_size=6), st.data())
def test_rows_read_written_gathered_and_copied_like_a_list(code, parts, tail, data):
    arrays = [np.array(p, _DT[code]) for p in parts]
    for a in arrays:
        a.flags.writeable = False  # as a memory-mapped segment file is
    col = TypedColumn(code, parts=arrays)
    for v in tail:
        col.append(v)
    ref = [v for p in parts for v in p] + list(tail)
    assert len(col) == len(ref) and list(col) == ref
    assert all(col[i] == ref[i] and col[i - len(ref)] == ref[i] for i in range(len(ref)))
    for start in range(len(ref) + 1):
        got = col.numpy(start)
        assert got.dtype == _DT[code] and got.tolist() == ref[start:]
    if ref:
        ids = data.draw(st.lists(st.integers(0, len(ref) - 1), max_size=10))
        assert col.take(ids).tolist() == [ref[i] for i in ids]
        i = data.draw(st.integers(0, len(ref) - 1))
        col[i] = ref[i] = 7
        assert list(col) == ref and np.asarray(col).tolist() == ref
    assert [a.tolist() for a in arrays] == parts  # a row of a read-only part was changed in a copy
    with pytest.raises(IndexError):
        col.take([len(ref)])


def test_parts_are_referenced_not_copied_and_a_mapped_file_is_never_written(tmp_path):
    atomic_save_npy(tmp_path / "a.npy", np.arange(5, dtype=np.int64))
    mapped = np.asarray(load_npy(tmp_path / "a.npy", True, dtype=np.int64, shape=(5,)))
    col = TypedColumn("q", parts=[mapped])
    assert col._parts[0] is mapped
    col[2] = 40
    col.append(9)
    assert col.numpy().tolist() == [0, 1, 40, 3, 4, 9]
    assert np.load(tmp_path / "a.npy").tolist() == [0, 1, 2, 3, 4]


def test_parts_of_another_dtype_are_refused():
    with pytest.raises(ValueError, match="1-d uint64"):
        TypedColumn("Q", parts=[np.zeros(3, np.int64)])
    with pytest.raises(ValueError, match="typecode"):
        TypedColumn("f")
