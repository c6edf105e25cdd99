"""Assembly plans (keys, names and traces made beside the decomposition) against assembling in one place."""

from __future__ import annotations

from array import array

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from noderag.graph.keys import canonical_name, node_key
from noderag.graph.types import NodeType
from noderag.indexing.assemble import ChunkRecord, NodeTable, assemble_chunks, assemble_planned
from noderag.indexing.assembly_plan import PlannedChunks, plan_chunks, plan_columns, planned_from_table
from noderag.indexing.decompose.base import ChunkDecomposition, Unit
from noderag.indexing.executor.stages import chunk_table, decompose_batch

T, S, N, R = (int(NodeType.T), int(NodeType.S), int(NodeType.N), int(NodeType.R))


def _reference_assemble(table: NodeTable, chunks, decomps, trace: list) -> tuple:
    """Assembly as one loop that canonicalises and keys every name itself (the code before plans)."""
    src, dst, wts = array("i"), array("i"), array("f")

    def entity(surface: str):
        surface = " ".join(surface.split())
        canon = canonical_name(surface)
        if not canon:
            return None
        display = surface.strip(" \t.,;:!?\"'“”‘’()[]{}")
        return table.add(N, node_key(N, canon), name=display or surface, text=display or surface)[0]

    for ch, dec in zip(chunks, decomps):
        tkey = node_key(T, f"{ch.source}\x00{ch.text}")
        tid, _ = table.add(T, tkey, name=None, text=ch.text, doc_id=ch.doc_id, source_id=ch.source)
        table.chunk_ids[tid] = tid
        made: list = []
        trace.append((tid, made))
        for unit in dec.units:
            utext = unit.text.strip()
            if not utext:
                continue
            sid, created = table.add(S, node_key(S, f"{tkey:016x}\x00{utext}"), name=None, text=utext,
                                     doc_id=ch.doc_id, chunk_id=tid, source_id=ch.source)
            if not created:
                continue
            made.append((sid, tuple(unit.entities), tuple(tuple(r) for r in unit.relations)))
            src.append(sid), dst.append(tid), wts.append(1.0)
            counts: dict[int, int] = {}
            for surface in unit.entities:
                nid = entity(surface)
                if nid is not None:
                    counts[nid] = counts.get(nid, 0) + 1
            for nid, c in counts.items():
                src.append(sid), dst.append(nid), wts.append(float(c))
            for s_surf, rel, t_surf in unit.relations:
                a, b = entity(s_surf), entity(t_surf)
                crel = canonical_name(rel)
                if a is None or b is None or a == b or not crel:
                    continue
                key = node_key(R, f"{canonical_name(s_surf)}\x1f{crel}\x1f{canonical_name(t_surf)}")
                rid, _ = table.add(R, key, name=None, text=f"{table.names[a]} {' '.join(rel.split())} {table.names[b]}")
                src.extend((a, b)), dst.extend((rid, rid)), wts.extend((1.0, 1.0))
    return np.frombuffer(src, np.int32), np.frombuffer(dst, np.int32), np.frombuffer(wts, np.float32)


def _columns(table: NodeTable) -> tuple:
    return (table.types_array().tolist(), table.keys_array().tolist(), list(table.doc_ids), list(table.chunk_ids),
            table.source_ids, [table.texts[i] for i in range(len(table))],
            [table.names[i] for i in range(len(table))])


_NAMES = ["Ada", "ada", " Ada ", "ADA.", "Bay", "Bay  Line", "bay line", "“Cole”", "...", "", "  ", "Dun", "42",
          "Zürich", "臺灣", "台湾", "(Ely)"]
_RELS = ["sails to", "SAILS  to", "", "...", "has", "owns the"]
_name = st.sampled_from(_NAMES)
_unit = st.builds(Unit, st.sampled_from(["A fact.", " A fact. ", "", "   ", "Another fact.", "Third one."]),
                  st.lists(_name, max_size=5),
                  st.lists(st.tuples(_name, st.sampled_from(_RELS), _name), max_size=4))
_chunk = st.tuples(st.sampled_from(["doc-a", "doc-b"]), st.sampled_from(["text one", "text two", "text three"]),
                   st.lists(_unit, max_size=4))


