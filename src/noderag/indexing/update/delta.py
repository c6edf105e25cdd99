"""Delta inserts: new documents become a delta segment beside the shared segments of the previous generation.

An insert of new documents (nothing deleted or replaced) runs chunk, decompose, assemble and embed
for the new documents only, against a node table of the existing nodes made from the segments'
typed arrays and text blobs (:func:`delta_table`: no Python object per node but the key map). Nodes
whose key exists merge into the existing node, exactly as in a build; the new nodes get the next
ids. The new generation shares every file of the previous one (hard links) and adds the delta
segment (:mod:`noderag.store.segments`): the new nodes' rows, documents and decompositions, the
structural edges the new chunks brought (an edge may end at an older node), name links of the new
units, an HNSW index of the new T/S vectors and query tables whose BM25 impacts use the whole
index's passage counts.

What waits for the next compaction (``noderag compact``; once the deltas hold ``update.max_delta_share``
of the base's documents, an insert starts one in the background or runs it: ``update.compaction``): importance and A nodes, Leiden
communities and H/O nodes, the mention counts of older entities, name links from older units to the
names the new documents introduce, and the BM25 statistics of older passages. New passages are
found by dense, lexical and name search and reached by PPR through every entity they share with
older ones.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ...graph.types import NodeType
from ...store.layout import DELTA_EDGES, DOCUMENTS, NODE_KEYS, NODE_TYPES, NODES, VECTORS
from ...store.segments import Delta, deltas_of, scrubbed_overlay, segment_folders, tombstoned_keys
from ..assemble import EdgeList, NodeTable
from ..doc_rows import DocumentRows

__all__ = ["delta_reason", "background_compaction_due", "load_documents", "delta_table", "delete_plan", "rewrite_deltas", "link_scope",
           "write_delta_segment", "delta_counts"]

T, S, N = int(NodeType.T), int(NodeType.S), int(NodeType.N)


def delta_reason(previous, config, drop, n_new: int) -> str | None:
    """Why this run must recompute the whole index instead of adding a delta segment (None: it may add one)."""
    if previous is None:
        return "a new index"
    if not config.update.segments:
        return "update.segments = false"
    if drop:
        return "documents are deleted or replaced"
    if config.semantic.enabled:
        return "the semantic kNN layer is on (a delta segment does not extend it)"
    in_deltas, base = _delta_documents(previous.manifest, previous.path, n_new)
    limit = config.update.max_delta_share * max(base, 1)
    mode = config.update.compaction
    if in_deltas > limit and mode == "inline":
        return (f"the deltas would hold {in_deltas} documents, over update.max_delta_share = "
                f"{config.update.max_delta_share} of the base's {base}: compacting")
    if in_deltas > 2 * limit and mode == "background":
        return (f"the deltas would hold {in_deltas} documents, twice update.max_delta_share = "
                f"{config.update.max_delta_share} of the base's {base} (no background compaction finished): "
                "compacting now")
    return None


def _delta_documents(manifest: dict, path: Path, n_new: int) -> tuple[int, int]:
    """(documents in the deltas once ``n_new`` more are added, documents of the base)."""
    deltas = deltas_of(manifest, path)
    documents = int((manifest.get("counts") or {}).get("documents", 0))
    in_deltas = sum(d.documents for d in deltas)
    return in_deltas + n_new, documents - in_deltas


def background_compaction_due(manifest: dict, path: Path, config) -> bool:
    """True when the deltas of the generation at ``path`` hold more than ``update.max_delta_share`` of the
    base's documents and ``update.compaction`` is "background" (the writer then starts one)."""
    if config.update.compaction != "background" or not deltas_of(manifest, path):
        return False
    in_deltas, base = _delta_documents(manifest, path, 0)
    return in_deltas > config.update.max_delta_share * max(base, 1)


def load_documents(path: Path, manifest: dict) -> DocumentRows:
    """The document rows of every segment of a generation, in id order (one Arrow table, no dict a row)."""
    from ...store.segments import concat_parquet

    return DocumentRows(concat_parquet(segment_folders(path, manifest), DOCUMENTS))


def _query_tables(folders: list[Path]) -> list:
    from ...search.query_index import open_query_index

    tables = [open_query_index(f, checked=False) for f in folders]
    missing = [str(f) for f, t in zip(folders, tables) if t is None]
    if missing:
        from ...errors import BuildError

        raise BuildError(f"{missing[0]}: no query tables to insert a delta beside (compact the index first)")
    return tables


