"""The build's embedding: the embed stage (vectors of every T/S node, new ones embedded, old ones reused), embedding
in large batches resumable per batch (T, S, A, H texts; late-chunked units), the HNSW index and the semantic kNN layer."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Sequence

import numpy as np

from ..embed.base import texts_digest
from ..graph.storage import atomic_save_npy, atomic_write_json, load_npy, read_json
from ..graph.types import NodeType
from .assemble import NodeTable
from .node_vectors import NodeVectors

__all__ = ["embed_late_resumable", "embed_pieces_resumable", "embed_stage", "embed_texts_resumable", "unit_spans", "semantic_layer",
           "load_vectors", "start_vector_index"]

T, S = int(NodeType.T), int(NodeType.S)


class _Parts:
    """Batches of vectors saved atomically under ``stage_dir`` and reused while ``digest`` matches."""

    def __init__(self, stage_dir: Path | None, digest: str, n: int, dim: int) -> None:
        self.dir = None if stage_dir is None else Path(stage_dir)
        self.dim = dim
        if self.dir is not None:
            meta_path = self.dir / "meta.json"
            meta = read_json(meta_path) if meta_path.is_file() else None
            if not isinstance(meta, dict) or meta.get("digest") != digest:
                if self.dir.exists():
                    shutil.rmtree(self.dir)
                self.dir.mkdir(parents=True)
                atomic_write_json(meta_path, {"digest": digest, "n": n, "dim": dim})

    def load(self, b: int, rows: int) -> np.ndarray | None:
        part = None if self.dir is None else self.dir / f"part-{b:06d}.npy"
        if part is None or not part.is_file():
            return None
        try:
            return np.asarray(load_npy(part, mmap=False, dtype=np.float32, shape=(rows, self.dim)))
        except ValueError:
            return None

    def save(self, b: int, vec: np.ndarray) -> None:
        if self.dir is not None:
            atomic_save_npy(self.dir / f"part-{b:06d}.npy", vec)


def _embed_checked(embedder, texts: Sequence[str], dim: int) -> np.ndarray:
    vec = np.asarray(embedder.embed(list(texts)), dtype=np.float32)
    if vec.shape != (len(texts), dim):
        raise ValueError(f"embedder {getattr(embedder, 'name', embedder)!r} returned shape {vec.shape}, "
                         f"expected ({len(texts)}, {dim})")
    return vec


def embed_texts_resumable(embedder, texts: Sequence[str], stage_dir: Path | None, *, batch_size: int = 1024,
                          progress=None) -> np.ndarray:
    """Embed ``texts`` in batches of ``batch_size``; with ``stage_dir`` each batch is saved atomically.

    A rerun after a kill reuses the saved batches (checked against a digest of all texts,
    the batch size and the embedder name). Returns float32 of shape (len(texts), dim).
    """
    texts = list(texts)
    dim = int(embedder.dim)
    out = np.zeros((len(texts), dim), dtype=np.float32)
    if not texts:
        return out
    parts = _Parts(stage_dir, texts_digest(getattr(embedder, "name", type(embedder).__name__), texts, batch_size),
                   len(texts), dim)
    for b, start in enumerate(range(0, len(texts), batch_size)):
        stop = min(start + batch_size, len(texts))
        vec = parts.load(b, stop - start)
        if vec is None:
            vec = _embed_checked(embedder, texts[start:stop], dim)
            parts.save(b, vec)
        out[start:stop] = vec
        if progress is not None:
            progress.update(stop - start)
    return out


def _collapsed(text: str) -> tuple[str, np.ndarray, np.ndarray]:
    """``text`` with whitespace runs collapsed to one space, and each kept char's start/end in ``text``."""
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    pieces, starts, ends = [], [], []
    for k, (a, b) in enumerate(words):
        if k:
            pieces.append(" ")
            starts.append(a)
            ends.append(a)
        pieces.append(text[a:b])
        starts.extend(range(a, b))
        ends.extend(range(a + 1, b + 1))
    return "".join(pieces), np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)


