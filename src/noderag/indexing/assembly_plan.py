"""The half of assembling a chunk that needs no node table: its keys, names and trace text.

Assembling a chunk (:func:`noderag.indexing.assemble.assemble_planned`) looks keys up in the node
table and appends rows, which only the process that owns the table can do. Everything before
that (canonical names, node keys, display names, the JSON of the chunk trace) depends on the
chunk alone, so the decompose workers compute it beside the decomposition
(:func:`plan_chunks`) and ship it as Arrow list columns (:func:`plan_columns`). At 10^6 passages
the main process's assembly paced the whole decompose stage (busy 322 of its 349 s); with the
plans it is busy 117 of 331 s, and the workers set the pace.

A plan lists, per unit, its entity *touches* in the order assembling touches them: each distinct
entity of its mentions (first mention first, with its mention count), then the ends of its
relations not touched yet. Entities are created in touch order and relation nodes between
them, so node ids come out exactly as a build that canonicalises in the main process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..graph.keys import node_key
from ..graph.types import NodeType
from ..lang.entities import canonical_name, strip_edges

from .decompose.base import ChunkDecomposition

__all__ = ["PlannedChunks", "plan_chunks", "plan_columns", "planned_from_table", "t_key", "PLAN_COLUMNS"]

T, S, N, R = int(NodeType.T), int(NodeType.S), int(NodeType.N), int(NodeType.R)

_DISPLAY_STRIP = frozenset(" \t.,;:!?\"'“”‘’()[]{}")  # paired brackets/quotes stay (strip_edges)


def t_key(source: str, text: str) -> int:
    """Key of the T node of a chunk of ``source`` with ``text`` (equal chunks of one document merge)."""
    return node_key(T, f"{source}\x00{text}")


@dataclass
class PlannedChunks:
    """Plans of a run of chunks as flat columns; offsets delimit each chunk's units and each unit's
    touches and relations (``unit_start[c]:unit_start[c + 1]`` are chunk ``c``'s units)."""

    tkey: list[int] = field(default_factory=list)  # per chunk
    unit_start: list[int] = field(default_factory=lambda: [0])  # per chunk, + 1
    u_index: list[int] = field(default_factory=list)  # per unit: its position in the decomposition
    u_key: list[int] = field(default_factory=list)
    u_text: list[str] = field(default_factory=list)  # stripped
    u_trace: list[str] = field(default_factory=list)  # JSON ``[entities,relations]`` without its "["
    touch_start: list[int] = field(default_factory=lambda: [0])  # per unit, + 1
    rel_start: list[int] = field(default_factory=lambda: [0])  # per unit, + 1
    e_key: list[int] = field(default_factory=list)  # per touch: entity key, display name, mention count
    e_name: list[str] = field(default_factory=list)
    e_count: list[int] = field(default_factory=list)  # 0: only a relation's end
    r_a: list[int] = field(default_factory=list)  # per relation: its ends as touch positions in the unit
    r_b: list[int] = field(default_factory=list)  # (-1: no entity), its key and its words;
    r_key: list[int] = field(default_factory=list)  # r_text None: no R node (its ends are still touched)
    r_text: list[str | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tkey)


def plan_chunks(sources: Sequence[str], texts: Sequence[str], decomps: Sequence[ChunkDecomposition]) -> PlannedChunks:
    """Plans of chunks (the source passage id and text of each, and its decomposition; same order)."""
    if not (len(sources) == len(texts) == len(decomps)):
        raise ValueError(f"got {len(sources)} sources, {len(texts)} texts and {len(decomps)} decompositions")
    p = PlannedChunks()
    entity_of: dict[str, tuple[int, str] | None] = {}  # surface -> (key, display name)
    canon_of: dict[str, str] = {}

    def entity(surface: str) -> tuple[int, str] | None:
        got = entity_of.get(surface, 0)
        if got == 0:
            norm = " ".join(surface.split())
            canon = canonical_name(norm)
            got = entity_of[surface] = ((node_key(N, canon), strip_edges(norm, _DISPLAY_STRIP) or norm)
                                        if canon else None)
        return got

    def canon(text: str) -> str:
        c = canon_of.get(text)
        if c is None:
            c = canon_of[text] = canonical_name(text)
        return c

    for source, text, dec in zip(sources, texts, decomps):
        tkey = t_key(source, text)
        tkey_hex = f"{tkey:016x}"
        p.tkey.append(tkey)
        for ui, unit in enumerate(dec.units):
            utext = unit.text.strip()
            if not utext:
                continue
            p.u_index.append(ui)
            p.u_key.append(node_key(S, f"{tkey_hex}\x00{utext}"))
            p.u_text.append(utext)
            p.u_trace.append(json.dumps([list(unit.entities), [list(r) for r in unit.relations]],
                                        ensure_ascii=False, separators=(",", ":"))[1:])
            first = len(p.e_key)
            pos: dict[int, int] = {}  # entity key -> touch position in this unit

            def touch(ent: tuple[int, str] | None, mention: bool) -> int:
                if ent is None:
                    return -1
                k = pos.get(ent[0])
                if k is None:
                    k = pos[ent[0]] = len(p.e_key) - first
                    p.e_key.append(ent[0])
                    p.e_name.append(ent[1])
                    p.e_count.append(0)
                if mention:
                    p.e_count[first + k] += 1
                return k

            for surface in unit.entities:
                touch(entity(surface), True)
            for s_surf, rel, t_surf in unit.relations:
                a, b = entity(s_surf), entity(t_surf)
                ka, kb = touch(a, False), touch(b, False)
                crel = canon(rel)
                valid = a is not None and b is not None and a[0] != b[0] and bool(crel)
                p.r_a.append(ka)
                p.r_b.append(kb)
                p.r_key.append(node_key(R, f"{canon(s_surf)}\x1f{crel}\x1f{canon(t_surf)}") if valid else 0)
                p.r_text.append(" ".join(rel.split()) if valid else None)
            p.touch_start.append(len(p.e_key))
            p.rel_start.append(len(p.r_key))
        p.unit_start.append(len(p.u_key))
    return p


#: The plan's list columns in a decompose result table (one row per chunk) and their value types.
PLAN_COLUMNS = {"plan_tkey": None, "plan_u_index": "int32", "plan_u_key": "uint64", "plan_u_text": "string",
                "plan_u_trace": "string", "plan_u_touches": "int32", "plan_u_rels": "int32",
                "plan_e_key": "uint64", "plan_e_name": "string", "plan_e_count": "int32", "plan_r_a": "int32",
                "plan_r_b": "int32", "plan_r_key": "uint64", "plan_r_text": "string"}


def plan_columns(p: PlannedChunks) -> dict:
    """The plan as Arrow columns, one row per chunk (each a list of that chunk's units, touches or relations)."""
    import pyarrow as pa

    units = np.asarray(p.unit_start, dtype=np.int64)
    touches = np.asarray(p.touch_start, dtype=np.int64)
    rels = np.asarray(p.rel_start, dtype=np.int64)
    per_unit = {"plan_u_index": p.u_index, "plan_u_key": p.u_key, "plan_u_text": p.u_text,
                "plan_u_trace": p.u_trace, "plan_u_touches": np.diff(touches), "plan_u_rels": np.diff(rels)}
    per_touch = {"plan_e_key": p.e_key, "plan_e_name": p.e_name, "plan_e_count": p.e_count}
    per_rel = {"plan_r_a": p.r_a, "plan_r_b": p.r_b, "plan_r_key": p.r_key, "plan_r_text": p.r_text}
    out = {"plan_tkey": pa.array(p.tkey, pa.uint64())}
    for cols, offsets in ((per_unit, units), (per_touch, touches[units]), (per_rel, rels[units])):
        off = pa.array(offsets.astype(np.int32))
        for name, values in cols.items():
            out[name] = pa.ListArray.from_arrays(off, pa.array(values, getattr(pa, PLAN_COLUMNS[name])()))
    return out


def planned_from_table(table) -> PlannedChunks | None:
    """The plans in a decompose result table (rows in its order), or None when it carries none (a shard
    read back from disk keeps only the records)."""
    if "plan_tkey" not in table.column_names:
        return None

    def flat(name: str):
        col = table.column(name).combine_chunks()
        return col.offsets.to_numpy(), col.values

    p = PlannedChunks()
    p.tkey = table.column("plan_tkey").to_numpy().tolist()
    offsets, _ = flat("plan_u_key")
    p.unit_start = (offsets - offsets[0]).tolist()
    for name in ("plan_u_index", "plan_u_key", "plan_u_text", "plan_u_trace", "plan_e_key", "plan_e_name",
                 "plan_e_count", "plan_r_a", "plan_r_b", "plan_r_key", "plan_r_text"):
        off, values = flat(name)
        values = values.slice(int(off[0]), int(off[-1] - off[0]))
        setattr(p, name[len("plan_"):], values.to_pylist() if "string" in PLAN_COLUMNS[name]
                else values.to_numpy().tolist())
    for name, attr in (("plan_u_touches", "touch_start"), ("plan_u_rels", "rel_start")):
        off, values = flat(name)
        counts = values.slice(int(off[0]), int(off[-1] - off[0])).to_numpy()
        setattr(p, attr, np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).tolist())
    return p
