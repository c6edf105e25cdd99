"""Shallow personalized PageRank on a CSR graph (native sparse-frontier kernel).

Semantics
---------
``P`` is the row-normalised weighted adjacency, ``P[u, v] = w(u, v) / strength(u)``,
and ``s`` the seed vector (weights normalised to sum 1, duplicate seeds summed).
Starting from ``p = s`` the kernel runs ``iterations`` steps of

- ``rule="restart"``: ``p <- alpha * P.T @ p + (1 - alpha) * s`` (personalised PageRank
  truncated after ``t`` steps; converges to networkx ``pagerank(alpha=alpha,
  personalization=s)`` on graphs without dangling nodes), or
- ``rule="lazy"``: ``p <- alpha * P.T @ p + (1 - alpha) * p`` (the reference NodeRAG
  update; its fixed point forgets ``s``, so it is only meaningful for small ``t``).

Dangling nodes (zero strength: no edges, or only zero-weight edges) keep their own
mass, as if they had a self-loop (``P[u, u] = 1``); no dense row is built. Total mass
is therefore conserved (``sum(p) == 1``) by both rules.

Each step touches only the rows of nodes that hold mass, so a query costs
O(edges in the seeds' t-hop neighbourhood), independent of the number of nodes.
The result is the top-k nodes per node type, found by bounded heaps over the
touched support (never a sort of all n scores); nodes of score 0 are never
returned; ties are broken by the smaller node id.

Bounded-error mode (``epsilon > 0``): the operator keeps the rows of nodes with more
than ``MIN_SKIP_SEGMENT`` (64) neighbours grouped by neighbour type. When such a node
``u`` holding mass ``m`` is expanded, each type segment of its row with at least 64
entries is skipped if it would add less than ``epsilon`` to every node in it
(``alpha * m * max_w(segment) / strength(u) < epsilon``); the mass it would have pushed,
``alpha * m * strength(segment) / strength(u)``, is dropped. Small rows and small
segments are always expanded, so only large fan-outs of little mass (hub entities
reached at the last step) are cut, which is where exact PPR spends its time. Then:

- every returned score is a lower bound of the exact score;
- the L1 distance between the computed and the exact score vectors (over all nodes,
  hence also over the returned ones) is at most the total dropped mass, reported as
  ``PPRResult.error_bound`` (0.0 in exact mode, and whenever nothing was skipped);
- each skipped segment would have added less than ``epsilon`` to any single node;
  moreover, when the graph's large rows are mirrored (undirected graphs,
  checked once per graph: ``PPROperator.mirrored``) the skipped last-step shares are
  added back exactly to every node that reaches the top-k test, so near-ties keep
  their exact order. Nodes reached *only* through skipped segments are not returned.

Exact mode on mirrored graphs prunes the same way at the last step, with a
certificate instead of a bound: large segments whose per-node share is below 1e-6 are
skipped, their shares are added back exactly to every top-k candidate, and the result
is accepted only if no node reached solely through them could enter any top-k (every
such type's heap is full and its k-th score exceeds the most they could give);
otherwise the query reruns without pruning. Exact results, at close to the bounded
mode's cost on hub-heavy graphs. (``support_size`` then excludes the pruned leaves.)

Push threshold (``push_epsilon > 0``, with either mode): at every step a node ``u`` holding mass ``m`` spreads
``alpha * m`` along its row only if ``alpha * m >= push_epsilon * degree(u)`` (``degree``: the row's entries) --
the residual test of forward push (Andersen, Chung & Lang 2006) -- else that mass is dropped and added to
``error_bound`` (a dangling node with zero-weight entries too). A step then reads at most ``alpha /
push_epsilon`` row entries (the mass it spreads is at most 1): a query's cost no longer grows with its seeds'
degrees (a hub seed reaches thousands of nodes of little mass each, and each would fan out again). The returned
scores are lower bounds; a node reached only through unspread rows is absent.

Use :class:`PPROperator` for repeated queries on one graph: it validates the CSR once (O(n + nnz), or O(n)
with ``check_edges=False``: each row is then checked as a query reads it); the type-grouped copies of the
large rows and the mirror check (O(nnz)) are built at the first query of a mode that reads them (bounded, or
exact without a push threshold). An operator may be shared by threads. :func:`shallow_ppr` and
:func:`shallow_ppr_batch` accept either a :class:`~noderag.graph.csr.CSR` (validated
and precomputed on every call, O(n + nnz)) or a :class:`PPROperator`.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import _core
from .arrays import out_of_range
from .csr import CSR, validate_csr
from .types import N_TYPES

__all__ = ["PPRResult", "PPROperator", "shallow_ppr", "shallow_ppr_batch", "RULES", "DEFAULT_EPSILON",
           "MIN_SKIP_SEGMENT"]

RULES = ("restart", "lazy")
# the one default update rule, used by the kernels' wrappers and by search.rule (the reference NodeRAG's rule)
DEFAULT_RULE = "lazy"
#: Recommended ``epsilon`` for the bounded-error mode (top-50 per type equal to exact on
#: the benchmark's synthetic NodeRAG graphs at 10^6 nodes).
DEFAULT_EPSILON = 1e-6
#: Rows and type segments with fewer entries are always expanded in the bounded mode.
MIN_SKIP_SEGMENT = int(_core.PPRKernel.min_skip_segment)


@dataclass(frozen=True, eq=False)
class PPRResult:
    """Top-k nodes per type of one PPR query.

    Attributes
    ----------
    ids : ndarray of shape (7, k), int32
        Row ``t`` holds the best nodes of type code ``t`` by descending score
        (ties by smaller id), padded with -1; ``k`` is the largest ``k_per_type``
        (clipped to the number of nodes).
    scores : ndarray of shape (7, k), float32
        Their scores, padded with 0.
    error_bound : float
        Upper bound on the L1 error of the scores vs exact (0.0 in exact mode without a push threshold).
    support_size : int
        Number of nodes with a nonzero score in the computed vector (without the
        leaves of pruned or skipped hub segments).
    """

    ids: np.ndarray
    scores: np.ndarray
    error_bound: float = 0.0
    support_size: int = 0

    def top(self, node_type: int) -> tuple[np.ndarray, np.ndarray]:
        """Return the (ids, scores) of one type code without the -1 padding."""
        row = self.ids[int(node_type)]
        keep = row >= 0
        return row[keep], self.scores[int(node_type)][keep]


def _is_int(x) -> bool:
    t = type(x)
    if t is int:  # fast path (bool is a distinct type)
        return True
    return isinstance(x, (numbers.Integral, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_real(x) -> bool:
    t = type(x)
    if t is float or t is int:
        return True
    return isinstance(x, (numbers.Real, np.floating, np.integer)) and not isinstance(x, (bool, np.bool_))


_FAST_IDS = (np.dtype(np.int32), np.dtype(np.int64))
_FAST_WEIGHTS = (np.dtype(np.float32), np.dtype(np.float64))


def _is_fast_array(x, dtypes) -> bool:
    """An ndarray the native query takes as is (native dtype, 1-D, C-contiguous, non-empty)."""
    return type(x) is np.ndarray and x.dtype in dtypes and x.ndim == 1 and x.size > 0 and x.flags.c_contiguous


def _node_types(node_types, n: int, *, kernel_checks: bool = False) -> np.ndarray:
    """``node_types`` as contiguous uint8 codes, checked; ``kernel_checks``: uint8 codes are left to the compiled
    kernel's own range check (it reads every code as it checks indptr; a failure comes back here, named)."""
    if node_types is None:
        raise ValueError("node_types is required when a CSR is given (an array of type codes of shape (n,))")
    arr = np.asarray(node_types)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"node_types must have shape ({n},), got {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"node_types must be integer type codes, got dtype {arr.dtype}")
    if kernel_checks and arr.dtype == np.uint8:  # no cast that could wrap a bad code into range
        return np.ascontiguousarray(arr)
    if arr.size and (arr.min() < 0 or arr.max() >= N_TYPES):
        bad = arr.min() if arr.min() < 0 else arr.max()
        raise ValueError(f"node_types must lie in [0, {N_TYPES}), found {bad}")
    return np.ascontiguousarray(arr, np.uint8)


