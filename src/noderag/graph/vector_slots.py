"""Direct reads of a saved vector index's rows: its keys in add order, saved beside it, and the row table.

A usearch dense file starts with its vectors as one matrix (the number of rows and the bytes per row,
two uint32, then the rows), row ``s`` holding the vector of slot ``s``. A shard added to by one thread
and never removed from fills its slots in add order, and a sharded :class:`~noderag.graph.vectors.
VectorIndex` sends vector ``i`` of its add sequence to shard ``i % P``: so when the index knows that
sequence (every add single-threaded) it saves the keys in add order as ``<stem>.keys.npy`` (int64, e.g.
``vectors.keys.npy``), and the vector of the key at position ``i`` is row ``i // P`` of shard ``i % P``.

A reader finds the rows of a batch of ids with a ``searchsorted`` per ascending run of the keys (a build
adds its passages and units by id, then its attributes and summaries by id: one run, or two after an
insert gave passages ids above the old summaries') and reads them from the file mapping, converted to
float32 exactly as usearch's ``get_many`` converts them. Each shard file is parsed from its bytes
(:class:`ShardFile`: the matrix, usearch's head, the graph's levels and so where each slot's node, which
starts with the key usearch stored for that slot, lies); before any read the keys file is checked once
against the files (sizes, the parse ending exactly at each file's end, the keys the nodes at a sample
of positions store), and every row a read returns is confirmed by its slot's node key: a keys file that
names another key than its slot holds (two entries exchanged, a changed key) raises
:class:`KeysFileDamagedError` instead of returning another key's row. So a view whose keys file fits
maps its shards without usearch's key hash table (the slot tables answer ``get`` and ``contains``; an
id the keys file does not name is not stored, the file having been checked to fill the shards), and
an index without one, or whose files this parse refuses, is viewed with it, as before.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import numpy as np

from ..errors import NodeRAGError

__all__ = ["SlotTable", "ShardFile", "KeysFileDamagedError", "keys_path", "check_add_order", "write_add_order", "key_fingerprint"]

log = logging.getLogger("noderag.vectors")

# storage type -> (numpy type of a stored scalar, conversion of stored rows to float32 as usearch does it)
_I8_SCALE = np.float32(1.0 / 127.0)  # usearch multiplies by the float32 of 1/127 (not divides: the bits differ)


class KeysFileDamagedError(NodeRAGError, ValueError):
    """A keys file names a key its slot's node does not hold, or a key twice: a read by it would return
    another key's row, so it stops (one line naming the file; ``noderag verify`` checks it in full)."""


def shard_path(path, j: int) -> Path:
    """File of shard ``j`` of the index saved at ``path``: ``path`` itself for 0, ``stem.j.suffix`` after."""
    path = Path(path)
    return path if j == 0 else path.with_name(f"{path.stem}.{j}{path.suffix}")


def _dtype_name(kind) -> str:
    return str(getattr(kind, "name", kind)).lower()


def _rows(index, keys: np.ndarray, ndim: int) -> np.ndarray:
    """The float32 vectors of ``keys`` (all present) in one usearch index, shape (len(keys), ndim).

    usearch's ``Index.get`` wraps each row of its compiled ``get_many`` in a Python-level cast; a query
    fetches a few hundred rows, so the compiled call is used directly where the index has one (the rows
    come back float32 for the F32 scalar kind), and the public ``get`` otherwise.
    """
    from usearch.index import ScalarKind

    compiled = getattr(index, "_compiled", None)
    if compiled is not None and hasattr(compiled, "get_many"):
        try:
            flat = np.concatenate(compiled.get_many(np.ascontiguousarray(keys, dtype=np.uint64), ScalarKind.F32))
        except (TypeError, ValueError):  # a missing key answers None
            flat = None
        if flat is not None and flat.dtype == np.float32 and flat.size == keys.shape[0] * ndim:
            return flat.reshape(-1, ndim)
    return np.asarray(index.get(keys, dtype=np.float32), dtype=np.float32).reshape(-1, ndim)


