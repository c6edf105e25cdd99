"""Manifest of an index directory and the stage bookkeeping of a running build."""

from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import Any

from ..graph.storage import FORMAT_VERSION, atomic_write_json, dir_bytes, read_json

__all__ = ["MANIFEST", "StageLog", "read_manifest", "dir_sizes", "bytes_by_component"]

MANIFEST = "manifest.json"


def read_manifest(root: Path) -> dict[str, Any] | None:
    """The manifest of the index in ``root`` (its current generation), or of the generation folder ``root``.

    None when there is none. A reader that needs the files of that generation too should
    use :class:`~noderag.store.tables.IndexStore`, which pins it.
    """
    from .generations import current_generation, generation_path

    root = Path(root)
    gen = current_generation(root)
    path = (generation_path(root, gen) if gen is not None else root) / MANIFEST
    if not path.is_file():
        return None
    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of its finished child processes."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class StageLog:
    """Stage states, wall and CPU times and the peak RSS after each stage of one build run.

    Persisted in ``stages/state.json``; times of a stage resumed after a kill add up.
    ``peak_rss_mb`` is the process's peak so far when the stage finished (monotone).
    """

    def __init__(self, path: Path, log=None, on_finish=None) -> None:
        self.path = Path(path)
        self.log = log
        self.on_finish = on_finish  # called after each finished stage (the build returns freed memory)
        data = read_json(self.path) if self.path.is_file() else {}
        self.stages: dict[str, dict[str, Any]] = dict(data.get("stages", {})) if isinstance(data, dict) else {}
        self._t0: dict[str, tuple[float, float]] = {}

    def done(self, name: str) -> bool:
        return self.stages.get(name, {}).get("state") == "done"

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


def dir_sizes(root: Path) -> dict[str, int]:
    """Bytes per file (relative POSIX paths, sorted) under ``root``, without the readers' lock file."""
    from .generations import READERS

    return {name: size for name, size in dir_bytes(root).items() if name != READERS}


def bytes_by_component(sizes: dict[str, int], node_arrays: str = "node arrays") -> dict[str, int]:
    """Bytes per top-level file or folder of a manifest's ``bytes`` map, largest first.

    The ``node_*.npy`` arrays are summed under the label ``node_arrays``.
    """
    out: dict[str, int] = {}
    for path, size in sizes.items():
        top = path.split("/", 1)[0]
        if top.startswith("node_"):
            top = node_arrays
        out[top] = out.get(top, 0) + int(size)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))
