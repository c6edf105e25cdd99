"""Direct reads of saved vectors (noderag.graph.vector_slots): the keys file in add order, written only where the
slot order is known, and gets that return exactly what usearch returns, or fall back to it."""

import logging

import numpy as np
import pytest

from noderag.graph.vector_slots import key_fingerprint, keys_path
from noderag.graph.vectors import VectorIndex, shard_path


def _vectors(seed: int, n: int, d: int = 24) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((n, d)) * 2).astype(np.float32)


def _saved(tmp_path, dtype="i8", shards=1, n=400, name="v", threads=1, seed=0):
    """An index of ``n`` vectors under ascending, non-contiguous ids, added in two calls, saved; returns its path."""
    index = VectorIndex(24, dtype=dtype, shards=shards, threads=threads)
    ids = np.arange(n, dtype=np.int64) * 5 + 3
    index.add(ids[: n // 3], _vectors(seed, n // 3))
    index.add(ids[n // 3:], _vectors(seed + 1, n - n // 3))
    path = tmp_path / name / "vectors.usearch"
    index.save(path)
    return path


def _pair(path):
    fast, slow = VectorIndex.load(path, view=True), VectorIndex.load(path, view=True, direct=False)
    return fast, slow


@pytest.mark.parametrize("dtype", ["i8", "f16", "f32", "bf16", "f64"])
@pytest.mark.parametrize("shards", [1, 3])
def test_direct_get_equals_usearchs_get_bit_for_bit(tmp_path, dtype, shards):
    path = _saved(tmp_path, dtype, shards)
    fast, slow = _pair(path)
    assert fast.direct_status() == {str(path): "direct"}
    assert slow.direct_status() == {str(path): "direct reads off"}
    keys = slow.keys()
    ids = np.random.default_rng(3).permutation(keys)  # every key, every shard, in no order
    got = fast.get(ids)
    assert got.dtype == np.float32 and got.shape == (keys.size, 24)
    assert np.array_equal(got, slow.get(ids))
    assert np.array_equal(fast.get(ids[:7]), slow.get(ids[:7]))
    assert np.array_equal(fast.get(np.r_[ids[5], ids[5], ids[9]]), slow.get(np.r_[ids[5], ids[5], ids[9]]))
    assert fast.get([]).shape == (0, 24)
    with pytest.raises(ValueError, match=r"ids not in the index: \[4, 9\]"):
        fast.get(np.r_[ids[:3], 4, 9])


def test_i8_conversion_covers_every_stored_value(tmp_path):
    """Each int8 value -127..127 converts as usearch converts it (usearch scales each row to unit length
    before quantising: rows (x, sqrt(1 - x^2), 0, ...) for x from -1 to 1 store every value first)."""
    first = np.linspace(-1, 1, 2001)
    rows = np.zeros((first.size, 8), np.float32)
    rows[:, 0], rows[:, 1] = first, np.sqrt(1 - first ** 2)
    index = VectorIndex(8, dtype="i8")
    index.add(np.arange(first.size) * 2, rows)
    index.save(tmp_path / "vectors.usearch")
    fast, slow = _pair(tmp_path / "vectors.usearch")
    assert fast.direct_status()[str(tmp_path / "vectors.usearch")] == "direct"
    got = fast.get(np.arange(first.size) * 2)
    assert np.unique(np.round(got[:, 0] * 127)).size == 255
    assert np.array_equal(got, slow.get(np.arange(first.size) * 2))


def test_f16_conversion_covers_subnormal_to_large_values(tmp_path):
    """float16 rows widened through the table equal usearch's rows, subnormals and large values included."""
    bits = np.arange(0, 0x7C00, 7, dtype=np.uint16)  # every 7th finite non-negative float16, subnormals first
    values = np.r_[bits, bits | 0x8000].view(np.float16).astype(np.float32)
    rows = np.resize(values, (values.size // 16 + 1, 16))
    index = VectorIndex(16, metric="l2sq", dtype="f16")
    index.add(np.arange(rows.shape[0]), rows)
    index.save(tmp_path / "vectors.usearch")
    fast, slow = _pair(tmp_path / "vectors.usearch")
    assert fast.direct_status()[str(tmp_path / "vectors.usearch")] == "direct"
    got = fast.get(np.arange(rows.shape[0]))
    assert np.array_equal(got, rows) and np.array_equal(got, slow.get(np.arange(rows.shape[0])))


def test_keys_file_is_the_add_order_and_the_file_rows_follow_it(tmp_path):
    path = _saved(tmp_path, "f32", shards=3, n=100)
    order = np.load(keys_path(path))
    assert keys_path(path).name == "vectors.keys.npy" and order.dtype == np.int64
    assert np.array_equal(order, np.arange(100) * 5 + 3)
    index = VectorIndex.load(path)
    for j in range(3):  # vector i of the add order is row i // 3 of shard i % 3
        raw = np.memmap(shard_path(path, j), np.float32, "r", offset=8, shape=(len(range(j, 100, 3)), 24))
        assert np.array_equal(np.asarray(raw), index.get(order[j::3]))


def test_a_multi_threaded_add_writes_no_keys_file(tmp_path):
    path = _saved(tmp_path, "f16", shards=1, threads=2)
    assert not keys_path(path).exists()
    fast, slow = _pair(path)
    assert fast.direct_status() == {str(path): "no keys file"}
    assert np.array_equal(fast.get(slow.keys()), slow.get(slow.keys()))


def test_a_save_without_a_known_order_removes_a_stale_keys_file(tmp_path):
    path = _saved(tmp_path, "f32", shards=1)
    assert keys_path(path).exists()
    index = VectorIndex(24, dtype="f32", threads=2)
    index.add(np.arange(50) + 1000, _vectors(9, 50))
    index.save(path)
    assert not keys_path(path).exists()


def test_an_ordered_index_loaded_writable_and_added_to_keeps_its_keys_file(tmp_path):
    path = _saved(tmp_path, "i8", shards=2, n=90)
    index = VectorIndex.load(path, view=False)
    assert index.direct_status() == {str(path): "not a view"}
    index.add(np.arange(7) + 10_000, _vectors(5, 7))
    out = tmp_path / "more" / "vectors.usearch"
    index.save(out)
    assert np.array_equal(np.load(keys_path(out)), np.r_[np.arange(90) * 5 + 3, np.arange(7) + 10_000])
    fast, slow = _pair(out)
    assert fast.direct_status() == {str(out): "direct"}
    assert np.array_equal(fast.get(slow.keys()), slow.get(slow.keys()))


def test_shift_keys_moves_the_keys_file_along(tmp_path):
    path = _saved(tmp_path, "f16", shards=3, n=60)
    before = VectorIndex.load(path).get(np.arange(60) * 5 + 3)
    index = VectorIndex.load(path, view=False)
    index.shift_keys(1000)
    out = tmp_path / "shifted" / "vectors.usearch"
    index.save(out)
    assert np.array_equal(np.load(keys_path(out)), np.arange(60) * 5 + 1003)
    fast, slow = _pair(out)
    assert fast.direct_status() == {str(out): "direct"}
    assert np.array_equal(fast.get(np.arange(60) * 5 + 1003), before)
    with pytest.raises(ValueError, match="read-only"):
        fast.shift_keys(1)


def test_keys_renamed_behind_the_index_write_no_keys_file(tmp_path):
    """A shard changed without the index knowing (a rename straight on usearch) no longer matches the recorded order."""
    index = VectorIndex(24, dtype="f32", shards=2)
    index.add(np.arange(30), _vectors(1, 30))
    index._shards[1].rename(np.array([1], np.uint64), np.array([999], np.uint64))
    index.save(tmp_path / "vectors.usearch")
    assert not keys_path(tmp_path / "vectors.usearch").exists()


def test_two_ascending_runs_read_directly(tmp_path):
    """Passages and units by id, then summaries by id, after an insert gave passages ids above old summaries."""
    index = VectorIndex(24, dtype="i8", shards=3)
    index.add(np.r_[np.arange(0, 300, 2), np.arange(400, 500, 3)], _vectors(4, 184))
    index.add(np.arange(301, 350, 4), _vectors(5, 13))
    path = tmp_path / "vectors.usearch"
    index.save(path)
    fast, slow = _pair(path)
    assert fast.direct_status() == {str(path): "direct"}
    ids = np.random.default_rng(1).permutation(slow.keys())
    assert np.array_equal(fast.get(ids), slow.get(ids))
    with pytest.raises(ValueError, match=r"ids not in the index: \[1\]"):
        fast.get([305, 1])


def test_a_descending_add_order_is_kept_but_read_through_usearch(tmp_path):
    index = VectorIndex(24, dtype="f32", shards=2)
    index.add(np.arange(40)[::-1].copy(), _vectors(2, 40))
    path = tmp_path / "vectors.usearch"
    index.save(path)
    assert np.array_equal(np.load(keys_path(path)), np.arange(40)[::-1])
    fast, slow = _pair(path)
    assert fast.direct_status() == {str(path): "vectors.keys.npy: keys in more than 8 ascending runs"}
    assert np.array_equal(fast.get(np.arange(40)), slow.get(np.arange(40)))


def _rewrite_keys(path, keys):
    np.save(keys_path(path), np.asarray(keys, dtype=np.int64))


@pytest.mark.parametrize("damage, reason", [
    ("short", "do not fill the shards"),
    ("reversed", "holds key"),
    ("runs", "more than 8 ascending runs"),
    ("shifted", "holds key"),
    ("float", "dtype float64"),
    ("garbage", "vectors.keys.npy:"),
])
def test_a_keys_file_that_disagrees_with_its_shards_falls_back(tmp_path, caplog, damage, reason):
    path = _saved(tmp_path, "i8", shards=3, n=300)
    good = np.load(keys_path(path))
    if damage == "short":
        _rewrite_keys(path, good[:-1])
    elif damage == "reversed":
        _rewrite_keys(path, good[::-1])
    elif damage == "runs":  # keys of shard 0 outside the sampled rows exchanged pairwise: only their order tells
        bad = good.copy()
        for i in (3, 9, 15, 21, 27, 33, 45, 51, 63):  # none of them, nor i + 3, a sampled row
            bad[i], bad[i + 3] = good[i + 3], good[i]
        _rewrite_keys(path, bad)
    elif damage == "shifted":
        _rewrite_keys(path, good + 1)
    elif damage == "float":
        np.save(keys_path(path), good.astype(np.float64))
    else:
        keys_path(path).write_bytes(b"not an npy file at all")
    with caplog.at_level(logging.DEBUG, logger="noderag.vectors"):
        fast, slow = _pair(path)
    assert reason in fast.direct_status()[str(path)]
    assert "read through usearch" in caplog.text
    assert np.array_equal(fast.get(good[::-1]), slow.get(good[::-1]))


def test_a_damaged_entry_never_reads_another_keys_row(tmp_path):
    """Entries changed so that the keys stay ascending (and the sampled slots still agree): a read of an entry
    whose slot's node holds another key, or of a key two entries name, raises instead of returning a row."""
    path = _saved(tmp_path, "f32", shards=3, n=300)
    good = np.load(keys_path(path))  # 3, 8, 13, ...
    bad = good.copy()
    bad[100] += 1  # the key 503 (row 33 of shard 1) becomes 504, which is no key at all
    bad[200] = good[50]  # the key 1003 (shard 2) becomes 253, a key of shard 2 at row 16: named twice
    _rewrite_keys(path, bad)
    fast, slow = _pair(path)
    assert fast.direct_status() == {str(path): "direct"}  # the sample slots did not include them (two runs now)
    assert np.array_equal(fast.get(good[:50]), slow.get(good[:50]))  # the undamaged entries read as before
    with pytest.raises(ValueError, match=r"names key 504 at slot 33 of vectors.1.usearch, whose node holds key 503"):
        fast.get([3, 504])
    with pytest.raises(ValueError, match="names key 504 at slot 33"):
        fast.contains([504])
    with pytest.raises(ValueError, match="names key 253 twice"):
        fast.get([253])


def test_two_swapped_entries_never_return_each_others_rows(tmp_path):
    """Two entries of one shard exchanged: each key is still in its shard (usearch's contains says yes), but
    its slot's node holds the other key, so the read raises instead of returning the other key's row."""
    path = _saved(tmp_path, "f32", shards=2, n=200)
    good = np.load(keys_path(path))
    bad = good.copy()
    bad[60], bad[62] = good[62], good[60]  # both in shard 0 (rows 30 and 31), neither a sampled position
    _rewrite_keys(path, bad)
    fast, slow = _pair(path)
    assert fast.direct_status() == {str(path): "direct"}
    assert np.asarray(slow._shards[0].contains(good[[60, 62]].astype(np.uint64))).all()  # the old check passed
    assert not np.array_equal(slow.get([good[60]]), slow.get([good[62]]))  # two different rows
    for key in (good[60], good[62]):
        with pytest.raises(ValueError, match=rf"names key {key} at slot 3[01] of vectors.usearch"):
            fast.get([key])
    assert np.array_equal(fast.get(good[:60]), slow.get(good[:60]))


def test_a_view_without_key_lookups_answers_as_a_view_with_them(tmp_path):
    """contains, get, keys and search of the direct view (shards mapped without usearch's key tables) equal the
    view with them, for ids held and not held, in one segment or several."""
    path = _saved(tmp_path, "i8", shards=3, n=300)
    other = VectorIndex(24, dtype="i8")
    other.add(np.arange(50) + 5000, _vectors(4, 50))
    other.save(tmp_path / "o" / "vectors.usearch")
    for paths in ([path], [path, tmp_path / "o" / "vectors.usearch"]):
        fast = VectorIndex.load_segments(paths)
        slow = VectorIndex.load_segments(paths, direct=False)
        assert len(fast._keyless) == 3 + (len(paths) - 1) and not slow._keyless
        ids = np.r_[slow.keys(), np.arange(0, 6000, 7)]
        assert np.array_equal(fast.contains(ids), slow.contains(ids))
        assert np.array_equal(np.sort(fast.keys()), np.sort(slow.keys())) and len(fast) == len(slow)
        held = slow.keys()
        assert np.array_equal(fast.get(held), slow.get(held))
        queries = _vectors(9, 20)
        for k in (1, 10):
            got, want = fast.search(queries, k), slow.search(queries, k)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        assert np.array_equal(fast.search(queries[:1], 5)[0], slow.search(queries[:1], 5)[0])


@pytest.mark.parametrize("damage, reason", [
    ("version", "usearch file version 2.99.6 is not read directly"),
    ("deleted", "3 deleted vectors"),
    ("multi", "a multi-key index"),
    ("slot", "key kind 14, slot kind 2"),
    ("key", "key kind 15, slot kind 15"),
    ("tail", "the nodes end at byte"),
    ("level", "node levels outside"),
])
def test_a_shard_file_that_is_not_parsed_is_viewed_with_key_lookups(tmp_path, damage, reason):
    """Each refusal of the file parse: no slot table, the shards are viewed with usearch's key tables as before
    (a changed head byte usearch itself ignores when it views)."""
    path = _saved(tmp_path, "i8", shards=2, n=100)
    file = shard_path(path, 1)
    data = bytearray(file.read_bytes())
    rows, cols = np.frombuffer(bytes(data[:8]), "<u4")
    h = 8 + int(rows) * int(cols)
    assert data[h:h + 7] == b"usearch"
    if damage == "version":
        data[h + 9:h + 11] = (99).to_bytes(2, "little")
    elif damage == "deleted":
        data[h + 25:h + 33] = (3).to_bytes(8, "little")
    elif damage == "multi":
        data[h + 41] = 1
    elif damage == "slot":
        data[h + 16] = 2
    elif damage == "key":
        data[h + 15] = 15
    elif damage == "tail":
        data += b"\0" * 8
    else:
        data[h + 104:h + 106] = (-1).to_bytes(2, "little", signed=True)
    file.write_bytes(bytes(data))
    from noderag.graph.vector_slots import ShardFile

    with pytest.raises(ValueError, match=f"vectors.1.usearch: {reason}"):
        ShardFile(file)
    if damage in ("key", "slot"):  # usearch refuses these files itself, with or without key lookups
        with pytest.raises(ValueError, match="is not a usearch index file"):
            VectorIndex.load(path)
        return
    fast = VectorIndex.load(path)
    assert reason in fast.direct_status()[str(path)] and not fast._keyless and not fast._direct
    if damage in ("version", "tail"):  # bytes usearch's view does not read: it answers as before
        slow = VectorIndex.load(path, direct=False)
        keys = slow.keys()
        assert np.array_equal(fast.get(keys), slow.get(keys)) and fast.contains(keys).all()


def test_an_index_without_a_keys_file_is_viewed_as_before(tmp_path):
    """No keys file (an old index, or one added to by several threads): usearch's key tables answer, unchanged."""
    path = _saved(tmp_path, "f16", shards=2, n=120)
    slow = VectorIndex.load(path, direct=False)
    keys_path(path).unlink()
    fast = VectorIndex.load(path)
    assert fast.direct_status() == {str(path): "no keys file"} and not fast._keyless
    ids = np.r_[slow.keys(), 4, 9]
    assert np.array_equal(fast.contains(ids), slow.contains(ids))
    assert np.array_equal(fast.get(slow.keys()), slow.get(slow.keys()))
    assert np.array_equal(np.sort(fast.keys()), np.sort(slow.keys()))


def test_the_shard_file_parse_finds_every_slots_key(tmp_path):
    """Every node's key, read at the offset the levels give, is the key usearch reports for that slot's row."""
    from noderag.graph.vector_slots import ShardFile

    path = _saved(tmp_path, "f16", shards=1, n=600)
    parsed = ShardFile(path)
    order = np.load(keys_path(path))
    assert parsed.size == 600 and parsed.ndim == 24 and parsed.dtype == "f16"
    assert int(parsed.levels.max()) >= 1  # some nodes above level 0: the offsets are not a plain stride
    assert np.array_equal(parsed.node_keys(np.arange(600)), order.astype(np.uint64))


def test_an_index_with_an_empty_shard_reads_directly(tmp_path):
    """Fewer vectors than shards: the empty shard's file (its graph's level stored as -1) parses too."""
    index = VectorIndex(8, dtype="i8", shards=3)
    index.add(np.array([4, 9]), _vectors(2, 2, 8))
    index.save(tmp_path / "vectors.usearch")
    fast, slow = _pair(tmp_path / "vectors.usearch")
    assert fast.direct_status() == {str(tmp_path / "vectors.usearch"): "direct"} and len(fast._keyless) == 3
    assert np.array_equal(fast.get([9, 4]), slow.get([9, 4]))
    assert fast.contains([4, 5, 9]).tolist() == [True, False, True] and sorted(fast.keys().tolist()) == [4, 9]


def test_the_keys_file_of_another_index_falls_back(tmp_path):
    """The same keys in other slots: the keys the sampled slots' nodes store tell."""
    path = _saved(tmp_path, "i8", shards=2, n=100, name="a", seed=0)
    other = _saved(tmp_path, "i8", shards=2, n=100, name="b", seed=7)
    index = VectorIndex(24, dtype="i8", shards=2)
    index.add(np.arange(100)[::-1] * 5 + 3, _vectors(0, 100))  # the same keys, added the other way round
    index.save(path)
    keys_path(path).write_bytes(keys_path(other).read_bytes())  # ascending, not this index's slot order
    fast, slow = _pair(path)
    assert fast.direct_status()[str(path)].startswith("vectors.keys.npy: slot 0 of shard 0 holds key 498")
    assert np.array_equal(fast.get(np.arange(100) * 5 + 3), slow.get(np.arange(100) * 5 + 3))


def test_segments_read_directly_where_they_can(tmp_path):
    """Several saved indexes opened as one: each with its own table, a segment without one through usearch."""
    a = _saved(tmp_path, "i8", shards=2, n=120, name="a")
    b_index = VectorIndex(24, dtype="i8", threads=2)
    b_index.add(np.arange(30) + 5000, _vectors(8, 30))
    b = tmp_path / "b" / "vectors.usearch"
    b_index.save(b)
    c_index = VectorIndex(24, dtype="i8")
    c_index.add(np.arange(40) + 9000, _vectors(9, 40))
    c = tmp_path / "c" / "vectors.usearch"
    c_index.save(c)
    fast = VectorIndex.load_segments([a, b, c])
    slow = VectorIndex.load_segments([a, b, c], direct=False)
    assert fast.direct_status() == {str(a): "direct", str(b): "no keys file", str(c): "direct"}
    ids = np.random.default_rng(0).permutation(slow.keys())
    assert np.array_equal(fast.get(ids), slow.get(ids))
    with pytest.raises(ValueError, match=r"ids not in the index: \[4\]"):
        fast.get([5003, 4, 9001])


def test_fingerprint_is_order_free_and_tells_sets_apart():
    keys = np.arange(1000, dtype=np.int64) * 7
    assert key_fingerprint(keys) == key_fingerprint(keys[::-1])
    assert key_fingerprint(keys) != key_fingerprint(np.r_[keys[:-1], keys[-1] + 1])


# ----------------------------------------------------------------------------- the writers of an index

def _docs(folder, n: int, first: int = 0):
    import json

    path = folder / f"docs{first}.jsonl"
    path.write_text("".join(json.dumps({"id": f"d{i}", "title": f"Harbour {i}", "text": f"Harbour {i} was built by "
                                        f"Engineer Smith{i} in {1800 + i}. Ships from Harbour {i} sail to Quell{i}."})
                            + "\n" for i in range(first, first + n)), encoding="utf-8")
    return path


def _every_vector_index_reads_directly(gen):
    """Each vectors.usearch of the generation (base, deltas) has its keys file, listed with a checksum, read directly."""
    import json

    sums = json.loads((gen / "manifest.json").read_text())["checksums"]["files"]
    found = sorted(gen.rglob("vectors.usearch"))
    assert found
    for path in found:
        rel = keys_path(path).relative_to(gen).as_posix()
        assert rel in sums, rel
        index = VectorIndex.load(path)
        assert index.direct_status() == {str(path): "direct"}, path
        keys = index.keys()
        slow = VectorIndex.load(path, direct=False)  # usearch's key tables
        assert len(index._keyless) == index.shards  # mapped without them
        assert np.array_equal(index.get(keys), slow.get(keys))
        probe = np.r_[keys, np.arange(int(keys.max()) + 2)]  # held and not held
        assert np.array_equal(index.contains(probe), slow.contains(probe))
        queries = index.get(keys[:5]) + 0.01
        for got, want in zip(index.search(queries, 4), slow.search(queries, 4)):
            assert np.array_equal(got, want)
    return found


def test_build_insert_compaction_and_segments_write_consistent_keys_files(tmp_path):
    from noderag.config import NodeRAGConfig
    from noderag.indexing.driver import build_index
    from noderag.indexing.segmented import build_segmented
    from noderag.indexing.update.compact import compact_index
    from noderag.store.generations import current_path
    from noderag.store.verify import verify_index

    cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:32", "embed.vector_shards": 2,
                                          "update.max_delta_share": 100.0})
    root = tmp_path / "idx"
    build_index([_docs(tmp_path, 12)], root, cfg, progress=False)
    assert len(_every_vector_index_reads_directly(current_path(root))) == 1
    build_index([_docs(tmp_path, 4, first=12)], root, progress=False)  # a delta segment with its own index
    gen = current_path(root)
    assert {p.parent.relative_to(gen).as_posix() for p in _every_vector_index_reads_directly(gen)} == {".", "deltas/1"}
    verify_index(root, "full")
    compact_index(root, progress=False)
    assert len(_every_vector_index_reads_directly(current_path(root))) == 1
    verify_index(root, "full")
    seg = tmp_path / "seg"
    build_segmented([_docs(tmp_path, 12)], seg, NodeRAGConfig.from_dict(
        {"embed": {"spec": "hash:32", "vector_shards": 2}, "update": {"max_delta_share": 100.0}}), segments=2)
    assert len(_every_vector_index_reads_directly(current_path(seg))) == 2  # the later part's keys moved along
    verify_index(seg, "full")


def test_full_verify_names_a_keys_file_that_differs_from_the_vectors(tmp_path):
    from noderag.store.errors import IndexDamagedError
    from noderag.store.verify import _check_add_order

    path = _saved(tmp_path, "i8", shards=2, n=100)
    index = VectorIndex.load(path, direct=False)  # as verify opens it: usearch's key tables, not the keys file
    keys = np.sort(index.keys())
    _check_add_order(path.parent, index, keys)  # as saved: fits
    _rewrite_keys(path, np.r_[np.load(keys_path(path))[:-1], 10_000])  # the last key replaced: no shard row is its
    with pytest.raises(IndexDamagedError, match="keys differ from the vector index in vectors.keys.npy"):
        _check_add_order(path.parent, index, keys)


@pytest.mark.parametrize("size", [1, 2, 65536, 65537, 140_000])
def test_run_starts_block_by_block_equal_one_comparison(size):
    from noderag.graph.vector_slots import _MAX_RUNS, _run_starts

    keys = np.arange(size, dtype=np.int64) * 3
    for cuts in ([], [size - 1], [65536], [1, 65536, 65537], list(range(1, size, max(1, size // 20)))):
        bad = keys.copy()
        for c in (c for c in cuts if 0 < c < size):
            bad[c:] -= 3 * c + 1  # a new ascending run starts at c
        want = [0] + (np.flatnonzero(bad[1:] <= bad[:-1]) + 1).tolist()
        assert _run_starts(bad) == want[:_MAX_RUNS + 1], cuts
    assert _run_starts(keys[:0]) == []


@pytest.mark.parametrize("spread", ["dense", "sparse", "clustered"])
def test_the_bucket_directory_finds_what_a_binary_search_finds(spread):
    from noderag.graph.vector_slots import _BUCKET_KEYS, _Directory

    rng = np.random.default_rng(5)
    if spread == "dense":  # every id: buckets of one id each would be wasteful, of 16 ids are full
        run = np.arange(1000, 6000, dtype=np.int64)
    elif spread == "sparse":
        run = np.unique(rng.integers(0, 10**9, 5000)).astype(np.int64)
    else:  # long gaps, then stretches where every id is a key (passages beside their units)
        run = np.unique(np.concatenate([np.arange(s, s + 40) for s in rng.integers(0, 10**7, 200)])).astype(np.int64)
    directory = _Directory.of(run)
    assert directory is not None and int(np.diff(directory.starts).max()) <= _BUCKET_KEYS
    ids = np.concatenate([rng.choice(run, 500), rng.integers(-5, int(run[-1]) + 50, 500), [run[0], run[-1]]])
    hit, pos = directory.find(run, ids)
    want = np.isin(ids, run)
    assert np.array_equal(hit, want)
    assert np.array_equal(pos[hit], np.searchsorted(run, ids[hit]))
    assert _Directory.of(run[:10]) is None  # a short run is searched directly
    # a dense stretch in a huge id range would need a directory far larger than the keys: searched directly
    assert _Directory.of(np.r_[np.arange(100), np.unique(rng.integers(200, 10**12, 200))].astype(np.int64)) is None
