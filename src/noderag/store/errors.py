"""The store's errors: an index that is missing, damaged, or has lost its generation pointer."""

from __future__ import annotations

import os

from .layout import CURRENT, GENERATIONS
from ..errors import NodeRAGError

__all__ = ["IndexNotFoundError", "IndexDamagedError", "IndexPointerError"]



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
