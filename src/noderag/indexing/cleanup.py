"""Clean-up after a failed first build: a folder that holds nothing built is removed (lock file last).

Only bookkeeping that a rerun recreates in seconds counts as "nothing built": the writer
lock, a manifest in state ``building`` and the run/stage/chunk tables under ``stages/``.
A decomposition journal, embeddings, finished files or a finished index are never removed:
a rerun resumes from them.
"""

from __future__ import annotations

from pathlib import Path

from ..store.lock import LOCK_FILE
from ..store.manifest import MANIFEST, read_manifest

__all__ = ["remove_if_nothing_built"]

_BOOKKEEPING = frozenset({LOCK_FILE, MANIFEST, "stages/run.json", "stages/state.json", "stages/chunks.json"})


def remove_if_nothing_built(root: str | Path) -> bool:
    """Remove the index folder ``root`` when it holds only bookkeeping of an unfinished first build.

    Call it with the writer lock held, only for a folder the failed run created. Returns
    True when the folder was removed. A writer waiting on the removed lock file notices
    (:class:`~noderag.store.lock.WriterLock` checks that its locked file is still linked).
    """
    root = Path(root)
    if not root.is_dir():
        return False
    entries = sorted(root.rglob("*"))
    files = [p for p in entries if not p.is_dir() or p.is_symlink()]
    if any(p.relative_to(root).as_posix() not in _BOOKKEEPING for p in files):
        return False
    try:
        manifest = read_manifest(root)
    except ValueError:  # unreadable: not ours to judge
        return False
    if manifest is not None and manifest.get("state") != "building":
        return False
    for p in files:
        if p.name != LOCK_FILE:
            p.unlink()
    for d in sorted((p for p in entries if p.is_dir() and not p.is_symlink()), key=lambda p: -len(p.parts)):
        d.rmdir()
    (root / LOCK_FILE).unlink(missing_ok=True)
    try:
        root.rmdir()
    except OSError:  # something appeared meanwhile: leave it
        return False
    return True
