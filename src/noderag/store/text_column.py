"""Compact string columns of the build's node table: texts in one UTF-8 buffer, names derived from them.

A list of Python strings costs ~60 bytes a text on top of its characters, and millions of small
objects freed at different times leave the allocator's pages fragmented (at 10^5 passages the node
table held 2.1M texts). One buffer plus an offsets array costs 8 bytes a text and is freed whole.
"""

from __future__ import annotations

from array import array
from typing import Iterable, Iterator

__all__ = ["TextColumn", "DerivedNames", "NAME_IS_TEXT"]

#: Type codes (N, O) whose name is their text; every other type's name is None unless set otherwise.
NAME_IS_TEXT = (2, 6)

#: Rows per Arrow chunk: keeps each chunk's int32 offsets far below 2 GiB of text.
ARROW_CHUNK_ROWS = 1 << 20


class TextColumn:
    """Append-only texts stored as UTF-8 in one ``bytearray`` with int64 end offsets.

    Reading a text decodes its slice. A text replaced after it was appended (an A or H node
    reactivated by an insert) lives in a small override map.
    """

    def __init__(self, texts: Iterable[str] = ()) -> None:
        self._data = bytearray()
        self._ends = array("q")
        self._replaced: dict[int, str] = {}
        for t in texts:
            self.append(t)

    @classmethod
    def from_buffers(cls, parts) -> "TextColumn":
        """Texts given as (int64 offsets from 0, UTF-8 bytes) pairs, e.g. the text blobs of an index's segments,
        one after the other; each buffer is copied once, straight into the column."""
        import numpy as np

        col = cls()
        for offsets, data in parts:
            start = len(col._data)
            col._data += memoryview(np.ascontiguousarray(data, dtype=np.uint8))
            ends = np.asarray(offsets, dtype=np.int64)[1:]
            col._ends.frombytes((ends + start).tobytes() if start else np.ascontiguousarray(ends).tobytes())
        return col

    def __len__(self) -> int:
        return len(self._ends)

    def append(self, text: str) -> None:
        self._data += text.encode("utf-8")
        self._ends.append(len(self._data))

    def _span(self, i: int) -> tuple[int, int]:
        n = len(self._ends)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"text index {i} out of range for {n} texts")
        return (self._ends[i - 1] if i else 0), self._ends[i]

    def __getitem__(self, i: int) -> str:
        if self._replaced:
            hit = self._replaced.get(i if i >= 0 else i + len(self._ends))
            if hit is not None:
                return hit
        a, b = self._span(i)
        return self._data[a:b].decode("utf-8")

    def __setitem__(self, i: int, text: str) -> None:
        self._span(i)  # bounds check
        self._replaced[i if i >= 0 else i + len(self._ends)] = str(text)

    def __iter__(self) -> Iterator[str]:
        for i in range(len(self._ends)):
            yield self[i]

    def __eq__(self, other) -> bool:
        if isinstance(other, (TextColumn, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def take(self, ids) -> list[str]:
        """The texts of ``ids`` (ints, any order) as a list: one Arrow gather, ~10x faster than indexing."""
        import numpy as np
        import pyarrow as pa

        ids = np.asarray(ids, dtype=np.int64)
        n = len(self._ends)
        if ids.size and (ids.min() < -n or ids.max() >= n):
            raise IndexError(f"text ids must lie in [{-n}, {n}), got {int(ids.min())}..{int(ids.max())}")
        ids = np.where(ids < 0, ids + n, ids)
        offsets = np.zeros(n + 1, dtype=np.int64)
        offsets[1:] = np.frombuffer(self._ends, dtype=np.int64)
        arr = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(self._data))
        out = arr.take(pa.array(ids)).to_pylist()
        if self._replaced:
            for k, i in enumerate(ids.tolist()):
                if i in self._replaced:
                    out[k] = self._replaced[i]
        return out

    def nbytes(self) -> int:
        """Bytes held by the buffer and the offsets."""
        return len(self._data) + self._ends.itemsize * len(self._ends)

    def to_arrow(self, first: int = 0):
        """Texts ``first..`` as an Arrow string column (chunked), built from the buffer without Python strings."""
        import numpy as np
        import pyarrow as pa

        n = len(self._ends)
        if n <= first:
            return pa.chunked_array([pa.array([], pa.string())])
        ends = np.frombuffer(self._ends, dtype=np.int64)
        data = np.frombuffer(self._data, dtype=np.uint8)
        chunks = []
        for lo in range(first, n, ARROW_CHUNK_ROWS):
            hi = min(n, lo + ARROW_CHUNK_ROWS)
            start = int(ends[lo - 1]) if lo else 0
            offsets = np.empty(hi - lo + 1, dtype=np.int64)
            offsets[0] = 0
            offsets[1:] = ends[lo:hi] - start
            if offsets[-1] >= 2 ** 31:
                raise ValueError(f"texts {lo}..{hi - 1} hold {offsets[-1]} bytes: more than one Arrow chunk can")
            body = data[start:int(ends[hi - 1])].copy()
            chunks.append(pa.StringArray.from_buffers(hi - lo, pa.py_buffer(offsets.astype(np.int32)),
                                                      pa.py_buffer(body)))
        col = pa.chunked_array(chunks, type=pa.string())
        if any(i >= first for i in self._replaced):
            import pyarrow.compute as pc

            idx = sorted(i for i in self._replaced if i >= first)
            mask = np.zeros(n - first, dtype=bool)
            mask[np.asarray(idx, dtype=np.int64) - first] = True
            # replace_with_mask takes the replacements in row order
            col = pc.replace_with_mask(col, pa.array(mask), pa.array([self._replaced[i] for i in idx], pa.string()))
        return col


class DerivedNames:
    """Node names as a view of the texts: an N/O node's name is its text, any other node's is None.

    Only names that break this rule are stored (``exceptions``); ``nodes.parquet`` leaves its
    ``name`` column out when there are none.
    """

    _UNSET = object()

    def __init__(self, types: array, texts: TextColumn) -> None:
        self._types = types
        self._texts = texts
        self.exceptions: dict[int, str | None] = {}

    def derived(self, ntype: int, text: str, name: str | None) -> bool:
        """Whether ``name`` is what the rule gives for a node of ``ntype`` with ``text``."""
        return name == text if ntype in NAME_IS_TEXT else name is None

    def note(self, i: int, ntype: int, text: str, name: str | None) -> None:
        """Record node ``i``'s name (called once, as the node is appended)."""
        if not self.derived(ntype, text, name):
            self.exceptions[i] = name

    def __len__(self) -> int:
        return len(self._types)

    def __getitem__(self, i: int) -> str | None:
        if i < 0:
            i += len(self._types)
        hit = self.exceptions.get(i, self._UNSET) if self.exceptions else self._UNSET
        if hit is not self._UNSET:
            return hit  # type: ignore[return-value]
        if self._types[i] in NAME_IS_TEXT:
            return self._texts[i]
        return None

    def __iter__(self) -> Iterator[str | None]:
        for i in range(len(self._types)):
            yield self[i]

    def take(self, ids) -> list[str | None]:
        """The names of ``ids`` as a list (the texts gathered at once, see :meth:`TextColumn.take`)."""
        import numpy as np

        ids = np.asarray(ids, dtype=np.int64)
        types = np.frombuffer(self._types, dtype=np.uint8)[ids] if len(self._types) else np.zeros(0, np.uint8)
        named = np.isin(types, NAME_IS_TEXT)
        texts = iter(self._texts.take(ids[named]))
        out = [next(texts) if t else None for t in named.tolist()]
        if self.exceptions:
            for k, i in enumerate(ids.tolist()):
                if i in self.exceptions:
                    out[k] = self.exceptions[i]
        return out
