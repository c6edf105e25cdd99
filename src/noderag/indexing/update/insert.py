"""Incremental insert: add documents to a finished index without rebuilding it.

This is the build pipeline run against an existing index (see
:mod:`noderag.indexing.driver` for exactly what is recomputed): only the new
chunks are decomposed, nodes whose keys exist are merged, vectors of existing
T/S nodes are reused. ``build(A)`` then ``insert(B)`` gives the same T/S/N/R
nodes (by key) and structural edges as ``build(A + B)``.
"""

from __future__ import annotations

import os
from typing import Sequence

from ..driver import BuildReport, build_index

__all__ = ["insert_documents"]


def insert_documents(index_dir: str | os.PathLike, inputs: Sequence[str | os.PathLike], *, llm=None,
                     embedder=None, progress: bool = False, allow_failures: bool = False,
                     wait: float | None = None, config=None) -> BuildReport:
    """Add the new documents of ``inputs`` (files, folders, JSONL) to the index in ``index_dir``.

    ``config``: the index's own configuration with other ``update`` (or ``llm``) settings, if any.
    """
    from ...store.manifest import read_manifest
    from ...store.tables import IndexNotFoundError

    m = read_manifest(index_dir)
    if m is None or m.get("state") != "complete":
        raise IndexNotFoundError(f"{index_dir}: no finished index to insert into (run a build first)")
    return build_index(inputs, index_dir, config, llm=llm, embedder=embedder, progress=progress,
                       allow_failures=allow_failures, wait=wait)
