"""End-to-end builds of the demo corpus with the fast ``hash:64`` embedder: table contract, store,
determinism across processes, resume after SIGKILL, incremental insert, bad input, failed writes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from noderag.config import NodeRAGConfig
from noderag.data import demo_dir
from noderag.graph.storage import FormatVersionError
from noderag.graph.types import NodeType
from noderag.indexing.ingest import IngestError
from noderag.store.generations import current_generation, generation_path
from noderag.indexing.driver import BuildError, build_index
from noderag.store.tables import NODE_COLUMNS, IndexNotFoundError, IndexStore

T, S, N, R, A, H, O = (int(t) for t in NodeType)


def _config(**over) -> NodeRAGConfig:
    base = {"embed.spec": "hash:64", "decompose.batch_size": 3, "semantic.enabled": True}
    base.update(over)
    return NodeRAGConfig().with_overrides(base)


def _build(inputs, out, **kw):
    return build_index(inputs, out, kw.pop("config", _config()), progress=False, **kw)


@pytest.fixture(scope="module")
def demo_index(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "idx"
    _build([demo_dir()], out)
    return out


def _live(root: Path) -> Path:
    """The folder of the index's current generation."""
    return generation_path(root, current_generation(root))


def _snapshot(path: Path) -> dict:
    """Everything that must be identical between equivalent builds (not times)."""
    path = _live(path)
    snap = {}
    for rel in ("node_types.npy", "node_keys.npy", "graph/indptr.npy", "graph/indices.npy", "graph/weights.npy",
                "semantic/indptr.npy", "semantic/indices.npy", "semantic/weights.npy"):
        snap[rel] = np.load(path / rel, allow_pickle=False).tobytes()
    snap["nodes"] = pq.read_table(path / "nodes.parquet").to_pydict()
    snap["linked"] = pq.read_table(path / "linked.parquet").to_pydict()
    snap["documents"] = pq.read_table(path / "documents.parquet").to_pydict()
    snap["vectors"] = (path / "vectors.usearch").read_bytes()
    m = json.loads((path / "manifest.json").read_text())
    snap["counts"] = m["counts"]
    return snap


def test_nodes_parquet_contract(demo_index):
    # the file holds no key column (node_keys.npy does); IndexStore.nodes carries it, in column order
    stored = pq.read_table(_live(demo_index) / "nodes.parquet")
    assert "key" not in stored.column_names
    tab = IndexStore.open(demo_index).nodes
    schema = {f.name: str(f.type) for f in tab.schema}
    assert schema == {"id": "int32", "type": "uint8", "key": "uint64", "name": "string", "text": "string",
                      "doc_id": "int32", "chunk_id": "int32", "source_id": "string", "mentions": "int32",
                      "active": "bool"}
    assert list(tab.column_names) == list(NODE_COLUMNS)
    assert tab.column("key").to_numpy().tolist() == np.load(_live(demo_index) / "node_keys.npy").tolist()
    d = tab.to_pydict()
    n = len(d["id"])
    assert d["id"] == list(range(n))
    types = np.asarray(d["type"])
    assert set(np.unique(types).tolist()) == set(range(7))
    for i in range(n):
        t = types[i]
        if t == T:
            assert d["chunk_id"][i] == i and d["doc_id"][i] >= 0 and d["source_id"][i].endswith((".md", ".txt"))
        elif t == S:
            tid = d["chunk_id"][i]
            assert types[tid] == T and d["source_id"][i] == d["source_id"][tid] and d["doc_id"][i] == d["doc_id"][tid]
        else:
            assert d["chunk_id"][i] == -1 and d["doc_id"][i] == -1 and d["source_id"][i] is None
        if t == N:
            assert d["name"][i] == d["text"][i] and d["mentions"][i] >= 1
        elif t == O:
            assert d["name"][i] == d["text"][i]
        else:
            assert d["name"][i] is None and d["mentions"][i] == 0
    names = {d["name"][i] for i in range(n) if types[i] == N}
    assert {"Vellmar Archipelago", "Haldis Lighthouse", "Bram Ostervelt", "Oda Lindqvist", "Port Emmerich",
            "Grey Heron Line", "Kessel", "Skarn", "Mirela Szabo"} <= names
    rel = [d["text"][i] for i in range(n) if types[i] == R]
    assert "Bram Ostervelt was an engineer best known for Haldis Lighthouse" in rel
    docs = pq.read_table(_live(demo_index) / "documents.parquet").to_pydict()
    assert len(docs["doc_id"]) == 12 and docs["doc_id"] == list(range(12))
    assert all(types[c] == T for cs in docs["chunk_ids"] for c in cs)