def _k_vector(k_per_type) -> np.ndarray:
    if _is_int(k_per_type):
        if k_per_type < 0:
            raise ValueError(f"k_per_type must be >= 0, got {k_per_type}")
        return np.full(N_TYPES, int(k_per_type), np.int64)
    if isinstance(k_per_type, (str, bytes)) or k_per_type is None:
        raise ValueError(f"k_per_type must be an int or a length-{N_TYPES} sequence of ints, got {k_per_type!r}")
    arr = np.asarray(k_per_type)
    if arr.shape != (N_TYPES,) or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"k_per_type must be an int or a length-{N_TYPES} sequence of ints, got {k_per_type!r}")
    if arr.min() < 0:
        raise ValueError(f"k_per_type must be >= 0, got {arr.tolist()}")
    return np.ascontiguousarray(arr, np.int64)


def _params(alpha, iterations, rule, epsilon, push_epsilon=0.0):
    if not _is_real(alpha) or not (0.0 <= float(alpha) <= 1.0):
        raise ValueError(f"alpha must be a real number in [0, 1], got {alpha!r}")
    if not _is_int(iterations) or iterations < 0:
        raise ValueError(f"iterations must be an int >= 0, got {iterations!r}")
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if not _is_real(epsilon) or not np.isfinite(float(epsilon)) or float(epsilon) < 0.0:
        raise ValueError(f"epsilon must be a finite real number >= 0, got {epsilon!r}")
    if not _is_real(push_epsilon) or not np.isfinite(float(push_epsilon)) or float(push_epsilon) < 0.0:
        raise ValueError(f"push_epsilon must be a finite real number >= 0, got {push_epsilon!r}")
    return float(alpha), int(iterations), rule == "restart", float(epsilon), float(push_epsilon)


