"""What a delete or a replacement keeps: the documents to drop, the survivors re-assembled, the LLM cache pruned.

The survivors' chunks are re-assembled from ``decompositions/`` in their original order with a
fresh node table, so every surviving node gets the id a fresh build of the survivors would give it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ...graph.types import NodeType

from ..assemble import ChunkRecord, EdgeList, NodeTable, assemble_chunks
from ..decompose.base import ChunkDecomposition, Unit
from ...store.decompositions import ChunkTrace

from ...errors import NodeRAGError
from .scrub import is_tombstone

__all__ = ["Deletion", "UnknownDocumentError", "reassemble_survivors", "prune_llm_cache"]

T, S = int(NodeType.T), int(NodeType.S)


class UnknownDocumentError(NodeRAGError, ValueError):
    """Some documents to delete are not in the index; nothing was changed."""


@dataclass(frozen=True)
class Deletion:
    """Documents to delete: source ids (the JSONL ``id`` or the file path the build saw) and/or the
    documents that the files, folders or JSONL corpora in ``paths`` would add (matched by source
    id or by content)."""

    ids: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()

    def resolve(self, docs_rows) -> list[int]:
        """Index document ids to drop (ascending); raises :class:`UnknownDocumentError` listing what matched nothing.

        ``docs_rows``: a :class:`~noderag.indexing.doc_rows.DocumentRows` or a sequence of row dicts."""
        from ..doc_rows import DocumentRows

        rows = docs_rows if isinstance(docs_rows, DocumentRows) else DocumentRows.from_dicts(docs_rows)
        ids = list(dict.fromkeys(str(x) for x in self.ids))
        drop: set[int] = set(rows.doc_ids_where("source", ids))
        unknown = [i for i, hit in zip(ids, rows.present("source", ids)) if not hit]
        if self.paths:
            from ..ingest import iter_documents

            docs = list(iter_documents(list(self.paths)))
            sources, hashes = [d.source for d in docs], [d.content_hash for d in docs]
            drop.update(rows.doc_ids_where("source", sources))
            drop.update(rows.doc_ids_where("content_hash", hashes))
            unknown += [s for s, a, b in zip(sources, rows.present("source", sources),
                                             rows.present("content_hash", hashes)) if not (a or b)]
        if unknown:
            shown = ", ".join(repr(u) for u in unknown[:20]) + (f" (+{len(unknown) - 20} more)" if len(unknown) > 20
                                                                else "")
            raise UnknownDocumentError(f"{len(unknown)} document(s) to delete are not in the index: {shown}; "
                                       "nothing was deleted")
        if not drop:
            raise UnknownDocumentError("nothing to delete: give document ids or --all-from paths")
        return sorted(drop)


def reassemble_survivors(old: NodeTable, docs_rows: Sequence[dict], traces: Sequence[ChunkTrace],
                         drop: set[int], into: NodeTable | None = None, first_document: int = 0):
    """Re-assemble the T/S/N/R graph of the documents not in ``drop`` (old document ids).

    Returns (table, documents rows renumbered, decomposed edges, chunk traces, vec_src) where
    ``vec_src[i]`` is the old id of new T/S node ``i`` (its vector is reused), -1 elsewhere.
    ``into``: a table of the nodes that stay as they are (the segments a delete leaves untouched) to
    assemble onto, and ``first_document`` the id of the first re-assembled document; by default the
    table is new and documents are numbered from 0.
    """
    keep_docs = [d for d in docs_rows if int(d["doc_id"]) not in drop and not is_tombstone(d)]
    new_did = {int(d["doc_id"]): first_document + k for k, d in enumerate(keep_docs)}
    doc_of = {int(d["doc_id"]): d for d in keep_docs}
    crecs, decs, kept = [], [], []
    for tr in traces:
        if tr.doc_id not in new_did:
            continue
        d = doc_of[tr.doc_id]
        k = len(crecs)
        crecs.append(ChunkRecord(k, new_did[tr.doc_id], old.texts[tr.t], d["source"], d["title"]))
        decs.append(ChunkDecomposition(k, [Unit(old.texts[s], list(e), [tuple(r) for r in rel])
                                           for s, e, rel in tr.units]))
        kept.append(tr)
    table = into if into is not None else NodeTable()
    start = len(table)
    made: list = []
    base = EdgeList()
    base.extend(assemble_chunks(table, crecs, decs, trace=made))
    traces_new = [ChunkTrace(c.doc_id, int(t), tuple(units)) for c, (t, units) in zip(crecs, made)]
    doc_chunks: dict[int, list[int]] = {}
    for i in range(start, len(table)):
        if table.types[i] == T:
            doc_chunks.setdefault(table.doc_ids[i], []).append(i)
    rows = [{"doc_id": first_document + k, "source": d["source"], "title": d["title"],
             "content_hash": d["content_hash"], "chunk_ids": doc_chunks.get(first_document + k, [])}
            for k, d in enumerate(keep_docs)]
    vec_src = np.full(len(table), -1, dtype=np.int64)
    for i in range(start, len(table)):
        if table.types[i] in (T, S):
            vec_src[i] = old.index[table.keys[i]]
    return table, rows, base, traces_new, vec_src


def prune_llm_cache(path: Path, keep: set[str]) -> int:
    """Drop every entry of the index's LLM cache not in ``keep``; overwrite freed pages; return the count.

    After a delete the cache keeps only the responses the new generation's run looked up
    (attribute and community summaries, decompositions of replacement documents):
    decompositions of kept chunks are stored in the index and never asked again, and
    anything else (cached answers, summaries of the old graph) may quote a deleted
    document. ``secure_delete``, a vacuum and a truncating WAL checkpoint leave no copy of
    a dropped entry in the database or its WAL file.
    """
    import sqlite3

    if not path.is_file():
        return 0
    conn = sqlite3.connect(str(path), timeout=60.0, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout=60000")
        conn.execute("PRAGMA secure_delete=ON")
        rows = [r[0] for r in conn.execute("SELECT key FROM responses")]
        gone = [(k,) for k in rows if k not in keep]
        if gone:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("DELETE FROM responses WHERE key = ?", gone)
            conn.execute("COMMIT")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return len(gone)