def test_nodes_file_keeps_names_it_cannot_derive(tmp_path):
    import pyarrow.parquet as pq

    from noderag.indexing.assemble import NodeTable
    from noderag.store.tables import nodes_table, read_nodes_file, write_nodes

    t = NodeTable()
    t.add(N, 1, name="Kessel", text="Kessel")
    t.add(S, 2, name=None, text="Kessel is a town.")
    write_nodes(tmp_path / "a.parquet", t, np.array([1, 0]))
    assert "name" not in pq.read_table(tmp_path / "a.parquet").column_names
    assert read_nodes_file(tmp_path / "a.parquet").column("name").to_pylist() == ["Kessel", None]
    t.add(N, 3, name="Skarn", text="skarn")  # a name that is not the text: the column is stored
    assert nodes_table(t, np.zeros(3)).column("name").to_pylist() == ["Kessel", None, "Skarn"]
    pq.write_table(pq.read_table(tmp_path / "a.parquet").replace_schema_metadata(None), tmp_path / "b.parquet")
    with pytest.raises(ValueError, match="b.parquet: no name column"):
        read_nodes_file(tmp_path / "b.parquet")


def test_store_opens_memory_mapped(demo_index):
    store = IndexStore.open(demo_index)
    n = len(store)
    assert store.nodes.num_rows == n == store.types.shape[0]
    assert isinstance(store.graph.structural.indices, np.memmap)
    assert store.graph.structural.indptr.dtype == np.int64  # stored as int32, widened on load
    assert len(store.texts) == n and len(store.names) == n and len(store.source_ids) == n
    assert store.chunk_ids.dtype == np.int32 and store.mentions.dtype == np.int32 and store.active.all()
    emb = np.isin(store.types, (T, S, A, H))
    assert len(store.vectors) == int(emb.sum())
    assert store.embedder().dim == 64 and store.config.embed.spec == "hash:64"
    m = store.manifest
    assert m["state"] == "complete" and sum(m["counts"]["nodes"].values()) == n
    assert m["tokens"] == {} and m["bytes_total"] == sum(m["bytes"].values()) > 0
    assert set(m["stages"]) == {"ingest", "chunk", "decompose", "assemble", "embed", "attributes",
                                "communities", "tables", "semantic", "finalize"}
    for st in m["stages"].values():  # wall and CPU time and the peak RSS so far, per stage
        assert st["time_s"] >= 0 and st["cpu_s"] >= 0 and st["peak_rss_mb"] > 10
    peaks = [m["stages"][k]["peak_rss_mb"] for k in ("chunk", "assemble", "communities", "finalize")]
    assert peaks == sorted(peaks)


def test_edges_follow_the_schema(demo_index):
    store = IndexStore.open(demo_index)
    g, types = store.graph.structural, store.types
    allowed = {frozenset(p) for p in [(S, T), (S, N), (N, R), (N, A), (H, O), (H, S), (H, A)]} | {frozenset([S])}
    rows = np.repeat(np.arange(g.n), np.diff(g.indptr))
    pairs = {frozenset((int(types[a]), int(types[b]))) for a, b in zip(rows, g.indices)}
    assert pairs <= allowed and frozenset((S, T)) in pairs and frozenset((H, O)) in pairs
    for v in np.flatnonzero(types == S):  # every unit belongs to exactly one chunk
        nb = g.indices[g.indptr[v]:g.indptr[v + 1]]
        assert int(np.sum(types[nb] == T)) == 1
    for v in np.flatnonzero(types == R):  # every relationship links two entities
        nb = g.indices[g.indptr[v]:g.indptr[v + 1]]
        assert np.all(types[nb] == N) and nb.size == 2
    sem = store.graph.semantic
    srows = np.repeat(np.arange(sem.n), np.diff(sem.indptr))
    assert sem.nnz > 0 and np.all(np.isin(types[srows], (T, S, A, H))) and np.all(sem.weights > 0)


_SUB = """
import sys
from noderag.config import NodeRAGConfig
from noderag.indexing.driver import build_index
cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:64", "decompose.batch_size": 3, "semantic.enabled": True})
build_index([sys.argv[1]], sys.argv[2], cfg, progress=False)
"""


