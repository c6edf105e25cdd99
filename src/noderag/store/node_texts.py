"""The node texts of a segment, stored once: ``text_off.npy`` and the pages of ``text/`` beside ``nodes.parquet``.

Every node's text (a passage, a unit, an entity name, a summary) is the largest part of an index.
It is kept in one place, as UTF-8 in fixed-size pages (:mod:`noderag.store.paged_blob`) with int64
offsets: ``nodes.parquet`` holds every other column (its schema metadata ``noderag.text`` gives the
page size), and the query tables read the same pages. A delete in place overwrites the deleted texts
with zeros in new copies of the pages that held them and shares the rest; an erased text reads as
``""``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from .layout import NODE_TEXT_OFF, NODE_TEXT_PAGES
from .paged_blob import PagedBytes, page_size_for, write_pages

__all__ = ["TEXT_META", "NodeTexts", "node_texts", "string_blob", "text_page_of", "write_node_texts"]

#: The ``nodes.parquet`` schema metadata key whose value is the text pages' size in bytes.
TEXT_META = b"noderag.text"


def string_blob(arr) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets, uint8 bytes) of a pyarrow string array (or chunked array) without nulls.

    No Python loop, and one copy of the bytes: each chunk's data is copied into the blob directly.
    """
    import pyarrow as pa

    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    parts = []
    for c in chunks:
        if len(c) == 0:
            continue
        wide = pa.types.is_large_string(c.type) or pa.types.is_large_binary(c.type)
        _, off_buf, data_buf = c.buffers()
        off = np.frombuffer(off_buf, dtype=np.int64 if wide else np.int32)[c.offset:c.offset + len(c) + 1]
        parts.append((off.astype(np.int64), data_buf))
    n = sum(p[0].size - 1 for p in parts)
    offsets = np.zeros(n + 1, np.int64)
    blob = np.empty(sum(int(o[-1] - o[0]) for o, _ in parts), np.uint8)
    at, pos = 0, 1
    for off, data_buf in parts:
        size = int(off[-1] - off[0])
        if size:
            blob[at:at + size] = np.frombuffer(data_buf, dtype=np.uint8)[int(off[0]):int(off[-1])]
        offsets[pos:pos + off.size - 1] = off[1:] - off[0] + at
        at += size
        pos += off.size - 1
    return offsets, blob


def write_node_texts(folder: str | os.PathLike, texts) -> int:
    """Write the string column ``texts`` (pyarrow, no nulls) as ``folder/text_off.npy`` and the pages of
    ``folder/text/``; returns the page size (replaces pages an earlier, killed run left)."""
    from ..graph.storage import atomic_save_npy

    folder = Path(folder)
    offsets, data = string_blob(texts)
    page = page_size_for(int(data.shape[0]))
    if (folder / NODE_TEXT_PAGES).exists():
        shutil.rmtree(folder / NODE_TEXT_PAGES)
    write_pages(folder / NODE_TEXT_PAGES, data, page)
    atomic_save_npy(folder / NODE_TEXT_OFF, offsets)
    return page


