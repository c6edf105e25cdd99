"""Assemble: decomposed chunks -> T, S, N, R nodes and structural edges (append-only node table).

Node ids are assigned in insertion order (chunk order, then unit, entity and
relation order inside a chunk) and never reused; nodes whose key already exists
are merged. Edges are collected as COO arrays and turned into CSR vectorised.
"""

from __future__ import annotations

import re
import time
from array import array
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..lang.entities import canonical_token
from ..graph.types import A, H, N, O, R, S, T

from .assembly_plan import PlannedChunks, plan_chunks
from .decompose.base import ChunkDecomposition
from ..store.decompositions import traces_columns, traces_table
from ..store.text_column import DerivedNames, TextColumn
from ..store.typed_column import TypedColumn
from .key_index import KeyIndex

__all__ = ["NodeTable", "EdgeList", "assemble_chunks", "assemble_planned", "link_known_names", "ChunkRecord",
           "Assembly", "assemble_stage", "cat_edges", "mention_counts"]



@dataclass(frozen=True)
class ChunkRecord:
    """A chunk as assemble needs it: ids, text, and the source passage id and title of its document."""

    chunk_id: int
    doc_id: int
    text: str
    source: str
    title: str | None


class NodeTable:
    """The node table as growing columns plus a key -> id map (never reuses ids).

    Numeric columns are typed buffers (:class:`TypedColumn`: 1-8 bytes a node, where lists of int
    objects held 8-36; a delta insert's existing rows stay in the segments' memory-mapped files); texts
    live in one UTF-8 buffer (:class:`TextColumn`) and names are derived from them
    (:class:`DerivedNames`: an N/O name is its text, others are None).
    """

    def __init__(self, types: Sequence[int] = (), keys: Sequence[int] = (), names: Sequence[str | None] = (),
                 texts: Sequence[str] = (), doc_ids: Sequence[int] = (), chunk_ids: Sequence[int] = (),
                 source_ids: Sequence[str | None] = (), active: Sequence[bool] = ()) -> None:
        self.types = TypedColumn("B", types)
        self.keys = TypedColumn("Q", keys)
        self.doc_ids = TypedColumn("q", doc_ids)
        self.chunk_ids = TypedColumn("q", chunk_ids)
        self.source_ids: list[str | None] = list(source_ids)
        self.active = TypedColumn("B", (1 if a else 0 for a in active))
        self.index: dict[int, int] | KeyIndex = {}  # key -> id of the nodes later ones may merge with
        names = list(names)
        self.texts = TextColumn(texts)
        if len(names) != len(self.texts) or len(self.texts) != len(self.types):
            raise ValueError(f"node table columns differ in length: {len(self.types)} types, "
                             f"{len(names)} names, {len(self.texts)} texts")
        self.names = DerivedNames(self.types, self.texts)
        for i, (t, name) in enumerate(zip(self.types, names)):
            self.names.note(i, t, self.texts[i], name)

    @classmethod
    def from_segments(cls, types: Sequence[np.ndarray], keys: Sequence[np.ndarray], texts: TextColumn,
                      doc_ids: Sequence[np.ndarray], chunk_ids: Sequence[np.ndarray], active: Sequence[np.ndarray],
                      index: KeyIndex) -> "NodeTable":
        """A table of existing nodes over the (memory-mapped) arrays of an index's segments, one array per
        segment and column, referenced, not copied; every name is derived from its text and no source id is
        known. What a delta insert needs of the nodes it builds on: their keys to merge with (``index``), and
        the few rows it looks up."""
        def parts(arrays: Sequence[np.ndarray], dtype) -> list[np.ndarray]:  # bool flags viewed as uint8 bytes
            return [a.view(dtype) if a.dtype == np.bool_ else np.asarray(a, dtype=dtype)
                    for a in map(np.asarray, arrays)]

        table = cls()
        table.types = TypedColumn("B", parts=parts(types, np.uint8))
        table.keys = TypedColumn("Q", parts=parts(keys, np.uint64))
        table.doc_ids = TypedColumn("q", parts=parts(doc_ids, np.int64))
        table.chunk_ids = TypedColumn("q", parts=parts(chunk_ids, np.int64))
        table.active = TypedColumn("B", parts=parts(active, np.uint8))
        table.texts = texts
        table.names = DerivedNames(table.types, texts)
        n = len(table.types)
        table.source_ids = [None] * n
        table.index = index
        if not len(texts) == n == len(table.keys) == len(table.doc_ids) == len(table.chunk_ids) == len(table.active):
            raise ValueError("node table columns differ in length")
        return table

    def __len__(self) -> int:
        return len(self.types)

    def add(self, ntype: int, key: int, *, name: str | None, text: str, doc_id: int = -1,
            chunk_id: int = -1, source_id: str | None = None) -> tuple[int, bool]:
        """Return (id, created); an existing key returns its id and keeps its first values."""
        nid = self.index.get(key)
        if nid is not None:
            return nid, False
        nid = len(self.types)
        self.index[key] = nid
        self.types.append(ntype)
        self.keys.append(key)
        self.texts.append(text)
        self.names.note(nid, ntype, text, name)
        self.doc_ids.append(doc_id)
        self.chunk_ids.append(chunk_id)
        self.source_ids.append(source_id)
        self.active.append(True)
        return nid, True

    def keep_index_for(self, types: Sequence[int]) -> None:
        """Keep only the keys of nodes of ``types`` in the key -> id map (node keys carry their type, so
        the nodes still to be added, e.g. A/H/O after assemble, merge exactly as before; frees the rest)."""
        wanted = set(int(t) for t in types)
        self.index = {k: i for i, (t, k) in enumerate(zip(self.types, self.keys)) if t in wanted}

    def release_strings(self) -> None:
        """Drop the texts, names and source ids (written out already): a build's later stages need only
        the typed columns. Reading a text afterwards raises ``TypeError``."""
        self.texts = self.names = self.source_ids = None  # type: ignore[assignment]

    def types_array(self, start: int = 0) -> np.ndarray:
        """Type codes of nodes ``start..``, uint8 (a copy)."""
        return self.types.numpy(start)

    def keys_array(self, start: int = 0) -> np.ndarray:
        """Keys of nodes ``start..``, uint64 (a copy)."""
        return self.keys.numpy(start)

    def active_array(self, start: int = 0) -> np.ndarray:
        """Active flags of nodes ``start..``, bool (a copy)."""
        return self.active.numpy(start).astype(bool)


