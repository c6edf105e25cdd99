"""Build-time query index: everything a query needs that costs O(n) to prepare, written once per build
and memory-mapped at open, so a query touches only its seeds' neighbourhood and the texts it returns.

Folder ``query/`` of an index directory (``.npy`` files; ``*_off`` are int64 offsets into a uint8 UTF-8 blob)::

    meta.json                        format (3), n (nodes), names, max_tokens, text_page
    (../text_off.npy, ../text/)      display text of every node: the segment's node texts, stored once beside
                                     ``nodes.parquet`` in pages of ``text_page`` bytes
                                     (:mod:`noderag.store.node_texts`), read from there
    chunk, doc                       int64 (n,): chunk_id / doc_id of every node
    active                           bool (n,)
    label_node, label_off, label     source-passage label of every T node (sorted node ids)
    doclabel_id, doclabel_off, doclabel   label of every document with one (sorted doc ids)
    name_*, exact_*, phrase_*, tok*, post_*   the name matcher (noderag.search.entities.name_index_arrays)
    lex_*                            the passages' BM25 postings (noderag.search.lexical)
    title_*                          optional (an index without it still opens): the title links' table
                                     (noderag.search.titles.title_table); base segments only

Written by :func:`write_query_index` from the finished ``nodes.parquet`` and ``documents.parquet`` of a
build or insert (deterministic: the same tables give byte-identical files); opened by
:meth:`QueryIndex.load`.
"""

from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..store.layout import DOCUMENTS, NODE_TEXT_OFF, NODES, QUERY_DIR
from ..store.paged_blob import PagedBytes, page_name, unzeroed
from ..graph.storage import REBUILD_HINT, atomic_save_npy, atomic_write_bytes, load_npy, read_json

__all__ = ["QUERY_DIR", "QueryIndex", "write_query_index", "passage_labels", "document_labels"]

_FORMAT = 3  # the only format read: node texts from the segment's pages, BM25 postings here
_T = 0
_NAMED = (2, 6)  # N and O: matched by name


def document_labels(documents: Any) -> dict[int, str]:
    """doc_id -> label (the first of ``source_id``, ``path``, ``source`` the documents table has)."""
    if documents is None:
        return {}
    try:
        ids = documents.column("doc_id").to_pylist()
    except KeyError:
        return {}
    for col in ("source_id", "path", "source"):
        if col in documents.column_names:
            vals = documents.column(col).to_pylist()
            return {int(i): str(v) for i, v in zip(ids, vals) if v is not None}
    return {}


def passage_labels(types: np.ndarray, source_ids: list, doc_ids: np.ndarray, doc_labels: dict[int, str]
                   ) -> dict[int, str]:
    """Label of every chunk's source passage: its ``source_id`` (JSONL ``id``), else its document's label."""
    out: dict[int, str] = {}
    for i in np.flatnonzero(np.asarray(types) == _T).tolist():
        if source_ids[i] is not None:
            out[i] = source_ids[i]
        else:
            d = int(doc_ids[i])
            out[i] = doc_labels.get(d, f"doc:{d}")
    return out


