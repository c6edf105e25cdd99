"""Atomic, pickle-free file I/O for index directories.

Every writer goes to a temporary file in the destination's directory, is
flushed and fsync'ed, then renamed over the destination with ``os.replace``
(atomic on POSIX), and the directory itself is fsync'ed so the rename survives
a crash. A writer that raises part-way leaves the destination untouched and
removes its temporary file. Readers never execute code from disk:
``numpy.load`` always runs with ``allow_pickle=False`` and JSON is parsed as data.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import NodeRAGError

#: Version of the on-disk index layout written and read by this package (3: generations, delta segments, node
#: texts in pages beside ``nodes.parquet``, decompositions in parts, BM25 arrays in ``query/``). Only this
#: version is read: an index of an earlier one is refused with the command that rebuilds it.
FORMAT_VERSION = 3

#: How to rebuild an index this package cannot read (the tail of every format error).
REBUILD_HINT = "rebuild it with `noderag build SOURCES --index NEW_DIR`"

__all__ = [
    "FORMAT_VERSION",
    "REBUILD_HINT",
    "FormatVersionError",
    "atomic_write_bytes",
    "atomic_save_npy",
    "atomic_write_json",
    "atomic_write_parquet",
    "load_npy",
    "read_json",
    "dir_bytes",
    "tree_files",
    "fsync_dir",
    "check_format_version",
]


class FormatVersionError(NodeRAGError, ValueError):
    """The on-disk format version differs from the one this package reads."""


def check_format_version(found: Any, *, where: str | os.PathLike, expected: int = FORMAT_VERSION) -> None:
    """Raise ``FormatVersionError`` (one line: both versions and how to rebuild) when ``found != expected``."""
    if isinstance(found, bool) or not isinstance(found, int) or found != expected:
        raise FormatVersionError(
            f"{os.fspath(where)}: format version {found!r} is not supported; "
            f"this noderag reads format version {expected} only: {REBUILD_HINT}"
        )


def fsync_dir(directory: Path) -> None:
    """Fsync a directory so that a rename inside it is durable (no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process's umask, read without changing it (Linux: /proc/self/status; elsewhere set and restored)."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    """The mode a plainly created file gets: 0o666 less the umask (0o644 under the usual 022)."""
    return 0o666 & ~current_umask()


def _atomic_write(path: str | os.PathLike, write: Callable[[io.BufferedWriter], None]) -> Path:
    """Run ``write(fileobj)`` on a temp file next to ``path``, fsync, then rename onto ``path``.

    The temp file is created 0600 (``mkstemp``); it gets the mode a plainly created file would have
    (0666 less the umask) before the rename, so a reader that is not the writer can open the index.
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), new_file_mode())
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        raise
    fsync_dir(directory)
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file, fsync, rename, fsync dir)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes, got {type(data).__name__}")
    return _atomic_write(path, lambda fh: fh.write(data))


def atomic_save_npy(path: str | os.PathLike, array) -> Path:
    """Save one array as ``.npy`` atomically, never pickling (object arrays are rejected)."""
    arr = np.asanyarray(array)
    if arr.dtype.hasobject:
        raise ValueError(f"{os.fspath(path)}: refusing to save an object array (dtype {arr.dtype}); pickle is not allowed")
    arr = np.ascontiguousarray(arr)
    return _atomic_write(path, lambda fh: np.save(fh, arr, allow_pickle=False))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serialisable")


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as UTF-8 JSON (sorted keys, indented, no NaN) atomically.

    Numpy scalars and arrays are converted to plain numbers and lists.
    """
    text = json.dumps(obj, sort_keys=True, ensure_ascii=False, indent=2, allow_nan=False, default=_json_default)
    return atomic_write_bytes(path, (text + "\n").encode("utf-8"))


def atomic_write_parquet(path: str | os.PathLike, table, **write_options) -> Path:
    """Write a ``pyarrow.Table`` as Parquet atomically; ``write_options`` go to ``pyarrow.parquet.write_table``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not isinstance(table, pa.Table):
        raise TypeError(f"table must be a pyarrow.Table, got {type(table).__name__}")
    return _atomic_write(path, lambda fh: pq.write_table(table, fh, **write_options))


def read_json(path: str | os.PathLike) -> Any:
    """Parse a UTF-8 JSON file; errors name the file (and the line and column)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: file not found") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not valid UTF-8 at byte {exc.start}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


def load_npy(
    path: str | os.PathLike,
    mmap: bool = True,
    *,
    dtype=None,
    ndim: int | None = None,
    shape: tuple[int, ...] | None = None,
) -> np.ndarray:
    """Load one ``.npy`` array without pickle, memory-mapped read-only by default.

    Parameters
    ----------
    path : path of the ``.npy`` file.
    mmap : bool, default=True
        Map the file read-only (``mmap_mode="r"``) instead of reading it.
    dtype, ndim, shape : optional
        Expected dtype, number of dimensions and shape; a mismatch is a
        ``ValueError`` naming the file.

    Raises
    ------
    FileNotFoundError
        The file does not exist (the message names it).
    ValueError
        The file is not a valid ``.npy`` file, holds an object array, or has
        an unexpected dtype or shape (the message names the file).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: array file not found")
    try:
        arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except ValueError as exc:
        raise ValueError(f"{path}: cannot load array without pickle or file is corrupt ({exc})") from None
    except (OSError, EOFError) as exc:
        raise ValueError(f"{path}: corrupt or truncated .npy file ({exc})") from None
    if not isinstance(arr, np.ndarray):
        raise ValueError(f"{path}: expected a single .npy array, got {type(arr).__name__}")
    if arr.dtype.hasobject:
        raise ValueError(f"{path}: object arrays are not allowed")
    if dtype is not None and arr.dtype != np.dtype(dtype):
        raise ValueError(f"{path}: expected dtype {np.dtype(dtype)}, found {arr.dtype}")
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{path}: expected a {ndim}-D array, found shape {arr.shape}")
    if shape is not None and tuple(arr.shape) != tuple(shape):
        raise ValueError(f"{path}: expected shape {tuple(shape)}, found {arr.shape}")
    if not mmap:
        arr.setflags(write=False)
    return arr


def tree_files(root: str | os.PathLike) -> list[str]:
    """Relative POSIX paths of the regular files under ``root`` (symbolic links neither listed nor followed),
    in the order ``sorted(Path(root).rglob("*"))`` gives: folder by folder, by name.

    One ``os.scandir`` per folder gives each entry's type from the directory read itself; ``rglob`` with
    ``is_file`` and ``relative_to`` costs several calls and a path parse per file, which shows on a
    generation of ~3,100 files (text pages, decomposition parts) that every insert lists and links.
    """
    out: list[str] = []

    def walk(folder: str, prefix: str) -> None:
        with os.scandir(folder) as entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    walk(e.path, prefix + e.name + "/")
                elif e.is_file(follow_symlinks=False):
                    out.append(prefix + e.name)

    walk(os.fspath(root), "")
    out.sort(key=lambda rel: rel.split("/"))
    return out


def dir_bytes(path: str | os.PathLike) -> dict[str, int]:
    """Bytes per regular file under ``path`` (recursive), keyed by POSIX relative path, sorted."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: directory not found")
    base = os.fspath(root)
    return {rel: os.stat(os.path.join(base, rel)).st_size for rel in tree_files(base)}