def _run_sub(inputs, out, env_extra):
    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, "-c", _SUB, str(inputs), str(out)], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_deterministic_across_processes(tmp_path, demo_index):
    # the fixture was built in this process (random PYTHONHASHSEED); rebuild under a fixed other seed
    a = tmp_path / "a"
    ra = _run_sub(demo_dir(), a, {"PYTHONHASHSEED": "12345"})
    assert ra.returncode == 0, ra.stderr
    assert _snapshot(a) == _snapshot(demo_index)


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_resume_after_sigkills_is_identical(tmp_path, demo_index):
    out = tmp_path / "idx"
    other = tmp_path / "other.txt"
    other.write_text("A different document about Someplace Else.", encoding="utf-8")
    for point in ("decompose-batch", "embed", "finalize-files", "commit", "switch"):
        r = _run_sub(demo_dir(), out, {"NODERAG_TEST_KILL_AT": point})
        assert r.returncode == -9, (point, r.returncode, r.stderr)
        # killed before the pointer switch (at "switch" the generation folder was already renamed): no index yet
        with pytest.raises(IndexNotFoundError, match="not finished"):
            IndexStore.open(out)
        assert current_generation(out) is None
        if point == "decompose-batch":
            # one shard of three chunks was written; then a torn temp file as if killed mid-write
            shards = out / "stages" / "decompose" / "pass-000"
            parts = sorted(shards.glob("part-*.parquet"))
            assert len(parts) == 1 and pq.read_table(parts[0]).num_rows == 3
            (shards / ".part-000001.parquet.x.tmp").write_bytes(b"PAR1 torn")
            # a pending run is never mixed with other inputs: another build discards it (on a copy here)
            elsewhere = tmp_path / "elsewhere"
            shutil.copytree(out, elsewhere)
            said: list[str] = []
            rep = _build([other], elsewhere, log=said.append)
            assert rep.added_documents == 1 and any("discarded the unfinished" in s for s in said), said
            with IndexStore.open(elsewhere) as st:
                assert st.documents.num_rows == 1
    r = _run_sub(demo_dir(), out, {})
    assert r.returncode == 0, r.stderr
    assert IndexStore.open(out).manifest["state"] == "complete"
    assert not (out / "stages").exists()
    assert sorted(p.name for p in (out / "generations").iterdir()) == ["1"]  # the orphan was removed
    assert _snapshot(out) == _snapshot(demo_index)
    rep = _build([demo_dir()], out)  # a rerun finds nothing new
    assert rep.added_documents == 0 and _snapshot(out) == _snapshot(demo_index)


def _key_view(path: Path):
    """T/S/N/R nodes and the structural edges among them, by key (ids may differ)."""
    store = IndexStore.open(path)
    types, keys = store.types, store.keys
    keep = np.isin(types, (T, S, N, R))
    nodes = {(int(types[i]), int(keys[i]), store.texts[i], store.names[i], store.source_ids[i])
             for i in np.flatnonzero(keep)}
    g = store.graph.structural
    rows = np.repeat(np.arange(g.n), np.diff(g.indptr))
    m = keep[rows] & keep[g.indices]
    edges = sorted(zip(keys[rows[m]].tolist(), keys[g.indices[m]].tolist(), g.weights[m].tolist()))
    mentions = {int(keys[i]): int(store.mentions[i]) for i in np.flatnonzero(types == N)}
    return nodes, edges, mentions


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_insert_equals_full_build(tmp_path, demo_index):
    files = sorted(demo_dir().iterdir())
    part_a, part_b = tmp_path / "a", tmp_path / "b"
    part_a.mkdir()
    part_b.mkdir()
    for i, f in enumerate(files):
        shutil.copy(f, (part_a if i < 7 else part_b) / f.name)
    full = tmp_path / "full"
    _build([part_a, part_b], full)
    inc = tmp_path / "inc"
    _build([part_a], inc)
    before = IndexStore.open(inc)
    n_before = len(before)
    from noderag.api import Index

    idx = Index.open(inc).insert([part_b])
    assert _key_view(inc) == _key_view(full)
    # ids of existing nodes never change; new T/S/N/R nodes were appended
    assert np.array_equal(idx.keys[:n_before], before.keys)
    assert idx.manifest["counts"]["documents"] == 12 and len(idx.manifest["runs"]) == 2
    # A/H/O were recomputed: active ones are exactly those with edges; retired ones have none
    g = idx.graph.structural
    deg = np.diff(g.indptr)
    aho = np.isin(idx.types, (A, H, O))
    assert np.all(deg[aho & ~idx.active] == 0) and np.all(deg[aho & idx.active] > 0)
    assert len(idx.vectors) == int((np.isin(idx.types, (T, S, A, H)) & idx.active).sum())
    # inserting the same documents again adds nothing
    rep = build_index([part_b], inc, None, progress=False)
    assert rep.added_documents == 0 and rep.duplicates == 5


