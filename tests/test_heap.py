"""The build's heap remedies do what they claim on glibc: freed pages go back to the OS."""

import platform

import pytest

from noderag.indexing import heap

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim and mallopt are glibc's")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@glibc
def test_trim_returns_pages_freed_below_a_live_block():
    assert heap._LIBC is not None
    blocks = [bytes(2000) + bytes([i % 256]) for i in range(60_000)]  # ~120 MB of heap blocks (> pymalloc's 512 B)
    keep = blocks[-1]  # holds the top of the heap: free() alone cannot shrink it
    before = _rss()
    del blocks
    freed = _rss()
    heap.trim()
    after = _rss()
    assert keep[-1] == 59_999 % 256
    assert before - freed < 40e6 < freed - after  # free() kept the pages; trim returned them


def _freed_by_del(threshold: int) -> int:
    """RSS bytes that deleting 2,000 arrays of 320 KB gives back at once, under ``threshold``."""
    import numpy as np

    with heap.large_blocks_mapped(threshold):
        arrays = [np.ones(40_000, np.float64) for _ in range(2_000)]
        keep = np.ones(40_000)  # allocated last (no freed block fits it): holds the top of the heap
        before = _rss()
        del arrays
        freed = before - _rss()
    assert keep.sum() == 40_000
    heap.trim()
    return freed


@glibc
def test_large_blocks_mapped_gives_large_arrays_their_own_mapping():
    assert _freed_by_del(1 << 20) < 100e6  # below the threshold: heap blocks, kept by free()
    assert _freed_by_del(256 * 1024) > 400e6  # above it: each its own mapping, unmapped at once


def test_collector_paused_defers_cycles_and_restores_the_collector():
    import gc
    import weakref

    class Node:
        pass

    assert gc.isenabled()
    with heap.collector_paused():
        assert not gc.isenabled()
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        ref = weakref.ref(a)
        del a, b
        for _ in range(3):
            [Node() for _ in range(1000)]  # allocations that would trigger an automatic collection
        assert ref() is not None
    assert gc.isenabled() and ref() is None
    gc.disable()
    try:
        with heap.collector_paused():
            pass
        assert not gc.isenabled()  # a caller's paused collector stays paused
    finally:
        gc.enable()
