"""Python API: ``noderag.build(...)`` and ``noderag.Index`` (open, retrieve, answer, insert, delete, stats).

``Index`` composes the index store (``noderag.store``) and the search package (``noderag.search``);
its methods are defined here, in the class body, and import search lazily so ``import noderag``
stays cheap.
"""

from __future__ import annotations

import gc
import os
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

from .store.tables import IndexStore

__all__ = ["build", "Index", "IndexClosedError"]


class IndexClosedError(ValueError):
    """A closed :class:`Index` was asked to search (as a closed file is asked to read)."""


class Index(IndexStore):
    """An opened index: the read-only arrays and tables of one generation, search and the writers.

    ``Index.open(dir)`` pins the current generation and memory-maps it; :meth:`retrieve`,
    :meth:`retrieve_many` and :meth:`answer` query it through one prepared :meth:`searcher` per
    search configuration; :meth:`insert` and :meth:`delete` write a new generation and return it
    opened (this object keeps reading its own generation until it is closed).
    """

    @cached_property
    def query_index(self):
        """The build-time query tables (``query/``, memory-mapped; one per segment), or None for an index without them."""
        from .search.segments import open_segment_tables

        return open_segment_tables(self)

    def __init__(self, path: str | os.PathLike, *, verify: str = "cheap") -> None:
        super().__init__(path, verify=verify)
        from .search.api import SearcherCache

        self._search = SearcherCache()

    def searcher(self, config=None, *, llm=None):
        """The (cached, thread-safely prepared) Searcher of this index for ``config`` (default: the defaults).

        ``llm`` is a backend, a spec string, or None for the index config's ``llm.spec``.
        """
        if self._search is None:
            raise IndexClosedError(f"the index {str(self.root)!r} is closed: open it again with "
                                   f"noderag.Index.open({str(self.root)!r})")
        return self._search.searcher(self, config, llm=llm)

    def close(self) -> None:
        """Release the pinned generation, the prepared searchers and every loaded table, memory map and file
        of the generation (a long-lived process that reopens the index keeps no superseded generation open), and
        the worker processes batches kept; searching afterwards raises :class:`IndexClosedError`."""
        if self._search is not None:
            self._search.close()
        self._search = None
        super().close()
        loaded = {name for cls in type(self).__mro__ for name, attr in vars(cls).items()
                  if isinstance(attr, cached_property)}
        for name in loaded & set(vars(self)):
            del self.__dict__[name]
        gc.collect()  # the searchers' reference cycles hold the maps until a full collection

    def retrieve(self, query: str, *, config=None):
        """Retrieve nodes, ranked source passages and a budgeted context for one question."""
        return self.searcher(config).retrieve(query)

    def retrieve_many(self, queries: Sequence[str], *, config=None) -> list:
        """Retrieve for many questions: one embedding batch and one multi-threaded PPR call."""
        return self.searcher(config).retrieve_many(queries)

    def answer(self, query: str, *, llm=None, config=None):
        """Answer with one LLM call over the retrieved context, citing node ids.

        Raises ``LLMNotConfiguredError`` (only retrieval is available) without an LLM.
        """
        return self.searcher(config, llm=llm).answer(query)

    def stats(self) -> dict[str, Any]:
        """Generation, counts, bytes, token use and per-stage times of this index (from its manifest)."""
        m = self.manifest
        return {"generation": self.generation, "path": str(self.root),
                **{k: m[k] for k in ("format_version", "counts", "bytes_total", "tokens_total", "embedder", "stages")
                   if k in m}}

    def insert(self, docs_or_paths: Sequence[str | os.PathLike] | str | os.PathLike, *, llm=None,
               embedder=None, progress: bool = False, allow_failures: bool = False,
               wait: float | None = None, config=None) -> "Index":
        """Add documents (files, folders, JSONL corpora) and return the reopened index.

        ``wait``: seconds to wait for another writer of this index (default: fail at once).
        ``config``: the index's configuration with other ``update`` settings (``update.compaction``), if any.
        """
        from .indexing.update.insert import insert_documents

        if isinstance(docs_or_paths, (str, os.PathLike)):
            docs_or_paths = [docs_or_paths]
        insert_documents(self.root, docs_or_paths, llm=llm, embedder=embedder, progress=progress,
                         allow_failures=allow_failures, wait=wait, config=config)
        return type(self).open(self.root)

    def delete(self, doc_ids: Sequence[str] | str = (), *, all_from: Sequence[str | os.PathLike] = (), llm=None,
               embedder=None, progress: bool = False, wait: float | None = None, config=None) -> "Index":
        """Delete documents by source id (or every document of ``all_from`` paths); return the reopened index.

        Unknown ids raise :class:`~noderag.indexing.update.delete.UnknownDocumentError` and change nothing.
        This object keeps reading its own generation until it is closed.
        """
        from .indexing.update.delete import delete_documents

        delete_documents(self.root, doc_ids, all_from=all_from, llm=llm, embedder=embedder, progress=progress,
                         wait=wait, config=config)
        return type(self).open(self.root)


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
    from .config import NodeRAGConfig
    from .indexing.driver import build_index

    embedder = None
    if isinstance(embed, str):
        config = (config or NodeRAGConfig()).with_overrides({"embed.spec": embed})
    elif embed is not None:
        embedder = embed
    build_index(inputs, index_dir, config, llm=llm, embedder=embedder, progress=progress,
                allow_failures=allow_failures)
    return Index.open(Path(index_dir))

