"""Background compaction: an insert past ``update.max_delta_share`` returns at once and a detached
process compacts the index afterwards (``update.compaction = "background"``).

The writer that leaves the deltas over the share starts ``python -m noderag.indexing.update.compact INDEX --background SHARE``
in a session of its own, at low CPU priority, with its output appended to ``INDEX/compaction.log``.
That process takes the writer lock as a :data:`~noderag.store.lock.BACKGROUND` writer, checks under
the lock that the compaction is still due (another one may have run) and merges the deltas
(:func:`noderag.indexing.update.compact.compact_index`, ``merge``). Readers go on reading the generation they
opened. Any other writer that comes meanwhile stops it (:class:`~noderag.store.lock.WriterLock`), drops
its unfinished stages and, if the deltas are still over the
share when it is done, starts a new one: merges never delay a write, as in Lucene's merge scheduler.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["LOG", "LOCK_WAIT_S", "NICENESS", "start_background_compaction", "process_running", "wait_for_process"]

#: The background compactions' log, in the index directory (appended to).
LOG = "compaction.log"
#: Seconds a background compaction waits for the writer lock before leaving it to that writer.
LOCK_WAIT_S = 30.0
NICENESS = 10


# started through a short-lived intermediate so that the compaction is nobody's child: it outlives the
# writer, and no process has to reap it
_DETACH = ("import subprocess, sys; p = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, "
           "stdout=open(sys.argv[1], 'ab'), stderr=subprocess.STDOUT, start_new_session=True, close_fds=True); "
           "print(p.pid)")


def start_background_compaction(root: str | os.PathLike, *, max_delta_share: float,
                                llm_spec: str | None = None) -> int:
    """Start a detached compaction of the index in ``root``; returns its pid (it outlives the caller)."""
    root = Path(root)
    cmd = [sys.executable, "-m", "noderag.indexing.update.compact", str(root), "--background", repr(max_delta_share)]
    if llm_spec:
        cmd += ["--llm", llm_spec]
    out = subprocess.run([sys.executable, "-W", "ignore::ResourceWarning", "-c", _DETACH, str(root / LOG), *cmd],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=True)
    return int(out.stdout.strip())


def process_running(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2:][:1] != "Z"


def wait_for_process(pid: int, timeout: float | None = None) -> bool:
    """Wait for process ``pid`` (a background compaction) to end; False on timeout."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while process_running(pid):
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
