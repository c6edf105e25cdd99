"""Compaction: the delta segments of inserts merged into one base, every global stage recomputed.

``merge`` (the default) keeps every node's id and recomputes what deltas leave for later (name links
of older units to newer names, mention counts, importance and A nodes, communities and H/O nodes,
BM25 statistics, the vector index) over the whole index, as an insert without segments does.
``full`` also re-assembles every document from its stored decompositions in its original order with
a fresh node table and embeds every passage and unit again (stored vectors are quantised; a fresh
build's are not), so the index is byte for byte what a fresh build of the same documents writes, node
ids renumbered as that build numbers them. Decompositions are reused, never asked of the LLM again.
"""

from __future__ import annotations

import os

from .driver import BuildReport, build_index

__all__ = ["compact_index"]


def compact_index(index_dir: str | os.PathLike, *, full: bool = False, llm=None, embedder=None,
                  progress: bool = False, log=None, wait: float | None = None,
                  background: float | None = None) -> BuildReport:
    """Merge the delta segments of the index in ``index_dir`` into one and commit it as a new generation.

    An index built with an LLM needs it again (``llm`` or the configured spec): its summaries are recomputed.
    ``background``: the ``update.max_delta_share`` of a background compaction (:mod:`noderag.build.background`),
    which yields to any other writer and does nothing unless the deltas hold more than that share of the base.
    """
    return build_index([], index_dir, None, llm=llm, embedder=embedder, progress=progress, log=log,
                       wait=wait, compact="full" if full else "merge", background=background)