def unit_spans(chunk: str, units: Sequence[str], prefix: str | None = None) -> list[tuple[int, int] | None]:
    """Character span in ``chunk`` of each unit that is a verbatim extract of it (up to whitespace).

    A unit may carry ``prefix`` (e.g. "Title: ") that is not part of the chunk; it is
    ignored. Units are searched in order, each from where the previous one ended, then
    from the start. ``None`` for a unit that is not found.
    """
    flat, starts, ends = _collapsed(chunk)
    out: list[tuple[int, int] | None] = []
    pos = 0
    for unit in units:
        needle = " ".join(unit.split())
        if prefix and needle.startswith(prefix) and needle not in flat:
            needle = needle[len(prefix):].strip()
        at = flat.find(needle, pos) if needle else -1
        if at < 0 and needle:
            at = flat.find(needle)
        if at < 0:
            out.append(None)
            continue
        pos = at + len(needle)
        out.append((int(starts[at]), int(ends[at + len(needle) - 1])))
    return out


def embed_late_resumable(embedder, chunks: Sequence[str], units: Sequence[str], unit_chunk: np.ndarray,
                         prefixes: Sequence[str | None], stage_dir: Path | None, *, batch_size: int = 1024,
                         progress=None) -> tuple[np.ndarray, np.ndarray, int]:
    """Embed chunks and their units, the units by late chunking from the chunks' forward passes.

    ``unit_chunk[u]`` is the position in ``chunks`` of unit ``u``'s chunk; ``prefixes[c]`` is
    a prefix the units of chunk ``c`` may carry. Units that are not verbatim spans of their
    chunk, or that ``embedder.embed_with_spans`` does not cover, are embedded on their own.
    Batches of ``batch_size`` chunks (with their units) are saved under ``stage_dir`` as in
    ``embed_texts_resumable``. Returns (chunk vectors, unit vectors, units embedded late).
    """
    return _embed_chunks_and_units(embedder, chunks, units, unit_chunk, prefixes, stage_dir, batch_size, progress,
                                   "late", _late_batch)


def _late_batch(embedder, chunks: list[str], unit_lists: list[list[str]], prefixes: list[str | None]):
    """One batch of :func:`embed_late_resumable`: (chunk vectors, span vectors, covered, flat unit position
    of each span)."""
    spans, where, off = [], [], 0
    for chunk, texts, prefix in zip(chunks, unit_lists, prefixes):
        found = unit_spans(chunk, texts, prefix)
        h = len(prefix or "")
        spans.append([(a + h, b + h) for a, b in (sp for sp in found if sp is not None)])
        where.extend(off + k for k, sp in enumerate(found) if sp is not None)
        off += len(texts)
    heads = [len(p or "") for p in prefixes]
    inputs = [(p or "") + c for p, c in zip(prefixes, chunks)]
    text_vecs, span_vecs, covered = embedder.embed_with_spans(inputs, spans, heads)
    return text_vecs, span_vecs, covered, np.asarray(where, dtype=np.int64)


def _exact_spans(chunk: str, units: list[str], prefix: str | None) -> tuple[list[tuple[int, int]], list[str], list[int]]:
    """Spans of the units whose text is exactly ``chunk[a:b]`` or ``prefix + chunk[a:b]``: (spans, heads,
    position of each in ``units``); a unit that is not verbatim in its chunk (whitespace collapsed, say) is
    left out. Each is searched from where the previous one ended, then from the start."""
    spans, heads, where = [], [], []
    pos = 0
    for k, unit in enumerate(units):
        head, body = "", unit
        at = chunk.find(body, pos) if body else -1
        if at < 0 and body:
            at = chunk.find(body)
        if at < 0 and prefix and unit.startswith(prefix) and len(unit) > len(prefix):
            head, body = prefix, unit[len(prefix):]
            at = chunk.find(body, pos)
            if at < 0:
                at = chunk.find(body)
        if at >= 0:
            spans.append((at, at + len(body)))
            heads.append(head)
            where.append(k)
            pos = at + len(body)
    return spans, heads, where