def _pair_sums(src, dst, w) -> dict:
    out: dict = {}
    for s, d, x in zip(np.asarray(src).tolist(), np.asarray(dst).tolist(), np.asarray(w).tolist()):
        k = (min(s, d), max(s, d))
        out[k] = out.get(k, 0.0) + x
    return out


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_base_edges_derived_from_graph(tmp_path, monkeypatch):
    # the decomposed edges an insert extends are not stored: graph T/S/N/R edges minus linked.parquet
    import noderag.indexing.assemble as stages
    import noderag.indexing.previous as previous

    made = []

    def recording(*a, **k):
        e = stages.EdgeList()
        e.extend(assemble(*a, **k))
        made.append(e)
        return e

    assemble = stages.assemble_planned
    monkeypatch.setattr(stages, "assemble_planned", recording)
    out = tmp_path / "idx"
    _build([demo_dir()], out)
    assert made  # one call per run of chunks whose records had arrived
    every = stages.EdgeList()
    for e in made:
        every.extend(e)
    src, dst, w = previous.load_base(_live(out)).arrays()
    types = np.load(_live(out) / "node_types.npy")
    assert np.all(types[src] <= types[dst])
    assert _pair_sums(src, dst, w) == _pair_sums(*every.arrays())


def test_derive_base_subtracts_name_links():
    # T0 S1 S2 N3 N4 R5 A6: decomposed S-T, S-N (counts), N-R; links add to (1,3) and create (2,4); A edge ignored
    from noderag.graph.hetero import HeteroGraph
    from noderag.indexing.previous import derive_base

    types = [T, S, S, N, N, R, A]
    base = ([1, 2, 1, 2, 3], [0, 0, 3, 3, 5], [1.0, 1.0, 2.0, 1.0, 1.0])
    link = ([1, 2], [3, 4], [1.0, 3.0])
    src = base[0] + link[0] + [3]
    dst = base[1] + link[1] + [6]
    w = base[2] + link[2] + [1.0]
    g = HeteroGraph.from_coo(types, list(range(10, 17)), src, dst, w)
    s, d, x = derive_base(g, *(np.asarray(a) for a in link))
    assert sorted(zip(s.tolist(), d.tolist(), x.tolist())) == [(0, 1, 1.0), (0, 2, 1.0), (1, 3, 2.0), (2, 3, 1.0),
                                                               (3, 5, 1.0)]
    with pytest.raises(ValueError, match="linked.parquet"):
        derive_base(g, np.array([1]), np.array([4]), np.array([1.0]))


