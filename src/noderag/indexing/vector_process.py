"""The build's HNSW vector index, built beside the build in a process of its own.

usearch's ``add`` takes the GIL back for every vector, so a shard built on a thread of the build's
own process crawls while the main thread runs Python: 10,000 vectors took 1.2 s alone and 55 s
beside a busy Python loop, and at 10^5 passages the attributes and communities stages let the
shard thread run less than half the time. A separate interpreter has a GIL of its own.

It is a fresh interpreter (``python -m noderag.indexing.vector_worker``), not a fork: a forked child
keeps the build's whole heap as it was, and every page the build writes afterwards is copied
(at 10^5 passages the build's tree peaked 0.6 GB higher). The vectors are shared through a file
both processes map (:meth:`NodeVectors.share_file`); the A/H vectors go through small files.
Requests are JSON lines on the worker's stdin, replies JSON lines on its stdout; the worker ends
when its stdin closes, so a killed build leaves no worker writing into its staging folder. The
shards are added in the same order as in-process, so the files are identical.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

__all__ = ["VectorBuild"]


class VectorBuild:
    """A worker process building the HNSW index of the vectors at ``rows`` of ``vectors_file`` (a ``.npy``)
    under node ``ids``: :meth:`widen`, :meth:`add`, then :meth:`finish` (or :meth:`cancel`)."""

    def __init__(self, ids, rows, vectors_file, dim: int, embed_config, work, parallel: int = 1) -> None:
        from dataclasses import asdict

        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self._adds = 0
        self.cpu_s: float | None = None  # the worker's CPU seconds, known after finish
        np.save(self.work / "ts_ids.npy", np.asarray(ids, dtype=np.int64))
        np.save(self.work / "ts_rows.npy", np.asarray(rows, dtype=np.int64))
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[2])  # the worker imports this very noderag
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self._proc = subprocess.Popen([sys.executable, "-m", "noderag.indexing.vector_worker"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, env=env)
        self._send({"op": "start", "ids": str(self.work / "ts_ids.npy"), "rows": str(self.work / "ts_rows.npy"),
                    "vectors": str(vectors_file), "dim": int(dim), "embed": asdict(embed_config),
                    "parallel": int(parallel)})

    def widen(self, parallel: int) -> None:
        """Let up to ``parallel`` shards build at once from now on."""
        self._send({"op": "widen", "parallel": int(parallel)})

    def add(self, ids, vectors) -> None:
        """Queue more vectors (written to a file now, so the caller may free them)."""
        k = self._adds
        self._adds += 1
        np.save(self.work / f"add{k}_ids.npy", np.asarray(ids, dtype=np.int64))
        np.save(self.work / f"add{k}_vectors.npy", np.ascontiguousarray(vectors))
        self._send({"op": "add", "ids": str(self.work / f"add{k}_ids.npy"),
                    "vectors": str(self.work / f"add{k}_vectors.npy")})

    def finish(self, path) -> Path:
        """Build on every core, wait for every shard and write the index to ``path`` (and its shard
        siblings); returns ``path``. The caller only waits from here on, so its core is free."""
        self.widen(os.cpu_count() or 1)
        self._send({"op": "finish", "path": str(path)})
        line = self._proc.stdout.readline()
        self._close()
        try:
            reply = json.loads(line) if line else {"error": f"the vector index process ended (exit code "
                                                            f"{self._proc.returncode}) before saving the index"}
        except json.JSONDecodeError:
            reply = {"error": f"unreadable reply {line[:200]!r}"}
        if not reply.get("ok"):
            raise RuntimeError(f"building the vector index failed:\n{reply.get('error')}")
        self.cpu_s = reply.get("cpu_s")
        return Path(path)

    def cancel(self) -> None:
        """Stop the worker at once (a failed build's clean-up)."""
        if self._proc.poll() is None:
            self._proc.kill()
        self._close()

    def _send(self, msg: dict) -> None:
        try:
            self._proc.stdin.write(json.dumps(msg) + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            self._close()
            raise RuntimeError(f"the vector index process ended early (exit code {self._proc.returncode})") from None

    def _close(self) -> None:
        for stream in (self._proc.stdin, self._proc.stdout):
            try:
                stream.close()
            except (BrokenPipeError, OSError):
                pass
        self._proc.wait()
