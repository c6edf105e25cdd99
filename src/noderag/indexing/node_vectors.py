"""Vectors of the embedded nodes of a build, addressed by node id.

A build needs vectors only for T, S, A and H nodes (a minority of the graph);
a dense ``(n_nodes, dim)`` array held 1.5 KB per node for every entity and
relationship too. Rows are appended as ids are first assigned (capacity grows by a quarter),
and an int32 map takes node id -> row.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path

import numpy as np

from ..graph.arrays import distinct, drop_resident

__all__ = ["NodeVectors"]


class NodeVectors:
    """Vectors of some node ids: ``vec[ids] = values`` assigns, ``vec[ids]`` reads (a float32 copy).

    ``dtype`` is the storage type: a build keeps float16 (half the memory; the index stores int8 or
    float16 anyway, and means of float16 vectors are taken in float32). Reading an id that was never
    assigned raises ``KeyError`` naming it.
    """

    def __init__(self, dim: int, dtype=np.float32) -> None:
        self.dim = int(dim)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.dtype(np.float32), np.dtype(np.float16)):
            raise ValueError(f"dtype must be float32 or float16, got {self.dtype}")
        self._row = np.full(0, -1, dtype=np.int32)
        self._data = np.zeros((0, self.dim), dtype=self.dtype)
        self._used = 0
        self.file = None  # the .npy file the storage lives in (share_file), else None
        self._reader = None  # (file descriptor, its finalizer, header bytes) for reads from the file

    def __len__(self) -> int:
        return self._used

    @property
    def nbytes(self) -> int:
        return int(self._row.nbytes + self._data.nbytes)

    def _rows_for(self, ids: np.ndarray) -> np.ndarray:
        """Rows of ``ids``, allocating rows for ids seen for the first time (in order of first appearance)."""
        top = int(ids.max()) + 1 if ids.size else 0
        if top > self._row.size:
            grown = np.full(max(top, 2 * self._row.size), -1, dtype=np.int32)
            grown[: self._row.size] = self._row
            self._row = grown
        rows = self._row[ids]
        new = rows < 0
        if new.any():
            fresh, first = np.unique(ids[new], return_index=True)
            fresh = fresh[np.argsort(first, kind="stable")]
            need = self._used + fresh.size
            if need > self._data.shape[0]:
                # a quarter more, not double: the first assignment is most of a build's vectors
                self._grow(max(need, self._data.shape[0] + self._data.shape[0] // 4, 1024))
            self._row[fresh] = np.arange(self._used, need, dtype=np.int32)
            self._used = need
            rows = self._row[ids]
        return rows

    def __setitem__(self, ids, values) -> None:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        values = np.asarray(values, dtype=np.float32)
        if values.shape != (ids.size, self.dim):
            raise ValueError(f"expected vectors of shape ({ids.size}, {self.dim}), got {values.shape}")
        if ids.size and ids.min() < 0:
            raise ValueError(f"node ids must be >= 0, got {int(ids.min())}")
        rows = self._rows_for(ids)  # may reallocate self._data: look it up after
        self._data[rows] = values
        if self.file is not None and rows.size:
            # written rows leave the resident set (they stay in the file): a stage that fills the file
            # batch by batch (the static embedder's pieces) held all of it (0.3 GB at 10^5 passages)
            drop_resident(self._data[int(rows.min()):int(rows.max()) + 1])

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` more vectors now, so that views taken before they are assigned stay the
        live rows (a later growth would copy them, and a view would keep the old copy alive too)."""
        need = self._used + int(rows)
        if need > self._data.shape[0]:
            self._grow(need)

    def _grow(self, capacity: int) -> None:
        """Move the used rows into a new array of ``capacity`` rows."""
        data = np.zeros((capacity, self.dim), dtype=self.dtype)
        data[: self._used] = self._data[: self._used]
        self._data = data
        self.file = None
        if self._reader is not None:
            self._reader[1]()  # closes the descriptor
            self._reader = None

    def share_file(self, path) -> None:
        """Move the storage into the ``.npy`` file ``path`` (its present capacity), mapped read-write.

        Another process can then map the same rows (``np.load(path, mmap_mode="r")``) instead of
        holding a copy: both map one set of page-cache pages. Rows assigned later stay in the file
        while they fit; a growth past the capacity moves the storage back into memory.
        """
        data = np.lib.format.open_memmap(path, mode="w+", dtype=self.dtype, shape=self._data.shape)
        step = 1 << 16
        for b in range(0, self._used, step):
            data[b:min(self._used, b + step)] = self._data[b:min(self._used, b + step)]
        data.flush()
        self._data = data
        self.file = Path(path)
        if hasattr(os, "preadv"):
            fd = os.open(path, os.O_RDONLY)
            self._reader = (fd, weakref.finalize(self, os.close, fd), int(data.offset))
        self.drop_resident()

    def drop_resident(self) -> None:
        """Let the file-backed rows leave this process's resident memory (read back from the file when next
        used): a build reads only some of them per stage. A no-op for storage in memory."""
        if self.file is not None:
            drop_resident(self._data)

    def rows_of(self, ids) -> np.ndarray:
        """Storage rows of the assigned ``ids`` (int64); ``KeyError`` for an id never assigned."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        inside = ids < self._row.size
        rows = np.where(inside, self._row[np.where(inside, ids, 0)], -1).astype(np.int64)
        if (rows < 0).any():
            raise KeyError(f"no vector assigned to node id(s) {ids[rows < 0][:5].tolist()}")
        return rows

    def slots(self, ids) -> np.ndarray:
        """Writable rows for the new, distinct ``ids`` (in order): fill them in place, without a second copy
        of the vectors (the embed stage writes its shards straight into them)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            return np.zeros((0, self.dim), dtype=self.dtype)
        if ids.min() < 0:
            raise ValueError(f"node ids must be >= 0, got {int(ids.min())}")
        known = self._row[ids[ids < self._row.size]]
        if (known >= 0).any() or distinct(ids).size != ids.size:
            raise ValueError("slots() takes new, distinct ids")
        rows = self._rows_for(ids)
        return self._data[rows[0]:rows[-1] + 1]

    def __getitem__(self, ids) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._read(self.rows_of(ids)).astype(np.float32, copy=False)

    def _read(self, rows: np.ndarray) -> np.ndarray:
        """``self._data[rows]``; from a file by ``preadv`` of each run of consecutive rows, not through the
        mapping: scattered reads through it map the page-cache pages around every row read (on this
        kernel 1,000 random rows of a 300 MB file left 270 MB resident), and ``read`` maps none."""
        if self._reader is None:
            return self._data[rows]
        fd, _, header = self._reader
        order = np.argsort(rows, kind="stable")
        ordered = rows[order]
        out = np.empty((rows.size, self.dim), dtype=self.dtype)
        cuts = np.flatnonzero(np.diff(ordered) != 1) + 1
        row_bytes = self.dim * self.dtype.itemsize
        for a, b in zip(np.r_[0, cuts].tolist(), np.r_[cuts, rows.size].tolist()):
            target = memoryview(out[a:b]).cast("B")
            offset = header + int(ordered[a]) * row_bytes
            while target.nbytes:
                got = os.preadv(fd, [target], offset)
                if got <= 0:
                    raise OSError(f"{self.file}: short read at byte {offset}")
                target, offset = target[got:], offset + got
        result = np.empty_like(out)
        result[order] = out
        return result

    def view(self, ids) -> np.ndarray:
        """``self[ids]`` without a copy when their rows are consecutive and in order (the usual case for
        the vectors of one stage), in the storage dtype; a float32 copy otherwise. Read-only use: a later
        assignment may move the rows."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            return np.zeros((0, self.dim), dtype=self.dtype)
        rows = self.rows_of(ids)
        if rows[-1] - rows[0] == ids.size - 1 and (ids.size == 1 or (np.diff(rows) == 1).all()):
            return self._data[rows[0]:rows[-1] + 1]
        return self._read(rows).astype(np.float32, copy=False)