def _threads(n_threads) -> int:
    if n_threads is None:
        return max(1, os.cpu_count() or 1)
    if not _is_int(n_threads) or n_threads < 1:
        raise ValueError(f"n_threads must be None or an int >= 1, got {n_threads!r}")
    return int(n_threads)


def _seed_arrays(seeds, seed_weights, n: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    ids = _seed_ids(seeds, n, where)
    if seed_weights is None:
        return ids, np.ones(ids.shape[0], np.float32)
    return ids, _seed_weights(seed_weights, ids.shape, where)


def _seed_ids(seeds, n: int, where: str) -> np.ndarray:
    ids = np.asarray(seeds)
    if ids.ndim != 1:
        raise ValueError(f"{where}seeds must be 1-D, got shape {ids.shape}")
    if ids.size == 0:
        raise ValueError(f"{where}seeds must be non-empty")
    if not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"{where}seeds must be integer node ids, got dtype {ids.dtype}")
    bad = out_of_range(ids, n)
    if bad is not None:
        raise ValueError(f"{where}seeds must lie in [0, {n}), found {bad}")
    return np.ascontiguousarray(ids, np.int32)


def _seed_weights(seed_weights, shape: tuple, where: str) -> np.ndarray:
    w = np.asarray(seed_weights)
    if w.shape != shape:
        raise ValueError(f"{where}seed_weights must have shape {shape} like seeds, got {w.shape}")
    if not (np.issubdtype(w.dtype, np.floating) or np.issubdtype(w.dtype, np.integer)):
        raise ValueError(f"{where}seed_weights must be real numbers, got dtype {w.dtype}")
    w64 = w.astype(np.float64)
    if not np.all(np.isfinite(w64)) or w64.min() < 0:
        raise ValueError(f"{where}seed_weights must be finite and >= 0, got {w.tolist()[:10]}")
    if w64.max() > np.finfo(np.float32).max:
        raise ValueError(f"{where}seed_weights must fit in float32, found {w64.max()}")
    w = w64.astype(np.float32)
    if not w.sum(dtype=np.float64) > 0:
        raise ValueError(f"{where}seed_weights must not all be zero, got {w.tolist()[:10]}")
    return np.ascontiguousarray(w, np.float32)


