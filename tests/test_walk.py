"""The native typed-neighbour gather against its numpy reference, on random graphs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderag.graph.csr import csr_from_coo
from noderag.graph.walk import TypedNeighbours


def typed_neighbours_reference(indptr, indices, types, active, nodes, node_type: int) -> tuple[np.ndarray, np.ndarray]:
    """The same gather in numpy (one vectorised pass, the searcher's before the kernel)."""
    nodes = np.asarray(nodes, dtype=np.int64)
    starts = np.asarray(indptr)[nodes].astype(np.int64)
    lens = np.asarray(indptr)[nodes + 1].astype(np.int64) - starts
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    owner = np.repeat(np.arange(nodes.size), lens)
    offsets = np.cumsum(lens) - lens
    nb = np.asarray(indices)[starts[owner] + (np.arange(total) - offsets[owner])].astype(np.int64)
    keep = (np.asarray(types)[nb] == node_type) & np.asarray(active, dtype=bool)[nb]
    return owner[keep], nb[keep]


@st.composite
def graphs(draw):
    n = draw(st.integers(1, 40))
    m = draw(st.integers(0, 120))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = src != dst
    csr = csr_from_coo(n, src[keep], dst[keep], np.ones(int(keep.sum())))
    types = rng.integers(0, 7, n).astype(np.uint8)
    active = rng.random(n) < 0.8
    nodes = rng.integers(0, n, draw(st.integers(0, 12)))
    return csr, types, active, nodes, draw(st.integers(0, 6))


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_native_gather_equals_the_numpy_reference(case):
    csr, types, active, nodes, node_type = case
    walk = TypedNeighbours(csr.indptr, csr.indices, types, active)
    got = walk(nodes, node_type)
    want = typed_neighbours_reference(csr.indptr, csr.indices, types, active, nodes, node_type)
    for g, w in zip(got, want):
        assert g.dtype == np.int64 and g.tolist() == w.tolist()


def test_arrays_and_node_ids_are_checked():
    csr = csr_from_coo(3, np.array([0, 1]), np.array([1, 2]), np.ones(2))
    types, active = np.zeros(3, np.uint8), np.ones(3, bool)
    walk = TypedNeighbours(csr.indptr, csr.indices, types, active)
    assert walk([1], 0)[1].tolist() == [0, 2]
    with pytest.raises(IndexError, match=r"\[0, 3\)"):
        walk([3], 0)
    with pytest.raises(IndexError):
        walk([-1], 0)
    with pytest.raises(ValueError, match="CSR of 3 nodes"):
        TypedNeighbours(csr.indptr, csr.indices, types, active[:2])
    from noderag._core import typed_neighbours

    with pytest.raises(TypeError):  # the kernel takes no converted copies
        typed_neighbours(csr.indptr.astype(np.int16), csr.indices, types, active, np.array([0]), 0)
    # int32 offsets (a mapped graph's compact form) are read in place, with the same result
    compact = TypedNeighbours(csr.indptr.astype(np.int32), csr.indices, types, active)
    assert compact.indptr.dtype == np.int32
    assert compact([1], 0)[1].tolist() == [0, 2]


def test_damaged_rows_raise_instead_of_reading_out_of_bounds():
    types, active = np.zeros(3, np.uint8), np.ones(3, bool)
    bad_ids = TypedNeighbours(np.array([0, 1, 2, 2]), np.array([1, 7], np.int32), types, active)
    assert bad_ids([0], 0)[1].tolist() == [1]  # row 0 is sound
    with pytest.raises(ValueError, match="row 1 is damaged"):
        bad_ids([0, 1], 0)
    from noderag._core import typed_neighbours

    bad_ptr = np.array([0, 5, 2, 2], np.int64)  # row 0 ends past the edges, row 1 runs backwards
    for node in (0, 1):
        with pytest.raises(ValueError, match=f"row {node} is damaged"):
            typed_neighbours(bad_ptr, np.array([1, 2], np.int32), types, active, np.array([node]), 0)
