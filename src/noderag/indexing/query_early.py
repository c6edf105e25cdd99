"""The BM25 postings and context-line token counts of the query tables, made by a forked child while the
finalize stage makes the name index.

Those two tables are most of the query tables' CPU (:mod:`noderag.search.query_index`; at 10^5 passages
~7 and ~8 of ~23 CPU seconds, the name index ~7) and need nothing the name index needs, so once the vector
index is finished (the second core free again) a child forked from the build makes the postings and the
line counts of the nodes before the texts' middle byte from the written node texts (mapped pages, shared)
while the build makes the name index and the other line counts: the same files as making them all in one
process, moved into ``query/`` (:func:`~noderag.search.query_index.write_query_index`, ``early=``). Not forked
while the communities stage runs: the vector index's worker has the second core then (Leiden holds the GIL,
so no thread could use it either). A child that fails makes the build fail with its error.
"""

from __future__ import annotations

import gc
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from ..errors import BuildError

__all__ = ["EarlyTables", "fork_is_safe"]

#: The child's error (its traceback's last line), read by :meth:`EarlyTables.wait`.
ERROR_FILE = "error.txt"


def fork_is_safe() -> bool:
    """Whether this process may fork a child that runs Python: no other Python thread (a lock one holds would
    stay held in the child forever; tqdm's idle monitor thread, which the progress bars leave behind, is stopped
    first) and no Ray (its native threads would be copied): the query tables' own check, once the monitor is gone."""
    from ..search.query_index import _fork_is_safe

    _stop_progress_monitor()
    return _fork_is_safe()


def _stop_progress_monitor() -> None:
    """Stop tqdm's monitor thread (started by the first progress bar; it waits on an event between checks of the
    open bars) where one runs: the next bar starts another."""
    module = sys.modules.get("tqdm._monitor")
    if module is None:
        return
    for monitor in threading.enumerate():
        if isinstance(monitor, module.TMonitor) and monitor is not threading.current_thread():
            monitor.exit()  # sets its event and joins it
            if getattr(monitor.tqdm_cls, "monitor", None) is monitor:
                monitor.tqdm_cls.monitor = None


class EarlyTables:
    """A forked child writing the BM25 postings and the line token counts of the first ``nodes`` nodes into
    ``folder``.

    :meth:`wait` reaps it and returns the folder (a :class:`~noderag.errors.BuildError` naming its error when
    it failed); :meth:`cancel` kills it (a failed build). ``cpu_s``, ``maxrss_mb`` and ``wait_s``: the child's
    CPU seconds and peak resident memory, and how long the build waited for it, once reaped.
    """

    def __init__(self, pid: int, folder: Path, nodes: int) -> None:
        self.pid, self.folder, self.nodes = pid, folder, nodes
        self.cpu_s: float | None = None
        self.wait_s: float | None = None
        self.maxrss_mb: float | None = None
        self._code: int | None = None

    @classmethod
    def start(cls, index_dir: str | os.PathLike, folder: str | os.PathLike) -> "EarlyTables | None":
        """Fork the child for the base segment written in ``index_dir`` (its node and document tables), writing
        into ``folder`` (None where forking is not safe: :func:`write_query_index` then makes every table)."""
        if not fork_is_safe():
            return None
        folder = Path(folder)
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        from ..search.query_index import early_head

        n = early_head(index_dir)  # the child counts the lines of these nodes, the writer those of the rest
        gc.freeze()  # no collection in the parent writes to the pages both share while the child lives
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child (its coverage is not collected); leaves by os._exit only
            _child(Path(index_dir), folder, n)
        return cls(pid, folder, n)

    def wait(self) -> Path:
        """The folder of the finished tables, once the child has left (raises ``BuildError`` when it failed)."""
        if self._code is None:
            t0 = time.perf_counter()
            try:
                _, status, usage = os.wait4(self.pid, 0)
            finally:
                gc.unfreeze()
            self.wait_s = round(time.perf_counter() - t0, 2)
            self.cpu_s = round(usage.ru_utime + usage.ru_stime, 2)
            self.maxrss_mb = round(usage.ru_maxrss / 1024, 1)  # its pages shared with the build included
            self._code = os.waitstatus_to_exitcode(status)
        if self._code != 0:
            raise BuildError(f"query tables: the process making the passages' BM25 postings and line token counts "
                             f"beside the name index ended with status {self._code}: {self._error()}")
        return self.folder

    def cancel(self) -> None:
        """Stop the child (the build failed or is interrupted) and reap it."""
        if self._code is not None:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self._code = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        except ChildProcessError:
            self._code = -signal.SIGKILL
        gc.unfreeze()

    def _error(self) -> str:
        try:
            text = (self.folder / ERROR_FILE).read_text("utf-8").strip()
        except OSError:
            return "no error recorded (killed?)"
        return text.splitlines()[-1] if text else "no error recorded"


def _child(index_dir: Path, folder: Path, n_head: int) -> None:
    """The child's body: write the tables, then leave without the parent's exit handlers (status 0 when written;
    1 with the error in ``ERROR_FILE``)."""
    code = 1
    try:
        _die_with_parent()
        from ..search import query_index

        query_index.write_early_from_files(index_dir, folder, n_head)
        code = 0
    except BaseException:
        try:
            (folder / ERROR_FILE).write_text(traceback.format_exc(), "utf-8")
        except BaseException:
            pass
    finally:
        os._exit(code)


def _die_with_parent() -> None:
    """Linux: the child is killed when the build process dies (a killed build leaves no child writing on)."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
