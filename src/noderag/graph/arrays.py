"""Small array helpers shared by the graph and index code."""

from __future__ import annotations

import numpy as np

__all__ = ["distinct"]


def distinct(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values of a 1-D array (``np.unique`` without options).

    By a sort and a neighbour compare: NumPy 2.3+ answers a plain ``np.unique`` of integers with a hash
    table, 10-20x slower on large arrays (5.3 s against 0.3 s for 3.9M int64 here).
    """
    out = np.sort(np.asarray(values).ravel())
    if out.size > 1:
        out = out[np.concatenate(([True], out[1:] != out[:-1]))]
    return out