def _inputs(spec):
    recs = [ChunkRecord(i, i // 2, text, source, None) for i, (source, text, _) in enumerate(spec)]
    decs = [ChunkDecomposition(i, units) for i, (_, _, units) in enumerate(spec)]
    return recs, decs


@settings(max_examples=150, deadline=None)
@given(st.lists(_chunk, max_size=6), st.integers(0, 6))
def test_planned_assembly_equals_assembling_in_one_loop(spec, cut):
    """Node ids, keys, names, texts, edges and traces as the one-loop reference, also when the chunks
    arrive in two calls; duplicate chunks and units merge, relations' ends are created in order."""
    recs, decs = _inputs(spec)
    ref, ref_trace = NodeTable(), []
    ref_edges = _reference_assemble(ref, recs, decs, ref_trace)
    got, got_trace = NodeTable(), []
    parts = [assemble_chunks(got, recs[:cut], decs[:cut], trace=got_trace),
             assemble_chunks(got, recs[cut:], decs[cut:], trace=got_trace)]
    assert _columns(got) == _columns(ref)
    for a, b in zip(ref_edges, (np.concatenate(x) for x in zip(*(e.arrays() for e in parts)))):
        np.testing.assert_array_equal(a, b)
    assert got_trace == ref_trace


def _same_plans(a: PlannedChunks, b: PlannedChunks) -> None:
    assert vars(a) == vars(b)


@settings(max_examples=60, deadline=None)
@given(st.lists(_chunk, max_size=6), st.integers(0, 6))
def test_plans_round_trip_through_arrow(spec, start):
    """The list columns a worker sends give back the same plans, also from a slice of the table."""
    recs, decs = _inputs(spec)
    p = plan_chunks([r.source for r in recs], [r.text for r in recs], decs)
    tab = pa.table({"chunk_id": pa.array(range(len(recs)), pa.int64()), **plan_columns(p)})
    _same_plans(planned_from_table(tab), p)
    start = min(start, len(recs))
    tail = plan_chunks([r.source for r in recs[start:]], [r.text for r in recs[start:]], decs[start:])
    _same_plans(planned_from_table(tab.slice(start)), tail)


def test_worker_plans_build_what_the_records_build():
    """A decompose shard's plans (made in the worker from its records) assemble as the records do; a table
    without sources carries no plans, and the trace units are the records' JSON."""
    from noderag.config import DecomposeConfig
    from noderag.indexing.decompose.factory import make_decomposer

    texts = ["Ada Lovelace met Charles Babbage in London. Babbage designed the Analytical Engine.",
             "The Analytical Engine was never built. Ada Lovelace wrote about it in London.",
             "Ada Lovelace met Charles Babbage in London. Babbage designed the Analytical Engine."]
    rows = [(i, t, None, "doc-a" if i < 2 else "doc-b") for i, t in enumerate(texts)]
    out = decompose_batch(chunk_table(rows), make_decomposer(DecomposeConfig(method="nlp"), None, 0))
    assert planned_from_table(decompose_batch(chunk_table([r[:3] for r in rows]),
                                              make_decomposer(DecomposeConfig(method="nlp"), None, 0))) is None
    from noderag.indexing.executor.stages import records_of

    decs = records_of(out)
    assert sum(len(d.units) for d in decs) >= 4
    recs = [ChunkRecord(i, i, t, src, None) for i, t, _, src in rows]
    want, want_trace = NodeTable(), []
    want_edges = assemble_chunks(want, recs, decs, trace=want_trace).arrays()
    p = planned_from_table(out)
    got, got_trace = NodeTable(), []
    got_edges = assemble_planned(got, recs, [(p, i) for i in range(len(recs))], trace=got_trace).arrays()
    assert _columns(got) == _columns(want)
    for a, b in zip(want_edges, got_edges):
        np.testing.assert_array_equal(a, b)
    from noderag.store.decompositions import _units_json

    for (t, units), (t2, created) in zip(want_trace, got_trace):
        assert t == t2
        assert _units_json(units) == "[" + ",".join(f"[{sid},{p.u_trace[u]}" for sid, u in created) + "]"
