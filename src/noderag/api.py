"""Python API: ``noderag.build(...)`` and ``noderag.Index`` (open, insert; search methods are added by
``noderag.search``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from noderag.index.store import IndexStore

__all__ = ["build", "Index"]


class Index(IndexStore):
    """An opened index: read-only arrays and tables of one generation plus :meth:`insert` and :meth:`delete`.

    ``Index.open(dir)`` memory-maps a finished index. Retrieval methods
    (``retrieve``, ``retrieve_many``, ``answer``) come from ``noderag.search``.
    """

    def insert(self, docs_or_paths: Sequence[str | os.PathLike] | str | os.PathLike, *, llm=None,
               embedder=None, progress: bool = False, allow_failures: bool = False,
               wait: float | None = None) -> "Index":
        """Add documents (files, folders, JSONL corpora) and return the reopened index.

        ``wait``: seconds to wait for another writer of this index (default: fail at once).
        """
        from noderag.index.insert import insert_documents

        if isinstance(docs_or_paths, (str, os.PathLike)):
            docs_or_paths = [docs_or_paths]
        insert_documents(self.root, docs_or_paths, llm=llm, embedder=embedder, progress=progress,
                         allow_failures=allow_failures, wait=wait)
        return type(self).open(self.root)

    def delete(self, doc_ids: Sequence[str] | str = (), *, all_from: Sequence[str | os.PathLike] = (), llm=None,
               embedder=None, progress: bool = False, wait: float | None = None) -> "Index":
        """Delete documents by source id (or every document of ``all_from`` paths); return the reopened index.

        Unknown ids raise :class:`~noderag.index.delete.UnknownDocumentError` and change nothing.
        This object keeps reading its own generation until it is closed.
        """
        from noderag.index.delete import delete_documents

        delete_documents(self.root, doc_ids, all_from=all_from, llm=llm, embedder=embedder, progress=progress,
                         wait=wait)
        return type(self).open(self.root)


def _attach_search() -> None:
    """Add the search helper's methods to :class:`Index` when ``noderag.search`` provides them."""
    try:
        from noderag.search import attach_to_index  # type: ignore[attr-defined]
    except ImportError:
        return
    attach_to_index(Index)


def build(inputs: Sequence[str | os.PathLike] | str | os.PathLike, index_dir: str | os.PathLike, *,
          config=None, llm=None, embed=None, progress: bool = True, allow_failures: bool = False) -> Index:
    """Build (or extend) the index in ``index_dir`` from ``inputs`` and open it.

    Parameters
    ----------
    inputs : path or paths of .txt / .md / .jsonl files or directories
    index_dir : index directory
    config : NodeRAGConfig, optional
    llm : LLM backend or spec string (e.g. ``"openai:MODEL@http://host:8000/v1"``), optional
    embed : embedder spec string (e.g. ``"hash:64"``) or an Embedder object, optional
    progress : show per-stage progress bars on stderr
    allow_failures : finish even when some chunks failed to decompose (recorded in the manifest)
    """
    from noderag.config import NodeRAGConfig
    from noderag.index.pipeline import build_index

    embedder = None
    if isinstance(embed, str):
        config = (config or NodeRAGConfig()).with_overrides({"embed.spec": embed})
    elif embed is not None:
        embedder = embed
    build_index(inputs, index_dir, config, llm=llm, embedder=embedder, progress=progress,
                allow_failures=allow_failures)
    return Index.open(Path(index_dir))


_attach_search()
