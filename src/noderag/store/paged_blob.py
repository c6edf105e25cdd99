"""Strings kept as one offsets array and fixed-size byte pages, so that erasing a few rewrites a few pages.

A string column of an index (every node's display text) is the UTF-8 bytes of its strings, one
after the other, and int64 offsets (``n + 1``, from 0). Stored as one file, a delete that must take
a few strings out of it writes the whole file again: at 10^5 passages, 178 MB for a hundred
documents. Here the bytes are cut into pages of ``page`` bytes (the last one shorter), each a file
``NNNNNN.bin`` of a folder, and the offsets are a file of their own. A string may run over a page
boundary.

Erasing strings (:func:`erase_strings`) overwrites their bytes with zeros in a copy of the pages
that hold them and hard-links every other page: the offsets do not move, so they are shared too.
A string whose bytes are all zeros reads as ``""`` (no index text is NULs alone: the input rules
refuse NUL characters).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

__all__ = ["PagedBytes", "page_size_for", "write_pages", "erase_strings", "pages_holding", "page_name", "unzeroed", "MIN_PAGE"]

#: The smallest page: 16 KiB. Pages grow with the column (:func:`page_size_for`) to keep their count near 4,096.
MIN_PAGE = 1 << 14
TARGET_PAGES = 4096


def page_size_for(total: int) -> int:
    """The page size for a column of ``total`` bytes: a power of two, at least :data:`MIN_PAGE`, giving at most
    about :data:`TARGET_PAGES` pages (a hundred scattered deletes then rewrite ~2-3% of the column)."""
    page = MIN_PAGE
    while page * TARGET_PAGES < total:
        page <<= 1
    return page


def page_name(p: int) -> str:
    """File name of page ``p``."""
    return f"{p:06d}.bin"


def unzeroed(s: str) -> str:
    """``s``, or "" when it was erased (overwritten by zeros)."""
    return "" if s[:1] == "\x00" and not s.strip("\x00") else s


def _write_file(path: Path, data) -> None:
    """Write ``data`` to a new file and fsync it (the caller fsyncs the folder once: it is a new folder that a
    commit renames into place, so no reader sees a page half written)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        view = memoryview(data).cast("B")
        while view.nbytes:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    from ..graph.storage import fsync_dir

    fsync_dir(folder)


def write_pages(folder: str | os.PathLike, data: np.ndarray, page: int) -> int:
    """Write the bytes ``data`` as pages of ``page`` bytes into the new folder ``folder``; returns the page count."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=False)
    data = np.ascontiguousarray(np.asarray(data, dtype=np.uint8))
    count = -(-int(data.shape[0]) // page)
    for p in range(count):
        _write_file(folder / page_name(p), data[p * page:(p + 1) * page])
    _fsync_dir(folder)
    return count


class PagedBytes:
    """The pages of a column opened read-only; each page is memory-mapped the first time it is read.

    ``where(p)`` names page ``p`` in errors (e.g. ``query/text/000012.bin``); ``damaged(rel, problem,
    detail)`` makes the error raised for a page of the wrong size (a damaged index).
    """

    def __init__(self, folder: str | os.PathLike, page: int, total: int, damaged=None) -> None:
        if page <= 0:
            raise ValueError(f"{folder}: page size must be positive, got {page}")
        self.folder = Path(folder)
        self.page = int(page)
        self.total = int(total)
        self.count = -(-self.total // self.page)
        self._maps: list[memoryview | None] = [None] * self.count
        self._damaged = damaged

    @property
    def shape(self) -> tuple[int]:
        return (self.total,)

    def _fail(self, p: int, problem: str, detail: str) -> Exception:
        if self._damaged is not None:
            return self._damaged(page_name(p), problem, detail)
        return ValueError(f"{self.folder / page_name(p)}: {problem}: {detail}")

    def _map(self, p: int) -> memoryview:
        import mmap

        want = min(self.page, self.total - p * self.page)
        path = self.folder / page_name(p)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise self._fail(p, "missing file", f"page {p} of {self.count}") from None
        try:
            size = os.fstat(fd).st_size
            if size != want:
                raise self._fail(p, "wrong size", f"{size} bytes, page {p} must hold {want}")
            view = memoryview(mmap.mmap(fd, size, access=mmap.ACCESS_READ))
        finally:
            os.close(fd)
        self._maps[p] = view
        return view

    def page_view(self, p: int) -> memoryview:
        """Page ``p``'s bytes (mapped on first use)."""
        view = self._maps[p]
        return view if view is not None else self._map(p)

    def read(self, lo: int, hi: int) -> bytes | memoryview:
        """The bytes ``[lo, hi)`` (a view when they lie in one page)."""
        if hi <= lo:
            return b""
        if not (0 <= lo and hi <= self.total):
            raise IndexError(f"bytes [{lo}, {hi}) outside the {self.total} of {self.folder}")
        p, q = lo // self.page, (hi - 1) // self.page
        base = p * self.page
        if p == q:
            return self.page_view(p)[lo - base:hi - base]
        parts = [bytes(self.page_view(k)) for k in range(p, q + 1)]
        return b"".join(parts)[lo - base:hi - base]

    def __getitem__(self, key: slice) -> bytes | memoryview:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("paged bytes are read by contiguous slices")
        lo, hi, _ = key.indices(self.total)
        return self.read(lo, hi)

    def strings(self, lo, hi) -> list[str]:
        """The strings at byte ranges ``[lo[i], hi[i])``, decoded (``surrogatepass``); erased ones read ``""``. A
        string within one mapped page is decoded from the page's view in place (a query reads ~100 of them)."""
        out = []
        page, total, maps = self.page, self.total, self._maps
        for a, b in zip(lo, hi):
            p = a // page
            if 0 <= a < b <= total and p == (b - 1) // page and maps[p] is not None:
                base = p * page
                s = str(maps[p][a - base:b - base], "utf-8", "surrogatepass")
            else:
                s = str(self.read(a, b), "utf-8", "surrogatepass")
            out.append("" if s[:1] == "\x00" and not s.strip("\x00") else s)  # unzeroed, inline
        return out

    def to_array(self) -> np.ndarray:
        """Every byte in one array (a copy: for writers that rebuild the column)."""
        out = np.empty(self.total, dtype=np.uint8)
        for p in range(self.count):
            view = self.page_view(p)
            out[p * self.page:p * self.page + view.nbytes] = np.frombuffer(view, dtype=np.uint8)
        return out


