"""Atomic, pickle-free storage helpers."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from noderag.graph import storage
from noderag.graph.storage import (
    FORMAT_VERSION,
    FormatVersionError,
    atomic_save_npy,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_parquet,
    check_format_version,
    dir_bytes,
    load_npy,
    read_json,
    tree_files,
)


def test_atomic_write_bytes_creates_and_replaces(tmp_path):
    p = tmp_path / "sub" / "f.bin"
    atomic_write_bytes(p, b"one")
    assert p.read_bytes() == b"one"
    atomic_write_bytes(p, b"two")
    assert p.read_bytes() == b"two"
    assert sorted(os.listdir(p.parent)) == ["f.bin"]
    with pytest.raises(TypeError):
        atomic_write_bytes(p, "text")  # type: ignore[arg-type]


def test_atomic_npy_failure_midway_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    p = tmp_path / "a.npy"
    atomic_save_npy(p, np.arange(5, dtype=np.int32))
    before = p.read_bytes()

    def broken_save(fh, arr, allow_pickle=False):
        fh.write(b"\x93NUMPY partial")
        raise RuntimeError("disk full")

    monkeypatch.setattr(storage.np, "save", broken_save)
    with pytest.raises(RuntimeError, match="disk full"):
        atomic_save_npy(p, np.arange(100, dtype=np.int32))
    assert p.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["a.npy"]


def test_atomic_write_failure_on_new_path_leaves_nothing(tmp_path, monkeypatch):
    def broken_fsync(fd):
        raise OSError("io error")

    monkeypatch.setattr(storage.os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="io error"):
        atomic_write_bytes(tmp_path / "new.bin", b"data")
    assert os.listdir(tmp_path) == []


def test_save_rejects_object_arrays(tmp_path):
    with pytest.raises(ValueError, match="object array"):
        atomic_save_npy(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object))
    assert os.listdir(tmp_path) == []


def test_load_npy_mmap_and_readonly(tmp_path):
    p = tmp_path / "x.npy"
    atomic_save_npy(p, np.arange(10, dtype=np.int64))
    a = load_npy(p)
    assert isinstance(a, np.memmap)
    assert not a.flags.writeable
    np.testing.assert_array_equal(a, np.arange(10))
    b = load_npy(p, mmap=False)
    assert not isinstance(b, np.memmap)
    assert not b.flags.writeable
    np.testing.assert_array_equal(b, np.arange(10))
    e = tmp_path / "e.npy"
    atomic_save_npy(e, np.zeros(0, np.float32))
    assert load_npy(e).shape == (0,)


def test_load_npy_errors_name_the_file(tmp_path):
    missing = tmp_path / "missing.npy"
    with pytest.raises(FileNotFoundError, match="missing.npy"):
        load_npy(missing)

    p = tmp_path / "trunc.npy"
    atomic_save_npy(p, np.arange(1000, dtype=np.int64))
    p.write_bytes(p.read_bytes()[:200])
    with pytest.raises(ValueError, match="trunc.npy"):
        load_npy(p)
    with pytest.raises(ValueError, match="trunc.npy"):
        load_npy(p, mmap=False)

    garbage = tmp_path / "garbage.npy"
    garbage.write_bytes(b"not a numpy file at all")
    with pytest.raises(ValueError, match="garbage.npy"):
        load_npy(garbage)

    good = tmp_path / "good.npy"
    atomic_save_npy(good, np.arange(4, dtype=np.int32))
    with pytest.raises(ValueError, match="good.npy.*int64"):
        load_npy(good, dtype=np.int64)
    with pytest.raises(ValueError, match=r"good.npy.*shape \(5,\)"):
        load_npy(good, shape=(5,))
    with pytest.raises(ValueError, match="good.npy.*2-D"):
        load_npy(good, ndim=2)


@pytest.mark.parametrize("mmap", [True, False])
def test_load_npy_never_unpickles(tmp_path, mmap):
    p = tmp_path / "evil.npy"
    np.save(p, np.array([object(), 1], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="evil.npy"):
        load_npy(p, mmap=mmap)


def test_json_roundtrip_sorted_utf8_numpy(tmp_path):
    p = tmp_path / "m.json"
    obj = {"b": np.int64(3), "a": "Zürich 東京", "c": np.arange(3), "d": np.float32(0.5), "e": np.bool_(True)}
    atomic_write_json(p, obj)
    text = p.read_text(encoding="utf-8")
    assert text.index('"a"') < text.index('"b"') < text.index('"c"')
    assert "Zürich 東京" in text
    assert read_json(p) == {"a": "Zürich 東京", "b": 3, "c": [0, 1, 2], "d": 0.5, "e": True}
    with pytest.raises(ValueError):
        atomic_write_json(tmp_path / "nan.json", {"x": float("nan")})
    assert not (tmp_path / "nan.json").exists()
    with pytest.raises(TypeError):
        atomic_write_json(tmp_path / "bad.json", {"x": object()})


def test_read_json_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        read_json(tmp_path / "nope.json")
    p = tmp_path / "broken.json"
    p.write_text('{\n  "a": 1,\n  "b": \n}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken.json: invalid JSON at line 4 column 1"):
        read_json(p)
    q = tmp_path / "latin.json"
    q.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ValueError, match="latin.json.*UTF-8"):
        read_json(q)


def test_parquet_atomic(tmp_path, monkeypatch):
    p = tmp_path / "nodes.parquet"
    t = pa.table({"id": pa.array([0, 1, 2], pa.int32()), "text": ["a", "b", "ç"]})
    atomic_write_parquet(p, t)
    assert pq.read_table(p).equals(t)

    def broken(table, where, **kw):
        where.write(b"PAR1 partial")
        raise RuntimeError("boom")

    monkeypatch.setattr(pq, "write_table", broken)
    with pytest.raises(RuntimeError, match="boom"):
        atomic_write_parquet(p, pa.table({"id": [9]}))
    monkeypatch.undo()
    assert pq.read_table(p).equals(t)
    assert sorted(os.listdir(tmp_path)) == ["nodes.parquet"]
    with pytest.raises(TypeError):
        atomic_write_parquet(p, {"id": [1]})


def test_dir_bytes(tmp_path):
    atomic_write_bytes(tmp_path / "a.bin", b"12345")
    atomic_write_bytes(tmp_path / "graph" / "b.bin", b"12")
    assert dir_bytes(tmp_path) == {"a.bin": 5, "graph/b.bin": 2}
    with pytest.raises(FileNotFoundError):
        dir_bytes(tmp_path / "absent")


@pytest.mark.parametrize("seed", range(20))
def test_tree_files_is_the_rglob_listing(tmp_path, seed):
    """Random folder trees (names that sort differently as strings and as paths, empty folders, links to files
    and folders): the same files, in the same order, as sorted(rglob) filtered to regular files."""
    from pathlib import Path

    rng = np.random.default_rng(seed)
    names = ["a", "a-b", "a.b", "b", "B", "z0", "page", "000001.bin", "x_y"]
    folders = [tmp_path]
    for _ in range(int(rng.integers(1, 30))):
        parent = folders[int(rng.integers(len(folders)))]
        child = parent / str(rng.choice(names))
        if rng.random() < 0.3:
            if not child.exists():
                child.mkdir()
                folders.append(child)
        elif not child.exists():
            child.write_bytes(b"x" * int(rng.integers(0, 4)))
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    if files:  # links are neither listed nor followed
        os.symlink(files[0], tmp_path / "link-to-file")
    os.symlink(folders[-1], tmp_path / "link-to-folder")
    want = [p.relative_to(tmp_path).as_posix() for p in sorted(Path(tmp_path).rglob("*"))
            if p.is_file() and not p.is_symlink()]
    assert tree_files(tmp_path) == want
    assert list(dir_bytes(tmp_path)) == want


def test_check_format_version():
    check_format_version(FORMAT_VERSION, where="x")
    with pytest.raises(FormatVersionError, match=rf"m\.json.*99.*reads format version {FORMAT_VERSION} only: rebuild it with `noderag build SOURCES --index NEW_DIR`$"):
        check_format_version(99, where="m.json")
    for bad in (None, "1", True, 1.0):
        with pytest.raises(FormatVersionError):
            check_format_version(bad, where="m.json")
    assert issubclass(FormatVersionError, ValueError)
