"""Whether a build may write into a folder: an index, an unfinished first build, an empty or a new folder.

A build writes ``CURRENT`` and ``generations/`` next to whatever the folder holds, so a folder of a user's
own files, or a folder inside an index (``my-index/generations``), is refused before anything is written.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import NodeRAGError
from .layout import CURRENT, GENERATIONS, LLM_CACHE, LOCK_FILE, MANIFEST, READERS, STAGES

__all__ = ["NotAnIndexFolderError", "check_index_folder", "INDEX_ENTRIES"]

#: what an index folder holds (the LLM cache also as SQLite's -wal/-shm/-journal companions, and each entry as
#: the ".NAME.*" temporary file a killed write leaves, which the next writer removes)
INDEX_ENTRIES = frozenset({CURRENT, GENERATIONS, LOCK_FILE, LLM_CACHE, STAGES, READERS,
                           "compaction.log"})  # a background compaction's output (indexing.update.background.LOG)
_OWN_PREFIXES = (LLM_CACHE + "-", *(f".{name}." for name in sorted(INDEX_ENTRIES)))


class NotAnIndexFolderError(NodeRAGError, ValueError):
    """The folder given as an index holds other files, or lies inside an index."""


def _is_index(folder: Path) -> bool:
    return (folder / CURRENT).is_file() and (folder / GENERATIONS).is_dir()


def check_index_folder(root: str | Path) -> None:
    """Raise :class:`NotAnIndexFolderError` unless ``root`` is an index, holds only an index's entries
    (an unfinished first build), is empty or does not exist yet."""
    root = Path(root)
    for above in list(root.absolute().parents)[:3]:
        if _is_index(above):
            raise NotAnIndexFolderError(f"{root}: inside the index {above}; give the index folder itself "
                                        "or a new folder")
    if not root.exists():
        return
    if not root.is_dir():
        raise NotAnIndexFolderError(f"{root}: not a folder; give a new or empty folder for the index")
    if (root / MANIFEST).is_file():  # an index of an earlier layout: the build's layout check says what to do
        return
    other = sorted(p.name for p in root.iterdir()
                   if p.name not in INDEX_ENTRIES and not p.name.startswith(_OWN_PREFIXES))
    if other:
        shown = ", ".join(other[:3]) + (f" and {len(other) - 3} more" if len(other) > 3 else "")
        raise NotAnIndexFolderError(f"{root}: not empty and not a noderag index (it holds {shown}); "
                                    "give a new or empty folder for the index")
