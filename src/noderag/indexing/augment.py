"""What the attributes (A nodes) and communities (H, O nodes) stages share.

Both steps are recomputed from the whole T/S/N/R graph on every build and
insert (they depend on global structure). Node keys make the result stable:
an A node is keyed by its entity, so an entity that stays important keeps its
A id (its text is refreshed); H/O nodes are keyed by their content. A/H/O
nodes that a later insert no longer produces are retired (``active`` False,
no edges, no vector); ids are never reused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..graph.csr import CSR, csr_from_coo
from ..graph.types import A, H, O

from .assemble import NodeTable

from ..errors import NodeRAGError

__all__ = ["AugmentFailure", "Adjacency", "block_mean", "block_sims", "budget_join_count", "column_sums", "mean_vectors",
           "retire_unproduced", "subgraph_csr"]



class AugmentFailure(NodeRAGError, RuntimeError):
    """LLM augmentation failed for some items after retries; the message names them."""


@dataclass(frozen=True)
class Adjacency:
    csr: CSR

    def neighbors(self, v: int) -> np.ndarray:
        return self.csr.indices[self.csr.indptr[v]:self.csr.indptr[v + 1]]

    def weights(self, v: int) -> np.ndarray:
        return self.csr.weights[self.csr.indptr[v]:self.csr.indptr[v + 1]]


def subgraph_csr(n: int, types: np.ndarray, src: np.ndarray, dst: np.ndarray, w: np.ndarray,
                 keep_types: Sequence[int]) -> CSR:
    """Symmetric CSR over all ``n`` nodes with only the edges whose two ends have a type in ``keep_types``."""
    keep = np.zeros(7, dtype=bool)
    keep[list(keep_types)] = True
    m = keep[types[src]] & keep[types[dst]]
    return csr_from_coo(n, src[m], dst[m], w[m], symmetric=True)


def budget_join_count(texts: Sequence[str], budget: int) -> tuple[str, int]:
    """Join leading ``texts`` within ``budget`` tokens (at least one); return (text, how many)."""
    from ..tokenize import count_tokens

    out: list[str] = []
    used = 0
    for t in texts:
        n = count_tokens(t)
        if out and used + n > budget:
            break
        out.append(t)
        used += n
        if used >= budget:
            break
    return " ".join(out), len(out)


def mean_vectors(groups: Sequence[Sequence[int]], vectors_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Unit-norm mean vector of each group of node ids (the vector of an extractive summary)."""
    out = []
    for g in groups:
        v = vectors_of(np.asarray(g, dtype=np.int64)).mean(axis=0)
        out.append(v / max(float(np.linalg.norm(v)), 1e-12))
    return np.asarray(out, dtype=np.float32)


def column_sums(rows, cols: np.ndarray) -> np.ndarray:
    """Sum of each column ``cols`` (ascending ids) over the sparse CSR rows ``rows``, float64.

    ``rows[:, cols].sum(axis=0)`` without scipy's column indexing, which allocates an array as
    long as the matrix is wide (2M columns at 10^5 passages) for every call: 16 MB per community.
    """
    pos = np.searchsorted(cols, rows.indices)
    hit = pos < cols.size
    hit[hit] = cols[pos[hit]] == rows.indices[hit]
    return np.bincount(pos[hit], weights=np.asarray(rows.data, dtype=np.float64)[hit], minlength=cols.size)


#: Vectors read at a time for a community's centroid and similarities (the largest communities hold
#: 10^5 units at 10^5 passages: reading them at once took a 150 MB float32 copy).
VECTOR_BLOCK = 8192


def block_mean(ids: np.ndarray, vectors_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """The float32 mean of ``vectors_of(ids)``, reading ``VECTOR_BLOCK`` vectors at a time.

    The sum runs in float64 and the mean is rounded to float32 once, so it does not depend on the block size
    or on the order NumPy adds in (pairwise for one contiguous column, row after row otherwise) wherever the
    float64 sums are exact: float16-rounded vectors with components in [-1, 1] are multiples of 2^-24 below
    2, so any count under 2^28 rows sums exactly. Other float32 vectors can differ by one float32 rounding
    step where a float64 rounding error crosses a float32 rounding boundary (tested: at most 1 ulp).
    """
    acc = np.zeros(0 if not ids.size else vectors_of(ids[:1]).shape[1], np.float64)
    for b in range(0, ids.size, VECTOR_BLOCK):
        acc += vectors_of(ids[b:b + VECTOR_BLOCK]).sum(axis=0, dtype=np.float64)
    return (acc / ids.size).astype(np.float32)


def block_sims(ids: np.ndarray, vectors_of: Callable[[np.ndarray], np.ndarray], v: np.ndarray) -> np.ndarray:
    """Dot product of each vector of ``ids`` with ``v``, ``VECTOR_BLOCK`` vectors at a time.

    ``einsum``, not ``@``: BLAS's matrix-vector product rounds a row differently with the row count
    and its thread count (1 and 2 OpenBLAS threads gave other bits), so ties in the ranking could
    depend on the machine; einsum computes each row alone.
    """
    if ids.size == 0:
        return np.zeros(0, np.float32)
    return np.concatenate([np.einsum("ij,j->i", vectors_of(ids[b:b + VECTOR_BLOCK]), v)
                           for b in range(0, ids.size, VECTOR_BLOCK)])


def retire_unproduced(table: NodeTable, produced: set[int]) -> int:
    """Mark every A/H/O node not in ``produced`` inactive; return how many were retired."""
    types = table.types_array()
    count = 0
    for i in np.flatnonzero(np.isin(types, (A, H, O))).tolist():
        if i not in produced and table.active[i]:
            table.active[i] = False
            count += 1
    return count
