"""One writer per index: an exclusive ``fcntl.flock`` on ``INDEX/.writer.lock``.

The kernel drops a flock when its holder exits, however it exits (SIGKILL
included), so a lock left by a killed writer is simply taken over by the next
one: there is no stale state to detect by guesswork. The file also records the
holder's pid, host and start time so a second writer's error can name it.
The lock file itself is never removed (removing it would let two writers lock
two different inodes).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import time
from pathlib import Path

from .layout import LOCK_FILE
from ..errors import NodeRAGError

__all__ = ["LOCK_FILE", "BACKGROUND", "IndexLockedError", "WriterLock", "current_writer"]



class IndexLockedError(NodeRAGError, RuntimeError):
    """Another process is writing the index (build, insert or delete)."""


#: The role a background compaction (:mod:`noderag.indexing.update.background`) records: any other writer preempts it.
BACKGROUND = "background compaction"
#: Seconds a writer waits for a preempted background compaction to let go of the lock.
PREEMPT_WAIT_S = 60.0


def _holder_info(fd: int) -> dict:
    """What the holder recorded in the lock file ({} when it cannot be read)."""
    try:
        raw = os.pread(fd, 4096, 0)
        info = json.loads(raw.decode("utf-8")) if raw else {}
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


def _holder(fd: int) -> str:
    """'pid N on HOST since TIME' from the lock file, or 'another process' when it cannot be read."""
    info = _holder_info(fd)
    try:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info["since"])))
        role = f" ({info['role']})" if info.get("role") else ""
        return f"pid {int(info['pid'])} on {info['host']} since {since}{role}"
    except (KeyError, TypeError, ValueError):
        return "another process"


def _preempt(info: dict) -> bool:
    """Stop the background compaction that holds the lock (its process group: it runs in a session of its
    own, with any worker it started); True when a signal was sent."""
    if info.get("role") != BACKGROUND or info.get("host") != socket.gethostname():
        return False
    try:
        pid = int(info["pid"])
        if os.getpgid(pid) != pid:  # not the session leader we started: leave it alone
            return False
        os.killpg(pid, signal.SIGTERM)
    except (KeyError, TypeError, ValueError, ProcessLookupError, PermissionError):
        return False
    return True


def current_writer(root: str | os.PathLike) -> dict | None:
    """What the writer of the index in ``root`` recorded (pid, host, since, role), or None when none runs.

    For display only (``noderag stats``): it reads the lock file and checks that the pid lives on this
    host, without taking the lock, so it never delays a writer."""
    try:
        fd = os.open(Path(root) / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        info = _holder_info(fd)
    finally:
        os.close(fd)
    try:
        if info.get("host") != socket.gethostname():
            return info or None  # another host's writer: cannot be checked from here
        os.kill(int(info["pid"]), 0)
    except (KeyError, TypeError, ValueError, ProcessLookupError):
        return None
    except PermissionError:
        pass
    return info


class WriterLock:
    """Exclusive writer lock of the index in ``root`` (a context manager).

    Parameters
    ----------
    root : index directory (created when missing)
    wait : float or None, default=None
        Seconds to wait for a running writer to finish; None or 0 fails at once.
    poll : float, default=0.1
        Seconds between attempts while waiting.
    role : str or None, default=None
        Recorded for other writers; :data:`BACKGROUND` marks a background compaction, which any other
        writer stops (SIGTERM to its process group) and then waits up to :data:`PREEMPT_WAIT_S` for.
    """

    def __init__(self, root: str | os.PathLike, *, wait: float | None = None, poll: float = 0.1,
                 role: str | None = None) -> None:
        if wait is not None and wait < 0:
            raise ValueError(f"wait must be >= 0 seconds, got {wait}")
        self.root = Path(root)
        self.wait = float(wait or 0.0)
        self.poll = float(poll)
        self.role = role
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        return self.root / LOCK_FILE

    def acquire(self) -> "WriterLock":
        """Take the lock or raise :class:`IndexLockedError` naming the holder."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path}: already held by this object")
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)  # less the umask
        deadline = time.monotonic() + self.wait
        preempted = False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    if self._still_linked(fd):
                        break
                    # the holder removed the folder of its failed first build (lock file included)
                    # while we waited: this lock is on a dead file; lock the one at the path now
                    os.close(fd)
                    self.root.mkdir(parents=True, exist_ok=True)
                    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)  # less the umask
                except BlockingIOError:
                    if self.role != BACKGROUND and not preempted and _preempt(_holder_info(fd)):
                        preempted = True  # a background compaction yields to every other writer
                        deadline = max(deadline, time.monotonic() + PREEMPT_WAIT_S)
                    if time.monotonic() >= deadline:
                        waited = f" (waited {self.wait:g} s)" if self.wait else ""
                        raise IndexLockedError(
                            f"{self.root}: the index is being written by {_holder(fd)}{waited}; "
                            "wait for it to finish or pass --wait SECONDS") from None
                    time.sleep(self.poll)
            info = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
                               **({"role": self.role} if self.role else {})})
            os.ftruncate(fd, 0)
            os.pwrite(fd, info.encode("utf-8"), 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def _still_linked(self, fd: int) -> bool:
        """True when ``fd`` is the file now at :attr:`path` (not one unlinked since it was opened)."""
        try:
            return os.fstat(fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        """Drop the lock (the file stays, emptied)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> "WriterLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