def _native_csr(csr: CSR) -> bool:
    """Whether a CSR's arrays already have the kernel's dtypes and layout (1-D, C-contiguous, non-empty indptr of
    int64 or int32):
    then the native constructor's own pass checks their values, and the O(nnz) numpy checks of
    :func:`~noderag.graph.csr.validate_csr` (most of opening a searcher over millions of edges) run only to name
    a value it rejected."""
    arrays = (csr.indptr, csr.indices, csr.weights)
    dtypes = ((np.int64, np.int32), (np.int32,), (np.float32,))  # indptr: int32 is a mapped graph's compact form
    return (all(isinstance(a, np.ndarray) and a.dtype in d and a.ndim == 1 and a.flags.c_contiguous
                for a, d in zip(arrays, dtypes)) and csr.indptr.shape[0] >= 1)


class PPROperator:
    """Shallow-PPR operator over one graph: validated arrays plus per-node precomputation.

    Parameters
    ----------
    csr : CSR
        Weighted adjacency; rows are out-edges. The arrays are referenced, not
        copied: do not modify them while the operator is alive.
    node_types : array-like of shape (n,)
        Node type codes in [0, 7).
    check_edges : bool, default=True
        Check every column id and weight now (O(nnz)). False: only indptr and the type codes now (O(n), what a
        searcher opening millions of edges wants); a row is checked when a query first reads it, and a bad one
        raises ``ValueError`` then. Either way no query reads out of bounds.
    """

    def __init__(self, csr: CSR, node_types, *, check_edges: bool = True) -> None:
        if not isinstance(csr, CSR):
            raise ValueError(f"csr must be a noderag.graph.csr.CSR, got {type(csr).__name__}")
        kernel = None
        if _native_csr(csr):  # the kernel checks the values itself (all now, or each row as it is read)
            types = _node_types(node_types, csr.indptr.shape[0] - 1, kernel_checks=True)
            try:
                kernel = _core.PPRKernel(csr.indptr, csr.indices, csr.weights, types, bool(check_edges))
            except ValueError:
                kernel = None  # the numpy checks below name the bad value
        if kernel is None:
            csr = validate_csr(csr.indptr, csr.indices, csr.weights, name="csr")
            types = _node_types(node_types, csr.n)
            kernel = _core.PPRKernel(csr.indptr, csr.indices, csr.weights, types)
        self._csr = csr
        self._types = types
        self._kernel = kernel
        self._k_cache: dict = {}

    @property
    def n(self) -> int:
        """Number of nodes."""
        return self._csr.n

    @property
    def csr(self) -> CSR:
        """The validated CSR the operator runs on."""
        return self._csr

    @property
    def node_types(self) -> np.ndarray:
        """Type codes, uint8 of shape (n,)."""
        return self._types

    @property
    def mirrored(self) -> bool:
        """Whether the large rows are mirrored, so the bounded mode corrects last-step skips exactly."""
        return bool(self._kernel.mirrored)

    def query(self, seeds, seed_weights=None, *, k_per_type, alpha: float = 0.5, iterations: int = 2,
              rule: str = DEFAULT_RULE, epsilon: float = 0.0, push_epsilon: float = 0.0) -> PPRResult:
        """Run one query; see the module docstring for the semantics."""
        a, t, restart, eps, push = _params(alpha, iterations, rule, epsilon, push_epsilon)
        k = self._k(k_per_type)
        # int32/int64 and float32/float64 arrays go straight to the native side, which checks ranges and values.
        ids = seeds if _is_fast_array(seeds, _FAST_IDS) else _seed_ids(seeds, self.n, "")
        if seed_weights is None or _is_fast_array(seed_weights, _FAST_WEIGHTS):
            w = seed_weights
        else:
            w = _seed_weights(seed_weights, ids.shape, "")
        out_ids, out_scores, err, support = self._kernel.query(ids, w, k, a, t, restart, eps, push)
        return PPRResult(out_ids, out_scores, float(err), int(support))

    def _flat_batch(self, seed_lists, weight_lists):
        """Vectorised conversion of a batch of well-formed arrays, or None to take the general path."""
        ids = [np.asarray(x) for x in seed_lists]
        dt = ids[0].dtype
        if dt not in _FAST_IDS or not all(a.dtype == dt and a.ndim == 1 and a.size for a in ids):
            return None
        lens = np.fromiter((a.shape[0] for a in ids), np.int64, len(ids))
        offsets = np.zeros(len(ids) + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        flat_ids = np.concatenate(ids)
        if flat_ids.min() < 0 or flat_ids.max() >= self.n:
            return None
        if weight_lists is None:
            flat_w = np.ones(flat_ids.shape[0], np.float32)
        else:
            ws = [np.asarray(x) for x in weight_lists]
            wt = ws[0].dtype
            if wt not in _FAST_WEIGHTS or not all(w.dtype == wt and w.shape == a.shape for w, a in zip(ws, ids)):
                return None
            w64 = np.concatenate(ws).astype(np.float64)
            if not (np.all(np.isfinite(w64)) and w64.min() >= 0 and w64.max() <= np.finfo(np.float32).max):
                return None
            flat_w = w64.astype(np.float32)
            if not np.all(np.add.reduceat(flat_w.astype(np.float64), offsets[:-1]) > 0):
                return None
        return np.ascontiguousarray(flat_ids, np.int32), flat_w, offsets

    def _k(self, k_per_type) -> np.ndarray:
        """The validated k vector (cached per operator; read-only)."""
        key = k_per_type if _is_int(k_per_type) else None
        if key is None and isinstance(k_per_type, (list, tuple)):
            key = tuple(k_per_type) if all(type(x) is int for x in k_per_type) else None
        if key is not None and key in self._k_cache:
            return self._k_cache[key]
        k = _k_vector(k_per_type)
        k.flags.writeable = False
        if key is not None:
            if len(self._k_cache) > 64:
                self._k_cache.clear()
            self._k_cache[key] = k
        return k

    def query_batch(self, seed_lists, weight_lists=None, *, k_per_type, alpha: float = 0.5, iterations: int = 2,
                    rule: str = DEFAULT_RULE, epsilon: float = 0.0, push_epsilon: float = 0.0,
                    n_threads: int | None = None) -> list[PPRResult]:
        """Run many queries in one native call on ``n_threads`` threads (GIL released).

        The results equal those of one :meth:`query` per seed list.
        """
        a, t, restart, eps, push = _params(alpha, iterations, rule, epsilon, push_epsilon)
        k = self._k(k_per_type)
        threads = _threads(n_threads)
        if isinstance(seed_lists, np.ndarray) and seed_lists.ndim == 2:
            seed_lists = list(seed_lists)
        if isinstance(weight_lists, np.ndarray) and weight_lists.ndim == 2:
            weight_lists = list(weight_lists)
        if isinstance(seed_lists, (str, bytes)) or not isinstance(seed_lists, Sequence):
            raise ValueError(f"seed_lists must be a sequence of 1-D seed arrays, got {type(seed_lists).__name__}")
        if weight_lists is not None and (isinstance(weight_lists, (str, bytes)) or not isinstance(weight_lists, Sequence)
                                         or len(weight_lists) != len(seed_lists)):
            raise ValueError(f"weight_lists must be None or a sequence of {len(seed_lists)} weight arrays")
        q = len(seed_lists)
        flat = self._flat_batch(seed_lists, weight_lists) if q else None
        if flat is None:  # general path: per-query conversion with messages naming the query
            ids_parts, w_parts = [], []
            offsets = np.zeros(q + 1, np.int64)
            for i, seeds in enumerate(seed_lists):
                where = f"query {i}: "
                ids, w = _seed_arrays(seeds, None if weight_lists is None else weight_lists[i], self.n, where)
                ids_parts.append(ids)
                w_parts.append(w)
                offsets[i + 1] = offsets[i] + ids.shape[0]
            flat_ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, np.int32)
            flat_w = np.concatenate(w_parts) if w_parts else np.zeros(0, np.float32)
        else:
            flat_ids, flat_w, offsets = flat
        k = np.minimum(k, self.n)  # no type can have more than n nodes
        k_max = int(k.max())
        out_ids = np.empty((q, N_TYPES, k_max), np.int32)
        out_scores = np.empty((q, N_TYPES, k_max), np.float32)
        out_err = np.empty(q, np.float64)
        out_support = np.empty(q, np.int64)
        self._kernel.run(flat_ids, flat_w, offsets, k, a, t, restart, eps, push, threads,
                         out_ids, out_scores, out_err, out_support)
        if q == 1:
            return [PPRResult(out_ids[0], out_scores[0], float(out_err[0]), int(out_support[0]))]
        return [PPRResult(out_ids[i].copy(), out_scores[i].copy(), float(out_err[i]), int(out_support[i]))
                for i in range(q)]


