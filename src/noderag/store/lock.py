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
import socket
import time
from pathlib import Path

from .layout import LOCK_FILE
from ..errors import NodeRAGError

__all__ = ["LOCK_FILE", "IndexLockedError", "WriterLock"]



class IndexLockedError(NodeRAGError, RuntimeError):
    """Another process is writing the index (build, insert or delete)."""


def _holder(fd: int) -> str:
    """'pid N on HOST since TIME' from the lock file, or 'another process' when it cannot be read."""
    try:
        raw = os.pread(fd, 4096, 0)
        info = json.loads(raw.decode("utf-8")) if raw else {}
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info["since"])))
        return f"pid {int(info['pid'])} on {info['host']} since {since}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


class WriterLock:
    """Exclusive writer lock of the index in ``root`` (a context manager).

    Parameters
    ----------
    root : index directory (created when missing)
    wait : float or None, default=None
        Seconds to wait for a running writer to finish; None or 0 fails at once.
    poll : float, default=0.1
        Seconds between attempts while waiting.
    """

    def __init__(self, root: str | os.PathLike, *, wait: float | None = None, poll: float = 0.1) -> None:
        if wait is not None and wait < 0:
            raise ValueError(f"wait must be >= 0 seconds, got {wait}")
        self.root = Path(root)
        self.wait = float(wait or 0.0)
        self.poll = float(poll)
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
                    if time.monotonic() >= deadline:
                        waited = f" (waited {self.wait:g} s)" if self.wait else ""
                        raise IndexLockedError(
                            f"{self.root}: the index is being written by {_holder(fd)}{waited}; "
                            "wait for it to finish or pass --wait SECONDS") from None
                    time.sleep(self.poll)
            info = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()})
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
