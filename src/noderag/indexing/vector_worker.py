"""The vector index worker process of a build (see :mod:`noderag.indexing.vector_process`).

Reads one JSON request per line on stdin: ``start`` (T/S ids, their rows of the shared vectors
file, the embed settings), ``widen``, ``add`` (ids and vectors in ``.npy`` files), ``finish``
(wait for every shard, save, reply ``{"ok": true, "cpu_s": ...}``, this process's CPU seconds). Any failure is replied as ``{"error": ...}``
at ``finish``. End of stdin (the build went away) ends the process at once.

    python -m noderag.indexing.vector_worker
"""

from __future__ import annotations

import json
import os
import resource
import sys
import traceback


def _load(path: str):
    import numpy as np

    return np.load(path, allow_pickle=False)


def serve(stdin, stdout) -> int:
    import numpy as np

    from ..config import EmbedConfig

    from .embedding import start_vector_index

    index = None
    error = None
    for line in stdin:
        msg = json.loads(line)
        op = msg.get("op")
        try:
            if error is not None and op != "finish":
                continue
            if op == "start":
                ids, rows = _load(msg["ids"]), _load(msg["rows"])
                mapped = np.load(msg["vectors"], mmap_mode="r", allow_pickle=False)
                consecutive = rows.size and rows[-1] - rows[0] == rows.size - 1 and bool((np.diff(rows) == 1).all())
                vectors = mapped[int(rows[0]):int(rows[-1]) + 1] if consecutive else np.asarray(mapped[rows])
                index = start_vector_index(ids, vectors, int(msg["dim"]), EmbedConfig(**msg["embed"]),
                                           parallel=int(msg["parallel"]))
            elif op == "widen":
                index.widen(int(msg["parallel"]))
            elif op == "add":
                index.add_in_background(_load(msg["ids"]), _load(msg["vectors"]))
            elif op == "finish":
                if error is None:
                    try:
                        index.wait().save(msg["path"])
                    except Exception:
                        error = traceback.format_exc()
                use = resource.getrusage(resource.RUSAGE_SELF)  # the shard threads' CPU: the build reports it
                reply = {"ok": True, "cpu_s": round(use.ru_utime + use.ru_stime, 2)} if error is None else {"error": error}
                stdout.write(json.dumps(reply) + "\n")
                stdout.flush()
                return 0
            else:
                raise ValueError(f"unknown request {op!r}")
        except Exception:
            error = traceback.format_exc()
    os._exit(1)  # stdin closed before finish: the build is gone; the shard threads die with the process


def main() -> int:
    return serve(sys.stdin, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