def delta_table(folders: list[Path]) -> tuple[NodeTable, list]:
    """(the node table of every node of the segments in ``folders``, over their memory-mapped arrays; their
    query tables). Nothing is copied: the insert reads the rows it looks up."""
    from ...graph.keys import KEY_DTYPE
    from ...graph.storage import load_npy
    from ...graph.types import TYPE_DTYPE
    from ...store.text_column import TextColumn
    from ..key_index import KeyIndex, segment_keys

    tables = _query_tables(folders)
    texts = TextColumn.from_buffers((t._a["text_off"], t._a["text"]) for t in tables)
    types = [np.asarray(load_npy(f / NODE_TYPES, True, dtype=TYPE_DTYPE, shape=(t.n,))) for f, t in zip(folders, tables)]
    keys = [np.asarray(load_npy(f / NODE_KEYS, True, dtype=KEY_DTYPE, shape=(t.n,))) for f, t in zip(folders, tables)]
    gone = scrubbed_overlay(folders[0], tables[0].n)  # the base's nodes a delete in place scrubbed: never found
    keys[0] = tombstoned_keys(folders[0], keys[0])
    index = KeyIndex(segments=[(t.first, segment_keys(f, k, gone if i == 0 else None))
                               for i, (f, t, k) in enumerate(zip(folders, tables, keys))])
    table = NodeTable.from_segments(types, keys, texts, [t.doc for t in tables], [t.chunk for t in tables],
                                    [t.active for t in tables], index)
    return table, tables


def delete_plan(previous, config, drop) -> int | None:
    """The first delta segment a delete must rewrite when every dropped document is in a delta, or None when
    the delete recomputes the index (a document of the base, segments off, the semantic layer on, or an LLM
    cache whose replies may quote the documents: the full delete prunes it)."""
    from ...store.layout import LLM_CACHE

    deltas = deltas_of(previous.manifest, previous.path)
    if not drop or not deltas or min(drop) < deltas[0].first_document or not config.update.segments \
            or config.semantic.enabled or (previous.path.parent.parent / LLM_CACHE).is_file():
        return None
    return max(i for i, d in enumerate(deltas) if d.first_document <= min(drop))


def rewrite_deltas(previous, k: int, drop, docs_rows: DocumentRows):
    """A delete inside the deltas: the surviving documents of deltas ``k..`` re-assembled, from their stored
    decompositions and in their original order, onto the segments before them (which stay as they are).

    Returns (table, decomposed edges, chunk traces, kept segments' query tables, document rows, vec_src,
    first node of the new delta): what :func:`noderag.indexing.run.start_run` holds for a delta run.
    """
    from ...store.decompositions import DECOMPOSITIONS, read_decompositions
    from .survivors import reassemble_survivors

    folders = segment_folders(previous.path, previous.manifest)
    d = deltas_of(previous.manifest, previous.path)[k]
    old, _ = delta_table(folders)  # every node: the rewritten deltas' texts and keys
    kept, segments = delta_table(folders[:1 + k])
    traces = [t for f in folders[1 + k:] for t in read_decompositions(f / DECOMPOSITIONS)]
    table, rows, base, traces, vec_src = reassemble_survivors(old, docs_rows[d.first_document:], traces, set(drop),
                                                              into=kept, first_document=d.first_document)
    return table, base, traces, segments, docs_rows.head(d.first_document, rows), vec_src, d.first_node


