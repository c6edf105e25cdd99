"""The journal of a running build (``stages/state.json``): each stage's state, wall and CPU time, peak RSS.

A stage is one ``with journal.stage(name) as info:`` block: it is marked running, then done with
the facts the block put into ``info``; times of a stage resumed after a kill add up. The end of
each stage is a :func:`checkpoint` of the resume tests.
"""

from __future__ import annotations

import os
import resource
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from ..graph.storage import FORMAT_VERSION, atomic_write_json, read_json

__all__ = ["Journal", "checkpoint", "cpu_seconds", "peak_rss_mb"]


def checkpoint(name: str) -> None:
    """Fault injection for the resume tests: SIGKILL this process at checkpoint ``name``, or hold it there.

    Active only when the environment variable ``NODERAG_TEST_KILL_AT`` equals ``name`` (a kill), or
    ``NODERAG_TEST_HOLD_AT`` does (sleep ``NODERAG_TEST_HOLD_S`` seconds, default 600: a writer caught
    mid-run, for the tests of what stops it).
    """
    if os.environ.get("NODERAG_TEST_KILL_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("NODERAG_TEST_HOLD_AT") == name:
        time.sleep(float(os.environ.get("NODERAG_TEST_HOLD_S", "600")))


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of its finished child processes."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Journal:
    """Stage states, wall and CPU times and the peak RSS after each stage of one build run.

    ``peak_rss_mb`` is the process's peak so far when the stage finished (monotone).
    ``on_finish`` runs after each finished stage (the build hands freed memory back then).
    """

    def __init__(self, path: Path, log: Callable[[str], None] | None = None,
                 on_finish: Callable[[], None] | None = None) -> None:
        self.path = Path(path)
        self.log = log
        self.on_finish = on_finish
        data = read_json(self.path) if self.path.is_file() else {}
        self.stages: dict[str, dict[str, Any]] = dict(data.get("stages", {})) if isinstance(data, dict) else {}
        self._t0: dict[str, tuple[float, float]] = {}

    def done(self, name: str) -> bool:
        return self.stages.get(name, {}).get("state") == "done"

    @contextmanager
    def stage(self, name: str, *, already_s: float = 0.0, checkpoint_as: str | None = None) -> Iterator[dict]:
        """Run one stage: the block fills the yielded dict with what the stage report says; then the
        stage is done and the :func:`checkpoint` named ``checkpoint_as`` (default ``name``) is passed."""
        self.start(name, already_s=already_s)
        info: dict[str, Any] = {}
        yield info
        self.finish(name, **info)
        checkpoint(checkpoint_as or name)

    def start(self, name: str, *, already_s: float = 0.0) -> None:
        """Mark ``name`` running; ``already_s`` seconds of wall time spent before this call count too."""
        self._t0[name] = (time.perf_counter() - already_s, cpu_seconds())
        prev = self.stages.get(name, {})
        self.stages[name] = {"state": "running", "time_s": float(prev.get("time_s", 0.0)),
                             "cpu_s": float(prev.get("cpu_s", 0.0))}

    def finish(self, name: str, **info: Any) -> None:
        t0, c0 = self._t0.pop(name, (time.perf_counter(), cpu_seconds()))
        elapsed = time.perf_counter() - t0
        cpu = cpu_seconds() - c0
        prev = self.stages.get(name, {})
        self.stages[name] = {"state": "done", "time_s": round(float(prev.get("time_s", 0.0)) + elapsed, 4),
                             "cpu_s": round(float(prev.get("cpu_s", 0.0)) + cpu, 4),
                             "peak_rss_mb": round(peak_rss_mb(), 1), **info}
        self.save()
        if self.on_finish is not None:
            self.on_finish()
        if self.log is not None:
            extra = ", ".join(f"{k} {v}" for k, v in info.items())
            self.log(f"{name:<12} done in {elapsed:.2f} s" + (f" ({extra})" if extra else ""))

    def save(self) -> None:
        atomic_write_json(self.path, {"format_version": FORMAT_VERSION, "stages": self.stages})