@dataclass
class EdgeList:
    """Undirected weighted edges as COO chunks (concatenated on demand)."""

    src: list[np.ndarray] = field(default_factory=list)
    dst: list[np.ndarray] = field(default_factory=list)
    w: list[np.ndarray] = field(default_factory=list)

    def add(self, src, dst, w) -> None:
        self.src.append(np.asarray(src, dtype=np.int32))
        self.dst.append(np.asarray(dst, dtype=np.int32))
        self.w.append(np.asarray(w, dtype=np.float32))

    def extend(self, other: "EdgeList") -> None:
        self.src += other.src
        self.dst += other.dst
        self.w += other.w

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(src int32, dst int32, w float32) concatenated."""
        if not self.src:
            return np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32)
        return np.concatenate(self.src), np.concatenate(self.dst), np.concatenate(self.w)


def assemble_chunks(table: NodeTable, chunks: Sequence[ChunkRecord],
                    decomps: Sequence[ChunkDecomposition], trace: list | None = None) -> EdgeList:
    """Add the T/S/N/R nodes of ``chunks`` (with their decompositions, same order) to ``table``.

    Returns the new structural edges: S-T (1), S-N (mention count), N-R (1 per statement).
    ``trace``: when given, one ``(T id, [(S id, entities, relations), ...])`` per chunk is
    appended, listing the units that created an S node (what ``decompositions/`` keeps).
    """
    if len(chunks) != len(decomps):
        raise ValueError(f"got {len(chunks)} chunks but {len(decomps)} decompositions")
    for ch, dec in zip(chunks, decomps):
        if dec.chunk_id != ch.chunk_id:
            raise ValueError(f"decomposition for chunk {dec.chunk_id} paired with chunk {ch.chunk_id}")
    plan = plan_chunks([c.source for c in chunks], [c.text for c in chunks], decomps)
    made: list | None = [] if trace is not None else None
    edges = assemble_planned(table, chunks, [(plan, c) for c in range(len(chunks))], made)
    if trace is not None:
        for (tid, units), dec in zip(made, decomps):
            picked = [(sid, dec.units[plan.u_index[u]]) for sid, u in units]
            trace.append((tid, [(sid, tuple(x.entities), tuple(tuple(r) for r in x.relations)) for sid, x in picked]))
    return edges


def assemble_planned(table: NodeTable, chunks: Sequence[ChunkRecord], plans: Sequence[tuple[PlannedChunks, int]],
                     trace: list | None = None) -> EdgeList:
    """:func:`assemble_chunks` from the chunks' plans (``(plans, position)`` per chunk, same order).

    ``trace``: when given, one ``(T id, [(S id, unit position in its plans), ...])`` per chunk is
    appended, listing the units that created an S node.
    """
    src = array("i")  # typed buffers: lists of int/float objects held ~100 B per edge
    dst = array("i")
    wts = array("f")
    name_of: dict[int, str] = {}  # entity id -> name (a relation's text names both ends; the column decodes)
    add = table.add

    def name(nid: int) -> str:
        got = name_of.get(nid)
        if got is None:
            got = name_of[nid] = table.names[nid]
        return got

    for ch, (p, c) in zip(chunks, plans):
        tid, _ = add(T, p.tkey[c], name=None, text=ch.text, doc_id=ch.doc_id, source_id=ch.source)
        table.chunk_ids[tid] = tid
        made: list = []
        if trace is not None:
            trace.append((tid, made))
        for u in range(p.unit_start[c], p.unit_start[c + 1]):
            sid, created = add(S, p.u_key[u], name=None, text=p.u_text[u], doc_id=ch.doc_id, chunk_id=tid,
                               source_id=ch.source)
            if not created:  # the same unit twice in one chunk: count once
                continue
            made.append((sid, u))
            src.append(sid)
            dst.append(tid)
            wts.append(1.0)
            first, end = p.touch_start[u], p.touch_start[u + 1]
            nids: list[int] = []  # entity id per touch position, resolved in touch order
            while first + len(nids) < end and p.e_count[first + len(nids)]:  # the mentions come first
                t = first + len(nids)
                nid, _ = add(N, p.e_key[t], name=p.e_name[t], text=p.e_name[t])
                nids.append(nid)
                src.append(sid)
                dst.append(nid)
                wts.append(float(p.e_count[t]))
            for r in range(p.rel_start[u], p.rel_start[u + 1]):
                ends = []
                for k in (p.r_a[r], p.r_b[r]):
                    if k == len(nids):  # a relation's end not touched before: the entity may be new
                        t = first + k
                        nids.append(add(N, p.e_key[t], name=p.e_name[t], text=p.e_name[t])[0])
                    ends.append(nids[k] if k >= 0 else -1)
                words = p.r_text[r]
                if words is None:
                    continue
                a, b = ends
                rid, _ = add(R, p.r_key[r], name=None, text=f"{name(a)} {words} {name(b)}")
                src.extend((a, b))
                dst.extend((rid, rid))
                wts.extend((1.0, 1.0))
    edges = EdgeList()
    edges.add(np.frombuffer(src, np.int32), np.frombuffer(dst, np.int32), np.frombuffer(wts, np.float32))
    return edges


_WORD = re.compile(r"\w+")
_ASCII_LETTER = re.compile(r"[A-Za-z]")


def _has_letter(name: str) -> bool:
    if name.isascii():
        return _ASCII_LETTER.search(name) is not None
    return any(ch.isalpha() for ch in name)
#: Units per batch of the name matching (batches run in worker processes when there are 4 or more).
LINK_BATCH = 8192


def link_known_names(table: NodeTable, base_src: np.ndarray, base_dst: np.ndarray,
                     base_w: np.ndarray, workers: int | None = 1, *, units: np.ndarray | None = None,
                     entities: np.ndarray | None = None) -> EdgeList:
    """S-N edges for every known entity name occurring as a whole-word phrase in a unit.

    ``units`` and ``entities`` (node ids; default: every S node, every active N node) narrow the
    search: a delta insert links only its new units, against the names that may occur in them.

    Matching is case-insensitive on word tokens, but a match must start with an
    upper-case letter or a digit in the unit text; at each position the longest
    name wins. The returned weight is the occurrence count minus the mention count
    the decomposer already recorded for that (unit, entity) pair (only positive
    remainders are returned), so the union equals ``max`` of both counts. The
    result depends only on all units and all names, never on insertion history.
    """
    types = table.types_array()
    ent_ids = np.flatnonzero((types == N) & np.asarray(table.active, dtype=bool)) if entities is None \
        else np.unique(np.asarray(entities, dtype=np.int64))
    known = _KnownNames(table.names, ent_ids)
    s_ids = np.flatnonzero(types == S) if units is None else np.asarray(units, dtype=np.int64)
    step = LINK_BATCH  # worker processes (``workers``) only for several batches
    batches = [(s_ids[b:b + step],) for b in range(0, s_ids.size, step)]
    from .executor.local import fork_map

    parts = list(fork_map(_match_names, batches, workers if len(batches) >= 4 else 1,
                          shared=(known, table.texts)))
    f_src = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    f_dst = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    cnt = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, np.int64)
    extra = np.asarray(cnt, dtype=np.float64) - _pair_weights(types, base_src, base_dst, base_w, f_src, f_dst)
    keep = extra > 0
    edges = EdgeList()
    edges.add(f_src[keep], f_dst[keep], extra[keep])
    return edges


class _KnownNames:
    """The entity names to look for, as matching keys, built on first use.

    A key is a name's canonical tokens joined by NUL (no token holds one); ``lengths`` lists, per
    first token, the token counts of its names longest first, so a position costs one lookup per
    distinct length, never a scan over every name that starts with a common word. With worker
    processes each builds its own on first use: building them here would leave the main process's
    small-object arenas fragmented by a million short-lived strings for the rest of the build.
    """

    def __init__(self, names, ent_ids: np.ndarray) -> None:
        self._names, self._ent_ids = names, ent_ids
        self._built: tuple[dict[str, int], dict[str, tuple[int, ...]]] | None = None

    def keys(self) -> tuple[dict[str, int], dict[str, tuple[int, ...]]]:
        """(name key -> lowest entity id, first token -> name lengths in tokens, descending)."""
        if self._built is None:
            ids: dict[str, int] = {}
            lengths: dict[str, set[int]] = {}
            for nid, name in zip(self._ent_ids.tolist(), self._names.take(self._ent_ids)):
                name = name or ""
                toks = list(map(canonical_token, _WORD.findall(name)))
                if not toks or not _has_letter(name) or (len(toks) == 1 and len(toks[0]) < 3):
                    continue
                ids.setdefault("\x00".join(toks), nid)  # ids ascend: identical token lists keep the lowest id
                lengths.setdefault(toks[0], set()).add(len(toks))
            self._built = ids, {first: tuple(sorted(ks, reverse=True)) for first, ks in lengths.items()}
        return self._built


def _match_names(shared, s_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unit, entity, count) of the known names found in the units ``s_ids`` (``shared``: names, node texts)."""
    known, texts = shared
    ids, lengths = known.keys()
    src: list[int] = []
    dst: list[int] = []
    cnt: list[int] = []
    for sid in s_ids.tolist():
        words = _WORD.findall(texts[sid])
        low = list(map(canonical_token, words))
        found: dict[int, int] = {}
        i = 0
        while i < len(words):
            cands = lengths.get(low[i])
            step = 1
            if cands and (words[i][0].isupper() or words[i][0].isdigit()):  # the match's first character
                for k in cands:
                    nid = ids.get(low[i] if k == 1 else "\x00".join(low[i:i + k]))
                    if nid is not None:
                        found[nid] = found.get(nid, 0) + 1
                        step = k
                        break
            i += step
        for nid in sorted(found):
            src.append(sid)
            dst.append(nid)
            cnt.append(found[nid])
    return np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64), np.asarray(cnt, dtype=np.int64)