def link_scope(tables: list, first: int | None = None):
    """The name-linking scope of a delta insert, for :func:`~noderag.indexing.assemble.assemble_stage`: the new
    units, against the new names and the older names that may occur in them (found through the segments'
    name postings). Name linking matches from a word that starts with a capital or a digit
    (``assemble._match_names``), and a name matching there starts with that word; every other token
    of the name must occur in the new units too. Both tests read only the postings' token ids, so the
    scope costs what the new units hold, not what the index holds."""

    def scope(table: NodeTable, old_n: int) -> dict:
        from ...search.entities import name_tokens
        from ..assemble import _WORD
        from ...lang.entities import canonical_token

        old_n = old_n if first is None else first  # a delete's delta: its re-assembled nodes from ``first`` on

        types = table.types_array()
        active = table.active_array()
        units = old_n + np.flatnonzero(types[old_n:] == S)
        starts: set[str] = set()  # tokens a match may start with
        vocab: set[str] = set()  # every token of the units, as names and as the matcher tokenise them
        for text in table.texts.take(units):
            vocab.update(name_tokens(text))
            for word in set(_WORD.findall(text)):
                toks = name_tokens(word)
                vocab.update(toks)
                vocab.add(canonical_token(word))
                if word[0].isupper() or word[0].isdigit():
                    starts.update(toks)
        found = [np.zeros(0, np.int64)]
        for t in tables:
            names = t.names
            if not len(names):
                continue
            ptr, tok = np.asarray(names._name_tok_ptr), np.asarray(names._name_tok)
            first_tok = tok[ptr[:-1]]
            js = []
            for word in starts:
                j = names._posting(word)
                if j is not None and j.size:
                    js.append(j[first_tok[j] == names._tid(word)])  # names that start with it: a match starts there
            if not js:
                continue
            js = np.unique(np.concatenate(js))
            known = names.token_ids(vocab)
            lens = ptr[js + 1] - ptr[js]
            at = np.repeat(ptr[js] - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
            missing = np.add.reduceat((~np.isin(tok[at], known)).astype(np.int64), np.cumsum(lens) - lens)
            found.append(np.asarray(names._name_node)[js[missing == 0]].astype(np.int64))
        old = np.unique(np.concatenate(found))
        old = old[(types[old] == N) & active[old]]
        new = old_n + np.flatnonzero((types[old_n:] == N) & active[old_n:])
        return {"units": units, "entities": np.concatenate([old, new])}

    return scope


def write_delta_segment(folder: Path, table: NodeTable, old_n: int, docs_rows: list, first_document: int,
                        edges: EdgeList, link: EdgeList, traces: Path, vec, config, tables: list, name: str) -> Delta:
    """Write the delta segment ``folder`` (``deltas/<name>`` of the new generation); returns its manifest entry.

    ``edges``: the decomposed edges of the new chunks; ``traces``: their ``decompositions/`` folder, moved in.
    """
    from ...graph.storage import atomic_save_npy
    from ...search.query_index import write_query_index
    from ...store.decompositions import DECOMPOSITIONS
    from ...store.layout import LINKED
    from ...store.tables import write_documents, write_nodes
    from ..assemble import cat_edges, mention_counts
    from ..finalize import write_linked

    folder.mkdir(parents=True)
    n = len(table)
    types = table.types_array()
    src, dst, w = cat_edges(edges, link)
    write_nodes(folder / NODES, table, mention_counts(n, types, src, dst, w, first=old_n), first=old_n)
    write_documents(folder / DOCUMENTS, docs_rows[first_document:])
    os.replace(traces, folder / DECOMPOSITIONS)
    atomic_save_npy(folder / NODE_TYPES, types[old_n:])
    atomic_save_npy(folder / NODE_KEYS, table.keys_array(old_n))
    (folder / DELTA_EDGES).mkdir()
    for key, arr, dtype in (("src", src, np.int64), ("dst", dst, np.int64), ("w", w, np.float32)):
        atomic_save_npy(folder / DELTA_EDGES / f"{key}.npy", np.asarray(arr, dtype=dtype))
    write_linked(folder / LINKED, *link.arrays())
    _write_vectors(folder / VECTORS, table, old_n, vec, config)
    # the older passages BM25 counts: every one the segments' postings hold, scrubbed ones too (a delete in place
    # keeps their postings, which a search skips), so that no term's document frequency exceeds the count
    passages = int(np.sum(types[:old_n] == T))
    lexicals = [t.lexical for t in tables if t.lexical is not None]
    background = (passages, lambda h: sum((x.document_frequencies(h) for x in lexicals), np.zeros(len(h), np.int64)))
    write_query_index(folder, first_node=old_n, lexical_background=background)
    return Delta(name, old_n, n - old_n, first_document, len(docs_rows) - first_document)


def _write_vectors(path: Path, table: NodeTable, old_n: int, vec, config) -> None:
    """The HNSW index of the new T/S nodes' vectors (keys: node ids), one shard as small deltas need."""
    from ...graph.vectors import VectorIndex

    ids = old_n + np.flatnonzero(np.isin(table.types_array(old_n), (T, S)) & table.active_array(old_n))
    emb = config.embed
    index = VectorIndex(vec.dim, metric="cos", dtype=emb.vector_dtype, connectivity=emb.connectivity,
                        expansion_add=emb.expansion_add)
    index.add(ids, np.asarray(vec[ids], dtype=np.float32))
    index.save(path)



def delta_counts(prev: dict, table: NodeTable, first: int, n_docs: int, edges: EdgeList,
                 removed: list[Path] = ()) -> dict:
    """The previous generation's ``counts`` with the nodes (chunks: its T nodes), documents and decomposed edges
    of the new delta added and those of the ``removed`` delta folders (a delete's) taken away. An edge the
    base has too counts again until compaction recounts them."""
    from ...graph.storage import load_npy
    from ...graph.types import TYPE_NAMES

    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in prev.items()}
    parts = [(table.types_array(first), 1, int(edges.arrays()[0].shape[0]), n_docs)]
    for folder in removed:
        types = np.asarray(load_npy(folder / NODE_TYPES, True, dtype=np.uint8, ndim=1, shape=None))
        gone = int(np.asarray(load_npy(folder / DELTA_EDGES / "src.npy", True, ndim=1, shape=None)).shape[0])
        docs = int(pq_rows(folder / DOCUMENTS))
        parts.append((types, -1, gone, docs))
    for types, sign, n_edges, docs in parts:
        for key in ("nodes", "active_nodes"):  # a delta's nodes are all active
            per = out.setdefault(key, {})
            for t in range(7):
                name = TYPE_NAMES[NodeType(t)]
                per[name] = int(per.get(name, 0)) + sign * int(np.sum(types == t))
        out["documents"] = int(out.get("documents", 0)) + sign * docs
        out["chunks"] = int(out.get("chunks", 0)) + sign * int(np.sum(types == T))
        edge_counts = out.setdefault("edges", {})
        edge_counts["structural"] = int(edge_counts.get("structural", 0)) + sign * n_edges
    return out


def pq_rows(path: Path) -> int:
    """Rows of a Parquet file (from its footer)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows
