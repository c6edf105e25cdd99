"""The store's errors: an index that is missing, damaged, or has lost its generation pointer."""

from __future__ import annotations

import errno
import os

try:  # imported now: importing it once the descriptors have run out would fail too
    import resource
except ImportError:  # not on Windows
    resource = None

from .layout import CURRENT, GENERATIONS
from ..errors import NodeRAGError

__all__ = ["IndexNotFoundError", "IndexDamagedError", "IndexPointerError", "TooManyOpenFilesError", "fd_exhaustion"]



class IndexNotFoundError(NodeRAGError, FileNotFoundError):
    """The directory holds no finished index."""


class IndexDamagedError(NodeRAGError, ValueError):
    """An index file is missing, truncated, altered or inconsistent; ``file`` is its path in the index."""

    def __init__(self, root: str | os.PathLike, file: str, problem: str, detail: str = "") -> None:
        self.root = str(root)
        self.file = file
        self.problem = problem
        detail = " ".join("".join(c if c.isprintable() else " " for c in detail).split())  # one clean line
        extra = f" ({detail})" if detail else ""
        super().__init__(f"{root}: {problem} in {file}{extra}; the index is damaged: run `noderag verify` for a "
                         "full check, then rebuild it or restore a copy")


class IndexPointerError(IndexDamagedError):
    """The index folder holds generations but no valid ``CURRENT`` pointer; ``newest`` is the newest
    complete generation (None when none is left). Every command refuses such a folder; ``noderag repair``
    restores the pointer."""

    def __init__(self, root: str | os.PathLike, problem: str, newest: int | None) -> None:
        self.root = str(root)
        self.file = CURRENT
        self.problem = problem
        self.newest = newest
        if newest is None:
            tail = "no complete generation is left: rebuild the index or restore a copy"
        else:
            tail = (f"the newest complete generation is {newest} ({GENERATIONS}/{newest}): run `noderag repair "
                    f"{root}` to point {CURRENT} at the newest generation that passes the full check")
        ValueError.__init__(self, f"{root}/{problem}; the index is damaged: {tail}")


class TooManyOpenFilesError(NodeRAGError, OSError):
    """The process ran out of file descriptors (EMFILE/ENFILE) while reading an index: not damage."""


_FD_ERRNOS = (errno.EMFILE, errno.ENFILE)
_FD_TEXTS = ("Too many open files", f"[Errno {errno.EMFILE}]", f"[Errno {errno.ENFILE}]")


def fd_exhaustion(exc: BaseException, root: str | os.PathLike, file: str) -> TooManyOpenFilesError | None:
    """The :class:`TooManyOpenFilesError` to raise instead of calling ``exc`` (an error reading ``file`` of the
    index in ``root``) damage, when ``exc`` is the process running out of file descriptors; else None.

    Readers in C++ (pyarrow, usearch) report it in their message only, hence the text match."""
    if isinstance(exc, TooManyOpenFilesError):
        return exc
    text = str(exc)
    if getattr(exc, "errno", None) not in _FD_ERRNOS and not any(t in text for t in _FD_TEXTS):
        return None
    try:
        limit = f" of {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}" if resource is not None else ""
    except (OSError, ValueError):
        limit = ""
    err = TooManyOpenFilesError(f"{root}: too many open files: this process reached its limit{limit} open files "
                                f"(ulimit -n) while reading {file}; the index is not damaged: raise the limit "
                                "or open fewer indexes at once")
    err.errno = errno.EMFILE
    return err
