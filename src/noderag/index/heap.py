"""Hand the memory a build stage freed back to the operating system (glibc; a no-op elsewhere).

A build frees millions of objects and large arrays stage by stage. glibc keeps freed heap pages
for reuse and, after a large array is freed, raises its mmap threshold (up to 32 MiB), so later
arrays land in the heap too and fragment it. At 10^5 passages these kept the build's peak RSS
~0.5 GB above what it held (3.03 GB against 2.47 GB with both remedies below).
"""

from __future__ import annotations

import ctypes
import sys
from contextlib import contextmanager

__all__ = ["trim", "large_blocks_mapped"]

_M_MMAP_THRESHOLD = -3  # mallopt parameter (malloc.h)
_DEFAULT_MMAP_THRESHOLD = 128 * 1024


def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        lib = ctypes.CDLL(None)
    except OSError:
        return None
    return lib if hasattr(lib, "malloc_trim") and hasattr(lib, "mallopt") else None  # musl has neither


_LIBC = _glibc()


def trim() -> None:
    """Return the free pages of every malloc arena to the OS (``malloc_trim(0)``)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


@contextmanager
def large_blocks_mapped(threshold: int = 256 * 1024):
    """While it runs, allocations of ``threshold`` bytes or more get their own mappings (freed whole).

    Afterwards the threshold is glibc's default again, held fixed (glibc's own adjustment of it
    stays off once it has been set).
    """
    if _LIBC is None:
        yield
        return
    _LIBC.mallopt(_M_MMAP_THRESHOLD, int(threshold))
    try:
        yield
    finally:
        _LIBC.mallopt(_M_MMAP_THRESHOLD, _DEFAULT_MMAP_THRESHOLD)
