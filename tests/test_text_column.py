"""The node table's compact string columns against plain Python lists."""


import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderag.store import text_column
from noderag.store.text_column import DerivedNames, TextColumn
from noderag.store.typed_column import TypedColumn

_texts = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12), max_size=40)


@settings(max_examples=150, deadline=None)
@given(_texts, st.data())
def test_text_column_reads_back_what_was_appended(texts, data):
    col = TextColumn(texts)
    ref = list(texts)
    assert len(col) == len(ref) and list(col) == ref and col == ref
    if ref:
        for _ in range(3):  # replace a few texts, as an insert that reactivates an A/H node does
            i = data.draw(st.integers(-len(ref), len(ref) - 1))
            new = data.draw(st.text(max_size=5, alphabet="abcé漢"))
            col[i] = new
            ref[i] = new
        assert [col[i] for i in range(len(ref))] == ref and [col[-1]] == ref[-1:]
    assert col.to_arrow().to_pylist() == ref


def test_to_arrow_splits_into_chunks_without_changing_the_texts(monkeypatch):
    monkeypatch.setattr(text_column, "ARROW_CHUNK_ROWS", 3)
    texts = ["a", "", "bé", "漢字", "x" * 10, "y", "z"]
    col = TextColumn(texts)
    col[4] = "changed"
    arr = col.to_arrow()
    assert arr.num_chunks == 3 and arr.type == pa.string()
    assert arr.to_pylist() == texts[:4] + ["changed"] + texts[5:]


def test_text_column_index_errors_name_the_range():
    col = TextColumn(["a"])
    with pytest.raises(IndexError, match="text index 1 out of range for 1 texts"):
        col[1]
    with pytest.raises(IndexError):
        col[-2] = "b"


def test_derived_names_store_only_what_the_rule_does_not_give():
    types = TypedColumn("B", [2, 1, 6, 2, 3])  # N, S, O, N, R
    texts = TextColumn(["Kessel", "Kessel is a town.", "Towns", "skarn", "a b c"])
    names = DerivedNames(types, texts)
    for i, name in enumerate(["Kessel", None, "Towns", "Skarn", None]):
        names.note(i, types[i], texts[i], name)
    assert list(names) == ["Kessel", None, "Towns", "Skarn", None]
    assert names.exceptions == {3: "Skarn"}
    assert names[-1] is None and len(names) == 5


@settings(max_examples=100, deadline=None)
@given(_texts.filter(bool), st.data())
def test_take_gathers_like_indexing(texts, data):
    col = TextColumn(texts)
    types = TypedColumn("B", data.draw(st.lists(st.sampled_from([1, 2, 6]), min_size=len(texts), max_size=len(texts))))
    names = DerivedNames(types, col)
    for i, t in enumerate(types):
        names.note(i, t, texts[i], data.draw(st.sampled_from([None, texts[i], "other"])))
    if data.draw(st.booleans()):
        col[0] = "replaced"
    ids = data.draw(st.lists(st.integers(-len(texts), len(texts) - 1), max_size=20))
    assert col.take(ids) == [col[i] for i in ids]
    pos = [i % len(texts) for i in ids]
    assert names.take(pos) == [names[i] for i in pos]
    with pytest.raises(IndexError, match="text ids must lie in"):
        col.take([len(texts)])


def test_from_buffers_reads_several_blobs_as_one_column():
    import numpy as np

    from noderag.store.text_column import TextColumn

    a, b = TextColumn(["alpha", "", "βeta"]), TextColumn(["gamma", "δ"])

    def blob(col):
        ends = np.frombuffer(col._ends, dtype=np.int64)
        return np.concatenate([[0], ends]), np.frombuffer(bytes(col._data), dtype=np.uint8)

    both = TextColumn.from_buffers([blob(a), blob(b)])
    assert list(both) == ["alpha", "", "βeta", "gamma", "δ"] and both.take([4, 0]) == ["δ", "alpha"]
    both.append("new")
    assert both[5] == "new" and len(both) == 6
    assert both.take([5, 3, -1, 0]) == ["new", "gamma", "new", "alpha"]


def test_a_column_over_read_only_blobs_behaves_as_one_built_by_appending(tmp_path):
    """Memory-mapped parts are referenced, never copied or written: every read equals a plain column's."""
    import numpy as np

    rng = np.random.default_rng(3)
    words = ["Kessel", "", "βeta", "馬祖列島", "a b c", "x" * 300]
    parts, every = [], []
    for p in range(3):
        texts = [words[int(i)] + str(p) * int(j) for i, j in rng.integers(0, 6, size=(int(rng.integers(1, 40)), 2))]
        data = b"".join(t.encode("utf-8") for t in texts)
        offsets = np.concatenate([[0], np.cumsum([len(t.encode("utf-8")) for t in texts])]).astype(np.int64)
        np.save(tmp_path / f"o{p}.npy", offsets)
        np.save(tmp_path / f"d{p}.npy", np.frombuffer(data, dtype=np.uint8))
        parts.append((np.load(tmp_path / f"o{p}.npy", mmap_mode="r"), np.load(tmp_path / f"d{p}.npy", mmap_mode="r")))
        every += texts
    col = TextColumn.from_buffers(parts)
    plain = TextColumn(every)
    for t in ("appended", "Ünïcode"):
        col.append(t)
        plain.append(t)
    col[2] = plain[2] = "replaced"
    col[len(col) - 1] = plain[len(plain) - 1] = "replaced tail"
    assert len(col) == len(plain) and list(col) == list(plain) and col == plain
    ids = rng.integers(-len(col), len(col), size=200)
    assert col.take(ids) == plain.take(ids)
    first = len(every)  # what a delta writes: the appended rows only
    assert col.to_arrow(first).to_pylist() == plain.to_arrow(first).to_pylist() == ["appended", "replaced tail"]
    assert col.to_arrow(1).to_pylist() == plain.to_arrow(1).to_pylist()
    assert col.nbytes() == len("appended".encode()) + len("Ünïcode".encode()) + 16  # the parts are not held
    with pytest.raises(IndexError):
        col[len(col)]
    with pytest.raises(ValueError, match="text offsets must run from 0"):
        TextColumn.from_buffers([(np.array([0, 5], np.int64), np.zeros(4, np.uint8))])
