"""The build's HNSW vector index, built beside the build: in a forked child process where it can.

usearch's ``add`` takes the GIL back for every vector, so a shard built on a thread of the build's
own process crawls while the main thread runs Python: 10,000 vectors took 1.2 s alone and 55 s
beside a busy Python loop. At 10^5 passages the attributes and communities stages let the shard
thread run ~45% of the time. A child process has an interpreter of its own. It is forked after
the embed stage: the T/S vectors reach it by fork (no copy), the A/H vectors later through a pipe,
and it writes ``vectors.usearch`` itself. The shards are added in the same order either way, so
the files are identical. Where ``fork`` is missing the index is built on threads in-process.
"""

from __future__ import annotations

import os
import signal
import traceback
from pathlib import Path

import numpy as np

__all__ = ["VectorBuild", "start_vector_build"]


def start_vector_build(ids: np.ndarray, vectors: np.ndarray, dim: int, embed_config, parallel: int = 1):
    """Start the HNSW index of ``vectors`` under node ``ids`` (:class:`VectorBuild`; in-process without fork)."""
    from .executor.local import can_fork

    if can_fork():
        return VectorBuild(ids, vectors, dim, embed_config, parallel)
    return _ThreadedBuild(ids, vectors, dim, embed_config, parallel)


def _die_with_parent(parent: int) -> None:
    """Ask Linux to SIGKILL this process when the build that forked it dies (a killed build leaves no
    orphan writing into its staging folder); elsewhere the pipe closing ends it."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _serve(conn, parent: int, ids, vectors, dim: int, embed_config, parallel: int) -> None:
    """The child: build, then take ``widen``/``add``/``finish`` requests until the index is saved."""
    _die_with_parent(parent)
    from .enrich import start_vector_index

    try:
        index = start_vector_index(ids, vectors, dim, embed_config, parallel=parallel)
        del ids, vectors
        while True:
            msg = conn.recv()
            if msg[0] == "widen":
                index.widen(int(msg[1]))
            elif msg[0] == "add":
                index.add_in_background(msg[1], msg[2])
            elif msg[0] == "finish":
                index.wait()
                index.save(Path(msg[1]))
                conn.send(("ok",))
                return
            else:
                raise ValueError(f"unknown request {msg[0]!r}")
    except EOFError:  # the build went away
        return
    except BaseException:
        conn.send(("error", traceback.format_exc()))


class VectorBuild:
    """A child process building the index: :meth:`widen`, :meth:`add`, then :meth:`finish` (or :meth:`cancel`)."""

    def __init__(self, ids, vectors, dim: int, embed_config, parallel: int = 1) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, os.getpid(), np.asarray(ids, dtype=np.int64), vectors,
                                                      int(dim), embed_config, int(parallel)),
                                 name="noderag-vectors", daemon=True)
        self._proc.start()
        child.close()

    def widen(self, parallel: int) -> None:
        """Let up to ``parallel`` shards build at once from now on."""
        self._send(("widen", int(parallel)))

    def add(self, ids, vectors) -> None:
        """Queue more vectors (copied to the child now, so the caller may free them)."""
        self._send(("add", np.asarray(ids, dtype=np.int64), np.ascontiguousarray(vectors)))

    def finish(self, path) -> Path:
        """Wait for every shard and write the index to ``path`` (and its shard siblings); returns ``path``."""
        self._send(("finish", str(path)))
        try:
            reply = self._conn.recv()
        except EOFError:
            reply = ("error", f"the vector index process ended (exit code {self._wait()}) before saving it")
        self._wait()
        if reply[0] != "ok":
            raise RuntimeError(f"building the vector index failed:\n{reply[1]}")
        return Path(path)

    def cancel(self) -> None:
        """Stop the child at once (a failed build's clean-up)."""
        if self._proc.is_alive():
            self._proc.kill()
        self._wait()

    def _send(self, msg) -> None:
        try:
            self._conn.send(msg)
        except (BrokenPipeError, ConnectionResetError, EOFError):
            code = self._wait()
            raise RuntimeError(f"the vector index process ended early (exit code {code})") from None

    def _wait(self):
        self._proc.join()
        self._conn.close()
        return self._proc.exitcode


class _ThreadedBuild:
    """:class:`VectorBuild`'s interface over an in-process, threaded index (no ``fork`` on this platform)."""

    def __init__(self, ids, vectors, dim: int, embed_config, parallel: int = 1) -> None:
        from .enrich import start_vector_index

        self._index = start_vector_index(ids, vectors, dim, embed_config, parallel=parallel)

    def widen(self, parallel: int) -> None:
        self._index.widen(parallel)

    def add(self, ids, vectors) -> None:
        self._index.add_in_background(ids, np.array(vectors))  # a copy: the caller may free its rows

    def finish(self, path) -> Path:
        self._index.wait().save(Path(path))
        return Path(path)

    def cancel(self) -> None:
        self._index.cancel()