def _pair_weights(types: np.ndarray, base_src: np.ndarray, base_dst: np.ndarray, base_w: np.ndarray,
                  s: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Summed weight of the decomposer's S->N edges (``base_*``) for each (unit ``s``, entity ``d``) pair."""
    out = np.zeros(s.size, dtype=np.float64)
    if base_src.size == 0 or s.size == 0:
        return out
    bs = np.asarray(base_src, dtype=np.int64)
    bd = np.asarray(base_dst, dtype=np.int64)
    sn = (types[bs] == S) & (types[bd] == N)
    code = bs[sn] * (1 << 32) + bd[sn]
    uniq, inv = np.unique(code, return_inverse=True)
    sums = np.bincount(inv, weights=np.asarray(base_w, dtype=np.float64)[sn], minlength=uniq.size)
    q = s * (1 << 32) + d
    pos = np.minimum(np.searchsorted(uniq, q), max(uniq.size - 1, 0))
    hit = uniq[pos] == q if uniq.size else np.zeros(q.size, bool)
    out[hit] = sums[pos[hit]]
    return out


def cat_edges(*lists: EdgeList) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, w) of several edge lists, concatenated."""
    e = EdgeList()
    for x in lists:
        e.extend(x)
    return e.arrays()


def mention_counts(n: int, types: np.ndarray, src: np.ndarray, dst: np.ndarray, w: np.ndarray,
                   first: int = 0) -> np.ndarray:
    """Mention count per entity of the nodes ``first..n-1`` (a delta's own rows): the sum of its S-N edge weights."""
    sn = (types[src] == S) & (types[dst] == N) & (dst >= first)
    ns = (types[src] == N) & (types[dst] == S) & (src >= first)
    out = np.bincount(dst[sn] - first, weights=w[sn], minlength=n - first) \
        + np.bincount(src[ns] - first, weights=w[ns], minlength=n - first)
    return np.rint(out).astype(np.int32)


# ----------------------------------------------------------------------------- the stage

#: Chunks assembled per group: their records and traces are the only per-chunk objects alive at once.
ASSEMBLE_GROUP = 4096


class Assembly:
    """The assemble stage, run incrementally: chunks are added to the table in chunk order as soon as
    their decomposition records are noted (:meth:`advance`), the rest and the name links at the end
    (:func:`assemble_stage`).

    Where the cut between the calls falls never changes the result: chunks are assembled one by one
    in the same order, and the groups only bound how many records are parsed at once.
    """

    def __init__(self, table: NodeTable, base: EdgeList, traces, chunk_rows, doc_of, docs_rows: list, config):
        self.table, self.base, self.chunk_rows, self.doc_of = table, base, chunk_rows, doc_of
        self.docs_rows, self.config = docs_rows, config
        self.old_n = len(table)
        self.parts = [traces_table(traces)]
        self.pos = 0  # chunk rows assembled so far
        self.busy_s = 0.0  # seconds spent assembling inside advance()

    def advance(self, records) -> None:
        """Assemble the chunks from the next one on whose records are noted in ``records``."""
        t0 = time.perf_counter()
        rows = self.chunk_rows
        end = self.pos
        while end < len(rows) and rows[end][0] in records:
            end += 1
        for g in range(self.pos, end, ASSEMBLE_GROUP):
            self._assemble(rows[g:min(end, g + ASSEMBLE_GROUP)], records)
        self.pos = end
        self.busy_s += time.perf_counter() - t0

    def _assemble(self, rows, records) -> None:
        crecs, plans = [], []
        for cid, did, text in rows:
            d = self.doc_of[did]
            crecs.append(ChunkRecord(cid, did, text, d.source, d.title))
            plans.append(records.plan(cid, d.source, text))
        made: list = []
        self.base.extend(assemble_planned(self.table, crecs, plans, trace=made))
        units = ["[" + ",".join(f"[{sid},{p.u_trace[u]}" for sid, u in created) + "]"
                 for (p, _), (_, created) in zip(plans, made)]
        self.parts.append(traces_columns([c.doc_id for c in crecs], [t for t, _ in made], units))


def assemble_stage(assembly: Assembly, records, link_scope=None):
    """Finish ``assembly``: add the chunks not assembled yet, append the documents' rows, link known names.

    ``link_scope``: ``(table, old_n) -> {"units": ..., "entities": ...}`` narrows the name linking
    (a delta insert's, :func:`noderag.indexing.update.delta.link_scope`); default: every unit and name.

    ``records``: the decompose stage's :class:`~noderag.indexing.executor.sharded.DecomposedRecords`
    (every chunk noted), read in chunk order one group at a time. Returns (chunk traces as an
    Arrow table, name-link edges). A failed chunk becomes its T node alone. Afterwards the table
    keeps only A/H/O keys in its key map (the only nodes still added).
    """
    import pyarrow as pa

    assembly.advance(records)
    if assembly.pos != len(assembly.chunk_rows):
        cid = assembly.chunk_rows[assembly.pos][0]
        raise RuntimeError(f"assemble: no decomposition record of chunk {cid}")
    table, config = assembly.table, assembly.config
    old_n = assembly.old_n
    traces = pa.concat_tables(assembly.parts)
    assembly.parts = []
    doc_chunks: dict[int, list[int]] = {}  # chunk ids are T node ids
    types = table.types_array()
    for i in (old_n + np.flatnonzero(types[old_n:] == T)).tolist():
        doc_chunks.setdefault(table.doc_ids[i], []).append(i)
    for did, d in assembly.doc_of.items():
        assembly.docs_rows.append({"doc_id": did, "source": d.source, "title": d.title,
                                   "content_hash": d.content_hash, "chunk_ids": doc_chunks.get(did, [])})
    bsrc, bdst, bw = assembly.base.arrays()
    scope = link_scope(table, old_n) if link_scope is not None else {}
    link = (link_known_names(table, bsrc, bdst, bw, workers=config.executor.workers, **scope)
            if config.decompose.link_known_names else EdgeList())
    if link_scope is None:  # a delta run (which narrows the links) adds no A/H/O node: its key map stays
        table.keep_index_for((A, H, O))
    return traces, link
