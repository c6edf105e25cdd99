"""The NodeRAG heterograph: typed nodes with stable keys and two CSR layers.

``HeteroGraph`` holds, per node, a ``uint8`` type code (:class:`NodeType`) and a
``uint64`` content key, plus two symmetric CSR layers over the same node ids:
``structural`` (S-T, S-N, N-R, ... edges) and ``semantic`` (kNN links among
embedded nodes). Ids ``0..n-1`` are assigned in insertion order and never
reused. Everything is vectorised; no per-edge Python loop.

On disk (``save``/``load``)::

    DIR/node_types.npy        uint8 (n,)
    DIR/node_keys.npy         uint64 (n,)
    DIR/node_key_order.npy    int32 (n,)   from KEY_ORDER_FROM nodes on: argsort of the keys (below,
                                           recomputed on the first key lookup, O(n log n))
    DIR/node_keys_sorted.npy  uint64 (n,)  with it: the keys in that order (binary-searched in place)
    DIR/graph/{indptr,indices,weights}.npy     structural layer (indptr stored as int32 while
                                               nnz < 2**31, widened to int64 on load; int64 files load too)
    DIR/semantic/{indptr,indices,weights}.npy  semantic layer
    DIR/graph/meta.json       format version, n, nnz per layer (written last)

Loaded arrays are read-only memory maps; every mutating method builds new
arrays (copy-on-write), so a loaded graph never writes into its files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import numpy as np

from .arrays import distinct, out_of_range
from .csr import CSR, INDEX_DTYPE, INDPTR_DTYPE, WEIGHT_DTYPE, csr_from_coo, validate_csr
from .keys import KEY_DTYPE
from .storage import (
    FORMAT_VERSION,
    atomic_save_npy,
    atomic_write_json,
    check_format_version,
    load_npy,
    read_json,
)
from .types import N_TYPES, TYPE_DTYPE, NodeType, parse_type

__all__ = ["HeteroGraph", "LAYERS", "merge_csr"]

LAYERS = ("structural", "semantic")
_LAYER_DIRS = {"structural": "graph", "semantic": "semantic"}
_ID_DTYPE = np.dtype(np.int32)
_MAX_NODES = int(np.iinfo(np.int32).max)
#: From this many nodes on, ``save`` stores the keys' sorted order (12 bytes a node): sorting them on the first
#: look-up costs ~0.15 s per million keys, and a delta insert into a large index would pay it every time
KEY_ORDER_FROM = 1 << 22


def merge_csr(a: CSR, b: CSR, a_weight: float = 1.0, b_weight: float = 1.0) -> CSR:
    """Return ``a_weight * a + b_weight * b`` for two CSRs of equal ``n`` with sorted columns.

    Runs in O(nnz(a) + nnz(b)); entries present in both are summed (in float64,
    stored as float32). Structural zeros are kept, so the pattern is the union.
    """
    if a.n != b.n:
        raise ValueError(f"cannot merge CSRs of different sizes: {a.n} and {b.n} nodes")
    from ._hetero_kernels import merge_csr_kernel  # Numba: loaded on first use, not by opening an index

    indptr, indices, weights = merge_csr_kernel(
        np.asarray(a.indptr), np.asarray(a.indices), np.asarray(a.weights), float(a_weight),
        np.asarray(b.indptr), np.asarray(b.indices), np.asarray(b.weights), float(b_weight),
    )
    return CSR(indptr, indices, weights)


# --------------------------------------------------------------------------- helpers


def _csr_invariants(indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray, n: int) -> tuple[int, int]:
    """(0, 0) if a loaded CSR is safe to walk, else (code, position) of the first violation: 1 indptr
    decreasing, 2 a column id outside [0, n), 3 a weight negative or not finite. NumPy reductions, so
    opening an index does not load Numba; a position is searched for only when a check fails."""
    if indptr[0] != 0:
        return 1, 0
    if indptr.size > 1 and not bool(np.all(indptr[1:] >= indptr[:-1])):
        return 1, int(np.flatnonzero(indptr[1:] < indptr[:-1])[0]) + 1
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= n):
        return 2, int(np.flatnonzero((indices < 0) | (indices >= n))[0])
    if weights.size and not (weights.min() >= 0 and weights.max() < np.inf):  # NaN fails both comparisons
        return 3, int(np.flatnonzero(~(np.isfinite(weights) & (weights >= 0)))[0])
    return 0, 0


def _readonly(arr: np.ndarray) -> np.ndarray:
    view = arr.view()
    view.setflags(write=False)
    return view


def _check_codes(arr: np.ndarray, name: str, what: str, n: int, span: str) -> None:
    """Raise ValueError unless ``arr`` is a 1-D integer array of ``what`` (type codes, node ids) in
    ``[0, n)``, which the message writes as ``span``."""
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integer {what}, got dtype {arr.dtype}")
    bad = out_of_range(arr, n) if arr.size else None
    if bad is not None:
        raise ValueError(f"{name} must hold {what} in {span}, found {bad}")


def _as_types(types, name: str) -> np.ndarray:
    """Validate node type codes (ints, NodeType or letters) -> uint8 array."""
    if isinstance(types, np.ndarray) and types.dtype.kind in "iu":
        arr = types
    else:
        seq = list(types) if not isinstance(types, np.ndarray) else types.tolist()
        if any(isinstance(t, str) for t in seq):
            try:
                seq = [int(parse_type(t)) for t in seq]
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        arr = np.asarray(seq)
        if arr.size == 0:
            arr = arr.astype(np.int64)
    _check_codes(arr, name, "type codes", N_TYPES, f"0..{N_TYPES - 1}")
    return np.ascontiguousarray(arr, TYPE_DTYPE)


def _as_keys(keys, name: str) -> np.ndarray:
    """Validate content keys -> uint64 array (negative or non-integer keys rejected)."""
    if isinstance(keys, (int, np.integer)) and not isinstance(keys, bool):
        keys = [keys]
    if isinstance(keys, np.ndarray):
        arr = keys
    else:
        seq = list(keys)
        if not seq:
            return np.zeros(0, KEY_DTYPE)
        if all(isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) for x in seq):
            try:
                return np.array([int(x) for x in seq], dtype=KEY_DTYPE)
            except OverflowError:
                raise ValueError(f"{name} must hold integers in [0, 2**64)") from None
        arr = np.asarray(seq)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, KEY_DTYPE)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold unsigned 64-bit integer keys, got dtype {arr.dtype}")
    if arr.dtype.kind == "i" and arr.min() < 0:
        raise ValueError(f"{name} must be non-negative, found {arr.min()}")
    return np.ascontiguousarray(arr, KEY_DTYPE)


def _as_ids(ids, n: int, name: str) -> np.ndarray:
    arr = np.asarray(ids)
    if arr.size == 0:
        arr = arr.astype(np.int64).reshape(-1)
    _check_codes(arr, name, "node ids", n, f"[0, {n})")
    return arr.astype(np.int64, copy=False)


def _as_weights(w, m: int, name: str) -> np.ndarray:
    if w is None:
        return np.ones(m, np.float64)
    arr = np.asarray(w)
    if arr.ndim == 0:
        arr = np.full(m, arr)
    if arr.ndim != 1 or arr.shape[0] != m:
        raise ValueError(f"{name} must have shape ({m},) like the edge ids, got {arr.shape}")
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be numeric, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if arr.size and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name} must be non-negative, found {arr.min()}")
    return arr


def _frozen(csr: CSR) -> CSR:
    """The layer with read-only views of its arrays (they are shared with callers through the properties)."""
    return CSR(_readonly(csr.indptr), _readonly(csr.indices), _readonly(csr.weights))


def _grow(csr: CSR, n: int) -> CSR:
    """The same CSR over ``n >= csr.n`` nodes (new rows empty)."""
    if csr.n == n:
        return csr
    indptr = np.empty(n + 1, INDPTR_DTYPE)
    indptr[: csr.n + 1] = csr.indptr
    indptr[csr.n + 1:] = csr.indptr[-1]
    return CSR(_readonly(indptr), csr.indices, csr.weights)


def _coo_rows(csr: CSR) -> np.ndarray:
    return np.repeat(np.arange(csr.n, dtype=np.int64), np.diff(np.asarray(csr.indptr)))


def _check_layer(csr: CSR, n: int, name: str) -> CSR:
    """Validate a layer: CSR invariants, sorted unique columns, no self-loops, symmetric."""
    if not isinstance(csr, CSR):
        try:
            import scipy.sparse as sp

            if sp.issparse(csr):
                m = sp.csr_array(csr)
                m.sort_indices()
                csr = CSR(m.indptr, m.indices, m.data)
        except ImportError:  # pragma: no cover
            pass
    if not isinstance(csr, CSR):
        raise ValueError(f"{name} must be a CSR (or scipy.sparse matrix), got {type(csr).__name__}")
    csr = validate_csr(csr.indptr, csr.indices, csr.weights, n=n, name=name)
    if csr.nnz == 0:
        return csr
    from ._hetero_kernels import layer_structure_kernel

    code, r, c = layer_structure_kernel(csr.indptr, csr.indices, csr.weights)
    if code == 1:
        raise ValueError(f"{name} must have strictly increasing column ids within each row "
                         f"(sorted, no duplicates); row {r} breaks at column {c}")
    if code == 2:
        raise ValueError(f"{name} must have no self-loops, found one at node {r}")
    if code == 3:
        raise ValueError(f"{name} must be symmetric (every edge stored in both directions with equal weight); "
                         f"edge ({r}, {c}) has no equal mirror ({c}, {r})")
    return csr


class _KeyIndex:
    """Sorted-array key -> id map (main run + small sorted delta, merged when it grows)."""

    __slots__ = ("main_keys", "main_ids", "delta_keys", "delta_ids")

    def __init__(self, keys: np.ndarray | None = None, order: np.ndarray | None = None):
        if keys is None:
            keys = np.zeros(0, KEY_DTYPE)
        if order is None:
            order = np.argsort(keys, kind="stable").astype(_ID_DTYPE)
        self.main_keys = np.asarray(keys)[order]
        self.main_ids = np.asarray(order, _ID_DTYPE)
        self.delta_keys = np.zeros(0, KEY_DTYPE)
        self.delta_ids = np.zeros(0, _ID_DTYPE)

    @staticmethod
    def _find(sorted_keys: np.ndarray, sorted_ids: np.ndarray, q: np.ndarray) -> np.ndarray:
        out = np.full(q.shape[0], -1, _ID_DTYPE)
        if sorted_keys.size == 0 or q.size == 0:
            return out
        if q.size > 4096:
            # sorted queries make the binary searches cache-friendly (~10x at 10^6)
            qo = np.argsort(q)
            qs = q[qo]
            pos = np.minimum(np.searchsorted(sorted_keys, qs), sorted_keys.size - 1)
            hit = sorted_keys[pos] == qs
            out[qo[hit]] = sorted_ids[pos[hit]]
            return out
        pos = np.minimum(np.searchsorted(sorted_keys, q), sorted_keys.size - 1)
        hit = sorted_keys[pos] == q
        out[hit] = sorted_ids[pos[hit]]
        return out

    def lookup(self, q: np.ndarray) -> np.ndarray:
        out = self._find(self.main_keys, self.main_ids, q)
        if self.delta_keys.size:
            miss = out < 0
            if miss.any():
                out[miss] = self._find(self.delta_keys, self.delta_ids, q[miss])
        return out

    def insert(self, keys: np.ndarray, ids: np.ndarray) -> None:
        """Insert keys known to be absent (unique among themselves)."""
        if keys.size == 0:
            return
        order = np.argsort(keys, kind="stable")
        keys, ids = keys[order], ids[order].astype(_ID_DTYPE)
        pos = np.searchsorted(self.delta_keys, keys)
        self.delta_keys = np.insert(self.delta_keys, pos, keys)
        self.delta_ids = np.insert(self.delta_ids, pos, ids)
        if self.delta_keys.size > max(4096, self.main_keys.size // 16):
            pos = np.searchsorted(self.main_keys, self.delta_keys)
            self.main_keys = np.insert(self.main_keys, pos, self.delta_keys)
            self.main_ids = np.insert(self.main_ids, pos, self.delta_ids)
            self.delta_keys = np.zeros(0, KEY_DTYPE)
            self.delta_ids = np.zeros(0, _ID_DTYPE)

    def order(self) -> np.ndarray:
        """Node ids sorted by key (int32), merging the delta."""
        if self.delta_keys.size:
            pos = np.searchsorted(self.main_keys, self.delta_keys)
            self.main_keys = np.insert(self.main_keys, pos, self.delta_keys)
            self.main_ids = np.insert(self.main_ids, pos, self.delta_ids)
            self.delta_keys = np.zeros(0, KEY_DTYPE)
            self.delta_ids = np.zeros(0, _ID_DTYPE)
        return self.main_ids


# --------------------------------------------------------------------------- graph


class HeteroGraph:
    """Typed nodes with stable keys and two symmetric CSR layers (structural, semantic).

    Build with :meth:`from_coo` or :meth:`empty` plus :meth:`add_nodes` /
    :meth:`add_edges`; persist with :meth:`save` / :meth:`load`.

    Attributes
    ----------
    types : ndarray of shape (n,), uint8, read-only
    keys : ndarray of shape (n,), uint64, read-only
    structural, semantic : CSR over n nodes
    """

    def __init__(self, types: np.ndarray, keys: np.ndarray, structural: CSR, semantic: CSR,
                 *, _key_order: np.ndarray | None = None, _key_order_path: Path | None = None):
        # Private constructor: inputs are trusted (validated by the public builders).
        self._n = int(types.shape[0])
        self._types_buf = types
        self._keys_buf = keys
        self._structural = structural
        self._semantic = semantic
        self._key_order = _key_order
        self._key_order_path = _key_order_path
        self._index: _KeyIndex | None = None

    # ------------------------------------------------------------------ builders

    @classmethod
    def empty(cls) -> "HeteroGraph":
        """A graph with no nodes and no edges."""
        return cls(np.zeros(0, TYPE_DTYPE), np.zeros(0, KEY_DTYPE), CSR.empty(0), CSR.empty(0))

    @classmethod
    def from_coo(
        cls,
        types,
        keys,
        struct_src=None,
        struct_dst=None,
        struct_w=None,
        *,
        sem_src=None,
        sem_dst=None,
        sem_w=None,
        struct_edges: tuple | None = None,
        semantic_edges: tuple | None = None,
    ) -> "HeteroGraph":
        """Build from node arrays and COO edge arrays (vectorised, validated).

        Parameters
        ----------
        types : array-like of shape (n,)
            Node type codes (0..6, ``NodeType`` or letters).
        keys : array-like of shape (n,)
            Unique uint64 content keys; a duplicate key is a ``ValueError``.
        struct_src, struct_dst, struct_w : array-like of shape (m,), optional
            Structural edges (undirected; weights default to 1).
        sem_src, sem_dst, sem_w : array-like, optional
            Semantic edges.
        struct_edges, semantic_edges : tuple (src, dst) or (src, dst, w), optional
            The same edges given as one tuple (alternative to the separate arrays).

        Self-loops are dropped, each edge is stored in both directions and
        duplicate edges have their weights summed.
        """
        t = _as_types(types, "types")
        k = _as_keys(keys, "keys")
        if t.shape[0] != k.shape[0]:
            raise ValueError(f"types and keys must have the same length, got {t.shape[0]} and {k.shape[0]}")
        n = t.shape[0]
        if n > _MAX_NODES:
            raise ValueError(f"at most {_MAX_NODES} nodes are supported, got {n}")
        order = np.argsort(k, kind="stable")
        sk = k[order]
        if n > 1:
            dup = np.flatnonzero(sk[1:] == sk[:-1])
            if dup.size:
                i, j = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
                raise ValueError(f"keys must be unique: key {int(sk[dup[0]])} appears at positions {i} and {j}")
        layers = []
        for lname, prefix, src, dst, w, tup in (
            ("structural", "struct", struct_src, struct_dst, struct_w, struct_edges),
            ("semantic", "sem", sem_src, sem_dst, sem_w, semantic_edges),
        ):
            if tup is not None:
                if src is not None or dst is not None or w is not None:
                    raise ValueError(f"give {lname} edges either as {prefix}_src/{prefix}_dst/{prefix}_w or as a tuple, not both")
                tname = "struct_edges" if prefix == "struct" else "semantic_edges"
                if not isinstance(tup, (tuple, list)) or len(tup) not in (2, 3):
                    raise ValueError(f"{tname} must be a tuple (src, dst) or (src, dst, w)")
                src, dst, w = (tuple(tup) + (None,))[:3]
                names = (f"{tname}[0]", f"{tname}[1]", f"{tname}[2]")
            else:
                names = (f"{prefix}_src", f"{prefix}_dst", f"{prefix}_w")
            layers.append(cls._coo_layer(n, src, dst, w, names))
        # own the node arrays (the caller's arrays may be returned unchanged by the converters)
        return cls(np.array(t, copy=True), np.array(k, copy=True), _frozen(layers[0]), _frozen(layers[1]),
                   _key_order=order.astype(_ID_DTYPE))

    @staticmethod
    def _coo_layer(n: int, src, dst, w, names: tuple[str, str, str]) -> CSR:
        if src is None and dst is None:
            if w is not None:
                raise ValueError(f"{names[2]} given without {names[0]} and {names[1]}")
            return CSR.empty(n)
        if src is None or dst is None:
            missing = names[0] if src is None else names[1]
            raise ValueError(f"{missing} is missing")
        s = _as_ids(src, n, names[0])
        d = _as_ids(dst, n, names[1])
        if s.shape != d.shape:
            raise ValueError(f"{names[0]} and {names[1]} must have the same length, got {s.shape[0]} and {d.shape[0]}")
        ww = _as_weights(w, s.shape[0], names[2])
        return csr_from_coo(n, s, d, ww, symmetric=True)

    # ------------------------------------------------------------------ properties

    @property
    def n(self) -> int:
        """Number of nodes."""
        return self._n

    def __len__(self) -> int:
        return self._n

    @property
    def types(self) -> np.ndarray:
        """Node type codes, uint8 of shape (n,), read-only."""
        return _readonly(self._types_buf[: self._n])

    @property
    def keys(self) -> np.ndarray:
        """Node content keys, uint64 of shape (n,), read-only."""
        return _readonly(self._keys_buf[: self._n])

    @property
    def structural(self) -> CSR:
        """The structural layer (over n nodes)."""
        if self._structural.n != self._n:
            self._structural = _grow(self._structural, self._n)
        return self._structural

    @property
    def semantic(self) -> CSR:
        """The semantic layer (over n nodes)."""
        if self._semantic.n != self._n:
            self._semantic = _grow(self._semantic, self._n)
        return self._semantic

    def layer(self, name: str) -> CSR:
        """Return a layer by name: ``"structural"``, ``"semantic"`` or ``"combined"`` (weights 1, 1)."""
        if name == "structural":
            return self.structural
        if name == "semantic":
            return self.semantic
        if name == "combined":
            return self.combined()
        raise ValueError(f"layer must be 'structural', 'semantic' or 'combined', got {name!r}")

    def __repr__(self) -> str:
        counts = " ".join(f"{k}={v}" for k, v in self.counts_by_type().items() if v)
        return (f"HeteroGraph(n={self._n}, structural_nnz={self._structural.nnz}, "
                f"semantic_nnz={self._semantic.nnz}{', ' + counts if counts else ''})")

    def counts_by_type(self) -> dict[str, int]:
        """Number of nodes per type letter (all seven letters, in code order)."""
        counts = np.bincount(self.types, minlength=N_TYPES)
        return {t.name: int(counts[int(t)]) for t in NodeType}

    # ------------------------------------------------------------------ keys

    def _key_index(self) -> _KeyIndex:
        if self._index is None:
            order = self._key_order
            if order is not None:
                # a persisted order is checked before use: in range and keys[order] strictly increasing
                order = np.asarray(order)
                where = self._key_order_path or "key order"
                if order.size and (int(order.min()) < 0 or int(order.max()) >= self._n):
                    raise ValueError(f"{where}: node ids must lie in [0, {self._n}) (corrupt index)")
                sk = self.keys[order]
                if sk.size > 1 and not np.all(sk[1:] > sk[:-1]):
                    raise ValueError(f"{where}: node key order is not a strictly increasing permutation of the keys (corrupt index)")
            self._index = _KeyIndex(self.keys, order)
            self._key_order = None
        return self._index

    def ids_of(self, keys) -> np.ndarray:
        """Node ids of the given keys, int32 of shape (m,), -1 where a key is absent."""
        q = _as_keys(keys, "keys")
        return self._key_index().lookup(q)

    def add_nodes(self, types, keys) -> np.ndarray:
        """Add nodes by key; return their ids, int32 of shape (m,).

        New keys get new ids appended in order of first occurrence; keys
        already in the graph (or repeated in ``keys``) return the existing id.
        A key whose type differs from the existing node's type is a ``ValueError``.
        """
        t = _as_types(types, "types")
        k = _as_keys(keys, "keys")
        if t.shape[0] != k.shape[0]:
            raise ValueError(f"types and keys must have the same length, got {t.shape[0]} and {k.shape[0]}")
        m = k.shape[0]
        if m == 0:
            return np.zeros(0, _ID_DTYPE)
        index = self._key_index()
        ids = index.lookup(k)
        old = ids >= 0
        if old.any():
            existing_t = self._types_buf[ids[old]]
            bad = np.flatnonzero(existing_t != t[old])
            if bad.size:
                i = int(np.flatnonzero(old)[bad[0]])
                raise ValueError(
                    f"keys[{i}] = {int(k[i])} already exists as node {int(ids[i])} of type "
                    f"{NodeType(int(existing_t[bad[0]])).name}, but types[{i}] = {NodeType(int(t[i])).name}"
                )
        new_pos = np.flatnonzero(~old)
        if new_pos.size:
            nk, nt = k[new_pos], t[new_pos]
            uniq, first, inverse = np.unique(nk, return_index=True, return_inverse=True)
            # within-call type consistency: every occurrence must match the first one's type
            if np.any(nt != nt[first][inverse]):
                j = int(np.flatnonzero(nt != nt[first][inverse])[0])
                f = int(new_pos[first[inverse[j]]])
                i = int(new_pos[j])
                raise ValueError(f"key {int(nk[j])} is given with two types: types[{f}] = {NodeType(int(t[f])).name} "
                                 f"and types[{i}] = {NodeType(int(t[i])).name}")
            # new ids in order of first occurrence
            first_order = np.argsort(first, kind="stable")
            rank = np.empty(uniq.shape[0], np.int64)
            rank[first_order] = np.arange(uniq.shape[0])
            n_old = self._n
            n_new = n_old + uniq.shape[0]
            if n_new > _MAX_NODES:
                raise ValueError(f"at most {_MAX_NODES} nodes are supported")
            ids[new_pos] = (n_old + rank[inverse]).astype(_ID_DTYPE)
            firsts_sorted = new_pos[first[first_order]]
            self._append(t[firsts_sorted], k[firsts_sorted])
            index.insert(k[firsts_sorted], np.arange(n_old, n_new, dtype=_ID_DTYPE))
        return ids

    def _append(self, t: np.ndarray, k: np.ndarray) -> None:
        """Append node rows, growing owned buffers geometrically (never writing into loaded arrays)."""
        n, m = self._n, t.shape[0]
        cap = self._types_buf.shape[0]
        owned = self._types_buf.flags.writeable and self._keys_buf.flags.writeable and not isinstance(self._types_buf, np.memmap)
        if not owned or n + m > cap:
            new_cap = max(n + m, 2 * n, 16)
            tb = np.empty(new_cap, TYPE_DTYPE)
            kb = np.empty(new_cap, KEY_DTYPE)
            tb[:n] = self._types_buf[:n]
            kb[:n] = self._keys_buf[:n]
            self._types_buf, self._keys_buf = tb, kb
        self._types_buf[n:n + m] = t
        self._keys_buf[n:n + m] = k
        self._n = n + m

    # ------------------------------------------------------------------ edges

    def _check_layer_name(self, layer: str) -> str:
        if layer not in LAYERS:
            raise ValueError(f"layer must be 'structural' or 'semantic', got {layer!r}")
        return layer

    def add_edges(self, layer: str, src, dst, w=None) -> None:
        """Add undirected edges to a layer; duplicates (with each other and existing edges) are summed.

        Self-loops are dropped. Cost O(nnz + m log m): the new edges are built
        into a CSR and merged row by row with the existing layer.
        """
        self._check_layer_name(layer)
        new = self._coo_layer(self._n, src, dst, w, ("src", "dst", "w"))
        if new.nnz == 0:
            return
        cur = self.layer(layer)
        merged = new if cur.nnz == 0 else merge_csr(cur, new)
        self._set(layer, _frozen(merged))

    def _set(self, layer: str, csr: CSR) -> None:
        if layer == "structural":
            self._structural = csr
        else:
            self._semantic = csr

    def set_layer(self, layer: str, csr) -> None:
        """Replace a layer wholesale with a copy of ``csr`` (symmetric, loop-free, sorted columns, n nodes)."""
        self._check_layer_name(layer)
        c = _check_layer(csr, self._n, "csr")
        self._set(layer, _frozen(CSR(np.array(c.indptr), np.array(c.indices), np.array(c.weights))))

    def combined(self, structural_weight: float = 1.0, semantic_weight: float = 1.0) -> CSR:
        """``structural_weight * structural + semantic_weight * semantic``: the PPR operator.

        A weight of 0 drops that layer entirely (its pattern too).
        """
        for name, val in (("structural_weight", structural_weight), ("semantic_weight", semantic_weight)):
            if not np.isfinite(val) or val < 0:
                raise ValueError(f"{name} must be finite and non-negative, got {val}")
        a, b = self.structural, self.semantic
        if semantic_weight == 0 or b.nnz == 0:
            return self._scaled(a, structural_weight) if structural_weight != 0 else CSR.empty(self._n)
        if structural_weight == 0 or a.nnz == 0:
            return self._scaled(b, semantic_weight)
        return merge_csr(a, b, structural_weight, semantic_weight)

    @staticmethod
    def _scaled(c: CSR, s: float) -> CSR:
        if s == 1.0:
            return c
        return CSR(c.indptr, c.indices, (np.asarray(c.weights, np.float64) * s).astype(WEIGHT_DTYPE))

    # ------------------------------------------------------------------ subgraphs

    def subgraph_mask(self, types: Iterable) -> np.ndarray:
        """Boolean mask of shape (n,): nodes whose type is in ``types`` (codes, NodeType, letters or "SNRA")."""
        if isinstance(types, str):
            if types.upper() in NodeType.__members__ or not types or not set(types.upper()) <= set(NodeType.__members__):
                types = [types]
            else:
                types = list(types)  # a string of letters, e.g. "SNRA"
        elif isinstance(types, (int, np.integer)):
            types = [types]
        try:
            codes = [int(parse_type(t)) for t in types]
        except ValueError as exc:
            raise ValueError(f"types: {exc}") from None
        sel = np.zeros(N_TYPES, bool)
        sel[codes] = True
        return sel[self.types]

    def induced(self, nodes, layer: str = "structural") -> tuple[CSR, np.ndarray]:
        """Induced subgraph of a layer on ``nodes`` (bool mask of shape (n,) or id array).

        Returns ``(csr, node_ids)``: local node ``i`` is global node ``node_ids[i]``
        (int32). With a mask the ids come out ascending; with an id array they
        keep the given order (duplicates rejected).
        """
        csr = self.layer(layer)
        n = self._n
        arr = np.asarray(nodes)
        if arr.dtype == bool:
            if arr.shape != (n,):
                raise ValueError(f"nodes mask must have shape ({n},), got {arr.shape}")
            node_ids = np.flatnonzero(arr)
        else:
            node_ids = _as_ids(arr.reshape(-1) if arr.ndim == 0 else arr, n, "nodes")
            if node_ids.size and distinct(node_ids).size != node_ids.size:
                raise ValueError("nodes must not contain duplicate ids")
        k = node_ids.shape[0]
        local = np.full(n, -1, np.int64)
        local[node_ids] = np.arange(k)
        rows = _coo_rows(csr)
        lr = local[rows]
        lc = local[np.asarray(csr.indices)]
        keep = (lr >= 0) & (lc >= 0)
        lr, lc, w = lr[keep], lc[keep], np.asarray(csr.weights)[keep]
        if k < 2 or np.all(node_ids[1:] > node_ids[:-1]):
            # monotone relabelling keeps rows and columns sorted
            indptr = np.zeros(k + 1, INDPTR_DTYPE)
            np.cumsum(np.bincount(lr, minlength=k), out=indptr[1:])
            sub = CSR(indptr, lc.astype(INDEX_DTYPE), np.ascontiguousarray(w, WEIGHT_DTYPE))
        else:
            sub = csr_from_coo(k, lr, lc, w, symmetric=False)
        return sub, node_ids.astype(_ID_DTYPE)

    # ------------------------------------------------------------------ exports

    def to_scipy(self, layer: str = "combined"):
        """The layer as a ``scipy.sparse.csr_array`` of shape (n, n), float32."""
        return self.layer(layer).to_scipy()

    def _upper_edges(self, layer: str):
        csr = self.layer(layer)
        rows = _coo_rows(csr)
        cols = np.asarray(csr.indices, np.int64)
        up = rows < cols
        return rows[up], cols[up], np.asarray(csr.weights)[up]

    def edge_list(self, layer: str = "structural") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each undirected edge once as ``(src, dst, w)`` with ``src < dst`` (int32, int32, float32), sorted."""
        r, c, w = self._upper_edges(layer)
        return r.astype(_ID_DTYPE), c.astype(_ID_DTYPE), np.array(w, WEIGHT_DTYPE)

    def neighbors(self, node: int, layer: str = "structural") -> tuple[np.ndarray, np.ndarray]:
        """Neighbour ids (int32, ascending) and edge weights (float32) of one node, as read-only views."""
        csr = self.layer(layer)
        if isinstance(node, bool) or not isinstance(node, (int, np.integer)) or not 0 <= int(node) < self._n:
            raise ValueError(f"node must be an id in [0, {self._n}), got {node!r}")
        s, e = int(csr.indptr[node]), int(csr.indptr[int(node) + 1])
        return _readonly(csr.indices[s:e]), _readonly(csr.weights[s:e])

    def to_igraph(self, layer: str = "combined"):
        """Weighted undirected ``igraph.Graph`` (edge attribute ``weight``, vertex attributes ``type`` and ``key``)."""
        import igraph as ig

        r, c, w = self._upper_edges(layer)
        g = ig.Graph(n=self._n, edges=np.column_stack([r, c]).tolist(), directed=False)
        g.es["weight"] = w.astype(np.float64).tolist()
        g.vs["type"] = self.types.tolist()
        g.vs["key"] = self.keys.tolist()
        return g

    def to_networkx(self, layer: str = "combined"):
        """``networkx.Graph`` with node attributes ``type`` (int code) and ``key`` (int) and edge attribute ``weight``."""
        import networkx as nx

        g = nx.Graph()
        g.add_nodes_from(
            (i, {"type": t, "key": k}) for i, (t, k) in enumerate(zip(self.types.tolist(), self.keys.tolist()))
        )
        r, c, w = self._upper_edges(layer)
        g.add_weighted_edges_from(zip(r.tolist(), c.tolist(), w.astype(np.float64).tolist()))
        return g

    # ------------------------------------------------------------------ comparison

    def equals(self, other: "HeteroGraph") -> bool:
        """Exact equality of node arrays and both layers (same ids, keys, edges, weights)."""
        if not isinstance(other, HeteroGraph) or len(self) != len(other):
            return False
        if not (np.array_equal(self.types, other.types) and np.array_equal(self.keys, other.keys)):
            return False
        for name in LAYERS:
            a, b = self.layer(name), other.layer(name)
            if not (np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
                    and np.array_equal(a.weights, b.weights)):
                return False
        return True

    # ------------------------------------------------------------------ persistence

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the graph under ``directory`` (see module docstring); every file atomically, meta last."""
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        atomic_save_npy(root / "node_types.npy", self.types)
        self.save_keys(root)
        meta: dict = {"format_version": FORMAT_VERSION, "n": self._n}
        for name in LAYERS:
            csr = self.layer(name)
            sub = root / _LAYER_DIRS[name]
            indptr = np.asarray(csr.indptr)
            # offsets fit int32 below 2**31 entries: half the bytes on disk (widened again on load)
            atomic_save_npy(sub / "indptr.npy", indptr.astype(np.int32) if csr.nnz < 2**31 else indptr)
            atomic_save_npy(sub / "indices.npy", csr.indices)
            atomic_save_npy(sub / "weights.npy", csr.weights)
            meta[f"{name}_nnz"] = csr.nnz
        atomic_write_json(root / "graph" / "meta.json", meta)
        return root

    def save_keys(self, directory: str | os.PathLike) -> None:
        """Write the node keys (and, from :data:`KEY_ORDER_FROM` nodes on, their sorted order) under ``directory``:
        part of :meth:`save`, alone for a writer that changes keys only (a delete in place)."""
        root = Path(directory)
        atomic_save_npy(root / "node_keys.npy", self.keys)
        if self._n >= KEY_ORDER_FROM:  # looked up without sorting every key (a delta insert reads a few pages)
            index = self._key_index()
            atomic_save_npy(root / "node_key_order.npy", np.asarray(index.order(), _ID_DTYPE))
            atomic_save_npy(root / "node_keys_sorted.npy", np.asarray(index.main_keys, KEY_DTYPE))
        else:  # derived from the keys on the first look-up; a stale file of an earlier save would not match
            (root / "node_key_order.npy").unlink(missing_ok=True)
            (root / "node_keys_sorted.npy").unlink(missing_ok=True)

    def with_layers(self, structural: CSR, semantic: CSR, keys: np.ndarray | None = None) -> "HeteroGraph":
        """The same nodes over other edge layers of the same size: the types shared, and the keys with their
        stored order unless other ``keys`` are given (their order is then made on the first look-up)."""
        if structural.n != self._n or semantic.n != self._n:
            raise ValueError(f"layers over {structural.n} and {semantic.n} nodes for a graph of {self._n}")
        if keys is not None:
            if keys.shape != (self._n,):
                raise ValueError(f"{keys.shape[0]} keys for a graph of {self._n} nodes")
            return HeteroGraph(self._types_buf, np.asarray(keys, KEY_DTYPE), structural, semantic)
        return HeteroGraph(self._types_buf, self._keys_buf, structural, semantic, _key_order=self._key_order,
                           _key_order_path=self._key_order_path)

    @classmethod
    def load(cls, directory: str | os.PathLike, mmap: bool = True, *, validate: bool = True,
             widen: bool = True) -> "HeteroGraph":
        """Open a saved graph, memory-mapping its arrays read-only (never unpickling).

        Checks the format version (``FormatVersionError``), and every file's dtype
        and shape against ``graph/meta.json`` (``ValueError`` naming the file).
        With ``validate`` (default) the CSR invariants (bounds, monotone indptr,
        finite non-negative weights) are checked too, in O(n + nnz). ``widen=False`` keeps an int32 ``indptr``
        (the compact on-disk form) as mapped instead of an int64 copy (for readers that take both).
        """
        root = Path(directory)
        meta_path = root / "graph" / "meta.json"
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: graph directory not found")
        meta = read_json(meta_path)
        if not isinstance(meta, dict):
            raise ValueError(f"{meta_path}: expected a JSON object")
        check_format_version(meta.get("format_version"), where=meta_path)
        for field in ("n",) + tuple(f"{name}_nnz" for name in LAYERS):
            val = meta.get(field)
            if isinstance(val, bool) or not isinstance(val, int) or val < 0:
                raise ValueError(f"{meta_path}: field {field!r} must be a non-negative integer, got {val!r}")
        n = meta["n"]
        types = load_npy(root / "node_types.npy", mmap, dtype=TYPE_DTYPE, shape=(n,))
        keys = load_npy(root / "node_keys.npy", mmap, dtype=KEY_DTYPE, shape=(n,))
        order_path = root / "node_key_order.npy"
        # written for graphs of KEY_ORDER_FROM nodes and more (checked before first use); otherwise derived lazily
        order = load_npy(order_path, mmap, dtype=_ID_DTYPE, shape=(n,)) if order_path.is_file() else None
        layers = {}
        for name in LAYERS:
            sub = root / _LAYER_DIRS[name]
            nnz = meta[f"{name}_nnz"]
            indptr = load_npy(sub / "indptr.npy", mmap, shape=(n + 1,))
            if indptr.dtype == np.int32 and widen:  # the compact on-disk form: widened (an O(n) copy)
                indptr = _readonly(indptr.astype(INDPTR_DTYPE))
            elif indptr.dtype not in (INDPTR_DTYPE, np.int32):
                raise ValueError(f"{sub / 'indptr.npy'}: expected dtype int32 or int64, found {indptr.dtype}")
            indices = load_npy(sub / "indices.npy", mmap, dtype=INDEX_DTYPE, shape=(nnz,))
            weights = load_npy(sub / "weights.npy", mmap, dtype=WEIGHT_DTYPE, shape=(nnz,))
            if indptr[0] != 0 or indptr[-1] != nnz:
                raise ValueError(f"{sub / 'indptr.npy'}: indptr must start at 0 and end at nnz = {nnz}, "
                                 f"found {int(indptr[0])} .. {int(indptr[-1])}")
            if validate:
                code, pos = _csr_invariants(np.asarray(indptr), np.asarray(indices), np.asarray(weights), n)
                if code:
                    what = {1: "indptr.npy: indptr must be non-decreasing",
                            2: f"indices.npy: column ids must lie in [0, {n})",
                            3: "weights.npy: weights must be finite and non-negative"}[int(code)]
                    raise ValueError(f"{sub}: corrupt {name} layer: {what}; first violation at position {int(pos)}")
            layers[name] = CSR(indptr, indices, weights)
        if validate and n:
            hi = int(np.max(types))
            if hi >= N_TYPES:
                raise ValueError(f"{root / 'node_types.npy'}: type codes must be in 0..{N_TYPES - 1}, found {hi}")
        return cls(types, keys, layers["structural"], layers["semantic"],
                   _key_order=order, _key_order_path=order_path)
