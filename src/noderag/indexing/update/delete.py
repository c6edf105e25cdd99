"""Delete and replace documents: in place, or the survivors re-assembled and the build's later stages run.

A delete of documents of the base is done in place when it can be (:mod:`noderag.indexing.update.scrub`: the
nodes holding their text are scrubbed, every id kept, the rest of the index shared); a delete of
documents of the delta segments rewrites those (:func:`noderag.indexing.update.delta.rewrite_deltas`). Otherwise,
and for a replacement, what follows holds.

A delete (``noderag delete``, ``Index.delete``) and a replacement (a document given again
with the same source id and new text) run the build pipeline with a set of documents to
drop. The T/S/N/R nodes and decomposed edges of the surviving documents are re-assembled
from ``decompositions/`` in their original order with a fresh node table, so every
order-dependent choice (an entity's display name is its first surface form seen, a
relationship's text uses the names and wording of its first statement) is made again
without the dropped documents, exactly as a fresh build of the survivors makes it.
Everything that depends on the whole corpus is then recomputed as after an insert: name
links, mention counts, importance and A nodes, communities and H/O nodes, the vector index
and the semantic layer. T/S vectors of survivors are reused (found by key).

Consequences: ``build(A ∪ B)`` then ``delete(B)`` equals ``build(A)`` on T/S/N/R nodes and
edges compared by key; node ids are renumbered (the T/S/N/R nodes as a fresh build of the
survivors in their original order numbers them, then the new A/H/O nodes); document ids are
renumbered in order. A known limit: a document skipped at build time as a content duplicate
of one that is later deleted is not brought back (it was never indexed). No node, vector or decomposition
of a dropped document stays in the new generation, and the LLM cache keeps only the entries
the new generation's run looked up (see :func:`prune_llm_cache`).
"""

from __future__ import annotations

import os
from typing import Sequence

from .survivors import Deletion, UnknownDocumentError, prune_llm_cache, reassemble_survivors

__all__ = ["Deletion", "UnknownDocumentError", "delete_documents", "reassemble_survivors", "prune_llm_cache"]


def delete_documents(index_dir: str | os.PathLike, doc_ids: Sequence[str] = (), *,
                     all_from: Sequence[str | os.PathLike] = (), llm=None, embedder=None, progress: bool = False,
                     log=None, wait: float | None = None, config=None):
    """Delete documents from the index in ``index_dir`` and commit a new generation.

    ``doc_ids``: source ids as the build saw them (the JSONL ``id``, else the file path);
    ``all_from``: files, folders or JSONL corpora whose documents are deleted. Unknown
    documents raise :class:`UnknownDocumentError` and nothing changes. An index built with
    an LLM needs it again (``llm`` or the configured spec): its summaries are recomputed.
    ``config``: the index's own configuration with other ``update`` (or ``llm``) settings, if any.
    Returns the :class:`~noderag.indexing.driver.BuildReport` (``deleted`` documents).
    """
    from ..driver import build_index

    if isinstance(doc_ids, (str, os.PathLike)):
        doc_ids = [doc_ids]
    if isinstance(all_from, (str, os.PathLike)):
        all_from = [all_from]
    deletion = Deletion(tuple(str(i) for i in doc_ids), tuple(os.fspath(p) for p in all_from))
    if not deletion.ids and not deletion.paths:
        raise UnknownDocumentError("nothing to delete: give document ids or --all-from paths")
    return build_index([], index_dir, config, llm=llm, embedder=embedder, progress=progress, log=log, wait=wait,
                       delete=deletion)
