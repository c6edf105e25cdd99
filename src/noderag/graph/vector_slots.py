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
float32 exactly as usearch's ``get_many`` converts them, instead of asking each shard's hash table (a miss
costs more than a hit, and the rows came back as one Python object each). Before any read the table is
checked once against the shards (matrix headers, sizes, at most ``_MAX_RUNS`` runs, sample rows equal to
usearch's). A read takes an id only when exactly one entry names it and that entry's shard holds the key;
so a damaged entry (a key changed: to no key, to another shard's, or to a duplicate) makes a read slower,
never returns another key's row: that would take two entries of one shard exchanged, which the keys
file's checksum (``noderag verify``) names.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

__all__ = ["SlotTable", "keys_path", "check_add_order", "write_add_order", "key_fingerprint"]

log = logging.getLogger("noderag.vectors")

# storage type -> (numpy type of a stored scalar, conversion of stored rows to float32 as usearch does it)
_I8_SCALE = np.float32(1.0 / 127.0)  # usearch multiplies by the float32 of 1/127 (not divides: the bits differ)


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


def _contains(shard, keys: np.ndarray) -> np.ndarray:
    """Which of ``keys`` (uint64) a usearch index holds (its compiled call: the wrapper copies the keys)."""
    compiled = getattr(shard, "_compiled", None)
    if compiled is not None and hasattr(compiled, "contains_many"):
        return np.asarray(compiled.contains_many(keys), dtype=bool).reshape(-1)
    return np.asarray(shard.contains(keys), dtype=bool).reshape(-1)


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
    """Why the saved shard files' rows at a sample of positions differ from usearch's rows of their keys."""
    try:
        rows = [_matrix(f, x) for f, x in zip(_shard_files(path, len(shards)), shards)]
    except ValueError as exc:
        return str(exc)
    return _compare_sample(order, shards, rows)


def _matrix(file: Path, shard) -> np.ndarray:
    """The vector matrix at the start of a saved usearch file (a read-only mapping), checked against the shard."""
    kind = _KINDS.get(_dtype_name(shard.dtype))
    if kind is None:
        raise ValueError(f"storage type {_dtype_name(shard.dtype)} is not read directly")
    scalar = np.dtype(kind[0])
    width = int(shard.ndim) * scalar.itemsize
    size = file.stat().st_size
    with open(file, "rb") as fh:
        head = fh.read(16)
    for offset, fmt in ((8, "<u4"), (16, "<u8")):
        if len(head) >= offset:
            rows, cols = (int(v) for v in np.frombuffer(head[:offset], dtype=fmt))
            if rows == len(shard) and cols == width and size >= offset + rows * cols:
                if rows == 0:
                    return np.zeros((0, int(shard.ndim)), scalar)
                mapped = np.memmap(file, dtype=scalar, mode="r", offset=offset, shape=(rows, int(shard.ndim)))
                return np.asarray(mapped)  # a plain array over the mapping: no memmap subclass cost per read
    raise ValueError(f"{file.name}: matrix header is not {len(shard)} rows of {width} bytes")


def _compare_sample(order: np.ndarray, shards: list, rows: list[np.ndarray]) -> str | None:
    """Why the rows at a few positions (first, last, spread between) differ from usearch's ``get_many``."""
    n, p = int(order.shape[0]), len(shards)
    if n == 0:
        return None
    convert = _KINDS[_dtype_name(shards[0].dtype)][1]
    at = np.unique(np.linspace(0, n - 1, min(n, _SAMPLE)).astype(np.int64))
    for i in at.tolist():
        j, s = i % p, i // p
        key = np.array([order[i]], dtype=np.uint64)
        if not bool(np.asarray(shards[j].contains(key)).reshape(-1)[0]):
            return f"key {int(order[i])} is not in shard {j}"
        if not np.array_equal(_rows(shards[j], key, int(shards[j].ndim))[0], convert(rows[j][s:s + 1])[0]):
            return f"row {s} of shard {j} is not the vector of key {int(order[i])}"
    return None


class SlotTable:
    """The rows of one saved (sharded) index by key: the keys file (in ascending runs) and each shard's matrix."""

    def __init__(self, keys: np.ndarray, runs: list[tuple[int, int]], shards: list, rows: list[np.ndarray],
                 dtype: str) -> None:
        self.keys, self.runs, self.shards, self.rows = keys, runs, shards, rows
        self.p = len(shards)
        self.convert = _KINDS[dtype][1]
        self.directories = [_Directory.of(keys[a:b]) for a, b in runs]
        # the smallest and largest key: a segment's table holds one id range, so a get over several segments
        # asks each table only for the ids inside its range
        self.span = (min(int(keys[a]) for a, _ in runs), max(int(keys[b - 1]) for _, b in runs)) if runs else (0, -1)

    @classmethod
    def open(cls, path, shards: list, dtype: str) -> tuple["SlotTable | None", np.ndarray | None, str]:
        """(table, keys in add order, "direct") for the index saved at ``path`` whose usearch ``shards`` are
        open; the table is None when the keys fall in too many ascending runs, both are None when there is no
        keys file or it does not fit the shards; the last item then says why."""
        target = keys_path(path)
        if not target.is_file():
            return None, None, "no keys file"
        if dtype not in _KINDS:
            return None, None, f"storage type {dtype} is not read directly"
        try:
            keys = np.load(target, mmap_mode="r", allow_pickle=False)
            rows = [_matrix(f, x) for f, x in zip(_shard_files(Path(path), len(shards)), shards)]
        except (ValueError, OSError) as exc:
            return None, None, f"{target.name}: {exc}"[:200]
        if keys.dtype != np.int64 or keys.ndim != 1:
            return None, None, f"{target.name}: dtype {keys.dtype}, shape {keys.shape}"
        keys = np.asarray(keys)
        if [len(x) for x in shards] != _round_robin_sizes(int(keys.shape[0]), len(shards)):
            return None, None, f"{target.name}: {keys.shape[0]} keys do not fill the shards in turn"
        why = _compare_sample(keys, shards, rows)
        if why is not None:
            return None, None, f"{target.name}: {why}"
        starts = [0] + (np.flatnonzero(keys[1:] <= keys[:-1])[:_MAX_RUNS] + 1).tolist() if keys.shape[0] else []
        if len(starts) > _MAX_RUNS:
            return None, keys, f"{target.name}: keys in more than {_MAX_RUNS} ascending runs"
        runs = list(zip(starts, starts[1:] + [int(keys.shape[0])]))
        return cls(keys, runs, shards, rows, dtype), keys, "direct"

    def read(self, ids: np.ndarray, out: np.ndarray, where: np.ndarray) -> np.ndarray:
        """Write the rows of the ``ids`` (int64) this table holds into ``out[where[k]]``; returns which it wrote.

        An id is read only when one entry names it and that entry's shard confirms the key: a damaged
        entry then leaves the id to the caller's slower path instead of reading another key's row."""
        found = np.zeros(ids.shape[0], bool)
        if not self.runs or ids.size == 0:
            return found
        hit, pos = self._find(ids)
        if hit.size == 0:
            return found
        if self.p > 1:  # by shard (stable: each shard's rows in id order), one slice of each array per shard
            shard = pos % self.p
            order = np.argsort(shard, kind="stable")
            hit, pos = hit[order], pos[order] // self.p
            bounds = np.searchsorted(shard[order], np.arange(self.p + 1)).tolist()
        else:
            bounds = [0, hit.size]
        keys = ids.astype(np.uint64)[hit]
        held = np.empty(hit.size, bool)
        raw = np.empty((ids.size, self.rows[0].shape[1]), self.rows[0].dtype)  # stored rows, in the order of ids
        for j in range(self.p):
            a, b = bounds[j], bounds[j + 1]
            if b > a:  # the shard confirms the keys its entries name; its rows are gathered from the mapping
                held[a:b] = _contains(self.shards[j], keys[a:b])
                raw[hit[a:b]] = self.rows[j].take(pos[a:b], axis=0)
        found[hit[held]] = True
        if where.size == out.shape[0] and found.all():  # every row asked for: converted straight into out
            self.convert(raw, out)
        else:
            out[where[found]] = self.convert(raw[found])
        return found

    def _find(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(indices into ``ids`` that exactly one entry names, those entries' positions in the add order)."""
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
        hit = np.flatnonzero(count == 1)
        return hit, where[hit]


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
        rel = run - np.int64(base)
        while True:  # about 4 keys a bucket; narrower while a dense stretch puts more than _BUCKET_KEYS in one
            if (span >> shift) >= max(4 * n, 1 << 20):  # a directory much larger than the keys: not worth it
                return None
            counts = np.bincount(rel >> np.int64(shift))
            if shift == 0 or int(counts.max()) <= _BUCKET_KEYS:
                break
            shift -= 1
        if int(counts.max()) > _BUCKET_KEYS:
            return None
        starts = np.zeros(counts.shape[0] + 1, np.int64 if n >= 2**31 else np.int32)
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
