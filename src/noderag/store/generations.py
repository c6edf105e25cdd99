"""Generations of an index: every build, insert or delete commits a new folder and switches one pointer.

Layout::

    INDEX/CURRENT                    the live generation's number (one line)
    INDEX/generations/N/             one complete, immutable index (manifest.json, nodes.parquet, ...)
    INDEX/generations/N/.readers     flock'ed shared by every reader that has generation N open
    INDEX/.writer.lock               the writer lock (noderag.store.lock)
    INDEX/stages/                    the unfinished work of a running (or killed) writer
    INDEX/llm_cache.sqlite           the LLM response cache (shared by the generations)

Commit (the writer, under the writer lock): the finished staging folder is fsynced and
renamed to ``generations/N`` in one ``os.replace``, then ``CURRENT`` is replaced atomically
(temp file, fsync, rename, fsync of the directory). A writer killed before the switch
leaves ``CURRENT`` on the previous generation, which is untouched; the orphan folder (its manifest's run id
is the one ``stages/run.json`` names) is removed by the next writer, ``gc`` and ``repair``.

Readers (:func:`pin`) resolve ``CURRENT`` once and hold a shared ``flock`` on that
generation's ``.readers`` file until they close, so every lazy load reads one generation.

Removal rule: before and after every commit the writer removes each generation other than
the current one whose ``.readers`` file it can lock exclusively without waiting, i.e. that
no open reader pins (a reader that exits or is killed drops its lock with its process). A
pinned generation stays on disk until a later writer finds it free. The folder is first
renamed out of ``generations/`` under the exclusive lock, so a reader racing the removal
sees the name gone and retries with the new ``CURRENT``. ``flock`` needs a local
filesystem (NFS does not honour it reliably). The newest complete generation is never removed,
even when ``CURRENT`` names an older one.

A damaged pointer never costs a generation: a folder that holds generations but no valid
``CURRENT`` (missing, not a number, or naming a generation that does not exist) raises
:class:`IndexPointerError` naming the newest complete generation, for readers, writers and
``gc`` alike; ``noderag repair`` (:func:`repair_pointer`) points ``CURRENT`` at the newest
generation that passes the full check. The one exception is the first build killed between
renaming its folder into place and writing ``CURRENT``: its ``stages/run.json`` names the run of
that generation, so readers see an unfinished build and the next writer completes the switch.

Temporary files of a killed commit (``.CURRENT.*.tmp``) and trash folders are removed by the
next writer, ``gc`` and ``repair``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .layout import CURRENT, GENERATIONS, MANIFEST, READERS
from ..graph.storage import atomic_write_bytes, fsync_dir

from .errors import IndexDamagedError, IndexPointerError

__all__ = [CURRENT, "GENERATIONS", "READERS", "IndexPointerError", "Pin", "current_generation", "current_path",
           "generation_path", "pin", "commit_generation", "collect_garbage", "remove_old_generations", "fsync_tree",
           "newest_complete", "finish_pending_switch", "remove_temp_files", "orphan_generations", "pending_run_id", "discard_stages"]

_TRASH_PREFIX = ".trash-"


_NUMBER = re.compile(r"[0-9]{1,18}")
_RUN_JSON = Path("stages") / "run.json"


def generation_path(root: str | os.PathLike, gen: int) -> Path:
    """Folder of generation ``gen`` of the index in ``root``."""
    return Path(root) / GENERATIONS / str(int(gen))


def manifest_of(folder: Path) -> dict | None:
    """The parsed manifest of a generation folder, or None when it is missing or unreadable."""
    try:
        data = json.loads((folder / MANIFEST).read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def newest_complete(root: str | os.PathLike) -> int | None:
    """The newest generation of ``root`` whose manifest reads as complete (a cheap check: the manifest only)."""
    root = Path(root)
    for n in reversed(generation_numbers(root)):
        m = manifest_of(generation_path(root, n))
        if m is not None and m.get("state") == "complete":
            return n
    return None


def pending_first_switch(root: Path, nums: list[int]) -> bool:
    """True when ``root`` is a first build killed between renaming its folder into place and writing ``CURRENT``.

    Then ``stages/run.json`` (removed only after a commit) names the run of every generation folder there.
    """
    try:
        run = json.loads((root / _RUN_JSON).read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    run_id = run.get("run_id") if isinstance(run, dict) else None
    if not run_id or not nums:
        return False
    return all((manifest_of(generation_path(root, n)) or {}).get("run_id") == run_id for n in nums)


def pending_run_id(root: Path) -> str | None:
    """The run id in ``stages/run.json`` (the unfinished or killed writer's run), or None."""
    try:
        run = json.loads((root / _RUN_JSON).read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    run_id = run.get("run_id") if isinstance(run, dict) else None
    return run_id if isinstance(run_id, str) and run_id else None


def orphan_generations(root: Path, cur: int | None) -> list[int]:
    """Generations a writer renamed into place but never switched to: numbered above ``CURRENT``, made by the
    run ``stages/run.json`` names (a kill between the rename and the switch). No reader ever saw them."""
    run_id = pending_run_id(root)
    if cur is None or run_id is None:
        return []
    return [n for n in generation_numbers(root)
            if n > cur and (manifest_of(generation_path(root, n)) or {}).get("run_id") == run_id]


def read_pointer(root: Path) -> str | None:
    """The stripped text of ``root/CURRENT``, or None when it does not exist."""
    try:
        raw = (root / CURRENT).read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise IndexPointerError(root, f"{CURRENT}: is a directory, not a pointer file", newest_complete(root)) \
            from None
    return raw.decode("utf-8", "replace").strip()


def current_generation(root: str | os.PathLike) -> int | None:
    """The number in ``root/CURRENT``, or None when the index has no committed generation.

    Raises :class:`IndexPointerError` when the folder holds generations but ``CURRENT`` is missing,
    is not a number, or names a generation folder that does not exist (unless a writer switched
    meanwhile: the pointer is read again before it is called dangling).
    """
    root = Path(root)
    text = read_pointer(root)
    for _ in range(100):
        if text is None:
            nums = generation_numbers(root)
            if not nums or pending_first_switch(root, nums):
                return None
            raise IndexPointerError(root, f"{CURRENT}: missing, but {GENERATIONS}/ holds generation(s) "
                                    f"{', '.join(map(str, nums[-5:]))}", newest_complete(root))
        if not _NUMBER.fullmatch(text):
            raise IndexPointerError(root, f"{CURRENT}: expected a generation number, found {text[:40]!r} "
                                    "(a malformed pointer)", newest_complete(root))
        gen = int(text)
        if generation_path(root, gen).is_dir():
            return gen
        again = read_pointer(root)  # a writer may have switched and removed the old folder meanwhile
        if again == text:
            raise IndexPointerError(root, f"{CURRENT}: names generation {gen}, which does not exist "
                                    f"(no folder {GENERATIONS}/{gen})", newest_complete(root))
        text = again
    raise IndexPointerError(root, f"{CURRENT}: keeps changing (writers switching too fast?)", newest_complete(root))


def current_path(root: str | os.PathLike) -> Path:
    """Folder of the current generation of the index in ``root`` (a peek for tools and tests: unpinned)."""
    gen = current_generation(root)
    if gen is None:
        raise FileNotFoundError(f"{root}: no committed generation (no {CURRENT} pointer)")
    return generation_path(root, gen)


def fsync_tree(folder: Path, durable: frozenset[str] = frozenset()) -> None:
    """Fsync every file and directory under ``folder`` (bottom-up), so a rename of it is durable with its content.

    ``durable``: files (relative POSIX paths) known to be on disk already, e.g. hard links of a committed
    generation's files: their directory entries are synced, their data is not read again.
    """
    for dirpath, _dirnames, filenames in os.walk(folder, topdown=False):
        for name in filenames:
            p = os.path.join(dirpath, name)
            if os.path.islink(p) or (durable and Path(p).relative_to(folder).as_posix() in durable):
                continue
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


def generation_numbers(root: Path) -> list[int]:
    gdir = root / GENERATIONS
    if not gdir.is_dir():
        return []
    return sorted(int(p.name) for p in gdir.iterdir() if p.name.isdigit() and p.is_dir())


def commit_generation(root: str | os.PathLike, staged: str | os.PathLike,
                      before_switch: Callable[[], None] | None = None, durable: frozenset[str] = frozenset()) -> int:
    """Make the finished folder ``staged`` the next generation of ``root`` and point ``CURRENT`` at it.

    Call with the writer lock held. Returns the new generation number: one more than the
    current one and any folder left, so no number a reader may have pinned is used again
    (only an orphan's, which no reader ever saw, after it was removed).
    ``before_switch`` runs after the rename and before the pointer switch (fault injection);
    ``durable``: files of ``staged`` already on disk (hard links of a committed generation's).
    """
    root, staged = Path(root), Path(staged)
    cur = current_generation(root)
    gen = max(generation_numbers(root) + [cur or 0]) + 1
    (staged / READERS).write_bytes(b"")
    fsync_tree(staged, durable)
    gdir = root / GENERATIONS
    gdir.mkdir(exist_ok=True)
    dest = gdir / str(gen)
    os.replace(staged, dest)
    fsync_dir(gdir)
    fsync_dir(staged.parent)
    if before_switch is not None:
        before_switch()
    atomic_write_bytes(root / CURRENT, f"{gen}\n".encode("ascii"))
    return gen


def _try_remove(folder: Path, trash_name: str) -> bool:
    """Remove a generation folder unless a reader pins it; True when removed."""
    lock = folder / READERS
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        fd = None  # a folder without its reader file (killed before it was written): nobody can pin it
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
        trash = folder.parent / trash_name
        os.replace(folder, trash)  # readers that race us now find the name gone and retry
    finally:
        if fd is not None:
            os.close(fd)
    shutil.rmtree(trash, ignore_errors=True)
    return True


def remove_temp_files(root: str | os.PathLike) -> list[str]:
    """Remove what a killed commit or removal left: ``.CURRENT.*.tmp`` files and trash folders; call as the writer.

    Returns the names removed (relative to ``root``). Only the writer (under the writer lock) writes
    these, so none of them can belong to a running commit.
    """
    root = Path(root)
    gone = []
    for p in sorted(root.glob(f".{CURRENT}.*.tmp")):
        if p.is_file() and not p.is_symlink():
            p.unlink(missing_ok=True)
            gone.append(p.name)
    for p in sorted(root.glob(".stages-discarded-*")):  # a writer killed while discarding stages
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
            gone.append(p.name)
    gdir = root / GENERATIONS
    if gdir.is_dir():
        for p in sorted(gdir.iterdir()):
            if p.name.startswith(_TRASH_PREFIX):
                shutil.rmtree(p, ignore_errors=True)
                gone.append(f"{GENERATIONS}/{p.name}")
    if gone:
        fsync_dir(root)
    return gone


def discard_stages(root: str | os.PathLike) -> dict | None:
    """Discard what an unfinished (failed or killed) writer left in ``stages/``, with any generation it renamed
    into place but never switched to; call as the writer. Returns its ``run.json`` (None when nothing was there).

    Nothing under ``stages/`` was ever part of the index: the index stays its last committed generation.
    """
    root = Path(root)
    stages = root / _RUN_JSON.parent
    if not stages.exists():
        return None
    try:
        run = json.loads((root / _RUN_JSON).read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        run = None
    try:
        cur = current_generation(root)
    except IndexPointerError:
        cur = None  # a damaged pointer: no generation is judged an orphan
    gdir = root / GENERATIONS
    for n in orphan_generations(root, cur):
        _try_remove(gdir / str(n), f"{_TRASH_PREFIX}{n}")
    trash = root / f".stages-discarded-{os.getpid()}"
    os.replace(stages, trash)  # one rename: a kill mid-removal leaves no half of stages/ to be resumed
    shutil.rmtree(trash, ignore_errors=True)
    fsync_dir(root)
    return run if isinstance(run, dict) else {}


def finish_pending_switch(root: str | os.PathLike) -> int | None:
    """Complete the pointer switch of a first build killed right after renaming its folder into place.

    Call as the writer. Returns the generation ``CURRENT`` now names, or None when nothing was pending.
    """
    root = Path(root)
    nums = generation_numbers(root)
    if read_pointer(root) is not None or not pending_first_switch(root, nums):
        return None
    gen = nums[-1]
    (generation_path(root, gen) / READERS).touch(exist_ok=True)
    atomic_write_bytes(root / CURRENT, f"{gen}\n".encode("ascii"))
    return gen


def collect_garbage(root: str | os.PathLike) -> list[int]:
    """Remove every generation but the current one that no reader pins, temp files and trash; call as the writer.

    The newest complete generation is kept too, even when ``CURRENT`` names an older one, unless it is an
    orphan (:func:`orphan_generations`: renamed into place by a writer killed before its pointer switch).
    Raises :class:`IndexPointerError` (removing nothing) when the pointer is damaged.
    Returns the numbers of the generations removed.
    """
    root = Path(root)
    cur = current_generation(root)  # a damaged pointer: refuse before touching anything
    remove_temp_files(root)
    gdir = root / GENERATIONS
    if not gdir.is_dir():
        return []
    orphans = orphan_generations(root, cur)
    keep = {cur} | ({newest_complete(root)} - set(orphans))
    removed = []
    for n in generation_numbers(root):
        if n not in keep and _try_remove(gdir / str(n), f"{_TRASH_PREFIX}{n}"):
            removed.append(n)
    if removed:
        fsync_dir(gdir)
    return removed


def remove_old_generations(root: str | os.PathLike, *, wait: float | None = None) -> tuple[list[int], list[int]]:
    """Take the writer lock and remove the old generations no reader pins (``noderag gc``).

    Returns (removed, still pinned). Useful after a delete when the old generation, which still
    holds the deleted text, was pinned by a reader that has since closed.
    """
    from .lock import WriterLock

    root = Path(root)
    with WriterLock(root, wait=wait):
        removed = collect_garbage(root)
        cur = current_generation(root)
        keep = {cur} | ({newest_complete(root)} - set(orphan_generations(root, cur)))
        left = [n for n in generation_numbers(root) if n not in keep]
    return removed, left


@dataclass
class Pin:
    """A reader's hold on one generation: ``path`` stays complete until :meth:`close` (or process exit)."""

    root: Path
    generation: int
    path: Path
    _fd: int | None = None

    def close(self) -> None:
        """Drop the shared lock (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    @property
    def closed(self) -> bool:
        return self._fd is None


def pin(root: str | os.PathLike, *, attempts: int = 1000) -> Pin | None:
    """Resolve ``CURRENT`` and hold a shared lock on that generation; None when there is none.

    Retries when a writer removed the generation between reading the pointer and locking
    (which needs ``CURRENT`` to have moved on, so the loop ends).
    """
    root = Path(root)
    for _ in range(attempts):
        gen = current_generation(root)
        if gen is None:
            return None
        path = generation_path(root, gen)
        lock = path / READERS
        try:
            fd = os.open(lock, os.O_RDONLY)
        except FileNotFoundError:
            if current_generation(root) == gen:
                raise IndexDamagedError(root, f"{GENERATIONS}/{gen}/{READERS}", "missing file",
                                        "the current generation's reader file; `noderag repair` restores it") \
                    from None
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # a writer holds it exclusively only while renaming the folder away
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            p = Pin(root, gen, path, fd)
            return p
        os.close(fd)
    raise RuntimeError(f"{root}: could not pin a generation after {attempts} attempts (writers switching too fast?)")


def pin_finalizer(owner: object, p: Pin) -> None:
    """Release ``p`` when ``owner`` is garbage-collected."""
    weakref.finalize(owner, p.close)
