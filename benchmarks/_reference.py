"""Fetch and load the reference NodeRAG PPR (``noderag==0.1.0`` on PyPI) for the benchmark.

Only the single file ``NodeRAG/utils/PPR.py`` is used: the wheel is fetched with
``pip download --no-deps`` into a cache directory, extracted there, and that one
file is loaded by path with importlib (it needs only networkx, numpy and scipy).
The rest of the reference package, and its pinned dependencies, are never
imported or installed. The file's SHA-256 is checked against the published
wheel's, so the benchmark times exactly the published code.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

__all__ = ["REFERENCE_SPEC", "PPR_MEMBER", "PPR_SHA256", "ReferenceStatus", "prepare_reference", "load_reference_ppr"]

REFERENCE_SPEC = "noderag==0.1.0"
PPR_MEMBER = "NodeRAG/utils/PPR.py"
#: SHA-256 of NodeRAG/utils/PPR.py in noderag-0.1.0-py3-none-any.whl (PyPI, 2025-03-18).
PPR_SHA256 = "a8e014a7b14f1268152346f89ff9a37f0a07678970524b993320cd292b15e25d"
WHEEL_NAME = "noderag-0.1.0-py3-none-any.whl"


@dataclass(frozen=True)
class ReferenceStatus:
    """Where the reference PPR file is, or why it could not be prepared."""

    path: Path | None
    reason: str  # "ok" or why the reference is skipped

    @property
    def ok(self) -> bool:
        return self.path is not None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _find_wheel(cache_dir: Path) -> Path | None:
    hits = sorted(p for p in cache_dir.glob("*.whl") if p.name.lower() == WHEEL_NAME)
    return hits[0] if hits else None


def prepare_reference(cache_dir: str | Path, *, download: bool = True, timeout_s: float = 180.0) -> ReferenceStatus:
    """Make ``cache_dir/reference/NodeRAG/utils/PPR.py`` exist (download and extract the wheel if needed).

    Never raises for a missing network or a failed download: the returned status
    carries the reason, and the benchmark skips the reference impl with it.
    """
    cache_dir = Path(cache_dir)
    target = cache_dir / "reference" / PPR_MEMBER
    if target.is_file() and _sha256(target) == PPR_SHA256:
        return ReferenceStatus(target, "ok")
    wheel = _find_wheel(cache_dir) if cache_dir.is_dir() else None
    if wheel is None:
        if not download:
            return ReferenceStatus(None, f"{WHEEL_NAME} not in {cache_dir} and download disabled")
        cache_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", REFERENCE_SPEC, "--no-deps",
               "--only-binary=:all:", "-d", str(cache_dir), "-q"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return ReferenceStatus(None, f"`pip download {REFERENCE_SPEC}` failed: {exc}")
        wheel = _find_wheel(cache_dir)
        if proc.returncode != 0 or wheel is None:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            return ReferenceStatus(None, f"`pip download {REFERENCE_SPEC}` failed (exit {proc.returncode}): {tail[0]}")
    try:
        with zipfile.ZipFile(wheel) as zf:
            data = zf.read(PPR_MEMBER)
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        return ReferenceStatus(None, f"{wheel}: cannot read {PPR_MEMBER}: {exc}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != PPR_SHA256:
        return ReferenceStatus(None, f"{wheel}:{PPR_MEMBER} has SHA-256 {digest}, expected {PPR_SHA256}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".py.tmp")
    tmp.write_bytes(data)
    tmp.replace(target)
    return ReferenceStatus(target, "ok")


def load_reference_ppr(path: str | Path) -> ModuleType:
    """Import the reference ``PPR.py`` from its path as a standalone module (exposes ``sparse_PPR``)."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location("noderag_reference_ppr", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the reference PPR module from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "sparse_PPR"):
        raise ImportError(f"{path} defines no sparse_PPR")
    return module
