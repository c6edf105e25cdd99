"""``noderag repair``: point ``CURRENT`` at the newest generation that passes the full check, and discard what an
unfinished writer left (``stages/`` and the generation it renamed into place but never switched to)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..graph.storage import atomic_write_bytes
from .errors import IndexDamagedError, IndexNotFoundError, IndexPointerError
from .generations import (current_generation, discard_stages, generation_numbers, generation_path, manifest_of, pending_first_switch,
                          read_pointer, remove_temp_files)
from .layout import CURRENT, GENERATIONS, READERS

__all__ = ["repair_pointer", "RepairReport"]


@dataclass
class RepairReport:
    """What :func:`repair_pointer` did: the generation ``CURRENT`` names now, whether it changed, the
    temporary files removed, and each newer generation skipped with why (one line each)."""

    generation: int
    changed: bool
    removed: list[str]
    skipped: list[str]
    before: str | None
    discarded: dict | None = None  # the ``stages/run.json`` of the unfinished run discarded ({}: unreadable)


def repair_pointer(root: str | os.PathLike, *, wait: float | None = None,
                   progress: Callable[[str], None] | None = None) -> RepairReport:
    """Point ``CURRENT`` at the newest generation that passes the full check (``noderag repair``).

    Under the writer lock: removes orphaned temporary files; discards an unfinished run's ``stages/`` (and a
    generation it renamed into place without switching to it) once the pointer is settled; keeps a valid ``CURRENT`` whose
    generation passes the full check; otherwise tries the generations newest first and switches
    the pointer to the first that passes. Raises :class:`IndexPointerError` when none passes, and
    :class:`~noderag.store.tables.IndexNotFoundError` when the folder holds no generation.
    """
    from .lock import WriterLock
    from .verify import verify_index

    root = Path(root)
    if not root.is_dir():
        raise IndexNotFoundError(f"{root}: no such index directory")
    with WriterLock(root, wait=wait):
        removed = remove_temp_files(root)
        nums = generation_numbers(root)
        if not nums:
            raise IndexNotFoundError(f"{root}: no {GENERATIONS}/ to repair from (not an index, or its first build "
                                     "never finished)")
        try:
            before = read_pointer(root)
        except IndexPointerError:
            before = "(a directory)"
            shutil.rmtree(root / CURRENT)
        try:
            cur = current_generation(root)
        except IndexPointerError:
            cur = None
        if cur is not None and not pending_first_switch(root, nums):
            order = [cur] + [n for n in reversed(nums) if n < cur]  # a valid pointer only ever moves back
        else:
            order = list(reversed(nums))
        skipped = []
        for n in order:
            folder = generation_path(root, n)
            m = manifest_of(folder)
            if m is None or m.get("state") != "complete":
                skipped.append(f"generation {n}: no complete manifest")
                continue
            try:
                verify_index(folder, "full", progress=progress)
            except IndexDamagedError as exc:
                skipped.append(f"generation {n}: {exc.problem} in {exc.file}")
                continue
            (folder / READERS).touch(exist_ok=True)  # a reader file lost with the pointer
            changed = cur != n or before is None or before != str(n)
            if changed:
                atomic_write_bytes(root / CURRENT, f"{n}\n".encode("ascii"))
            discarded = discard_stages(root)  # never committed: the index is the generation CURRENT names
            return RepairReport(n, changed, removed, skipped, before, discarded)
        raise IndexPointerError(root, f"{CURRENT}: no generation passes the full check "
                                f"({'; '.join(skipped[:5])})", None)


