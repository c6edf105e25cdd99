"""Array helpers of noderag.graph.arrays against NumPy references."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=80, deadline=None)
@given(st.sets(st.integers(0, 400), max_size=60), st.sets(st.integers(0, 400), max_size=200))
def test_intersect_sorted_equals_intersect1d(a, b):
    from noderag.graph.arrays import intersect_sorted

    small, large = np.array(sorted(a), dtype=np.int64), np.array(sorted(b), dtype=np.int64)
    want = np.intersect1d(small, large, assume_unique=True)
    got = intersect_sorted(small, large)
    assert got.dtype == small.dtype and np.array_equal(got, want)
    assert np.array_equal(intersect_sorted(large, small), want)
