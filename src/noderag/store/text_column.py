"""Compact string columns of the build's node table: texts in one UTF-8 buffer, names derived from them.

A list of Python strings costs ~60 bytes a text on top of its characters, and millions of small
objects freed at different times leave the allocator's pages fragmented (at 10^5 passages the node
table held 2.1M texts). One buffer plus an offsets array costs 8 bytes a text and is freed whole.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import TYPE_CHECKING, Iterable, Iterator

if TYPE_CHECKING:
    from .typed_column import TypedColumn

__all__ = ["TextColumn", "DerivedNames", "NAME_IS_TEXT"]

#: Type codes (N, O) whose name is their text; every other type's name is None unless set otherwise.
NAME_IS_TEXT = (2, 6)

#: Rows per Arrow chunk: keeps each chunk's int32 offsets far below 2 GiB of text.
ARROW_CHUNK_ROWS = 1 << 20


class TextColumn:
    """Append-only texts stored as UTF-8 in one ``bytearray`` with int64 end offsets.

    Reading a text decodes its slice. A text replaced after it was appended (an A or H node
    reactivated by an insert) lives in a small override map. A column made :meth:`from_buffers`
    starts with read-only parts (an index's memory-mapped text blobs, never copied) that the
    appended texts follow.
    """

    def __init__(self, texts: Iterable[str] = ()) -> None:
        self._data = bytearray()
        self._ends = array("q")
        self._replaced: dict[int, str] = {}
        self._parts: list[tuple] = []  # read-only leading parts: (int64 offsets from 0, uint8 bytes)
        self._part_starts = [0]  # first text of each part, then the count of read-only texts
        for t in texts:
            self.append(t)

    @classmethod
    def from_buffers(cls, parts) -> "TextColumn":
        """Texts given as (int64 offsets from 0, UTF-8 bytes) pairs, e.g. the memory-mapped text blobs of an
        index's segments, one after the other. They are referenced, not copied: a text is read from its
        part when asked for (a delta insert reads few of the index's texts). The bytes may be an array or
        the pages of an index's texts (:class:`~noderag.store.paged_blob.PagedBytes`)."""
        import numpy as np

        from .paged_blob import PagedBytes

        col = cls()
        for offsets, data in parts:
            offsets = np.asarray(offsets, dtype=np.int64)
            if not isinstance(data, PagedBytes):
                data = np.asarray(data, dtype=np.uint8)
            if offsets.ndim != 1 or offsets.shape[0] < 1 or int(offsets[0]) != 0 or int(offsets[-1]) != data.shape[0]:
                raise ValueError(f"text offsets must run from 0 to the {data.shape[0]} bytes of their part, "
                                 f"got {offsets.shape[0]} offsets ending at {int(offsets[-1]) if offsets.size else None}")
            col._parts.append((offsets, data))
            col._part_starts.append(col._part_starts[-1] + offsets.shape[0] - 1)
        return col

    @property
    def _n_frozen(self) -> int:
        return self._part_starts[-1]

    def __len__(self) -> int:
        return self._n_frozen + len(self._ends)

    def append(self, text: str) -> None:
        self._data += text.encode("utf-8")
        self._ends.append(len(self._data))

    def _index(self, i: int) -> int:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"text index {i} out of range for {n} texts")
        return i

    def __getitem__(self, i: int) -> str:
        i = self._index(i)
        if self._replaced:
            hit = self._replaced.get(i)
            if hit is not None:
                return hit
        f = self._n_frozen
        if i < f:
            p = bisect_right(self._part_starts, i) - 1
            offsets, data = self._parts[p]
            j = i - self._part_starts[p]
            return _part_strings(offsets, data, [j])[0]
        i -= f
        a = self._ends[i - 1] if i else 0
        return self._data[a:self._ends[i]].decode("utf-8")

    def __setitem__(self, i: int, text: str) -> None:
        self._replaced[self._index(i)] = str(text)

    def __iter__(self) -> Iterator[str]:
        for i in range(len(self)):
            yield self[i]

    def __eq__(self, other) -> bool:
        if isinstance(other, (TextColumn, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def _arrow_parts(self):
        """(first text, Arrow LargeString array) of every part, the appended texts last (no copy); a paged part
        stays (offsets, pages): see :func:`_take`."""
        import numpy as np
        import pyarrow as pa

        out = [(start, (offsets, data) if not isinstance(data, np.ndarray) else
                pa.LargeStringArray.from_buffers(offsets.shape[0] - 1, pa.py_buffer(offsets), pa.py_buffer(data)))
               for start, (offsets, data) in zip(self._part_starts, self._parts)]
        n = len(self._ends)
        offsets = np.zeros(n + 1, dtype=np.int64)
        offsets[1:] = np.frombuffer(self._ends, dtype=np.int64)
        out.append((self._n_frozen, pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(self._data))))
        return out

    def take(self, ids) -> list[str]:
        """The texts of ``ids`` (ints, any order) as a list: one Arrow gather per part, ~10x faster than indexing."""
        import numpy as np

        ids = np.asarray(ids, dtype=np.int64)
        n = len(self)
        if ids.size and (ids.min() < -n or ids.max() >= n):
            raise IndexError(f"text ids must lie in [{-n}, {n}), got {int(ids.min())}..{int(ids.max())}")
        ids = np.where(ids < 0, ids + n, ids)
        parts = self._arrow_parts()
        if len(parts) == 1:
            out = _take(parts[0][1], ids)
        else:
            out: list = [None] * ids.shape[0]
            which = np.searchsorted(np.asarray([s for s, _ in parts]), ids, side="right") - 1
            for p, (start, arr) in enumerate(parts):
                at = np.flatnonzero(which == p)
                if at.size:
                    for k, text in zip(at.tolist(), _take(arr, ids[at] - start)):
                        out[k] = text
        if self._replaced:
            for k, i in enumerate(ids.tolist()):
                if i in self._replaced:
                    out[k] = self._replaced[i]
        return out

    def nbytes(self) -> int:
        """Bytes held in memory by the appended texts and their offsets (read-only parts are not held)."""
        return len(self._data) + self._ends.itemsize * len(self._ends)

    def to_arrow(self, first: int = 0):
        """Texts ``first..`` as an Arrow string column (chunked), built from the buffer without Python strings."""
        import numpy as np
        import pyarrow as pa

        f = self._n_frozen
        if first < f:  # read-only parts are an index's own texts: written again only by a test or a rewrite
            head = self.take(np.arange(first, f))
            tail = self.to_arrow(f)
            return pa.chunked_array([pa.array(head, pa.string())] + tail.chunks, type=pa.string())
        n = len(self._ends)
        first -= f
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
        first += f
        if any(i >= first for i in self._replaced):
            import pyarrow.compute as pc

            idx = sorted(i for i in self._replaced if i >= first)
            mask = np.zeros(len(self) - first, dtype=bool)
            mask[np.asarray(idx, dtype=np.int64) - first] = True
            # replace_with_mask takes the replacements in row order
            col = pc.replace_with_mask(col, pa.array(mask), pa.array([self._replaced[i] for i in idx], pa.string()))
        return col


def _part_strings(offsets, data, ids) -> list[str]:
    """Texts ``ids`` of one read-only part: (offsets, bytes array) or (offsets, pages)."""
    if hasattr(data, "strings"):  # pages: erased texts read as ""
        return data.strings([int(offsets[j]) for j in ids], [int(offsets[j + 1]) for j in ids])
    return [bytes(data[int(offsets[j]):int(offsets[j + 1])]).decode("utf-8") for j in ids]


def _take(part, ids) -> list[str]:
    """Texts ``ids`` of a part as :meth:`TextColumn._arrow_parts` gives it: one Arrow gather, or reads of pages."""
    import pyarrow as pa

    if isinstance(part, tuple):
        return _part_strings(part[0], part[1], ids.tolist())
    return part.take(pa.array(ids)).to_pylist()


class DerivedNames:
    """Node names as a view of the texts: an N/O node's name is its text, any other node's is None.

    Only names that break this rule are stored (``exceptions``); ``nodes.parquet`` leaves its
    ``name`` column out when there are none.
    """

    _UNSET = object()

    def __init__(self, types: TypedColumn, texts: TextColumn) -> None:
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
        types = self._types.take(ids)
        named = np.isin(types, NAME_IS_TEXT)
        texts = iter(self._texts.take(ids[named]))
        out = [next(texts) if t else None for t in named.tolist()]
        if self.exceptions:
            for k, i in enumerate(ids.tolist()):
                if i in self.exceptions:
                    out[k] = self.exceptions[i]
        return out
