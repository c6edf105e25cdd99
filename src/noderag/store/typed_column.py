"""A growing column of fixed-size numbers whose leading rows may be read-only arrays (memory-mapped
segment files, referenced, not copied) and whose later rows are a typed buffer.

What the build's node table keeps per node: a delta insert adds a few thousand rows to millions it
only looks up, so it must not copy (or page in) the millions. Rows of the read-only parts can still be
changed: the first change copies that part (copy on write), which a delta insert never does.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import Iterable, Iterator, Sequence

import numpy as np

__all__ = ["TypedColumn"]

#: array typecode -> numpy dtype of the same layout
_DTYPES = {"B": np.uint8, "q": np.int64, "Q": np.uint64}


class TypedColumn:
    """Rows ``0..len-1``: the ``parts`` (read-only arrays, one after the other), then the appended rows."""

    __slots__ = ("typecode", "dtype", "_parts", "_starts", "_tail", "append")

    def __init__(self, typecode: str, values: Iterable[int] = (), parts: Sequence[np.ndarray] = ()) -> None:
        if typecode not in _DTYPES:
            raise ValueError(f"typecode must be one of {sorted(_DTYPES)}, got {typecode!r}")
        self.typecode = typecode
        self.dtype = np.dtype(_DTYPES[typecode])
        self._parts: list[np.ndarray] = []
        self._starts = [0]  # first row of each part, then the number of rows in parts
        for p in parts:
            p = np.asarray(p)
            if p.ndim != 1 or p.dtype != self.dtype:
                raise ValueError(f"column parts must be 1-d {self.dtype}, got {p.ndim}-d {p.dtype}")
            self._parts.append(p)
            self._starts.append(self._starts[-1] + p.shape[0])
        self._tail = array(typecode, values)
        self.append = self._tail.append  # bound once: appends cost what array.append costs

    @property
    def _n_parts(self) -> int:
        return self._starts[-1]

    def __len__(self) -> int:
        return self._starts[-1] + len(self._tail)

    def _locate(self, i: int) -> tuple[int, int]:
        """(part, row in it) of row ``i`` (< the rows in parts, >= 0)."""
        k = bisect_right(self._starts, i) - 1
        return k, i - self._starts[k]

    def __getitem__(self, i: int) -> int:
        n0 = self._starts[-1]
        if i < 0:
            i += len(self)
        if i >= n0:
            return self._tail[i - n0]
        if i < 0:
            raise IndexError("column index out of range")
        k, j = self._locate(i)
        return int(self._parts[k][j])

    def __setitem__(self, i: int, value: int) -> None:
        n0 = self._starts[-1]
        if i < 0:
            i += len(self)
        if i >= n0:
            self._tail[i - n0] = value
            return
        if i < 0:
            raise IndexError("column index out of range")
        k, j = self._locate(i)
        if not self._parts[k].flags.writeable:
            self._parts[k] = self._parts[k].copy()
        self._parts[k][j] = value

    def __iter__(self) -> Iterator[int]:
        for p in self._parts:
            yield from p.tolist()
        yield from self._tail

    def numpy(self, start: int = 0) -> np.ndarray:
        """Rows ``start..`` as a new numpy array (reads only the parts from ``start`` on)."""
        n0 = self._starts[-1]
        pieces = []
        for p, s in zip(self._parts, self._starts):
            if s + p.shape[0] > start:
                pieces.append(p[max(start - s, 0):])
        tail = np.frombuffer(self._tail, dtype=self.dtype) if len(self._tail) else np.zeros(0, self.dtype)
        pieces.append(tail[max(start - n0, 0):])
        return np.concatenate(pieces) if len(pieces) > 1 else pieces[0].copy()

    def take(self, ids) -> np.ndarray:
        """Rows ``ids`` (non-negative) as a new numpy array (reads only those rows)."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty(ids.shape, self.dtype)
        bounds = self._starts + [len(self)]
        pieces = self._parts + [np.frombuffer(self._tail, dtype=self.dtype) if len(self._tail)
                                else np.zeros(0, self.dtype)]
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= len(self)):
            raise IndexError(f"row ids must lie in [0, {len(self)})")
        for piece, lo, hi in zip(pieces, bounds[:-1], bounds[1:]):
            inside = (ids >= lo) & (ids < hi)
            out[inside] = piece[ids[inside] - lo]
        return out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)