class NodeTexts:
    """The node texts of a segment folder (``text_off.npy`` memory-mapped, pages mapped as read).

    ``damaged(rel, problem, detail)`` makes the error for a damaged file (``rel`` relative to ``folder``);
    by default a ``ValueError`` naming the path.
    """

    def __init__(self, folder: str | os.PathLike, page: int, n: int | None = None, damaged=None) -> None:
        from ..graph.storage import load_npy

        self.folder = Path(folder)
        self._damaged = damaged or (lambda rel, problem, detail:
                                    ValueError(f"{self.folder / rel}: {problem}: {detail}"))
        try:
            self.offsets = np.asarray(load_npy(self.folder / NODE_TEXT_OFF, True, dtype=np.int64, ndim=1,
                                               shape=None if n is None else (n + 1,)))
        except FileNotFoundError:
            raise self._damaged(NODE_TEXT_OFF, "missing file", "the node texts' offsets") from None
        except ValueError as exc:
            raise self._damaged(NODE_TEXT_OFF, "unreadable array", str(exc)[:200]) from None
        off = self.offsets
        total = int(off[-1]) if off.size else -1
        if off.size < 1 or int(off[0]) != 0 or total < 0:
            raise self._damaged(NODE_TEXT_OFF, "invalid offsets", "they must run from 0")
        try:
            held = set(os.listdir(self.folder / NODE_TEXT_PAGES))
        except FileNotFoundError:
            raise self._damaged(NODE_TEXT_PAGES + "/", "missing folder", "the node texts' pages") from None
        count = -(-total // page)
        if len(held) > count:
            raise self._damaged(NODE_TEXT_OFF, "invalid offsets", f"they end at byte {total}, before the end of "
                                f"the {len(held)} pages of {page} bytes in {NODE_TEXT_PAGES}/")
        from .paged_blob import page_name

        if len(held) < count:
            gone = next(p for p in range(count) if page_name(p) not in held)
            raise self._damaged(f"{NODE_TEXT_PAGES}/{page_name(gone)}", "missing file", f"page {gone} of {count}")
        self.pages = PagedBytes(self.folder / NODE_TEXT_PAGES, page, total,
                                lambda name, problem, detail:
                                    self._damaged(f"{NODE_TEXT_PAGES}/{name}", problem, detail))
        if self.pages.count:
            self.pages.page_view(self.pages.count - 1)  # the last page has the size it must have

    @property
    def n(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def column(self, start: int = 0, stop: int | None = None):
        """Texts ``start..stop`` as an Arrow string column (one copy of their bytes; erased texts read "")."""
        import pyarrow as pa
        import pyarrow.compute as pc

        stop = self.n if stop is None else stop
        off = np.asarray(self.offsets[start:stop + 1], dtype=np.int64)
        lo, hi = int(off[0]), int(off[-1])
        data = np.frombuffer(bytes(self.pages.read(lo, hi)), dtype=np.uint8)
        rel = off - lo
        wide = hi - lo >= 2 ** 31
        col = (pa.LargeStringArray if wide else pa.StringArray).from_buffers(
            stop - start, pa.py_buffer(rel if wide else rel.astype(np.int32)), pa.py_buffer(data))
        lens = np.diff(rel)
        if data.size and not data.all():  # some bytes are zero: texts erased by a delete in place read ""
            full = np.flatnonzero(lens > 0)
            erased = np.zeros(lens.size, dtype=bool)
            erased[full] = ~np.logical_or.reduceat(data != 0, rel[full])
            if erased.any():
                col = pc.if_else(pa.array(erased), pa.scalar("", col.type), col)
        return col if not wide else col.cast(pa.large_string())


def text_page_of(path: str | os.PathLike) -> int:
    """The page size of the node texts beside ``nodes.parquet`` at ``path`` (its schema metadata)."""
    import pyarrow.parquet as pq

    raw = (pq.read_schema(path).metadata or {}).get(TEXT_META)
    try:
        page = int(raw) if raw is not None else 0
    except ValueError:
        page = 0
    if page <= 0:
        raise ValueError(f"{path}: schema metadata {TEXT_META.decode()} must be a positive page size, got {raw!r}")
    return page


def node_texts(path: str | os.PathLike, n: int | None = None) -> NodeTexts:
    """The :class:`~noderag.store.node_texts.NodeTexts` beside ``nodes.parquet`` at ``path``; damaged files raise
    :class:`~noderag.store.errors.IndexDamagedError` naming them."""
    from .errors import IndexDamagedError

    path = Path(path)
    page = text_page_of(path)
    gen, seg = _generation_of(path.parent)
    return NodeTexts(path.parent, page, n,
                     lambda rel, problem, detail: IndexDamagedError(gen, seg + rel, problem, detail))


def _generation_of(folder: Path) -> tuple[Path, str]:
    """(generation folder, prefix of ``folder`` in it): a delta segment's files are named ``deltas/K/...``."""
    if folder.parent.name == "deltas":
        return folder.parent.parent, f"deltas/{folder.name}/"
    return folder, ""