def embed_pieces_resumable(embedder, chunks: Sequence[str], units: Sequence[str], unit_chunk: np.ndarray,
                           prefixes: Sequence[str | None], stage_dir: Path | None, *, batch_size: int = 1024,
                           progress=None, chunk_out=None, unit_out=None) -> tuple[np.ndarray, np.ndarray, int]:
    """Embed chunks and their units with a token-table embedder, each chunk tokenized once: a unit that is
    a span of its chunk (with or without ``prefixes[c]``) is pooled from the chunk's tokens
    (``embedder.embed_with_pieces``, the same vectors as embedding its text), any other on its own.

    Arguments and batches (of ``batch_size`` chunks, saved under ``stage_dir``) as ``embed_late_resumable``;
    ``chunk_out``/``unit_out``: where to put each batch's rows by position (``x[pos] = rows``) instead of
    new float32 arrays, so the build holds no second copy of its vectors. Returns (chunk vectors, unit
    vectors, units pooled from their chunk's tokens), the vectors being ``chunk_out``/``unit_out`` if given."""
    return _embed_chunks_and_units(embedder, chunks, units, unit_chunk, prefixes, stage_dir, batch_size, progress,
                                   "pieces", _pieces_batch, chunk_out, unit_out)


def _pieces_batch(embedder, chunks: list[str], unit_lists: list[list[str]], prefixes: list[str | None]):
    """One batch of :func:`embed_pieces_resumable`, returned as :func:`_late_batch` returns it."""
    spans, heads, where, off = [], [], [], 0
    for chunk, texts, prefix in zip(chunks, unit_lists, prefixes):
        sp, hd, at = _exact_spans(chunk, texts, prefix)
        spans.append(sp)
        heads.append(hd)
        where.extend(off + k for k in at)
        off += len(texts)
    text_vecs, span_vecs, covered = embedder.embed_with_pieces(chunks, spans, heads)
    return text_vecs, span_vecs, covered, np.asarray(where, dtype=np.int64)


def _embed_chunks_and_units(embedder, chunks, units, unit_chunk, prefixes, stage_dir, batch_size, progress,
                            kind: str, embed_batch, chunk_out=None, unit_out=None) -> tuple[np.ndarray, np.ndarray, int]:
    """The batches, resume and fallback shared by the late and the pieces paths: ``embed_batch`` embeds one
    batch's chunks with the units it can place in them; every other unit is embedded on its own."""
    chunks, units, prefixes = list(chunks), list(units), list(prefixes)
    unit_chunk = np.asarray(unit_chunk, dtype=np.int64)
    if unit_chunk.shape != (len(units),) or (unit_chunk.size and (unit_chunk.min() < 0
                                                                    or unit_chunk.max() >= len(chunks))):
        raise ValueError("unit_chunk must give a chunk position for every unit")
    dim = int(embedder.dim)
    chunk_vecs = np.zeros((len(chunks), dim), dtype=np.float32) if chunk_out is None else chunk_out
    unit_vecs = np.zeros((len(units), dim), dtype=np.float32) if unit_out is None else unit_out
    if not chunks:
        if units:
            raise ValueError("units without chunks")
        return chunk_vecs, unit_vecs, 0
    name = getattr(embedder, "name", type(embedder).__name__)
    digest = texts_digest(name, chunks + units + [str(c) for c in unit_chunk.tolist()]
                          + [p or "" for p in prefixes], batch_size, kind)
    parts = _Parts(stage_dir, digest, len(chunks) + len(units), dim)
    order = np.argsort(unit_chunk, kind="stable")
    bounds = np.searchsorted(unit_chunk[order], np.arange(len(chunks) + 1), side="left")
    placed = 0
    for b, start in enumerate(range(0, len(chunks), batch_size)):
        stop = min(start + batch_size, len(chunks))
        members = order[bounds[start]:bounds[stop]]
        rows = (stop - start) + members.size
        vec = parts.load(b, rows)
        if vec is None:
            vec = np.zeros((rows, dim), dtype=np.float32)
            unit_lists = [[units[u] for u in order[bounds[c]:bounds[c + 1]].tolist()] for c in range(start, stop)]
            text_vecs, span_vecs, covered, where = embed_batch(embedder, chunks[start:stop], unit_lists,
                                                               prefixes[start:stop])
            vec[: stop - start] = text_vecs
            done = np.zeros(members.size, dtype=bool)
            vec[stop - start + where[covered]] = span_vecs[covered]
            done[where[covered]] = True
            rest = np.flatnonzero(~done)
            if rest.size:
                vec[stop - start + rest] = _embed_checked(embedder, [units[u] for u in members[rest].tolist()], dim)
            parts.save(b, vec)
            placed += int(covered.sum())
        chunk_vecs[start:stop] = vec[: stop - start]
        unit_vecs[members] = vec[stop - start:]
        if progress is not None:
            progress.update(rows)
    return chunk_vecs, unit_vecs, placed