def _py_blob(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    from .entities import _blob

    return _blob(strings)


#: The table of context-line token counts (``line_tok.npy``, int32 per node; :func:`line_token_counts`).
LINE_TOKENS = "line_tok"


def line_token_counts(text_off: np.ndarray, text: np.ndarray, first_node: int = 0, batch: int = 32768,
                      workers: int | None = None, counter=None) -> np.ndarray:
    """Tokens of every node's context line (``[id] text``, whitespace collapsed, newline-ended:
    :func:`noderag.search.context.render_line`), int32 per node, 0 without text: counted once per build, as
    encoding every line would, from per-word counts cached across lines (:class:`~noderag.tokenize.LineCounter`)
    of texts split a batch at a time (:meth:`~noderag.tokenize.LineCounter.count_spans`, in the compiled core)
    and ``"[id]"``'s digits. With
    ``workers`` > 1 (default: up to 2 CPUs where forking is safe, :func:`_fork_is_safe`) and over 4 batches,
    a forked child counts the second half of the bytes. ``counter``: a :class:`~noderag.tokenize.LineCounter` to
    count with (its cached words carried from call to call; then no child)."""
    from ..tokenize import LineCounter

    n = int(text_off.shape[0]) - 1
    out = np.zeros(n, dtype=np.int32)
    given = counter

    def count(lo: int, hi: int, into: np.ndarray) -> None:  # nodes [lo, hi) into ``into``
        counter = given or LineCounter()
        for a in range(lo, hi, batch):
            b = min(hi, a + batch)
            counts, lengths = counter.count_spans(text, text_off[a:b + 1])
            tags = counter.tok.bracket_number_tokens(np.arange(a, b, dtype=np.int64) + first_node)
            into[a - lo:b - lo] = counts + np.where(lengths > 0, tags, 0)
    if workers is None:
        workers = min(2, os.cpu_count() or 1) if _fork_is_safe() else 1
    if given is not None or int(workers) < 2 or n <= 4 * batch or not hasattr(os, "fork"):
        count(0, n, out)
        return out
    cut = min(max(int(np.searchsorted(text_off, (int(text_off[0]) + int(text_off[-1])) // 2)), 1), n - 1)
    _count_halves(count, out, cut)
    return out


def _fork_is_safe() -> bool:
    """Whether this process may fork a counting child: no other Python thread (a lock one holds would stay held
    in the child forever) and no Ray (its native threads would be copied)."""
    import sys
    import threading

    return hasattr(os, "fork") and threading.active_count() == 1 and "ray" not in sys.modules


def _count_halves(count, out: np.ndarray, cut: int) -> None:
    """``count(0, cut)`` here and ``count(cut, n)`` in a forked child whose int32 counts come back through a
    pipe; a child that fails raises ``RuntimeError`` with its exit status."""
    import gc
    import signal
    import traceback

    n = out.shape[0]
    gc.freeze()  # no collection in either process writes to the pages they share (copy-on-write)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child counts [cut, n), writes the counts and leaves without the parent's exit code
        try:
            os.close(read)
            part = np.zeros(n - cut, dtype=np.int32)
            count(cut, n, part)
            with os.fdopen(write, "wb") as pipe:
                pipe.write(memoryview(part).cast("B"))
            os._exit(0)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(1)
    os.close(write)
    data = None
    with os.fdopen(read, "rb") as pipe:
        try:
            count(0, cut, out[:cut])
            data = pipe.read()
        finally:
            if data is None:
                os.kill(pid, signal.SIGKILL)
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            gc.unfreeze()
    if code != 0 or len(data) != 4 * (n - cut):
        raise RuntimeError(f"line_token_counts: the counting child ended with status {code} after {len(data)} "
                           f"of {4 * (n - cut)} bytes")
    out[cut:] = np.frombuffer(data, dtype=np.int32)


#: The early tables' context-line token counts of the first nodes (:func:`write_early_tables`).
EARLY_LINE_TOKENS = "line_tok_head"


def write_early_tables(folder: str | os.PathLike, n_head: int, texts_of: Callable[[np.ndarray], list[str]],
                       t_ids: np.ndarray, t_doc: np.ndarray, documents: Any, batch: int = 32768,
                       blob_of: Callable[[int, int], tuple[np.ndarray, Any]] | None = None) -> None:
    """The BM25 postings (``lex_*``) of the active passages ``t_ids`` (documents ``t_doc``; titles from
    ``documents``) and the context-line token counts of nodes ``0..n_head`` (``line_tok_head``), written into
    ``folder`` for :func:`write_query_index` (``early=``). ``texts_of(ids)``: those nodes' texts;
    ``blob_of(lo, hi)``: (offsets into the bytes, UTF-8 bytes) of nodes ``lo..hi`` (default: ``texts_of``
    encoded); both read ``batch`` nodes at a time (no copy of every text at once). The same files as
    :func:`write_query_index` makes from the written tables."""
    from ..tokenize import LineCounter
    from .lexical import titled

    out = Path(folder)
    t_ids = np.asarray(t_ids, dtype=np.int64)

    def save(key: str, arr: np.ndarray) -> None:
        atomic_save_npy(out / f"{key}.npy", arr)

    titles = _titles(documents)

    def passages():
        for a in range(0, t_ids.shape[0], batch):
            ids, docs = t_ids[a:a + batch], np.asarray(t_doc[a:a + batch]).tolist()
            for text, d in zip(texts_of(ids), docs):
                yield titled(unzeroed(text), titles.get(d))

    counts = np.zeros(n_head, dtype=np.int32)  # first: a bounded cache (the postings' arrays peak at their end)
    counter = LineCounter()
    for a in range(0, n_head, batch):
        b = min(n_head, a + batch)
        off, blob = blob_of(a, b) if blob_of is not None else _py_blob(texts_of(np.arange(a, b, dtype=np.int64)))
        counts[a:b] = line_token_counts(off, blob, a, batch=batch, counter=counter)
    save(EARLY_LINE_TOKENS, counts)
    del counter, counts
    _save_lexical_texts(save, t_ids, passages(), 0, None)


def early_head(index_dir: str | os.PathLike) -> int:
    """The nodes whose line token counts a base segment's early tables hold: those before the middle of the
    texts' bytes, so that the child's share (the postings and these counts) and the writer's (the name index
    and the other counts) take about as long."""
    off = load_npy(Path(index_dir) / NODE_TEXT_OFF, True, dtype=np.int64, ndim=1)
    return int(np.searchsorted(off, (int(off[0]) + int(off[-1])) // 2)) if off.shape[0] > 1 else 0


def write_early_from_files(index_dir: str | os.PathLike, folder: str | os.PathLike, n_head: int) -> None:
    """:func:`write_early_tables` of the base segment in ``index_dir`` (every passage, nodes ``0..n_head``) from
    its written ``nodes.parquet``, ``documents.parquet`` and text pages (mapped, read a batch at a time): what
    a build's finalize stage has a forked child make while it makes the name index."""
    import pyarrow.parquet as pq

    from ..store.node_texts import node_texts
    from ..store.tables import read_nodes_file

    root = Path(index_dir)
    nodes = read_nodes_file(root / NODES, columns=("type", "doc_id", "active"))
    types, doc, active = (np.asarray(nodes.column(c).to_numpy(zero_copy_only=False), dtype=d)
                          for c, d in (("type", np.uint8), ("doc_id", np.int64), ("active", bool)))
    n = int(types.shape[0])
    documents = pq.read_table(root / DOCUMENTS) if (root / DOCUMENTS).is_file() else None
    t_ids = np.flatnonzero((types == _T) & active)
    pages = node_texts(root / NODES, n)
    off = np.asarray(pages.offsets)

    def texts_of(ids: np.ndarray) -> list[str]:
        return pages.pages.strings(off[ids].tolist(), off[ids + 1].tolist())

    def blob_of(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        start = int(off[lo])
        return off[lo:hi + 1] - start, np.frombuffer(pages.pages.read(start, int(off[hi])), dtype=np.uint8)

    if not 0 <= n_head <= n:
        raise ValueError(f"write_early_from_files: {n_head} nodes of {n}")
    write_early_tables(folder, n_head, texts_of, t_ids, doc[t_ids], documents, blob_of=blob_of)


def write_query_index(index_dir: str | os.PathLike, *, first_node: int = 0, lexical_background=None,
                      early=None) -> Path:
    """Write ``query/`` into ``index_dir`` from its ``nodes.parquet`` and ``documents.parquet``; returns the folder.

    Called by the build (and insert) pipeline right after the finished files are written, so
    every index opens without O(n) preparation. Replaces an existing ``query/`` folder. Each
    array is written as soon as it is made and the node table is dropped before the name index
    is built, so the peak stays near one copy of the texts.

    A delta segment (:mod:`noderag.store.segments`) holds nodes ``first_node..``: its per-node
    arrays are by position in the segment, every node id it lists is global, and
    ``lexical_background`` (see :func:`~noderag.search.lexical.lexical_arrays`) puts its BM25
    impacts on the scale of the whole index.

    ``early``: :func:`write_early_tables`' files of a base segment's first ``early.nodes`` nodes, moved in as they
    are once every other table is written (``early.wait()``: their folder, or it raises).
    """
    import shutil

    import pyarrow.parquet as pq

    from ..store.node_texts import node_texts
    from ..store.tables import read_nodes_file

    root = Path(index_dir)
    out = root / QUERY_DIR
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    def save(key: str, arr: np.ndarray) -> None:  # fsynced like every index file: the commit only renames folders
        atomic_save_npy(out / f"{key}.npy", arr)

    nodes_path = root / NODES
    nodes = read_nodes_file(nodes_path, columns=("type", "doc_id", "chunk_id", "active", "source_id"))
    docs_path = root / DOCUMENTS
    documents = pq.read_table(docs_path) if docs_path.is_file() else None
    n = nodes.num_rows
    types, doc, active = _save_node_columns(save, nodes)
    pages = node_texts(nodes_path, n)  # the segment's own text pages: read for the BM25 postings, not copied
    if early is None:
        line_tok = _save_text_tables(save, pages, types, active, doc, documents, first_node, lexical_background)
    else:  # only the nodes the early tables have not counted
        if first_node or lexical_background is not None:
            raise ValueError("write_query_index: early tables are made for a base segment only")
        line_tok = _line_tail(pages, int(early.nodes))
    text_page = pages.pages.page
    del pages
    _save_labels(save, nodes, types, doc, documents, first_node)
    del nodes
    if not first_node:  # a delta segment's searcher builds its title links over every segment's documents
        _save_titles(save, documents, types, doc, active)
    names = _save_names(save, nodes_path, types, active, first_node)
    if early is not None:
        line_tok = _take_early(early.wait(), out, int(early.nodes), line_tok)
    save(LINE_TOKENS, line_tok)
    meta = {"format": _FORMAT, "n": int(n), **names, "text_page": text_page,
            **({"first_node": int(first_node)} if first_node else {})}
    atomic_write_bytes(out / "meta.json", (json.dumps(meta, sort_keys=True) + "\n").encode("utf-8"))
    return out


def _save_node_columns(save, nodes: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Save ``chunk``, ``doc`` and ``active`` of the node table; return (types uint8, doc ids, active)."""
    def col(name: str, dtype) -> np.ndarray:
        return np.asarray(nodes.column(name).to_numpy(zero_copy_only=False), dtype=dtype)

    doc, active = col("doc_id", np.int64), col("active", bool)
    save("chunk", col("chunk_id", np.int64))
    save("doc", doc)
    save("active", active)
    return col("type", np.uint8), doc, active


def _save_text_tables(save, pages, types: np.ndarray, active: np.ndarray, doc: np.ndarray, documents: Any,
                      first_node: int, background) -> np.ndarray:
    """The BM25 postings (saved) and every node's context-line token counts (returned) from the segment's text
    ``pages`` (:class:`~noderag.store.node_texts.NodeTexts`), read into one array."""
    text_off, text = np.asarray(pages.offsets), pages.pages.to_array()
    _save_lexical(save, types, active, doc, text_off, text, documents, first_node, background)
    return line_token_counts(text_off, text, first_node)


def _line_tail(pages, n_head: int, batch: int = 32768) -> np.ndarray:
    """The context-line token counts of the nodes from ``n_head`` on (those the early tables did not count), their
    bytes read from the pages a batch at a time."""
    from ..tokenize import LineCounter

    text_off = np.asarray(pages.offsets)
    n = int(text_off.shape[0]) - 1
    if not 0 <= n_head <= n:
        raise ValueError(f"write_query_index: early tables of {n_head} nodes for a segment of {n}")
    out = np.zeros(n - n_head, dtype=np.int32)
    counter = LineCounter()
    for a in range(n_head, n, batch):
        b = min(n, a + batch)
        lo = int(text_off[a])
        text = np.frombuffer(pages.pages.read(lo, int(text_off[b])), dtype=np.uint8)
        out[a - n_head:b - n_head] = line_token_counts(text_off[a:b + 1] - lo, text, a, batch=batch, counter=counter)
    return out


def _take_early(folder: Path, out: Path, n_head: int, line_tail: np.ndarray) -> np.ndarray:
    """Move the early tables' ``lex_*`` files from ``folder`` into ``out`` and return every node's context-line
    token counts (the early head of ``n_head`` nodes, then ``line_tail``)."""
    from .lexical import LEX_ARRAYS

    head = load_npy(folder / f"{EARLY_LINE_TOKENS}.npy", False, dtype=np.int32, ndim=1, shape=(n_head,))
    for key in LEX_ARRAYS:
        os.replace(folder / f"{key}.npy", out / f"{key}.npy")
    return np.concatenate([np.asarray(head, dtype=np.int32), line_tail])


def _save_labels(save, nodes: Any, types: np.ndarray, doc: np.ndarray, documents: Any, first_node: int) -> None:
    """The source-passage label of every T node (``label_*``) and the label of every document (``doclabel_*``)."""
    n = nodes.num_rows
    t_ids = np.flatnonzero(types == _T)
    src = nodes.column("source_id").take(t_ids).to_pylist()
    src_full: list = [None] * n
    for i, v in zip(t_ids.tolist(), src):
        src_full[i] = v
    dl = document_labels(documents)
    labels = passage_labels(types, src_full, doc, dl)
    del src, src_full
    save("label_node", t_ids.astype(np.int64) + first_node)
    for key, arr in zip(("label_off", "label"), _py_blob([labels[i] for i in t_ids.tolist()])):
        save(key, arr)
    del labels
    dids = sorted(dl)
    save("doclabel_id", np.asarray(dids, dtype=np.int64))
    for key, arr in zip(("doclabel_off", "doclabel"), _py_blob([dl[d] for d in dids])):
        save(key, arr)


def _save_titles(save, documents: Any, types: np.ndarray, doc: np.ndarray, active: np.ndarray) -> None:
    """The title links' table (``title_*``, :func:`~noderag.search.titles.title_table`) of the documents' titles
    and the active passages: the first query that bridges by title would otherwise hash every title."""
    from .titles import title_table

    if documents is None or "title" not in documents.column_names:
        return
    ids = documents.column("doc_id").combine_chunks()
    if ids.null_count:
        return  # the searcher names the bad table when it reads it
    t_ids = np.flatnonzero((types == _T) & active)
    doc_ids = np.asarray(ids.to_numpy(zero_copy_only=False), dtype=np.int64)
    for key, arr in title_table(doc_ids, documents.column("title"), t_ids, doc[t_ids]).items():
        save(key, arr)


def _load_titles(folder: Path, n: int, checked: bool) -> dict[str, np.ndarray] | None:
    """The title table (``title_*``) mapped, or None for an index written without it; sizes checked (and the
    passage ids, O(passages), when ``checked``)."""
    from .titles import TITLE_ARRAYS

    if not (folder / "title_head.npy").is_file():
        return None
    dtypes = {"title_head": np.uint64, "title_first": np.uint64, "title": np.uint8}
    a = {key: np.asarray(load_npy(folder / f"{key}.npy", True, dtype=dtypes.get(key, np.int64), ndim=1, shape=None))
         for key in TITLE_ARRAYS}
    k = a["title_head"].shape[0]
    off = a["title_off"]
    sizes = (("title_doc", a["title_doc"].shape[0] == k), ("title_off", off.shape[0] == k + 1
             and int(off[0]) == 0 and int(off[-1]) == a["title"].shape[0]),
             ("title_mask", a["title_mask"].shape[0] == a["title_first"].shape[0]),
             ("title_pid", a["title_pid"].shape[0] == a["title_pdoc"].shape[0]))
    for key, ok in sizes:
        if not ok:
            raise ValueError(f"{folder / (key + '.npy')}: its length does not match the title table's")
    pid = a["title_pid"]
    if checked and pid.size and (int(pid.min()) < 0 or int(pid.max()) >= n):
        raise ValueError(f"{folder / 'title_pid.npy'}: passage ids out of [0, {n})")
    return a


def _save_names(save, nodes_path: Path, types: np.ndarray, active: np.ndarray, first_node: int) -> dict[str, int]:
    """The name matcher's arrays (``name_*``, ...) of the active N and O nodes; their meta entries."""
    from ..store.tables import read_nodes_file
    from .entities import name_arrays

    named = np.flatnonzero(np.isin(types, _NAMED) & active)
    names = read_nodes_file(nodes_path, columns=("name",)).column("name").take(named).to_pylist()
    name_index, max_tokens = name_arrays(named + first_node, names)
    del names
    for key in sorted(name_index):
        save(key, name_index[key])
    return {"names": int(name_index["name_node"].shape[0]), "max_tokens": max_tokens}


def _save_lexical(save, types: np.ndarray, active: np.ndarray, doc: np.ndarray, text_off: np.ndarray,
                  text: np.ndarray, documents: Any, first_node: int = 0, background=None) -> None:
    """The passages' BM25 postings (``lex_*``, :mod:`noderag.search.lexical`): titled texts of active T nodes."""
    from .lexical import titled

    titles = _titles(documents)
    t_ids = np.flatnonzero((types == _T) & active)
    texts = (titled(QueryIndex._get(text_off, text, i), titles.get(d))
             for i, d in zip(t_ids.tolist(), doc[t_ids].tolist()))
    _save_lexical_texts(save, t_ids, texts, first_node, background)


def _titles(documents: Any) -> dict[int, str]:
    """doc_id -> title of the documents with one (what BM25 indexes before each passage's text)."""
    if documents is None or "title" not in documents.column_names:
        return {}
    return {int(d): t for d, t in zip(documents.column("doc_id").to_pylist(), documents.column("title").to_pylist())
            if t}


def _save_lexical_texts(save, t_ids: np.ndarray, texts, first_node: int, background) -> None:
    """The BM25 postings (``lex_*``) of the passages ``t_ids`` from their titled ``texts`` (an iterable)."""
    from .lexical import lexical_arrays

    for key, arr in lexical_arrays(np.asarray(t_ids, dtype=np.int64) + first_node, texts,
                                   background=background).items():
        save(key, arr)


def _load_lexical(folder: Path, arrays: dict[str, np.ndarray]) -> None:
    """Map the ``lex_*`` arrays into ``arrays``; O(1) checks (node ids are checked by ``noderag verify``,
    which reads every byte)."""
    from .lexical import LEX_ARRAYS

    dtypes = {"lex_term_hash": np.uint64, "lex_post_ptr": np.int64, "lex_post_node": np.int32,
              "lex_post_weight": np.float32}
    for key in LEX_ARRAYS:
        arrays[key] = np.asarray(load_npy(folder / f"{key}.npy", True, dtype=dtypes[key], ndim=1, shape=None))
    v, p = arrays["lex_term_hash"].shape[0], arrays["lex_post_node"].shape[0]
    ptr = arrays["lex_post_ptr"]
    if ptr.shape[0] != v + 1 or int(ptr[0]) != 0 or int(ptr[-1]) != p:
        raise ValueError(f"{folder / 'lex_post_ptr.npy'}: pointers must have len(lex_term_hash) + 1 entries "
                         f"from 0 to {p}")
    if arrays["lex_post_weight"].shape[0] != p:
        raise ValueError(f"{folder / 'lex_post_weight.npy'}: {arrays['lex_post_weight'].shape[0]} weights "
                         f"for {p} postings")


def _check_damage(folder: Path, arrays: dict[str, np.ndarray], n: int, m: int, first: int = 0,
                  rels: dict[str, str] | None = None) -> None:
    """Cheap structural checks of the loaded query arrays (O(n), at open): offsets and CSR pointers start
    at 0, end at their blob's length and never decrease; node and name ids are in range. Raises
    :class:`~noderag.store.verify.IndexDamagedError` naming the file that is wrong."""
    from ..store.verify import IndexDamagedError

    def bad(key: str, problem: str, detail: str = "") -> IndexDamagedError:  # rels: files outside query/
        return IndexDamagedError(folder.parent, (rels or {}).get(key, f"{QUERY_DIR}/{key}.npy"), problem, detail)

    for ptr, blob in (("text_off", "text"), ("label_off", "label"), ("doclabel_off", "doclabel"),
                      ("name_canon_off", "name_canon"), ("tok_off", "tok"), ("post_ptr", "post_name"),
                      ("name_tok_ptr", "name_tok")):
        o = arrays[ptr]
        if o.shape[0] < 1 or int(o[0]) != 0 or int(o[-1]) != arrays[blob].shape[0]:
            raise bad(ptr, "invalid offsets", f"they do not span {blob}.npy ({arrays[blob].shape[0]} entries)")
        if _decreases(o):
            raise bad(ptr, "invalid offsets", "not monotone")
    for key, hi in (("label_node", first + n), ("name_node", first + n), ("exact_name", m), ("phrase_name", m),
                    ("post_name", m), ("chunk", first + n), ("doc", None), ("doclabel_id", None)):
        lo, top = _bounds(arrays[key])
        if lo < -1 or (hi is not None and top >= hi):
            raise bad(key, "id out of range", f"[{lo}, {top}]" + (f", {hi} ids" if hi else ""))
    lo, _ = _bounds(arrays["name_tok"])
    if lo < 0:
        raise bad("name_tok", "id out of range", f"token id {lo}")


_CHECK_BLOCK = 1 << 16  # entries a check reads at a time: each block stays in cache for its two reductions


def _bounds(a: np.ndarray) -> tuple[int, int]:
    """(min, max) of ``a`` ((0, -1) when empty) in one pass over memory: min and max of each cache-sized block,
    where ``a.min()`` then ``a.max()`` read the whole array twice (20.9M ids: 167 MB each time)."""
    if a.size == 0:
        return 0, -1
    blocks = range(0, a.shape[0], _CHECK_BLOCK)
    lows, highs = np.empty(len(blocks), a.dtype), np.empty(len(blocks), a.dtype)
    for i, s in enumerate(blocks):
        part = a[s:s + _CHECK_BLOCK]
        lows[i], highs[i] = part.min(), part.max()
    return int(lows.min()), int(highs.max())


def _decreases(o: np.ndarray) -> bool:
    """Whether some entry of ``o`` is below the one before it, block by block into one small buffer (no
    boolean array the size of ``o``: fresh pages of it cost more than the comparison)."""
    buf = np.empty(min(_CHECK_BLOCK, max(o.shape[0] - 1, 0)), bool)
    for s in range(0, o.shape[0] - 1, _CHECK_BLOCK):
        e = min(s + _CHECK_BLOCK, o.shape[0] - 1)
        if np.less(o[s + 1:e + 1], o[s:e], out=buf[:e - s]).any():
            return True
    return False


def _paged_texts(folder: Path, meta: dict, n: int) -> tuple[np.ndarray, PagedBytes]:
    """(offsets, pages) of the node texts, the segment's own beside ``nodes.parquet``, checked as they open."""
    from ..store.node_texts import NodeTexts
    from ..store.verify import IndexDamagedError

    texts = NodeTexts(folder.parent, int(meta["text_page"]), n,
                      lambda rel, problem, detail: IndexDamagedError(folder.parent, rel, problem, detail))
    return texts.offsets, texts.pages


class QueryIndex:
    """The ``query/`` folder opened read-only (memory-mapped): per-node columns, texts, labels and names
    (a :class:`~noderag.store.protocols.NodeTables`).

    Attributes
    ----------
    n : int
    chunk, doc : ndarray (n,) int64
    active : ndarray (n,) bool
    names : MappedNames
    """

    def __init__(self, folder: Path, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        from .entities import MappedNames

        self.folder = folder
        self.n = int(meta["n"])
        self.first = int(meta.get("first_node", 0))  # a delta segment's first node id (0: the base)
        self._a = arrays
        self._views: dict[str, memoryview] = {}  # blob -> its bytes, for :meth:`_strings`
        self.chunk = arrays["chunk"]
        self.doc = arrays["doc"]
        self.active = arrays["active"]
        self.names = MappedNames(arrays, int(meta["max_tokens"]))
        #: tokens of each node's context line (int32), written at build time
        self.line_tokens = arrays[LINE_TOKENS]
        from .lexical import LexicalIndex

        self.lexical = LexicalIndex(arrays)

    @classmethod
    def load(cls, index_dir: str | os.PathLike, n: int | None = None, *, checked: bool = True) -> "QueryIndex | None":
        """Open ``index_dir/query`` (None when the index has none); ``n``: expected node count. ``checked``:
        also the O(n) checks that ids and offsets are in range (a writer that looks up a few rows and shares
        the files as they are, checksums included, leaves them to ``noderag verify``)."""
        from .entities import NAME_ARRAYS

        folder = Path(index_dir) / QUERY_DIR
        mpath = folder / "meta.json"
        if not mpath.is_file():
            return None
        meta = read_json(mpath)
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
            raise ValueError(f"{mpath}: query index format {meta.get('format') if isinstance(meta, dict) else meta!r}"
                             f" is not supported; this noderag reads format {_FORMAT} only: {REBUILD_HINT}")
        for key in ("n", "names", "max_tokens", "first_node", "text_page"):
            if key == "first_node" and key not in meta:
                continue
            if isinstance(meta.get(key), bool) or not isinstance(meta.get(key), int) or meta[key] < 0:
                raise ValueError(f"{mpath}: field {key!r} must be a non-negative integer, got {meta.get(key)!r}")
        nn = meta["n"]
        if n is not None and nn != n:
            raise ValueError(f"{mpath}: written for {nn} nodes but the graph has {n}")
        m = meta["names"]
        shapes: dict[str, tuple[Any, tuple | None]] = {
            "chunk": (np.int64, (nn,)), "doc": (np.int64, (nn,)), "active": (np.bool_, (nn,)),
            "label_node": (np.int64, None), "label_off": (np.int64, None), "label": (np.uint8, None),
            "doclabel_id": (np.int64, None), "doclabel_off": (np.int64, None), "doclabel": (np.uint8, None),
            "name_node": (np.int64, (m,)), "name_tok_ptr": (np.int64, (m + 1,)), "name_tok": (np.int32, None),
            "name_canon_off": (np.int64, (m + 1,)), "name_canon": (np.uint8, None),
            "exact_hash": (np.uint64, (m,)), "exact_name": (np.int64, (m,)),
            "phrase_hash": (np.uint64, (m,)), "phrase_name": (np.int64, (m,)),
            "tok_hash": (np.uint64, None), "tok_off": (np.int64, None), "tok": (np.uint8, None),
            "post_ptr": (np.int64, None), "post_name": (np.int64, None),
        }
        assert set(NAME_ARRAYS) <= set(shapes)
        arrays: dict[str, Any] = {}
        for key, (dtype, shape) in shapes.items():
            # plain ndarray views of the maps: numpy.memmap's per-item __getitem__ costs ~4 us a look-up
            arrays[key] = np.asarray(load_npy(folder / f"{key}.npy", True, dtype=dtype, ndim=1, shape=shape))
        arrays["text_off"], arrays["text"] = _paged_texts(folder, meta, nn)  # the segment's, beside nodes.parquet
        # cheap consistency checks (sizes only: O(1)), naming the file
        for off, blob in (("text_off", "text"), ("label_off", "label"), ("doclabel_off", "doclabel"),
                          ("name_canon_off", "name_canon"), ("tok_off", "tok")):
            o = arrays[off]
            if o.shape[0] < 1 or int(o[0]) != 0 or int(o[-1]) != arrays[blob].shape[0]:
                raise ValueError(f"{folder / (off + '.npy')}: offsets do not span {blob}.npy "
                                 f"({arrays[blob].shape[0]} bytes)")
        if arrays["label_off"].shape[0] != arrays["label_node"].shape[0] + 1:
            raise ValueError(f"{folder / 'label_off.npy'}: length must be len(label_node) + 1")
        if arrays["doclabel_off"].shape[0] != arrays["doclabel_id"].shape[0] + 1:
            raise ValueError(f"{folder / 'doclabel_off.npy'}: length must be len(doclabel_id) + 1")
        v = arrays["tok_hash"].shape[0]
        if arrays["tok_off"].shape[0] != v + 1 or arrays["post_ptr"].shape[0] != v + 1:
            raise ValueError(f"{folder / 'tok_off.npy'}: tok_off and post_ptr must have len(tok_hash) + 1 entries")
        if checked:  # ids in range (O(n)), naming the file
            _check_damage(folder, arrays, nn, m, meta.get("first_node", 0), {"text_off": NODE_TEXT_OFF})
        _load_lexical(folder, arrays)
        arrays[LINE_TOKENS] = np.asarray(load_npy(folder / f"{LINE_TOKENS}.npy", True, dtype=np.int32, ndim=1,
                                                  shape=(nn,)))
        return cls(folder, meta, arrays)

    @cached_property
    def title_table(self) -> dict[str, np.ndarray] | None:
        """The title links' arrays (``title_*``, memory-mapped; passage ids checked), or None: an index written
        without them, or a delta segment (its searcher makes the links over every segment's documents)."""
        from ..store.verify import reading

        if self.first:
            return None
        with reading(self.folder.parent, "query/"):  # read at the first bridging query: damage named as at open
            return _load_titles(self.folder, self.n, True)

    @staticmethod
    def _get(off: np.ndarray, data, i: int) -> str:
        if isinstance(data, PagedBytes):
            return data.strings([int(off[i])], [int(off[i + 1])])[0]
        return unzeroed(bytes(data[int(off[i]):int(off[i + 1])]).decode("utf-8", "surrogatepass"))

    def _text(self, key: str, i: int) -> str:
        """String ``i`` of the blob ``key`` (``key_off`` + ``key``); undecodable bytes name the damaged file."""
        try:
            return self._get(self._a[f"{key}_off"], self._a[key], i)
        except UnicodeDecodeError as exc:
            from ..store.verify import IndexDamagedError

            blob, rel = self._a[key], f"{QUERY_DIR}/{key}.npy"
            if isinstance(blob, PagedBytes):  # the page where the string starts
                at = blob.folder.relative_to(self.folder.parent).as_posix()
                rel = f"{at}/{page_name(int(self._a[f'{key}_off'][i]) // blob.page)}"
            raise IndexDamagedError(self.folder.parent, rel, "undecodable text", f"string {i}: {exc.reason}") from None

    def _strings(self, key: str, pos) -> list[str]:
        """Strings ``pos`` of the blob ``key``: one gather of their offsets, then slices of one buffer view."""
        pos = np.asarray(pos, dtype=np.int64)
        if not pos.size:
            return []
        off = self._a[f"{key}_off"]
        lo, hi = off[pos].tolist(), off[pos + 1].tolist()
        blob = self._a[key]
        if isinstance(blob, PagedBytes):
            try:
                return blob.strings(lo, hi)
            except UnicodeDecodeError:
                return [self._text(key, int(i)) for i in pos]  # names the damaged file and string
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = memoryview(np.ascontiguousarray(self._a[key])).cast("B")
        try:
            return [unzeroed(str(view[a:b], "utf-8", "surrogatepass")) for a, b in zip(lo, hi)]
        except UnicodeDecodeError:
            return [self._text(key, int(i)) for i in pos]  # names the damaged file and string

    def texts(self, ids) -> list[str]:
        """Display texts of some nodes (reads only their bytes)."""
        return self._strings("text", np.asarray(ids, dtype=np.int64).reshape(-1) - self.first)

    def label(self, node: int) -> str | None:
        """Source-passage label of a T node (None for other nodes and out-of-range ids)."""
        ids = self._a["label_node"]
        p = int(np.searchsorted(ids, node))
        if p < ids.shape[0] and int(ids[p]) == node:
            return self._text("label", p)
        return None

    def labels(self, nodes) -> list[str | None]:
        """:meth:`label` of many nodes: one binary search for all of them."""
        nodes = np.asarray(nodes, dtype=np.int64)
        ids = self._a["label_node"]
        if not nodes.size or not ids.shape[0]:
            return [None] * int(nodes.size)
        pos = np.minimum(np.searchsorted(ids, nodes), ids.shape[0] - 1)
        hit = np.asarray(ids[pos]) == nodes
        found = iter(self._strings("label", pos[hit]))
        return [next(found) if h else None for h in hit.tolist()]

    def doc_label(self, doc: int) -> str:
        """Label of a document (``doc:ID`` when it has none)."""
        ids = self._a["doclabel_id"]
        p = int(np.searchsorted(ids, doc))
        if p < ids.shape[0] and int(ids[p]) == doc:
            return self._text("doclabel", p)
        return f"doc:{doc}"


def open_query_index(index_path: str | os.PathLike, *, checked: bool = True) -> "QueryIndex | None":
    """The build-time query index of one generation folder (memory-mapped), or None when it has none.

    A damaged table raises ``IndexDamagedError`` naming its own file; the node count is checked
    against the graph by the searcher.
    """
    from ..store.verify import reading

    with reading(Path(index_path), "query/"):
        return QueryIndex.load(index_path, checked=checked)


def _zeroed(off: np.ndarray, data: np.ndarray, blank: np.ndarray) -> np.ndarray:
    """A copy of the string blob's bytes ``data`` with the strings where ``blank`` is True overwritten by zeros
    (the offsets stay as they are, so they are shared; an all-zero string reads as "")."""
    off = np.asarray(off, dtype=np.int64)
    out = np.array(data, dtype=np.uint8)
    at = np.flatnonzero(np.asarray(blank, dtype=bool))
    lo, lens = off[at], off[at + 1] - off[at]
    if int(lens.sum()):
        out[np.repeat(lo - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()), dtype=np.int64)] = 0
    return out


#: The tables :func:`scrub_query_tables` rewrites from their previous contents (a writer checks them first).
SCRUBBED_TABLES = ("active", "label_node", "label_off", "label", "doclabel_id", "doclabel_off", "doclabel",
                   "name_node", "name_canon_off", "name_canon", "name_tok_ptr", "name_tok", "tok_off", "tok")


def scrub_query_tables(src_dir: str | os.PathLike, dst_dir: str | os.PathLike, dead: np.ndarray,
                       documents_gone: np.ndarray) -> None:
    """Write ``dst_dir/query/`` from ``src_dir/query/`` without the texts of the ``dead`` nodes (a scrubbing
    delete, :mod:`noderag.indexing.update.scrub`): their passage labels, canonical names and the name tokens no live
    name uses are overwritten by zeros (read as ""; the offsets are shared), the labels of the
    ``documents_gone`` too, and the nodes are marked inactive. The display texts are the segment's own
    pages, erased by the scrub itself. Every other table (BM25 postings, name hashes and postings) holds
    ids and hashes only and is hard-linked as it is: a search skips inactive nodes.
    """
    import shutil

    src, out = Path(src_dir) / QUERY_DIR, Path(dst_dir) / QUERY_DIR
    out.mkdir(parents=True, exist_ok=True)
    dead = np.asarray(dead, dtype=bool)
    a = {p.stem: p for p in src.glob("*.npy")}

    def load(key: str) -> np.ndarray:
        return np.load(a[key], mmap_mode="r", allow_pickle=False)

    written: dict[str, np.ndarray] = {"active": np.asarray(load("active"), dtype=bool) & ~dead}
    # the smaller blobs are written whole with the scrubbed strings' bytes zeroed: their offsets are shared
    label_node = np.asarray(load("label_node"), dtype=np.int64)
    written["label"] = _zeroed(load("label_off"), load("label"), dead[label_node])
    doc_ids = np.asarray(load("doclabel_id"), dtype=np.int64)
    written["doclabel"] = _zeroed(load("doclabel_off"), load("doclabel"), np.isin(doc_ids, documents_gone))
    name_dead = dead[np.asarray(load("name_node"), dtype=np.int64)]
    written["name_canon"] = _zeroed(load("name_canon_off"), load("name_canon"), name_dead)
    ptr, tok = np.asarray(load("name_tok_ptr"), dtype=np.int64), np.asarray(load("name_tok"))
    live_tok = np.zeros(np.asarray(load("tok_off")).shape[0] - 1, dtype=bool)
    live_tok[tok[np.repeat(~name_dead, np.diff(ptr))]] = True
    written["tok"] = _zeroed(load("tok_off"), load("tok"), ~live_tok)
    for key, arr in written.items():
        atomic_save_npy(out / f"{key}.npy", arr)
    for p in sorted(src.iterdir()):  # not the title table: it holds the erased documents' titles (rebuilt in memory)
        if p.is_file() and (p.suffix != ".npy" or p.stem not in written) and not p.stem.startswith("title"):
            try:
                os.link(p, out / p.name)
            except OSError:
                shutil.copyfile(p, out / p.name)