def _ranges_by_page(offsets: np.ndarray, page: int, erase) -> dict[int, list[tuple[int, int]]]:
    """Page -> the byte ranges in it (page-relative) of the non-empty strings ``erase`` (indices or bool mask)."""
    erase = np.asarray(erase)
    ids = np.flatnonzero(erase) if erase.dtype == bool else np.unique(erase.astype(np.int64))
    lo, hi = offsets[ids], offsets[ids + 1]
    lo, hi = lo[hi > lo], hi[hi > lo]
    touched: dict[int, list[tuple[int, int]]] = {}
    for a, b in zip(lo.tolist(), hi.tolist()):
        for p in range(a // page, (b - 1) // page + 1):
            base = p * page
            touched.setdefault(p, []).append((max(a, base) - base, min(b, base + page) - base))
    return touched


def pages_holding(offsets: np.ndarray, page: int, erase) -> list[int]:
    """The pages that hold bytes of the strings ``erase``: the ones :func:`erase_strings` writes anew."""
    return sorted(_ranges_by_page(np.asarray(offsets, dtype=np.int64), page, erase))


def erase_strings(src: str | os.PathLike, dst: str | os.PathLike, offsets: np.ndarray, page: int, erase) -> list[int]:
    """Write the pages of ``src`` into the new folder ``dst`` with the strings ``erase`` (indices, or a bool mask
    over the strings) overwritten by zeros: the pages that held them are written anew, every other page is
    hard-linked (copied where links fail). ``offsets``: the column's int64 offsets. Returns the pages written."""
    import shutil

    src, dst = Path(src), Path(dst)
    offsets = np.asarray(offsets, dtype=np.int64)
    total = int(offsets[-1]) if offsets.size else 0
    count = -(-total // page)
    touched = _ranges_by_page(offsets, page, erase)
    dst.mkdir(parents=True, exist_ok=False)
    reader = PagedBytes(src, page, total)
    for p in range(count):
        name = page_name(p)
        if p in touched:
            buf = bytearray(reader.page_view(p))
            for a, b in touched[p]:
                buf[a:b] = bytes(b - a)
            _write_file(dst / name, buf)
        else:
            try:
                os.link(src / name, dst / name)
            except OSError:
                shutil.copyfile(src / name, dst / name)
    _fsync_dir(dst)
    return sorted(touched)