class _Rows:
    """The rows ``ids[pos]`` of a ``NodeVectors``, set by position (``rows[pos] = values``)."""

    def __init__(self, vec: NodeVectors, ids: np.ndarray) -> None:
        self.vec, self.ids = vec, ids

    def __setitem__(self, pos, values: np.ndarray) -> None:
        self.vec[self.ids[pos]] = values


def start_vector_index(ids: np.ndarray, vectors: np.ndarray, dim: int, embed_config, parallel: int | None = None):
    """An HNSW index keyed by node id whose first ``vectors`` are being added in the background.

    ``embed_config.vector_shard_count(len(ids))`` shards, each built by one thread, up to ``parallel``
    (default: every core) at once: identical files every run. Add the rest with ``add_in_background``;
    call ``wait()`` before using it.
    """
    from ..graph.vectors import VectorIndex

    shards = embed_config.vector_shard_count(int(ids.size))
    index = VectorIndex(dim, metric="cos", dtype=embed_config.vector_dtype, connectivity=embed_config.connectivity,
                        expansion_add=embed_config.expansion_add, shards=shards,
                        parallel=parallel or max(1, min(shards, os.cpu_count() or 1)))
    index.add_in_background(np.asarray(ids, dtype=np.int64), vectors)  # float16 or float32
    return index


def semantic_layer(n: int, ids: np.ndarray, vectors: np.ndarray, k: int, index=None):
    """kNN semantic layer (CSR over ``n`` nodes, weight = cosine similarity > 0) among ``ids``."""
    from ..graph.csr import CSR
    from ..graph.vectors import knn_csr

    if ids.size < 2:
        return CSR.empty(n)
    return knn_csr(n, np.asarray(ids, dtype=np.int64), np.asarray(vectors, dtype=np.float32),
                   k=min(k, ids.size - 1), index=index if ids.size >= 4096 else None)


def load_vectors(path, ids: np.ndarray, dim: int) -> np.ndarray:
    """The vectors of ``ids`` as a build stored them, in a saved ``vectors.usearch`` or several (a generation's
    segments): float32 (len(ids), dim). Exactly the values the build held (never re-normalised), so a
    run that reuses them computes what a fresh build computes."""
    from ..graph.vectors import VectorIndex

    if ids.size == 0:
        return np.zeros((0, dim), np.float32)
    paths = [path] if isinstance(path, (str, Path)) else list(path)
    arr = np.asarray(VectorIndex.load_segments(paths, view=True).get(np.asarray(ids, dtype=np.int64)),
                     dtype=np.float32)
    if arr.shape != (ids.size, dim):
        raise ValueError(f"{path}: stored vectors have shape {arr.shape}, expected ({ids.size}, {dim})")
    return arr