def test_bad_inputs(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(IngestError, match="no documents found"):
        _build([empty], tmp_path / "i1")
    with pytest.raises(IngestError, match="no such file"):
        _build([tmp_path / "nope.txt"], tmp_path / "i2")
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(BuildError, match="not a directory"):
        _build([demo_dir()], f)


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_failed_write_loses_nothing(tmp_path, demo_index, monkeypatch):
    import noderag.store.tables as store_mod

    def no_space(*a, **k):
        raise OSError(28, "No space left on device")

    out = tmp_path / "idx"
    monkeypatch.setattr(store_mod, "atomic_write_parquet", no_space)
    with pytest.raises(OSError, match="No space left"):
        _build([demo_dir()], out)
    shards = sorted((out / "stages" / "decompose" / "pass-000").glob("part-*.parquet"))
    assert sum(pq.read_table(p).num_rows for p in shards) == 12  # every decomposed chunk survived the failure
    monkeypatch.undo()
    _build([demo_dir()], out)
    assert _snapshot(out) == _snapshot(demo_index)


def test_format_version_mismatch_is_clear(tmp_path, demo_index):
    out = tmp_path / "copy"
    shutil.copytree(demo_index, out)
    mpath = _live(out) / "manifest.json"
    m = json.loads(mpath.read_text())
    m["format_version"] = 999
    mpath.write_text(json.dumps(m))
    with pytest.raises(FormatVersionError, match="format version 999.*rebuild it with `noderag build SOURCES --index NEW_DIR`"):
        IndexStore.open(out)
    with pytest.raises(FormatVersionError, match="format version 999.*rebuild it with `noderag build SOURCES --index NEW_DIR`"):
        _build([demo_dir()], out)  # a writer refuses it too
    # the flat single-folder layout of format version 1: a clear "rebuild it", for readers and writers
    flat = tmp_path / "flat"
    shutil.copytree(_live(demo_index), flat)
    with pytest.raises(FormatVersionError, match="flat layout of format version 1.*rebuild it with `noderag build SOURCES --index NEW_DIR`"):
        IndexStore.open(flat)
    with pytest.raises(FormatVersionError, match="flat layout"):
        _build([demo_dir()], flat)
    with pytest.raises(IndexNotFoundError, match="not an index directory"):
        IndexStore.open(tmp_path)


def test_insert_with_other_config_is_refused(tmp_path, demo_index):
    from noderag.config import ConfigError

    out = tmp_path / "copy"
    shutil.copytree(demo_index, out)
    with pytest.raises(ConfigError, match="chunk"):
        build_index([demo_dir()], out, _config(**{"chunk.max_tokens": 200}), progress=False)


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_manifest_records_build_settings_but_no_search_section(tmp_path):
    """Search settings are query-time: the manifest keeps the build's sections and no [search] copy."""
    import noderag
    from noderag.search.config import SearchConfig

    doc = tmp_path / "a.txt"
    doc.write_text("Ada Lovelace worked with Charles Babbage in London. Babbage designed the Analytical Engine.",
                   encoding="utf-8")
    cfg = NodeRAGConfig().with_overrides({"search.vector_top_k": 3, "embed.spec": "hash:16"})
    idx = noderag.build([doc], tmp_path / "idx", config=cfg, progress=False)
    assert "search" not in idx.manifest["config"]
    assert {"chunk", "decompose", "embed", "communities", "seed"} <= set(idx.manifest["config"])
    assert idx.searcher().config == SearchConfig()  # queries use the current defaults


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_semantic_layer_is_built_when_the_search_config_weights_it(tmp_path):
    """Off by default; a new index whose search config weights it gets it; an index without it refuses the weight."""
    from noderag import Index
    from noderag.errors import ConfigError

    plain = tmp_path / "plain"
    _build([demo_dir()], plain, config=_config(**{"semantic.enabled": False}))
    assert json.loads((_live(plain) / "manifest.json").read_text())["counts"]["edges"]["semantic"] == 0
    weighted = tmp_path / "weighted"
    _build([demo_dir()], weighted, config=_config(**{"semantic.enabled": False, "search.semantic_weight": 0.5}))
    m = json.loads((_live(weighted) / "manifest.json").read_text())
    assert m["config"]["semantic"]["enabled"] is True and m["counts"]["edges"]["semantic"] > 0
    from noderag.search.config import SearchConfig

    with Index.open(plain) as index:
        with pytest.raises(ConfigError, match="semantic.enabled = true"):
            index.retrieve("Who sails to Kessel?", config=SearchConfig(semantic_weight=0.5))
        assert index.retrieve("Who sails to Kessel?").passages is not None


def test_a_failed_build_closes_the_backend_it_opened(tmp_path, monkeypatch):
    """The driver closes the LLM backend it made in ``finally``: also when a stage fails."""
    import noderag.indexing.driver as pl

    closed = []

    class Opened:
        def close(self):
            closed.append(True)

    monkeypatch.setattr(pl, "open_llm", lambda llm, config, root, executor=None: Opened())

    def broken(*a, **k):
        raise RuntimeError("assemble broke")

    monkeypatch.setattr(pl, "assemble_stage", broken)
    with pytest.raises(RuntimeError, match="assemble broke"):
        _build([demo_dir()], tmp_path / "idx")
    assert closed == [True]


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_identical_for_any_batch_sizes_and_worker_count(tmp_path, demo_index):
    """Batch sizes and the local worker count change how the work is cut, never the index."""
    out = tmp_path / "other-cuts"
    _build([demo_dir()], out, config=_config(**{"decompose.batch_size": 7, "embed.batch_size": 5,
                                                 "executor.workers": 2}))
    assert _snapshot(out) == _snapshot(demo_index)