def _from_i8(raw: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    out = np.empty(raw.shape, np.float32) if out is None else out
    np.copyto(out, raw, casting="unsafe")  # exact; then one float32 product, as usearch (and faster than a
    return np.multiply(out, _I8_SCALE, out=out)  # mixed-type multiply: 11.5 against 14.7 us for 300 x 256)


_F16_TABLE: np.ndarray | None = None


def _from_f16(raw: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """float16 rows widened (exact) through a table of all 65,536 values: numpy's cast took 126 us for 300 x 256
    values, the table 75 (usearch's get_many of the same rows: 226)."""
    global _F16_TABLE
    if _F16_TABLE is None:
        _F16_TABLE = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    out = np.empty(raw.shape, np.float32) if out is None else out
    return np.take(_F16_TABLE, raw.view(np.uint16), out=out)


def _from_bf16(raw: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    wide = np.left_shift(raw, np.uint32(16), dtype=np.uint32)
    if out is None:
        return wide.view(np.float32)
    out.view(np.uint32)[...] = wide
    return out


def _cast(raw: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    if out is None:
        return raw.astype(np.float32)
    out[...] = raw
    return out


_KINDS = {"i8": (np.int8, _from_i8), "f16": (np.float16, _from_f16), "bf16": (np.uint16, _from_bf16),
          "f32": (np.float32, _cast), "f64": (np.float64, _cast)}
_SAMPLE = 16  # rows compared with usearch's get_many when a table is opened or saved
_MAX_RUNS = 8  # ascending runs of keys a table searches one by one (more: read through usearch)
_BUCKET_KEYS = 16  # at most this many keys share a bucket of a run's directory (else: binary search)
_BLOCK = 1 << 16  # keys a directory's counting takes at a time (512 KiB of int64)
# the usearch file: scalar kind codes (usearch's scalar_kind_t) of the storage types read directly, the key and
# compressed-slot kinds this parse knows (uint64 keys, uint32 slots), and the file versions it was checked on
_SCALARS = {10: "f64", 11: "f32", 12: "f16", 4: "bf16", 23: "i8"}
_U64, _U32, _SLOT_BYTES = 14, 15, 4
_VERSIONS = ((2, 10), (2, 26))
_NODE_HEAD = 10  # a node starts with its key (uint64) and its level (int16)


def keys_path(path) -> Path:
    """The add-order keys file of the index saved at ``path`` (shard 0's file): ``vectors.usearch`` ->
    ``vectors.keys.npy``."""
    path = Path(path)
    return path.with_name(f"{path.stem}.keys.npy")


def key_fingerprint(keys: np.ndarray) -> int:
    """A 64-bit fingerprint of a set of keys, independent of their order (sum of splitmix64 of each key):
    the keys recorded in add order against the keys a shard holds."""
    z = np.asarray(keys).astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return int(z.sum(dtype=np.uint64))


def _round_robin_sizes(n: int, p: int) -> list[int]:
    """Vectors in shard ``j`` when ``n`` vectors went to shard ``i % p``."""
    return [len(range(j, n, p)) for j in range(p)]


def check_add_order(order: np.ndarray, shards: list) -> str | None:
    """Why ``order`` (keys in add order) is not the slot order of ``shards`` (usearch indexes, vector ``i`` in
    shard ``i % P``), or None when it is: the sizes, and each shard's keys as a set (fingerprints)."""
    p = len(shards)
    if [len(x) for x in shards] != _round_robin_sizes(int(order.shape[0]), p):
        return f"{order.shape[0]} keys do not fill shards of {[len(x) for x in shards]} vectors in turn"
    for j, x in enumerate(shards):
        if len(x) and key_fingerprint(order[j::p]) != key_fingerprint(np.asarray(x.keys, dtype=np.uint64)):
            return f"shard {j} holds other keys than the add order gives it"
    return None


def write_add_order(path, order: np.ndarray | None, shards: list, why_unknown: str = "") -> bool:
    """Save ``order`` as the keys file of the index just saved at ``path`` when it is the slot order of its
    ``shards`` (else remove a keys file left there: a stale one would describe other slots). True when written."""
    from .storage import atomic_save_npy

    target = keys_path(path)
    reason = why_unknown or "add order unknown"
    if order is not None:
        reason = check_add_order(order, shards) or _sample_mismatch(Path(path), order, shards)
        if reason is None:
            atomic_save_npy(target, np.ascontiguousarray(order, dtype=np.int64))
            return True
    log.debug("%s: no keys file written (%s)", path, reason)
    try:
        os.unlink(target)
    except FileNotFoundError:
        pass
    return False


def _shard_files(path: Path, p: int) -> list[Path]:
    return [shard_path(path, j) for j in range(p)]


def _sample_mismatch(path: Path, order: np.ndarray, shards: list) -> str | None:
    """Why the saved shard files at a sample of positions differ from ``order`` (the keys their nodes store)
    or from usearch's rows of those keys."""
    try:
        files = [ShardFile(f) for f in _shard_files(path, len(shards))]
    except (ValueError, OSError) as exc:
        return str(exc)
    return _fits(order, files) or _against_shards(files, shards) or _compare_sample(order, shards, files)


def _compare_sample(order: np.ndarray, shards: list, files: list["ShardFile"]) -> str | None:
    """Why the file rows at a few positions (first, last, spread between) differ from usearch's ``get_many``
    (``shards`` opened with their key lookups)."""
    n, p = int(order.shape[0]), len(shards)
    if n == 0:
        return None
    convert = _KINDS[files[0].dtype][1]
    for i in _sample(n).tolist():
        j, s = i % p, i // p
        key = np.array([order[i]], dtype=np.uint64)
        if not bool(np.asarray(shards[j].contains(key)).reshape(-1)[0]):
            return f"key {int(order[i])} is not in shard {j}"
        if not np.array_equal(_rows(shards[j], key, int(shards[j].ndim))[0], convert(files[j].rows[s:s + 1])[0]):
            return f"row {s} of shard {j} is not the vector of key {int(order[i])}"
    return None


def _sample(n: int) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, min(n, _SAMPLE)).astype(np.int64))


def _fits(order: np.ndarray, files: list["ShardFile"]) -> str | None:
    """Why ``order`` is not the slot order of the shard ``files``: their sizes, their settings, and the keys
    the nodes at a sample of positions store."""
    p = len(files)
    if [f.size for f in files] != _round_robin_sizes(int(order.shape[0]), p):
        return f"{order.shape[0]} keys do not fill the shards of {[f.size for f in files]} vectors in turn"
    if len({(f.dtype, f.ndim) for f in files}) > 1:
        return "the shards store vectors of different types or lengths"
    at = _sample(int(order.shape[0]))
    for j in range(p):
        mine = at[at % p == j]
        stored = files[j].node_keys(mine // p)
        if not np.array_equal(stored, order[mine].astype(np.uint64)):
            k = int(np.flatnonzero(stored != order[mine].astype(np.uint64))[0])
            return f"slot {int(mine[k]) // p} of shard {j} holds key {int(stored[k])}, not {int(order[mine[k]])}"
    return None


def _against_shards(files: list["ShardFile"], shards: list) -> str | None:
    """Why the parsed files are not what usearch opened (sizes, vector type and length)."""
    for j, (f, x) in enumerate(zip(files, shards)):
        if (f.size, f.dtype, f.ndim) != (len(x), _dtype_name(x.dtype), int(x.ndim)):
            return f"shard {j}: usearch opened {len(x)} x {int(x.ndim)} {_dtype_name(x.dtype)}, the file holds " \
                   f"{f.size} x {f.ndim} {f.dtype}"
    return None


class ShardFile:
    """One saved usearch dense file read from its bytes (a read-only mapping): the vector matrix, and where each
    slot's graph node lies, whose first 8 bytes are the key usearch stored for that slot.

    The layout (usearch 2.x, ``index_dense_gt::save_to_stream`` then ``index_gt::save_to_stream``): the
    matrix (rows, bytes per row as two uint32 or two uint64, then the rows in slot order); a 64-byte head
    ("usearch", version, metric, scalar, key and slot kinds, present and deleted counts, dimensions, multi);
    the graph header (size, connectivity, base connectivity, max level, entry slot: five uint64); each
    slot's level (int16); then each slot's node: key (uint64), level (int16), its base neighbours
    (``connectivity_base`` slots and a uint32 count) and per level above 0 ``connectivity`` slots and a count.
    Slot ``s``'s node so starts at ``first + s * base_node + level_bytes * (levels above 0 before s)``; that
    offset is kept for every slot (int64: 8 bytes a vector, as usearch's own view keeps a pointer to each
    node; its key hash table, which a view without key lookups skips, holds a key and a slot for each
    vector, at least 16 bytes, in a table with free room). A file whose parse does
    not end exactly at its size, or whose head differs from what is read here, raises ValueError.
    """

    def __init__(self, file: Path) -> None:
        self.name = file.name
        size = file.stat().st_size
        if size < 8 + 64 + 40:
            raise ValueError(f"{self.name}: {size} bytes is too short for a usearch file")
        raw = np.asarray(np.memmap(file, np.uint8, mode="r"))
        h, rows, cols = self._matrix_end(raw)
        head = raw[h:h + 64].tobytes()
        version = struct.unpack_from("<3H", head, 7)
        _, scalar, key_kind, slot_kind = head[13:17]
        present, deleted, dims = struct.unpack_from("<3Q", head, 17)
        self.dtype = _SCALARS.get(scalar, f"scalar kind {scalar}")
        problem = (f"usearch file version {'.'.join(map(str, version))} is not read directly"
                   if not _VERSIONS[0] <= version[:2] <= _VERSIONS[1] else
                   f"key kind {key_kind}, slot kind {slot_kind}" if (key_kind, slot_kind) != (_U64, _U32) else
                   f"{deleted} deleted vectors" if deleted else "a multi-key index" if head[41] else
                   f"storage type {self.dtype} is not read directly" if self.dtype not in _KINDS else
                   f"{present} vectors in a matrix of {rows}" if present != rows else
                   f"{dims} dimensions in rows of {cols} bytes"
                   if dims * np.dtype(_KINDS[self.dtype][0]).itemsize != cols else None)
        if problem is not None:
            raise ValueError(f"{self.name}: {problem}")
        self.size, self.ndim = rows, int(dims)
        self.rows = raw[h - rows * cols:h].view(_KINDS[self.dtype][0]).reshape(rows, self.ndim)
        self._graph(raw, h + 64, size)
        # every byte offset of the file as the start of a little-endian uint64 (overlapping, unaligned): a node's
        # key is one element of it, so a batch of keys is one gather
        self.words = np.ndarray((size - 7,), "<u8", buffer=raw, strides=(1,))

    def _matrix_end(self, raw: np.ndarray) -> tuple[int, int, int]:
        """(where the matrix ends and the head starts, rows, bytes per row): the dimensions as two uint32 or
        two uint64, whichever puts "usearch" right after the rows."""
        for width, fmt in ((8, "<2I"), (16, "<2Q")):
            rows, cols = struct.unpack(fmt, raw[:width].tobytes())
            h = width + rows * cols
            if h + 64 + 40 <= raw.shape[0] and raw[h:h + 7].tobytes() == b"usearch":
                return h, rows, cols
        raise ValueError(f"{self.name}: no usearch head after the vector matrix")

    def _graph(self, raw: np.ndarray, g: int, size: int) -> None:
        """Parse the graph header and the levels; check that the nodes end exactly at the file's end."""
        count, conn, conn_base, max_level, _ = struct.unpack("<5Q", raw[g:g + 40].tobytes())
        first = g + 40 + 2 * count
        if count == 0:
            max_level = 0  # an empty graph stores its level as -1
        if count != self.size or not 0 < conn <= conn_base < 2**16 or max_level >= 2**15 or first > size:
            raise ValueError(f"{self.name}: graph header of {count} nodes (connectivity {conn}/{conn_base}, "
                             f"{max_level} levels) does not fit {self.size} vectors")
        self.levels = raw[g + 40:first].view("<i2")
        if count and (int(self.levels.min()) < 0 or int(self.levels.max()) > max_level):
            raise ValueError(f"{self.name}: node levels outside [0, {max_level}]")
        base_node, level_bytes = _NODE_HEAD + conn_base * _SLOT_BYTES + 4, conn * _SLOT_BYTES + 4
        # where each node starts: the file offset of slot 0's, then the running sum of the node sizes before
        self.node_at = np.empty(count, np.int64)
        if count:
            np.multiply(self.levels[:-1], level_bytes, out=self.node_at[1:], dtype=np.int64)
            self.node_at[1:] += base_node
            self.node_at[0] = first
            np.cumsum(self.node_at, out=self.node_at)
        end = int(self.node_at[-1]) + base_node + level_bytes * int(self.levels[-1]) if count else first
        if end != size:
            raise ValueError(f"{self.name}: the nodes end at byte {end}, the file at {size}")

    def node_keys(self, slots: np.ndarray) -> np.ndarray:
        """The keys (uint64) usearch stored in the nodes of ``slots`` (int64, each < ``size``)."""
        return self.words[self.node_at[slots]]  # (take would copy the whole strided view first)


class SlotTable:
    """The rows of one saved (sharded) index by key: the keys file (in ascending runs) and each shard's file,
    every row read confirmed by the key its slot's node stores."""

    def __init__(self, keys: np.ndarray, runs: list[tuple[int, int]], files: list[ShardFile], name: str) -> None:
        self.keys, self.runs, self.files, self.name = keys, runs, files, name
        self.rows = [f.rows for f in files]
        self.p = len(files)
        self.convert = _KINDS[files[0].dtype][1]
        self.directories = [_Directory.of(keys[a:b]) for a, b in runs]
        # the smallest and largest key: a segment's table holds one id range, so a get over several segments
        # asks each table only for the ids inside its range
        self.span = (min(int(keys[a]) for a, _ in runs), max(int(keys[b - 1]) for _, b in runs)) if runs else (0, -1)

    @classmethod
    def of_files(cls, path, p: int) -> tuple["SlotTable | None", np.ndarray | None, str]:
        """(table, keys in add order, "direct") for the index saved at ``path`` in ``p`` shard files, from the
        files alone; the table is None when the keys fall in too many ascending runs, both are None when there
        is no keys file, or it, or a shard file, does not fit; the last item then says why."""
        keys, files, why = _load(Path(path), p)
        if keys is None:
            return None, None, why
        starts = _run_starts(keys)
        if len(starts) > _MAX_RUNS:
            return None, keys, f"{keys_path(path).name}: keys in more than {_MAX_RUNS} ascending runs"
        runs = list(zip(starts, starts[1:] + [int(keys.shape[0])]))
        return cls(keys, runs, files, keys_path(path).name), keys, "direct"

    @classmethod
    def open(cls, path, shards: list, dtype: str) -> tuple["SlotTable | None", np.ndarray | None, str]:
        """:meth:`of_files`, then checked against the open usearch ``shards`` (with key lookups: a writable load,
        a verify): sizes, and usearch's rows of the sampled keys equal to the file rows."""
        table, keys, why = cls.of_files(path, len(shards))
        if keys is None:
            return None, None, why
        files = table.files if table is not None else _load(Path(path), len(shards))[1]
        bad = _against_shards(files, shards) or _compare_sample(keys, shards, files)
        if bad is not None:
            return None, None, f"{keys_path(path).name}: {bad}"
        return table, keys, why

    def check_shards(self, shards: list) -> None:
        """Raise ValueError when usearch opened other files than the ones parsed (a file replaced meanwhile)."""
        why = _against_shards(self.files, shards)
        if why is not None:
            raise ValueError(f"{self.name}: {why}")

    def holds(self, ids: np.ndarray) -> np.ndarray:
        """Which of ``ids`` (int64) the index holds, by the keys file, each confirmed by its slot's node."""
        found = np.zeros(ids.shape[0], bool)
        if not self.runs or ids.size == 0:
            return found
        hit, slots, bounds = self._grouped(*self._find(ids))
        keys = ids[hit]
        for j in range(self.p):
            a, b = bounds[j], bounds[j + 1]
            if b > a:
                self._confirm(j, keys[a:b], slots[a:b])
        found[hit] = True
        return found

    def read(self, ids: np.ndarray, out: np.ndarray, where: np.ndarray) -> np.ndarray:
        """Write the rows of the ``ids`` (int64) this table holds into ``out[where[k]]``; returns which it wrote.

        Each row is the one whose slot's node stores the id: an entry of the keys file that names another
        key than its slot holds raises ValueError (the keys file is damaged) instead of reading that row."""
        found = np.zeros(ids.shape[0], bool)
        if not self.runs or ids.size == 0:
            return found
        hit, slots, bounds = self._grouped(*self._find(ids))
        if hit.size == 0:
            return found
        keys = ids[hit]
        raw = np.empty((ids.size, self.rows[0].shape[1]), self.rows[0].dtype)  # stored rows, in the order of ids
        for j in range(self.p):
            a, b = bounds[j], bounds[j + 1]
            if b > a:  # the keys the slots' nodes hold confirm the entries; the rows are gathered from the mapping
                self._confirm(j, keys[a:b], slots[a:b])
                raw[hit[a:b]] = self.rows[j].take(slots[a:b], axis=0)
        found[hit] = True
        if where.size == out.shape[0] and hit.size == ids.size:  # every row asked for: converted straight into out
            self.convert(raw, out)
        else:
            out[where[found]] = self.convert(raw[found])
        return found

    def _grouped(self, hit: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """(``hit`` by shard, each shard's in id order; their slots; where each shard's part starts and ends)."""
        if self.p == 1:
            return hit, pos, [0, hit.size]
        shard = pos % self.p
        order = np.argsort(shard, kind="stable")
        return hit[order], pos[order] // self.p, np.searchsorted(shard[order], np.arange(self.p + 1)).tolist()

    def _confirm(self, j: int, ids: np.ndarray, slots: np.ndarray) -> None:
        stored = self.files[j].node_keys(slots)
        if (stored != ids.view(np.uint64)).any():
            k = int(np.flatnonzero(stored != ids.view(np.uint64))[0])
            raise KeysFileDamagedError(f"{self.name} names key {int(ids[k])} at slot {int(slots[k])} of "
                             f"{self.files[j].name}, whose node holds key {int(stored[k])}: the keys file is "
                             f"damaged (noderag verify names it; delete it to read through usearch)")

    def _find(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(indices into ``ids`` that an entry names, that entry's position in the add order); an id two
        entries name raises ValueError (a damaged keys file: the shards hold each key once)."""
        count = np.zeros(ids.shape[0], np.int64) if len(self.runs) > 1 else None
        where = np.zeros(ids.shape[0], np.int64)
        for (a, b), directory in zip(self.runs, self.directories):
            run = self.keys[a:b]
            if directory is not None:
                hit, pos = directory.find(run, ids)
            else:
                pos = np.searchsorted(run, ids)
                np.minimum(pos, b - a - 1, out=pos)
                hit = run[pos] == ids
            if count is None:
                at = np.flatnonzero(hit)
                return at, pos[at] + a
            count += hit
            where[hit] = pos[hit] + a
        if int(count.max(initial=0)) > 1:
            twice = ids[count > 1]
            raise KeysFileDamagedError(f"{self.name} names key {int(twice[0])} twice: the keys file is damaged "
                             f"(noderag verify names it; delete it to read through usearch)")
        hit = np.flatnonzero(count == 1)
        return hit, where[hit]


def _run_starts(keys: np.ndarray) -> list[int]:
    """Where each ascending run of ``keys`` starts (at most ``_MAX_RUNS + 1`` of them), block by block into one
    small buffer: no boolean array as long as the keys (4.86M at 10^6 passages)."""
    if keys.shape[0] == 0:
        return []
    starts, buf = [0], np.empty(min(_BLOCK, keys.shape[0]), bool)
    for a in range(0, keys.shape[0] - 1, _BLOCK):
        b = min(a + _BLOCK, keys.shape[0] - 1)
        down = np.less_equal(keys[a + 1:b + 1], keys[a:b], out=buf[:b - a])
        if down.any():
            starts += (np.flatnonzero(down) + a + 1).tolist()
            if len(starts) > _MAX_RUNS:
                return starts[:_MAX_RUNS + 1]
    return starts


def _load(path: Path, p: int) -> tuple[np.ndarray | None, list[ShardFile], str]:
    """(keys in add order, the parsed shard files, "") or (None, [], why) when they do not fit each other."""
    target = keys_path(path)
    if not target.is_file():
        return None, [], "no keys file"
    try:
        keys = np.load(target, mmap_mode="r", allow_pickle=False)
        files = [ShardFile(f) for f in _shard_files(path, p)]
    except (ValueError, OSError) as exc:
        return None, [], f"{target.name}: {exc}"[:200]
    if keys.dtype != np.int64 or keys.ndim != 1:
        return None, [], f"{target.name}: dtype {keys.dtype}, shape {keys.shape}"
    keys = np.asarray(keys)
    why = _fits(keys, files)
    if why is not None:
        return None, [], f"{target.name}: {why}"
    return keys, files, ""


class _Directory:
    """Where each bucket of ``2**shift`` consecutive ids starts in an ascending run of keys: a look-up reads one
    directory entry and one short stretch of keys (a few cache lines) instead of a binary search's ~20
    scattered reads, which dominate when a query's ids are spread over millions of keys."""

    def __init__(self, base: int, shift: int, starts: np.ndarray) -> None:
        self.base, self.shift, self.starts = base, shift, starts
        self.window = np.arange(_BUCKET_KEYS)

    @classmethod
    def of(cls, run: np.ndarray) -> "_Directory | None":
        """The directory of ``run`` with buckets of at most ``_BUCKET_KEYS`` keys (None for a short run)."""
        n = int(run.shape[0])
        if n < 4 * _BUCKET_KEYS:
            return None
        base, span = int(run[0]), int(run[-1]) - int(run[0]) + 1
        shift = max(0, int(np.log2(max(1.0, span / n * _BUCKET_KEYS / 4))))
        while True:  # about 4 keys a bucket; narrower while a dense stretch puts more than _BUCKET_KEYS in one
            if (span >> shift) >= max(4 * n, 1 << 20):  # a directory much larger than the keys: not worth it
                return None
            counts = _bucket_counts(run, base, shift)
            if shift == 0 or int(counts.max()) <= _BUCKET_KEYS:
                break
            shift -= 1
        if int(counts.max()) > _BUCKET_KEYS:
            return None
        starts = np.zeros(counts.shape[0] + 1, counts.dtype)
        np.cumsum(counts, out=starts[1:])
        return cls(base, shift, starts)

    def find(self, run: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(which ``ids`` the run holds, their positions in it; 0 where it does not)."""
        rel = ids - np.int64(self.base)
        bucket = np.clip(rel >> np.int64(self.shift), 0, self.starts.shape[0] - 2)
        lo = self.starts[bucket].astype(np.int64)
        count = self.starts[bucket + 1] - lo
        at = np.minimum(lo[:, None] + self.window, run.shape[0] - 1)
        same = (run[at] == ids[:, None]) & (self.window < count[:, None])
        return same.any(axis=1), lo + same.argmax(axis=1)


def _bucket_counts(run: np.ndarray, base: int, shift: int) -> np.ndarray:
    """Keys of the ascending ``run`` in each bucket ``(key - base) >> shift``, one cache-sized block at a time:
    a block's keys fall in a narrow stretch of buckets (the run is sorted), and no temporary as large as the
    run is made (two of 39 MB each, at 10^6 passages, cost more in fresh pages than the counting itself)."""
    # the type of the directory's starts (a cumsum into another type takes numpy's slow buffered path: 25x)
    counts = np.zeros(((int(run[-1]) - base) >> shift) + 1, np.int64 if run.shape[0] >= 2**31 else np.int32)
    buf = np.empty(min(_BLOCK, run.shape[0]), np.int64)
    for a in range(0, run.shape[0], _BLOCK):
        part = buf[:min(_BLOCK, run.shape[0] - a)]
        np.subtract(run[a:a + _BLOCK], base, out=part)
        np.right_shift(part, shift, out=part)
        lo = int(part[0])
        part -= lo
        got = np.bincount(part)
        counts[lo:lo + got.shape[0]] += got
    return counts