def embed_stage(table: NodeTable, old_n: int, emb, executor, embed, stages: Path, bars, doc_of,
                embedder_given: bool, old_vectors: tuple[list[Path], np.ndarray] | None = None,
                vectors_file: Path | None = None) -> NodeVectors:
    """Vectors of every T/S node: the new ones embedded (resumable shards), the old ones read from
    ``old_vectors`` = (the previous generation's vectors.usearch of each segment, old id of each node);
    ``embed``: the ``[embed]`` section.

    ``vectors_file``: keep them in this ``.npy`` file (room for the A and H vectors included), which
    the vector index worker maps too; the build then holds only the rows it is using in memory."""
    from .decompose.nlp import unit_prefix
    from .executor.sharded import embed_sharded

    dim = int(emb.dim)
    n_ts = len(table)
    types = table.types_array()
    # rows for the embedded nodes only; float16 unless the index keeps float32 vectors
    vec = NodeVectors(dim, np.float32 if embed.vector_dtype == "f32" else np.float16)
    n_vec = int(np.isin(types, (T, S)).sum())
    vec.reserve(n_vec + 1024 + n_vec // 20)  # untouched pages until written; room for the A and H vectors
    if vectors_file is not None:
        vectors_file.parent.mkdir(parents=True, exist_ok=True)
        vec.share_file(vectors_file)
    if old_vectors is not None:
        path, vec_src = old_vectors
        old_ids = np.flatnonzero(np.isin(types[:old_n], (T, S)))
        old_ids = old_ids[vec_src[old_ids] >= 0]  # a delete's untouched segments need no vectors here
        vec[old_ids] = load_vectors(path, vec_src[old_ids], dim)
    new_ids = np.flatnonzero(np.isin(types, (T, S)) & (np.arange(n_ts) >= old_n))
    late = embed.late_units and callable(getattr(emb, "embed_with_spans", None))
    pieces = not late and callable(getattr(emb, "embed_with_pieces", None))
    with bars.bar(int(new_ids.size), "embed T/S") as bar:
        if late or pieces:  # units from their chunk's pass: late chunking, or a static model's exact pooling
            vec.slots(new_ids)  # rows in id order, one range the HNSW worker maps (not a 2.5 GB copy at 10^6)
            new_t = new_ids[types[new_ids] == T]
            new_s = new_ids[types[new_ids] == S]
            pos_of_t = {int(t): k for k, t in enumerate(new_t.tolist())}
            in_new_chunk = np.array([table.chunk_ids[s] in pos_of_t for s in new_s.tolist()], dtype=bool)
            if not in_new_chunk.all():  # a new unit of an existing chunk: no pass of its chunk to reuse
                rest = new_s[~in_new_chunk]
                vec[rest] = embed_texts_resumable(emb, [table.texts[i] for i in rest.tolist()], stages / "emb_s",
                                                  batch_size=embed.batch_size, progress=bar)
                new_s = new_s[in_new_chunk]
            unit_chunk = np.array([pos_of_t[table.chunk_ids[s]] for s in new_s.tolist()], dtype=np.int64)
            titles = [getattr(doc_of.get(table.doc_ids[t]), "title", None) for t in new_t.tolist()]
            args = (emb, [table.texts[i] for i in new_t.tolist()], [table.texts[i] for i in new_s.tolist()],
                    unit_chunk, [unit_prefix(t) if t else None for t in titles])
            if late:
                vec[new_t], vec[new_s], _ = embed_late_resumable(*args, stages / "emb_ts",
                                                                 batch_size=embed.batch_size, progress=bar)
            else:  # rows straight into ``vec`` (float16 or file-mapped): no float32 copy of all T/S vectors
                embed_pieces_resumable(*args, stages / "emb_pieces", batch_size=embed.batch_size,
                                       progress=bar, chunk_out=_Rows(vec, new_t), unit_out=_Rows(vec, new_s))
        else:
            embed_sharded(executor, embed, emb, embedder_given, table.texts.take(new_ids),
                          stages / "emb_ts", bar, out=vec.slots(new_ids))
    return vec