def _operator(csr, node_types) -> PPROperator:
    if isinstance(csr, PPROperator):
        if node_types is not None and not np.array_equal(np.asarray(node_types), csr.node_types):
            raise ValueError("node_types differs from the PPROperator's node types; pass node_types=None")
        return csr
    return PPROperator(csr, node_types)


def shallow_ppr(csr: CSR | PPROperator, seeds, seed_weights=None, *, node_types=None, k_per_type,
                alpha: float = 0.5, iterations: int = 2, rule: str = DEFAULT_RULE, epsilon: float = 0.0,
                push_epsilon: float = 0.0, n_threads: int | None = None) -> PPRResult:
    """Top-k nodes per type by shallow personalized PageRank from weighted seeds.

    Parameters
    ----------
    csr : CSR or PPROperator
        The graph; a CSR is validated and precomputed on every call (use a
        PPROperator for repeated queries).
    seeds : array-like of int, shape (m,)
        Seed node ids (duplicates are summed).
    seed_weights : array-like of float, shape (m,), default=None
        Non-negative seed weights, normalised to sum 1 (None: uniform).
    node_types : array-like of shape (n,), default=None
        Type codes; required with a CSR.
    k_per_type : int or sequence of 7 ints
        How many nodes to return per type code.
    alpha : float, default=0.5
        Damping: the share of mass propagated along edges per step.
    iterations : int, default=2
        Number of steps t (0 returns the seeds).
    rule : {"restart", "lazy"}, default=DEFAULT_RULE ("lazy")
    epsilon : float, default=0.0
        Threshold of the bounded-error mode (0: exact; ``DEFAULT_EPSILON`` is a good start).
    push_epsilon : float, default=0.0
        Push threshold (0: off): a node whose propagated mass per row entry is below it spreads nothing, so a
        step reads at most ``alpha / push_epsilon`` row entries (see the module docstring).
    n_threads : int, default=None
        Accepted for symmetry with :func:`shallow_ppr_batch`; a single query runs on one thread.
    """
    _threads(n_threads)
    return _operator(csr, node_types).query(seeds, seed_weights, k_per_type=k_per_type, alpha=alpha,
                                            iterations=iterations, rule=rule, epsilon=epsilon,
                                            push_epsilon=push_epsilon)


def shallow_ppr_batch(csr: CSR | PPROperator, seed_lists, weight_lists=None, *, node_types=None, k_per_type,
                      alpha: float = 0.5, iterations: int = 2, rule: str = DEFAULT_RULE, epsilon: float = 0.0,
                      push_epsilon: float = 0.0, n_threads: int | None = None) -> list[PPRResult]:
    """Run :func:`shallow_ppr` for many seed lists in one native multi-threaded call.

    ``n_threads`` defaults to ``os.cpu_count()``; the results equal one
    :func:`shallow_ppr` call per seed list.
    """
    return _operator(csr, node_types).query_batch(seed_lists, weight_lists, k_per_type=k_per_type, alpha=alpha,
                                                  iterations=iterations, rule=rule, epsilon=epsilon,
                                                  push_epsilon=push_epsilon, n_threads=n_threads)
