"""Typed neighbour gathers over a CSR layer, for the query-time graph walks (the native kernel).

A query's bridging round asks, many times over, for the neighbours of a few nodes that have one
node type and are active (units of a passage, entities of those units, units of those entities).
Each ask is a handful of numpy calls in Python; :func:`noderag._core.typed_neighbours` does it in
one pass. The arrays are checked once here; the kernel checks the node ids of every call.
"""

from __future__ import annotations

import numpy as np

from .._core import typed_neighbours

__all__ = ["TypedNeighbours"]


class TypedNeighbours:
    """Active neighbours of one type of many nodes at once, over fixed CSR arrays.

    Parameters
    ----------
    indptr, indices : ndarray
        The layer's CSR structure (int64 or int32 of shape (n + 1,), int32 in [0, n)); memory-mapped arrays of
        these dtypes are used in place. Each row a call reads is checked (offsets and column ids; a damaged one
        raises ``ValueError``).
    types : ndarray of uint8, shape (n,)
    active : ndarray of bool, shape (n,)
    """

    def __init__(self, indptr, indices, types, active) -> None:
        indptr = np.asarray(indptr)  # int32: a mapped graph's compact form, used in place (the kernel takes both)
        self.indptr = np.ascontiguousarray(indptr, dtype=indptr.dtype if indptr.dtype == np.int32 else np.int64)
        self.indices = np.ascontiguousarray(indices, dtype=np.int32)
        self.types = np.ascontiguousarray(types, dtype=np.uint8)
        self.active = np.ascontiguousarray(active, dtype=bool)
        n = self.types.shape[0]
        if self.indptr.shape != (n + 1,) or self.active.shape != (n,) or self.indices.ndim != 1:
            raise ValueError(f"CSR of {n} nodes expected: indptr {self.indptr.shape}, indices {self.indices.shape}, "
                             f"active {self.active.shape}")
        if n and int(self.indptr[-1]) != self.indices.shape[0]:
            raise ValueError(f"indptr ends at {int(self.indptr[-1])}, indices has {self.indices.shape[0]} entries")
        self.n = n

    def __call__(self, nodes, node_type: int) -> tuple[np.ndarray, np.ndarray]:
        """(position in ``nodes`` of each neighbour's owner, neighbour ids), both int64, grouped by owner in
        adjacency order."""
        nodes = np.ascontiguousarray(nodes, dtype=np.int64).reshape(-1)
        # the kernel raises IndexError for a node id outside [0, n)
        return typed_neighbours(self.indptr, self.indices, self.types, self.active, nodes, int(node_type))

