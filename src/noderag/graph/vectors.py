"""Vector index over usearch HNSW, and the batched kNN that builds the semantic layer.

Keys are node ids (non-negative int64, stored by usearch as uint64). Vectors are
added as float32 and stored in ``dtype`` (``"f16"`` by default).

Determinism: usearch has no seed; an index built by a single thread is
byte-identical across runs (checked with usearch 2.26), while a multi-threaded
``add`` links the HNSW graph in scheduling order, so the index — and hence
approximate search results — can differ between runs. ``VectorIndex`` therefore
adds with one thread unless ``threads`` says otherwise. Search is a read-only
operation per query and returns the same results for any thread count.

Shards: a large index is split into ``shards`` HNSW graphs (vector ``i`` of an
``add`` goes to shard ``i % shards``), each built by one thread, the shards in
parallel. Every shard is the same in every run whatever the thread count, so the
index stays reproducible while a build uses every core. A search asks each shard
for more than ``k`` and merges by distance, ties to the lower id; one query's shards are
searched by usearch's own threads (outside the GIL) where the caller allows more than one,
which never changes the result. Shard 0
is saved at the given path (``vectors.usearch``), shard ``j >= 1`` beside it
(``vectors.j.usearch``).

Direct reads: an index that knows the order its vectors were added in (every add by one thread)
saves the keys in that order beside it (``vectors.keys.npy``); a view of it reads :meth:`get`'s rows
straight from the files (:mod:`noderag.graph.vector_slots`), the same float32 values usearch returns,
each confirmed by the key usearch stored in its slot's node. Such a view maps its shards without
usearch's key hash tables (building them was most of an open); its slot tables answer :meth:`get`,
:meth:`contains` and :meth:`keys`, and a search takes its keys from the graph nodes as before.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from .arrays import distinct, drop_resident
from .csr import CSR, csr_from_coo
from .vector_slots import SlotTable, _dtype_name, _rows, log, shard_path, write_add_order

__all__ = ["VectorIndex", "knn_search", "knn_csr"]

_METRICS = ("cos", "ip", "l2sq")
_ADD_BLOCK = 16384  # rows per usearch add of a background shard build
#: Shards a single query needs before its search is spread over threads: starting them and merging their entries
#: costs ~0.2 ms, about what searching 3 shards of 600k vectors in parallel saves (8 shards at 10^6 passages: 0.69
#: vs 0.95 ms; 2 at 10^5: slower threaded; benchmarks/bench_search_cost.py).
THREADED_SHARDS = 4
_DTYPES = ("f32", "f16", "bf16", "i8", "f64")


def _as_ids(ids, name: str = "ids") -> np.ndarray:
    arr = np.asarray(ids)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be integer node ids, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.min() < 0:
        raise ValueError(f"{name} must be non-negative, found {arr.min()}")
    return arr


def _as_vectors(vectors, ndim: int, name: str = "vectors") -> np.ndarray:
    arr = np.asarray(vectors)
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D of shape (n, {ndim}), got shape {arr.shape}")
    if arr.shape[1] != ndim:
        raise ValueError(f"{name} must have {ndim} columns (the index ndim), got {arr.shape[1]}")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{name} must be a real-valued array, got dtype {arr.dtype}")
    # float16 stays float16 (a build's vectors; converted block by block when added)
    arr = np.ascontiguousarray(arr, dtype=np.float16 if arr.dtype == np.float16 else np.float32)
    for b in range(0, arr.shape[0], _CHECK_BLOCK):  # in blocks: no (n, ndim) mask of the whole array
        part = arr[b:b + _CHECK_BLOCK]
        if not np.all(np.isfinite(part)):
            bad = b + int(np.flatnonzero(~np.all(np.isfinite(part), axis=1))[0])
            raise ValueError(f"{name} must be finite; row {bad} is not")
    return arr


_CHECK_BLOCK = 65536


def _check_threads(threads, name: str = "threads") -> int:
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 0:
        raise ValueError(f"{name} must be a non-negative integer (0 = all cores), got {threads!r}")
    return int(threads)


class VectorIndex:
    """An HNSW vector index keyed by node id (usearch ``Index``).

    Parameters
    ----------
    ndim : int
        Vector dimensionality.
    metric : {"cos", "ip", "l2sq"}, default="cos"
        Distance: ``cos`` is ``1 - cosine similarity``; ``ip`` is ``1 - dot``; ``l2sq``
        the squared Euclidean distance.
    dtype : {"f16", "f32", "bf16", "i8", "f64"}, default="f16"
        Storage type of the vectors.
    connectivity, expansion_add, expansion_search : int or None
        HNSW parameters; ``None`` keeps usearch's defaults (16, 128, 64).
    threads : int, default=1
        Threads used by :meth:`add` (0 = all cores). One thread gives a reproducible index.
    shards : int, default=1
        HNSW graphs the vectors are spread over (see the module notes); with ``shards > 1``
        each shard is built by one thread and up to ``parallel`` shards at once.
    parallel : int, default=1
        Shards built at the same time by :meth:`add` (never changes the index).

    Notes
    -----
    With ``dtype="i8"`` and ``metric="cos"`` usearch L2-normalises each vector before
    quantising it to int8 (checked with usearch 2.26: vectors of any norm work, and
    :meth:`get` returns unit vectors).
    """

    def __init__(
        self,
        ndim: int,
        metric: str = "cos",
        dtype: str = "f16",
        connectivity: int | None = None,
        expansion_add: int | None = None,
        expansion_search: int | None = None,
        *,
        threads: int = 1,
        shards: int = 1,
        parallel: int = 1,
    ):
        from usearch.index import Index

        if isinstance(ndim, bool) or not isinstance(ndim, (int, np.integer)) or ndim < 1:
            raise ValueError(f"ndim must be a positive integer, got {ndim!r}")
        if metric not in _METRICS:
            raise ValueError(f"metric must be one of {_METRICS}, got {metric!r}")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
        for name, value in (("connectivity", connectivity), ("expansion_add", expansion_add),
                            ("expansion_search", expansion_search)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        for name, value in (("shards", shards), ("parallel", parallel)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.threads = _check_threads(threads)
        self.parallel = int(parallel)
        self._added = 0  # vectors added or queued: where the next add starts in the shard rotation
        self._pending: list = []
        self._lanes: list | None = None
        self._gate = None
        self._permits = 0
        self._cancelled = False
        self._view = False
        self._path: str | None = None
        # keys in add order while every add is single-threaded (slot order; see the module notes), else None
        self._order: list[np.ndarray] | None = []
        self._unordered = ""  # why the add order is unknown
        self._direct: list[SlotTable] = []
        self._direct_status: dict[str, str] = {}
        self._keyless: dict[int, tuple[SlotTable, int]] = {}  # shard -> (its slot table, its place in it)
        self._shards = [Index(ndim=int(ndim), metric=metric, dtype=dtype, connectivity=connectivity,
                              expansion_add=expansion_add, expansion_search=expansion_search)
                        for _ in range(int(shards))]

    @property
    def _index(self):
        """The first shard (the one that carries the shared settings)."""
        return self._shards[0]

    @property
    def shards(self) -> int:
        return len(self._shards)

    # -- properties -----------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return int(self._index.ndim)

    @property
    def metric(self) -> str:
        return _metric_name(self._index.metric)

    @property
    def dtype(self) -> str:
        return _dtype_name(self._index.dtype)

    @property
    def read_only(self) -> bool:
        """True for an index opened with ``load(..., view=True)`` (memory-mapped, immutable)."""
        return self._view

    def __len__(self) -> int:
        return int(sum(len(x) for x in self._shards))

    def keys(self) -> np.ndarray:
        """Every key of the index (int64; shard by shard, each in insertion order)."""
        parts = [_table_keys(*self._keyless[i]) if i in self._keyless else np.asarray(x.keys, dtype=np.int64).reshape(-1)
                 for i, x in enumerate(self._shards)]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def __repr__(self) -> str:
        return (f"VectorIndex(ndim={self.ndim}, metric={self.metric!r}, dtype={self.dtype!r}, "
                f"size={len(self)}{f', shards={self.shards}' if self.shards > 1 else ''}"
                f"{', view=' + repr(self._path) if self._view else ''})")

    # -- mutation ---------------------------------------------------------------------
    def _rows_to_add(self, ids, vectors) -> tuple[np.ndarray, np.ndarray]:
        """``ids`` (int64) and ``vectors`` checked for an add: a writable index, one ``ndim`` row per id."""
        if self._view:
            raise ValueError(f"index viewed from {self._path!r} is read-only; load it with view=False to add")
        ids = _as_ids(ids)
        vectors = _as_vectors(vectors, self.ndim)
        if vectors.shape[0] != ids.shape[0]:
            raise ValueError(f"vectors has {vectors.shape[0]} rows but ids has {ids.shape[0]} entries")
        return ids, vectors

    def add(self, ids, vectors, *, threads: int | None = None) -> None:
        """Add ``vectors`` (n, ndim) under the node ``ids`` (n,); ids must be new and distinct."""
        ids, vectors = self._rows_to_add(ids, vectors)
        if ids.size == 0:
            return
        uniq, counts = np.unique(ids, return_counts=True)
        if uniq.size != ids.size:
            raise ValueError(f"ids must be distinct; repeated: {uniq[counts > 1][:5].tolist()}")
        if len(self):
            present = self.contains(ids)
            if present.any():
                raise ValueError(f"ids already in the index: {ids[present][:5].tolist()}")
        n_threads = self.threads if threads is None else _check_threads(threads)
        if self.shards == 1 and not self._pending:
            self._index.add(ids.astype(np.uint64), vectors.astype(np.float32, copy=False), threads=n_threads)
            self._added += ids.size
            self._record_order(ids, n_threads)
            return
        self._submit(ids, vectors)
        self.wait()

    def add_in_background(self, ids, vectors) -> None:
        """Start adding ``vectors`` under the new, distinct node ``ids`` and return at once.

        Each shard takes its rows in call order on its own thread (at most ``parallel``
        shards run at a time), so the index equals one built by :meth:`add` calls in the same
        order. Call :meth:`wait` before using the index. Ids are not checked against the
        pending adds: they must be new.
        """
        ids, vectors = self._rows_to_add(ids, vectors)
        if distinct(ids).size != ids.size:
            raise ValueError("ids must be distinct")
        self._submit(ids, vectors)

    def _submit(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Queue each shard's rows (vector ``i`` of the index goes to shard ``i % shards``)."""
        if self._lanes is None:
            self._lanes = [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"hnsw-shard-{j}")
                           for j in range(self.shards)]
            self._permits = max(1, min(self.parallel, self.shards))
            self._gate = _TurnGate(self._permits)
        p, first = self.shards, self._added
        self._record_order(ids, 1)  # each shard takes its rows in order on one thread
        keys = ids.astype(np.uint64)
        mapped = drop_resident(vectors)  # a file mapping (the build's vector worker): read back block by block
        for j in range(p):
            rows = np.arange((j - first) % p, ids.size, p)
            if rows.size:
                self._pending.append(self._lanes[j].submit(self._add_shard, j, keys[rows], vectors, rows, mapped))
        self._added += ids.size

    def _add_shard(self, j: int, keys: np.ndarray, vectors: np.ndarray, rows: np.ndarray, mapped: bool) -> None:
        """Add ``vectors[rows]`` to shard ``j`` in blocks (copied one at a time: one block in memory per shard).

        One thread adds them in order, so the blocks give the graph one call would. Each block waits its
        turn at the gate: with fewer permits than shards, the shards take turns block by block, so when
        the build widens they have come equally far and finish together (a shard built whole first
        left one core idle for the other's last ~30 s at 10^5 passages). When ``vectors`` is a file
        mapping (``mapped``), the pages a block read leave the resident set after it: the index holds
        its own copy, so the process need not keep the file's pages too."""
        for b in range(0, rows.size, _ADD_BLOCK):
            with self._gate:  # usearch releases the GIL: shards build in parallel, one thread each
                if self._cancelled:
                    return
                part = rows[b:b + _ADD_BLOCK]
                self._shards[j].add(keys[b:b + _ADD_BLOCK], np.ascontiguousarray(vectors[part], dtype=np.float32),
                                    threads=1)
                if mapped:
                    drop_resident(vectors[int(part[0]):int(part[-1]) + 1])

    def _record_order(self, ids: np.ndarray, threads: int) -> None:
        """Note ``ids`` as the next keys of the add order; a multi-threaded add fills slots in thread order,
        so after one the order is unknown."""
        if self._order is None:
            return
        if threads != 1:
            self._order, self._unordered = None, f"an add used {threads or 'all'} threads"
        else:
            self._order.append(np.array(ids, dtype=np.int64))

    def shift_keys(self, by: int) -> None:
        """Add ``by`` (>= 0) to every key (a rename in each shard, highest key first so a new key never lands on
        one not yet renamed); slots, and so the add order, stay."""
        if self._view:
            raise ValueError(f"index viewed from {self._path!r} is read-only; load it with view=False to rename keys")
        if isinstance(by, bool) or not isinstance(by, (int, np.integer)) or by < 0:
            raise ValueError(f"by must be a non-negative integer, got {by!r}")
        if not by:
            return
        for shard in self._shards:
            keys = np.asarray(shard.keys, dtype=np.uint64).reshape(-1)
            if keys.size:
                order = np.argsort(keys)[::-1]
                shard.rename(keys[order], keys[order] + np.uint64(by))
        if self._order is not None:
            self._order = [part + np.int64(by) for part in self._order]

    def cancel(self) -> None:
        """Stop pending background adds at the next block and drop the threads (a failed build's clean-up);
        the index is then incomplete and must not be used."""
        self._cancelled = True
        self._order, self._unordered = None, "cancelled"
        if self._gate is not None:
            self._gate.release(self.shards)  # waiting shards may start, see the flag and return
        self._pending = []
        lanes, self._lanes = self._lanes, None
        for lane in lanes or ():
            lane.shutdown(wait=True, cancel_futures=True)

    def widen(self, parallel: int) -> None:
        """Let up to ``parallel`` shards build at once from now on (only ever raises it; never changes the index).

        A build starts its vector shards on one thread while single-threaded stages run, then widens.
        """
        self.parallel = max(self.parallel, int(parallel))
        if self._lanes is not None:
            want = max(1, min(self.parallel, self.shards))
            if self._permits < want:
                self._gate.release(want - self._permits)
                self._permits = want

    def wait(self) -> "VectorIndex":
        """Finish every pending background add (re-raising the first failure); returns the index."""
        pending, self._pending = self._pending, []
        lanes, self._lanes = self._lanes, None
        try:
            for f in pending:
                f.result()
        except BaseException:
            for lane in lanes or ():
                lane.shutdown(wait=False, cancel_futures=True)
            raise
        for lane in lanes or ():
            lane.shutdown(wait=True)
        return self

    # -- queries ----------------------------------------------------------------------
    def contains(self, ids) -> np.ndarray:
        """Boolean array: which of ``ids`` are in the index."""
        ids = _as_ids(ids)
        if ids.size == 0 or len(self) == 0:
            return np.zeros(ids.shape[0], bool)
        keys = ids.astype(np.uint64)
        out = np.zeros(ids.shape[0], bool)
        for table in self._direct:  # shards viewed without key lookups answer by their slot tables alone
            lo, hi = table.span
            inside = np.flatnonzero((ids >= lo) & (ids <= hi))
            if inside.size:
                out[inside] |= table.holds(ids[inside])
        for i, x in enumerate(self._shards):
            if len(x) and i not in self._keyless:
                out |= np.asarray(x.contains(keys), dtype=bool).reshape(-1)
        return out

    def get(self, ids) -> np.ndarray:
        """Stored vectors of ``ids`` as float32 of shape (len(ids), ndim) (after ``dtype`` rounding).

        A view with slot tables reads their rows from the files first; ids they do not hold (another
        segment's) are asked of the other shards' hash tables as before (a shard viewed without key lookups
        holds exactly its table's keys)."""
        ids = _as_ids(ids)
        out = np.empty((ids.shape[0], self.ndim), np.float32)  # every row is written, or ValueError
        if ids.size == 0:
            return out
        todo = np.arange(ids.size)  # positions not found yet: each shard is asked for what is left
        for table in self._direct:
            if todo.size == 0:
                return out
            lo, hi = table.span
            asked = ids[todo]
            inside = (asked >= lo) & (asked <= hi)
            if inside.all():
                todo = todo[~table.read(asked, out, todo)]
            elif inside.any():
                asked = todo[inside]
                todo = np.concatenate([todo[~inside], asked[~table.read(ids[asked], out, asked)]])
        keys = ids.astype(np.uint64)
        for i, x in enumerate(self._shards):
            if todo.size == 0:
                break
            if not len(x) or i in self._keyless:
                continue
            # which keys this shard holds first: a get of missing keys answers a tuple with a Python
            # object per key, the common case of a sharded index
            hit = np.asarray(x.contains(keys[todo]), dtype=bool).reshape(-1)
            if hit.any():
                out[todo[hit]] = _rows(x, keys[todo[hit]], self.ndim)
            todo = todo[~hit]
        if todo.size:
            raise ValueError(f"ids not in the index: {ids[todo][:5].tolist()}")
        return out

    def search(self, vectors, k: int, *, threads: int = 0,
               expansion: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Approximate k nearest neighbours of each query row.

        ``expansion`` sets the HNSW search beam (usearch ``expansion_search``) first; it stays set on
        this index (a setting of the loaded index, shared by every caller of it). A sharded index
        gives each shard ``ceil(expansion / shards)`` (at least ``k``).

        Returns
        -------
        ids : ndarray of shape (q, k), int64
            Neighbour node ids by increasing distance, padded with -1.
        distances : ndarray of shape (q, k), float32
            Distances in the index metric (``cos``: 1 - cosine similarity), padded with +inf.
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        k = int(k)
        if expansion is not None:
            if isinstance(expansion, bool) or not isinstance(expansion, (int, np.integer)) or expansion < 1:
                raise ValueError(f"expansion must be a positive integer or None, got {expansion!r}")
            # each of P shards searches with a beam of expansion / P (at least k): about the work, and
            # the candidates, of one unsharded search with the full beam
            beam = max(k, -(-int(expansion) // self.shards)) if self.shards > 1 else int(expansion)
            for x in self._shards:
                if x.expansion_search != beam:
                    x.expansion_search = beam
        queries = _as_vectors(vectors, self.ndim, name="vectors").astype(np.float32, copy=False)
        q = queries.shape[0]
        out_ids = np.full((q, k), -1, np.int64)
        out_dist = np.full((q, k), np.inf, np.float32)
        if q == 0 or len(self) == 0:
            return out_ids, out_dist
        threads = _check_threads(threads)
        if self.shards > 1 and q == 1:
            return _nearest_of_one(self._shards, queries, k, threads)
        if self.shards > 1:
            return _merge_nearest_by_id(self._search_shards(queries, _per_shard(self._shards, k), threads), k)
        got_ids, got_dist = _search_one(self._index, queries, k, threads)
        out_ids[:, :got_ids.shape[1]] = got_ids
        out_dist[:, :got_ids.shape[1]] = got_dist
        return out_ids, out_dist

    def _search_shards(self, queries: np.ndarray, k: int, threads: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every non-empty shard's nearest, in shard order, one shard after another on this thread: usearch holds
        the GIL while it searches, so threads would only add their hand-offs (a single query's 8 shards at 10^6
        passages: 0.39 ms in turn, 0.85 ms split over two threads, wall p50); a batch is spread over the queries
        by usearch's own ``threads``."""
        return [_search_one(x, queries, k, threads) for x in self._shards if len(x)]

    # -- persistence ------------------------------------------------------------------
    def save(self, path) -> None:
        """Write the index to ``path`` (shard 0) and its siblings ``stem.j.suffix`` (shard j), each atomically."""
        target = Path(path)
        if target.is_dir():
            raise ValueError(f"path {str(target)!r} is a directory; give a file name such as vectors.usearch")
        target.parent.mkdir(parents=True, exist_ok=True)
        for j, shard in enumerate(self._shards):
            _save_one(shard, shard_path(target, j))
        order = None
        if self._order is not None and not self._pending:
            order = np.concatenate(self._order) if self._order else np.zeros(0, np.int64)
        write_add_order(target, order, self._shards, self._unordered or ("adds pending" if self._pending else ""))

    def direct_status(self) -> dict[str, str]:
        """How :meth:`get` reads each saved index this object opened: "direct" (rows from the file by its
        keys file) or why it asks usearch (no keys file, one that does not fit, a writable load)."""
        return dict(self._direct_status)

    @classmethod
    def load(cls, path, view: bool = True, *, threads: int = 1, direct: bool = True) -> "VectorIndex":
        """Open a saved index (and its shard siblings); ``view=True`` memory-maps it read-only instead of loading it.

        ``direct=False``: :meth:`get` always asks usearch, even where a keys file allows direct reads
        (the comparison a benchmark makes)."""
        return cls.load_segments([path], view, threads=threads, direct=direct)

    @classmethod
    def load_segments(cls, paths, view: bool = True, *, threads: int = 1, direct: bool = True) -> "VectorIndex":
        """Open several saved indexes (each with its shard siblings) as one whose shards are all of theirs, in order.

        A generation with delta segments keeps one index per segment (keys are node ids, so no key
        is in two of them); a search asks every shard and merges, as for one sharded index. A view
        whose slot table fits (``direct``) maps its shards without usearch's key hash tables: its
        table answers :meth:`get` and :meth:`contains`, and a search takes its keys from the nodes.
        """
        targets = [Path(p) for p in paths]
        shards, groups = [], []
        for target in targets:
            if not target.is_file():
                raise FileNotFoundError(f"no vector index file at {str(target)!r}")
            files = [target]
            while shard_path(target, len(files)).is_file():
                files.append(shard_path(target, len(files)))
            table, order, why = SlotTable.of_files(target, len(files)) if view and direct else (None, None, "")
            opened = [_load_one(f, view, lookups=table is None) for f in files]
            if table is not None:
                table.check_shards(opened)
            shards += list(zip(opened, files))
            groups.append((target, opened, (table, order, why) if table is not None else None))
        first = shards[0][0]
        for x, where in shards[1:]:
            if (x.ndim, str(x.metric), str(x.dtype)) != (first.ndim, str(first.metric), str(first.dtype)):
                raise ValueError(f"{str(where)!r}: shard settings differ from {str(targets[0])!r}")
        obj = cls.__new__(cls)
        obj.threads = _check_threads(threads)
        obj.parallel = 1
        obj._shards = [x for x, _ in shards]
        obj._added = sum(len(x) for x in obj._shards)
        obj._pending, obj._lanes = [], None
        obj._gate, obj._permits, obj._cancelled = None, 0, False  # a writable load may be added to
        obj._view = bool(view)
        obj._path = str(targets[0])
        obj._open_tables(groups, direct)
        return obj

    def _open_tables(self, groups: list, direct: bool) -> None:
        """Each saved index's slot table (a view reads through it; its shards were opened without key lookups),
        and the add order of a lone index loaded writable (saved again, it keeps its keys file)."""
        self._order, self._unordered = None, "a view" if self._view else "opened from several indexes"
        self._direct, self._direct_status, self._keyless = [], {}, {}
        first = 0
        for target, shards, opened in groups:
            table, order, why = opened or SlotTable.open(target, shards, self.dtype)
            if not self._view:
                if len(groups) == 1:
                    self._order, self._unordered = ([np.array(order)], "") if order is not None else (None, why)
                table, why = None, "not a view"
            elif not direct:
                table, why = None, "direct reads off"
            if table is not None:
                self._direct.append(table)
                self._keyless.update({first + j: (table, j) for j in range(len(shards))})
            else:
                log.debug("%s: vectors read through usearch (%s)", target, why)
            self._direct_status[str(target)] = why
            first += len(shards)


def _table_keys(table: SlotTable, j: int) -> np.ndarray:
    """Shard ``j``'s keys by the slot table (in slot order): what a shard without key lookups holds."""
    return np.array(table.keys[j::table.p])


class _TurnGate:
    """A counting semaphore that admits its waiters in arrival order.

    ``threading.Semaphore`` lets a thread that releases take a permit straight back, so a shard
    thread looping over its blocks would keep the gate; here it queues behind the others."""

    def __init__(self, permits: int) -> None:
        self._cond = threading.Condition()
        self._permits = permits
        self._queue: deque = deque()

    def __enter__(self) -> "_TurnGate":
        with self._cond:
            ticket = object()
            self._queue.append(ticket)
            while self._queue[0] is not ticket or self._permits == 0:
                self._cond.wait()
            self._queue.popleft()
            self._permits -= 1
            self._cond.notify_all()  # the next in line may take another permit
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def release(self, n: int = 1) -> None:
        with self._cond:
            self._permits += n
            self._cond.notify_all()


def _search_one(index, queries: np.ndarray, k: int, threads: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, distances) of one usearch index, shape (q, min(k, found)), padded with -1 / +inf."""
    q = queries.shape[0]
    compiled = getattr(getattr(index, "_compiled", None), "search_many", None)
    if compiled is not None:  # the compiled call: usearch's wrapper costs ~40 us a shard, a query asks each shard
        from usearch.index import ScalarKind

        keys, dist, counts = compiled(queries, count=k, exact=False, threads=threads, dtype=ScalarKind.Unknown)[:3]
        keys, dist = np.asarray(keys).reshape(q, -1), np.asarray(dist, np.float32).reshape(q, -1)
        counts = np.asarray(counts).reshape(q)
    else:
        res = index.search(queries, k, threads=threads)
        keys = np.asarray(res.keys).reshape(q, -1)
        dist = np.asarray(res.distances, dtype=np.float32).reshape(q, -1)
        if hasattr(res, "counts"):
            counts = np.asarray(res.counts).reshape(q)
        else:  # a single query comes back as ``Matches``, already trimmed to its count
            counts = np.full(q, keys.shape[1])
    width = min(k, keys.shape[1])
    valid = np.arange(width)[None, :] < counts[:, None]
    return (np.where(valid, keys[:, :width].astype(np.int64), -1),
            np.where(valid, dist[:, :width], np.float32(np.inf)).astype(np.float32))


def _per_shard(shards: list, k: int) -> int:
    """Entries each shard is asked for: more than ``k`` (one past them tells whether a tie crosses the ``k``-th),
    as many as its search beam finds anyway (usearch's beam is the larger of its ``expansion_search`` and the
    count; at most ``2 k``), so every path that merges the shards decides the ``k`` nearest from the same
    entries."""
    return max([k + 1, *(min(int(getattr(x, "expansion_search", k)), 2 * k) for x in shards)])


def _nearest_of_one(shards: list, query: np.ndarray, k: int, threads: int) -> tuple[np.ndarray, np.ndarray]:
    """One query's ``k`` nearest over several shards, (1, k) each, ties to the lower id: with ``threads`` other
    than 1 and at least :data:`THREADED_SHARDS` shards, usearch searches them on its own threads
    (:func:`_nearest_threaded`, outside the GIL); else, or where that cannot decide the ``k`` nearest alone,
    every shard's compiled search in turn, the entries found merged by one sort. Either way the result is
    :func:`_merge_nearest_by_id` of the shards' results."""
    live = [x for x in shards if len(x)]
    wanted = _per_shard(live, k)
    if any(getattr(getattr(x, "_compiled", None), "search_many", None) is None for x in live):
        return _merge_nearest_by_id([_search_one(y, query, wanted, threads) for y in live], k)
    if threads != 1 and len(live) >= THREADED_SHARDS:
        got = _nearest_threaded(live, query, k, wanted, threads)
        if got is not None:
            return got
    found = [_found_of_one(x._compiled, query, wanted, 1) for x in live]
    keys = np.concatenate([f[0] for f in found]) if found else np.zeros(0, np.int64)
    dist = np.concatenate([f[1] for f in found]) if found else np.zeros(0, np.float32)
    return _first_k(keys, dist, k)


def _found_of_one(compiled: Any, query: np.ndarray, count: int, threads: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids int64, distances float32) a compiled usearch index (or ``Indexes``) found for one query, up to
    ``count``, in its order."""
    from usearch.index import ScalarKind

    keys, dist, counts = compiled.search_many(query, count=count, exact=False, threads=threads,
                                              dtype=ScalarKind.Unknown)[:3]
    found = int(np.asarray(counts).reshape(-1)[0])
    return np.asarray(keys).reshape(-1)[:found].astype(np.int64), np.asarray(dist, np.float32).reshape(-1)[:found]


def _nearest_threaded(shards: list, query: np.ndarray, k: int, wanted: int, threads: int
                      ) -> tuple[np.ndarray, np.ndarray] | None:
    """The ``k`` nearest of one query over the shards, searched by usearch's ``Indexes`` on ``threads`` threads
    of its own (0: all cores), or None where a tie reaches the last of the ``wanted`` entries it keeps: its
    threads merge the shards' entries in the order they finish, so which of several equally distant entries it
    keeps may vary, and only entries strictly nearer than every one it dropped are sure."""
    from usearch.index import Indexes

    multi = Indexes()
    for x in shards:
        multi.merge(x)
    keys, dist = _found_of_one(multi._compiled, query, wanted, threads)
    if keys.size == wanted and dist.max() <= np.sort(dist)[k - 1]:
        return None
    return _first_k(keys, dist, k)


def _first_k(keys: np.ndarray, dist: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(1, k) ids and distances of the ``k`` nearest entries, ties to the lower id, padded with -1 / +inf."""
    order = np.lexsort((keys, dist))[:k]
    out_ids = np.full((1, k), -1, np.int64)
    out_dist = np.full((1, k), np.inf, np.float32)
    out_ids[0, :order.size] = keys[order]
    out_dist[0, :order.size] = dist[order]
    return out_ids, out_dist


def _merge_nearest_by_id(parts: list[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` nearest of several shards' results per query, ties to the lower id (padding last): the same
    whichever order the shards' entries come in."""
    ids = np.concatenate([p[0] for p in parts], axis=1)
    dist = np.concatenate([p[1] for p in parts], axis=1)
    return _take_nearest(ids, dist, np.lexsort((np.where(ids < 0, np.iinfo(np.int64).max, ids), dist), axis=-1), k)


def _merge_nearest(parts: list[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` nearest of several shards' results per query (ties: earlier shard, then its rank)."""
    ids = np.concatenate([p[0] for p in parts], axis=1)
    dist = np.concatenate([p[1] for p in parts], axis=1)
    return _take_nearest(ids, dist, np.argsort(dist, axis=1, kind="stable"), k)


def _take_nearest(ids: np.ndarray, dist: np.ndarray, order: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``k`` of each row of ``ids``/``dist`` in ``order``, padded with -1 / +inf to ``k`` columns."""
    order = order[:, :k]
    ids, dist = np.take_along_axis(ids, order, 1), np.take_along_axis(dist, order, 1)
    if ids.shape[1] < k:
        pad = k - ids.shape[1]
        ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
        dist = np.pad(dist, ((0, 0), (0, pad)), constant_values=np.inf)
    return ids, dist.astype(np.float32)


def _save_one(index, target: Path) -> None:
    """Write one usearch index atomically (temporary name in the same folder, fsync, rename)."""
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        index.save(str(tmp))
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    try:
        dir_fd = os.open(target.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _load_one(target: Path, view: bool, lookups: bool = True):
    """One usearch file, loaded or viewed; ``lookups=False`` skips usearch's key hash table (its ``contains``,
    ``get`` and ``keys`` then do not work: a slot table answers them)."""
    from usearch.index import Index

    if not target.is_file():
        raise FileNotFoundError(f"no vector index file at {str(target)!r}")
    try:
        index = Index.restore(str(target), view=bool(view), enable_key_lookups=bool(lookups))
    except (ValueError, RuntimeError) as exc:
        raise ValueError(f"{str(target)!r} is not a usearch index file: {exc}") from exc
    if index is None:
        raise ValueError(f"{str(target)!r} is not a usearch index file")
    return index


def _metric_name(kind) -> str:
    name = str(getattr(kind, "name", kind)).lower()
    return {"cos": "cos", "ip": "ip", "l2sq": "l2sq"}.get(name, name)


def _normalise_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


def _check_knn_inputs(ids, vectors, k):
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    ids = _as_ids(ids)
    if distinct(ids).size != ids.size:
        raise ValueError("ids must be distinct")
    arr = np.asarray(vectors)
    if arr.ndim != 2 or arr.shape[0] != ids.shape[0]:
        raise ValueError(f"vectors must have shape ({ids.shape[0]}, d) matching ids, got {arr.shape}")
    return ids, _as_vectors(arr, arr.shape[1]).astype(np.float32, copy=False)


def knn_search(
    ids,
    vectors,
    k: int = 10,
    *,
    exact_below: int = 4096,
    index: VectorIndex | None = None,
    dtype: str = "f16",
    batch_size: int = 16384,
    threads: int = 0,
    add_threads: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k cosine neighbours of every embedded node among the others (itself excluded).

    With fewer than ``exact_below`` vectors and no ``index`` the search is exact
    (blocked numpy products); otherwise an HNSW index (``index``, or one built here
    with ``add_threads`` threads; 1 keeps it reproducible) is searched in batches
    of ``batch_size`` queries with ``threads`` threads (0 = all cores).
    Similarities are recomputed exactly in float32 from ``vectors`` for every
    neighbour that is in ``ids``; neighbours that exist only in a given ``index``
    get ``1 - distance``. Rows of zero vectors have similarity 0 to everything.

    Returns
    -------
    neighbours : ndarray of shape (m, min(k, m - 1)), int64
        Neighbour node ids by decreasing similarity, padded with -1.
    similarities : ndarray of the same shape, float32 (padding: -inf).
    """
    ids, vecs = _check_knn_inputs(ids, vectors, k)
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    m = ids.shape[0]
    unit = _normalise_rows(vecs)
    kk = max(0, min(int(k), m - 1 if index is None else len(index)))
    if kk == 0 or m == 0:
        return np.full((m, kk), -1, np.int64), np.full((m, kk), -np.inf, np.float32)
    if index is None and m < exact_below:
        return _exact_knn(ids, unit, kk, batch_size)
    if index is None:
        index = VectorIndex(unit.shape[1], metric="cos", dtype=dtype, threads=_check_threads(add_threads, "add_threads"))
        index.add(ids, unit)
    elif index.ndim != unit.shape[1]:
        raise ValueError(f"index has ndim {index.ndim} but vectors have {unit.shape[1]} columns")
    order = np.argsort(ids)
    sorted_ids = ids[order]
    out_ids = np.full((m, kk), -1, np.int64)
    out_sim = np.full((m, kk), -np.inf, np.float32)
    for start in range(0, m, batch_size):
        stop = min(m, start + batch_size)
        hits, dist = index.search(unit[start:stop], kk + 1, threads=threads)
        not_self = (hits >= 0) & (hits != ids[start:stop, None])
        rank = np.cumsum(not_self, axis=1) - 1
        take = not_self & (rank < kk)
        rows, cols = np.nonzero(take)
        dest = rank[rows, cols]
        nbr = hits[rows, cols]
        sim = (1.0 - dist[rows, cols]).astype(np.float32)
        # exact cosine for neighbours whose vectors we hold
        loc = np.searchsorted(sorted_ids, nbr)
        loc = np.minimum(loc, m - 1)
        known = sorted_ids[loc] == nbr
        if known.any():
            a = unit[start + rows[known]]
            b = unit[order[loc[known]]]
            sim[known] = np.einsum("ij,ij->i", a, b)
        out_ids[start + rows, dest] = nbr
        out_sim[start + rows, dest] = sim
    # keep rows sorted by decreasing exact similarity
    resort = np.argsort(-out_sim, axis=1, kind="stable")
    return np.take_along_axis(out_ids, resort, 1), np.take_along_axis(out_sim, resort, 1)


def _exact_knn(ids: np.ndarray, unit: np.ndarray, kk: int, batch_size: int):
    m = ids.shape[0]
    out_ids = np.empty((m, kk), np.int64)
    out_sim = np.empty((m, kk), np.float32)
    block = max(1, min(batch_size, (1 << 24) // max(m, 1)))
    for start in range(0, m, block):
        stop = min(m, start + block)
        sims = unit[start:stop] @ unit.T
        sims[np.arange(stop - start), np.arange(start, stop)] = -np.inf
        part = np.argpartition(-sims, kk - 1, axis=1)[:, :kk]
        part_sims = np.take_along_axis(sims, part, 1)
        order = np.argsort(-part_sims, axis=1, kind="stable")  # decreasing similarity
        part = np.take_along_axis(part, order, 1)
        out_ids[start:stop] = ids[part]
        out_sim[start:stop] = np.take_along_axis(part_sims, order, 1)
    return out_ids, out_sim


def knn_csr(n: int, ids, vectors, k: int = 10, **search: Any) -> CSR:
    """Semantic layer: symmetric kNN graph over ``n`` nodes from the embedded nodes' vectors.

    Each embedded node links to its ``k`` most cosine-similar other embedded nodes
    (see :func:`knn_search`, which takes the keyword options ``search``: ``exact_below``,
    ``index``, ``dtype``, ``batch_size``, ``threads``, ``add_threads``); edges with
    similarity <= 0 are dropped. An edge found from both ends is kept once (the pair is
    deduplicated, keeping the larger of the two similarities, which are equal when both
    come from ``vectors``), so a mutual neighbour pair is not weighted double.
    Weight = cosine similarity (float32).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    ids_arr = _as_ids(ids)
    if ids_arr.size and ids_arr.max() >= n:
        raise ValueError(f"ids must lie in [0, {n}), found {ids_arr.max()}")
    nbrs, sims = knn_search(ids_arr, vectors, k, **search)
    if nbrs.size == 0:
        return CSR.empty(n)
    src = np.repeat(ids_arr, nbrs.shape[1])
    dst = nbrs.ravel()
    w = sims.ravel()
    keep = (dst >= 0) & (dst < n) & (w > 0) & (dst != src)
    src, dst, w = src[keep], dst[keep], w[keep]
    if src.size == 0:
        return CSR.empty(n)
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    pair = lo * np.int64(n) + hi
    order = np.lexsort((-w, pair))  # by pair, larger similarity first
    pair, w = pair[order], w[order]
    first = np.concatenate(([True], pair[1:] != pair[:-1]))
    pair, w = pair[first], w[first]
    return csr_from_coo(n, pair // n, pair % n, w)


class FlatVectors:
    """A small set of vectors searched exactly (one matrix product a batch): the delta segments of a generation.

    Same interface as :class:`VectorIndex` for what a reader asks (``search``, ``get``, ``contains``,
    ``keys``); cosine distance as the HNSW index measures it, on the stored (rounded) vectors.
    """

    def __init__(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        self._ids = ids[order]
        self._raw = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32)[order])
        norms = np.linalg.norm(self._raw, axis=1, keepdims=True)
        self._unit = self._raw / np.maximum(norms, 1e-12)
        self.ndim = int(self._raw.shape[1]) if self._raw.ndim == 2 else 0

    @classmethod
    def of(cls, indexes: list["VectorIndex"]) -> "FlatVectors":
        """Every vector of some (small) saved indexes."""
        ids = np.concatenate([x.keys() for x in indexes]) if indexes else np.zeros(0, np.int64)
        ndim = indexes[0].ndim if indexes else 0
        vecs = np.concatenate([x.get(x.keys()) for x in indexes]) if indexes else np.zeros((0, ndim), np.float32)
        return cls(ids, vecs)

    def __len__(self) -> int:
        return int(self._ids.shape[0])

    def keys(self) -> np.ndarray:
        return self._ids.copy()

    def contains(self, ids) -> np.ndarray:
        ids = _as_ids(ids)
        pos = np.minimum(np.searchsorted(self._ids, ids), max(len(self) - 1, 0))
        return (self._ids[pos] == ids) if len(self) else np.zeros(ids.shape[0], bool)

    def get(self, ids) -> np.ndarray:
        ids = _as_ids(ids)
        hit = self.contains(ids)
        if not hit.all():
            raise ValueError(f"ids not in the index: {ids[~hit][:5].tolist()}")
        return self._raw[np.searchsorted(self._ids, ids)]

    def search(self, vectors, k: int, *, threads: int = 0, expansion: int | None = None):
        """Exact k nearest of each query row: (ids (q, k) int64 padded with -1, cosine distances padded with +inf)."""
        q = np.asarray(vectors, dtype=np.float32).reshape(-1, self.ndim)
        out_ids = np.full((q.shape[0], k), -1, np.int64)
        out_dist = np.full((q.shape[0], k), np.inf, np.float32)
        if len(self) == 0 or q.shape[0] == 0:
            return out_ids, out_dist
        qn = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
        dist = 1.0 - qn @ self._unit.T
        m = min(k, len(self))
        top = np.argpartition(dist, m - 1, axis=1)[:, :m] if m < len(self) else np.tile(np.arange(m), (q.shape[0], 1))
        d = np.take_along_axis(dist, top, 1)
        order = np.lexsort((self._ids[top], d), axis=-1)  # by distance, ties by id: the same in any process
        top = np.take_along_axis(top, order, 1)
        out_ids[:, :m] = self._ids[top]
        out_dist[:, :m] = np.take_along_axis(dist, top, 1)
        return out_ids, out_dist


class LayeredVectors:
    """The base's HNSW index and the deltas' flat vectors, searched and read as one index."""

    def __init__(self, index: "VectorIndex", flat: FlatVectors) -> None:
        self.index, self.flat = index, flat
        self.ndim = index.ndim

    def __len__(self) -> int:
        return len(self.index) + len(self.flat)

    def keys(self) -> np.ndarray:
        return np.concatenate([self.index.keys(), self.flat.keys()])

    def contains(self, ids) -> np.ndarray:
        return np.asarray(self.index.contains(ids), dtype=bool) | self.flat.contains(ids)

    def get(self, ids) -> np.ndarray:
        ids = _as_ids(ids)
        out = np.zeros((ids.shape[0], self.ndim), np.float32)
        flat = self.flat.contains(ids)
        if flat.any():
            out[flat] = self.flat.get(ids[flat])
        if (~flat).any():
            out[~flat] = self.index.get(ids[~flat])
        return out

    def search(self, vectors, k: int, *, threads: int = 0, expansion: int | None = None):
        """The ``k`` nearest over both (ties: the base first)."""
        a = self.index.search(vectors, k, threads=threads, expansion=expansion)
        return _merge_nearest([a, self.flat.search(vectors, k)], k)
