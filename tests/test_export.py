"""``noderag export``: GraphML read back by networkx and igraph, Neo4j import CSVs checked against the
neo4j-admin header rules with counts and referential integrity, the Parquet layout, batching, the CLI."""

from __future__ import annotations

import csv
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import igraph as ig
import networkx as nx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doors import demo  # noqa: E402

from noderag.cli import main  # noqa: E402
from noderag.export import ExportError, export_index  # noqa: E402
from noderag.export.neo4j import LABELS  # noqa: E402
from noderag.export.parquet import LAYOUT  # noqa: E402
from noderag.export.text import xml_escape  # noqa: E402
from noderag.graph.types import NodeType  # noqa: E402

LETTERS = [t.name for t in NodeType]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return demo(tmp_path_factory)


def _edges(index, letters=LETTERS):
    """The index's undirected edges (both layers) among ``letters`` as a Counter of (min id, max id, layer)."""
    keep = np.isin(index.types, [int(NodeType[t]) for t in letters])
    out = Counter()
    for layer in ("structural", "semantic"):
        s, d, _ = index.graph.edge_list(layer)
        for a, b in zip(s.tolist(), d.tolist()):
            if keep[a] and keep[b]:
                out[(a, b, layer)] += 1
    return out


def _names(index):
    return index.nodes.column("name").to_pylist()


# ---------------------------------------------------------------- GraphML

def test_graphml_reads_back_in_networkx_and_igraph(index, tmp_path):
    out = tmp_path / "g.graphml"
    rep = export_index(index, "graphml", out=out)
    types = [NodeType(int(t)).name for t in index.types]
    names = _names(index)
    edges = _edges(index)
    assert rep.counts == {"nodes": len(index), "edges": sum(edges.values())}
    assert rep.counts["edges"] == index.manifest["counts"]["edges"]["structural"] + \
        index.manifest["counts"]["edges"]["semantic"]

    g = nx.read_graphml(out)
    assert g.number_of_nodes() == len(index) and g.number_of_edges() == sum(edges.values())
    assert [g.nodes[f"n{i}"]["type"] for i in range(len(index))] == types
    assert [g.nodes[f"n{i}"].get("name") for i in range(len(index))] == names
    assert [g.nodes[f"n{i}"]["text"] for i in range(len(index))] == index.texts
    assert Counter((min(int(u[1:]), int(v[1:])), max(int(u[1:]), int(v[1:])), d["layer"])
                   for u, v, d in g.edges(data=True)) == edges
    kinds = Counter(d["type"] for _, _, d in g.edges(data=True))
    assert {f"structural.{k}": v for k, v in kinds.items()} == {
        k: v for k, v in index.manifest["counts"]["edges"].items() if k.startswith("structural.")}

    h = ig.Graph.Read_GraphML(str(out))
    assert h.vcount() == len(index) and h.ecount() == sum(edges.values())
    assert h.vs["id"] == [f"n{i}" for i in range(len(index))]
    assert h.vs["type"] == types
    assert h.vs["name"] == [n or "" for n in names]  # igraph fills a missing string with ""
    assert Counter((min(e.source, e.target), max(e.source, e.target), e["layer"]) for e in h.es) == edges


def test_graphml_types_filter_keeps_edges_among_them(index, tmp_path):
    out = tmp_path / "nr.graphml"
    rep = export_index(index, "graphml", out=out, types="N, R")
    g = nx.read_graphml(out)
    assert {d["type"] for _, d in g.nodes(data=True)} == {"N", "R"}
    assert g.number_of_nodes() == int(np.isin(index.types, [2, 3]).sum()) == rep.counts["nodes"]
    assert {d["type"] for _, _, d in g.edges(data=True)} == {"N-R"}
    assert g.number_of_edges() == index.manifest["counts"]["edges"]["structural.N-R"] == rep.counts["edges"]


def test_xml_escape_round_trips_and_replaces_what_xml_cannot_hold():
    texts = ["a & b < c > d", 'quote " and \' apostrophe', "line\r\nbreak\ttab", "bell\x07 nul\x00 ff\x0c",
             "ünïcödé ✓ 漢字", None]
    esc = xml_escape(pa.array(texts, pa.string())).to_pylist()
    for raw, e in zip(texts, esc):
        if raw is None:
            assert e is None
            continue
        back = ET.fromstring(f"<a>{e}</a>").text or ""
        assert back == re.sub("[\x00-\x08\x0b\x0c\x0e-\x1f]", "\ufffd", raw)


# ---------------------------------------------------------------- Neo4j

_ID = re.compile(r"^(?P<name>[^:]*):(?P<kind>ID|START_ID|END_ID)(\((?P<space>[^)]+)\))?$")
_PROP = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(:(?P<type>[a-z_]+)(?P<array>\[\])?)?$")
# the property types neo4j-admin database import accepts
_NEO_TYPES = {"int", "long", "float", "double", "boolean", "byte", "short", "char", "string", "point", "date",
              "localtime", "time", "localdatetime", "datetime", "duration"}


def _check_header(header: list[str], kind: str) -> dict:
    """Apply neo4j-admin's header rules; returns {"id": (col, space), "start"/"end": ..., "label"/"type": col}."""
    found: dict = {}
    for i, entry in enumerate(header):
        m = _ID.match(entry)
        if m:
            key = {"ID": "id", "START_ID": "start", "END_ID": "end"}[m["kind"]]
            assert key not in found, f"{entry}: {m['kind']} given twice"
            found[key] = (i, m["space"])
            continue
        if entry in (":LABEL", ":TYPE", ":IGNORE"):
            found[entry[1:].lower()] = i
            continue
        p = _PROP.match(entry)
        assert p, f"header entry {entry!r} is not name[:type] nor a :ID/:LABEL/:TYPE field"
        assert p["type"] is None or p["type"] in _NEO_TYPES, f"{entry}: unknown property type"
    if kind == "nodes":
        assert "id" in found and "label" in found and "start" not in found and "type" not in found
    else:
        assert "start" in found and "end" in found and "type" in found and "id" not in found
    assert len(set(header)) == len(header)
    return found


def _read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return rows[0], rows[1:]


def test_neo4j_files_follow_the_import_format(index, tmp_path):
    out = tmp_path / "neo"
    rep = export_index(index, "neo4j", out=out, with_vectors=True)
    files = sorted(p.name for p in out.iterdir())
    assert {"import.cypher", "README.txt", "export.json", "documents.csv", "rels_in_document.csv"} <= set(files)
    ids: dict[str, set[int]] = {"Node": set(), "Document": set()}
    per_type = Counter()
    for name in files:
        if not name.startswith(("nodes_", "documents")):
            continue
        header, rows = _read_csv(out / name)
        f = _check_header(header, "nodes")
        col, space = f["id"]
        for row in rows:
            assert len(row) == len(header)
            nid = int(row[col])
            assert nid not in ids[space], f"{name}: id {nid} twice in ID space {space}"
            ids[space].add(nid)
            labels = row[f["label"]].split(";")
            if space == "Node":
                letter = name[len("nodes_"):-len(".csv")]
                assert labels == ["Node", LABELS[letter]] and row[header.index("type")] == letter
                assert NodeType(int(index.types[nid])).name == letter
                per_type[letter] += 1
                vec = row[header.index("vector:float[]")]
                if vec:
                    assert np.allclose([float(x) for x in vec.split(";")], index.vectors.get([nid])[0], atol=1e-6)
            else:
                assert labels == ["Document"]
    assert ids["Node"] == set(range(len(index)))
    assert ids["Document"] == set(index.documents.column("doc_id").to_pylist())
    assert dict(per_type) == {t: int((index.types == int(NodeType[t])).sum()) for t in LETTERS}

    rels = Counter()
    for name in files:
        if not name.startswith("rels_"):
            continue
        header, rows = _read_csv(out / name)
        f = _check_header(header, "relationships")
        (sc, sspace), (ec, espace) = f["start"], f["end"]
        rtypes = {row[f["type"]] for row in rows}
        assert len(rtypes) <= 1, f"{name}: one relationship type per file"
        for row in rows:  # referential integrity: both ends exist in their ID space
            s, e = int(row[sc]), int(row[ec])
            assert s in ids[sspace] and e in ids[espace], f"{name}: dangling relationship {s}->{e}"
            if name == "rels_in_document.csv":
                assert index.types[s] == NodeType.T and int(index.doc_ids[s]) == e
            else:
                kind = row[header.index("kind")]
                a, b = kind.split("-")
                assert (NodeType(int(index.types[s])).name, NodeType(int(index.types[e])).name) == (a, b)
                assert row[f["type"]] == (f"{a}_{b}" if not name.startswith("rels_semantic") else "SEMANTIC")
                rels[(min(s, e), max(s, e), "semantic" if name.startswith("rels_semantic") else "structural")] += 1
    assert rels == _edges(index)
    assert rep.counts["edges"] == sum(rels.values())
    in_doc = _read_csv(out / "rels_in_document.csv")[1]
    assert len(in_doc) == int((index.types == NodeType.T).sum())

    # the LOAD CSV script loads every file, and reads only columns its file has
    script = (out / "import.cypher").read_text()
    loaded = re.findall(r"LOAD CSV WITH HEADERS FROM 'file:///([^']+)'", script)
    assert sorted(loaded) == sorted(n for n in files if n.endswith(".csv"))
    for stmt in script.splitlines():
        m = re.search(r"file:///([^']+)'", stmt)
        if m:
            header = _read_csv(out / m[1])[0]
            assert set(re.findall(r"row\.`([^`]+)`", stmt)) <= set(header), stmt
    readme = (out / "README.txt").read_text()
    assert "neo4j-admin database import full" in readme
    assert all(f"={n}" in readme for n in files if n.endswith(".csv"))


# ---------------------------------------------------------------- Parquet

def test_parquet_layout_and_contents(index, tmp_path):
    out = tmp_path / "pq"
    rep = export_index(index, "parquet", out=out, with_vectors=True)
    info = json.loads((out / "export.json").read_text())
    assert info["layout"] == LAYOUT and info["generation"] == index.generation and info["vector_dim"] == 64
    nodes = pq.read_table(out / "nodes.parquet")
    assert nodes.schema.names == ["id", "type", "key", "name", "text", "doc_id", "chunk_id", "source_id",
                                  "mentions", "active"]
    assert [str(f.type) for f in nodes.schema] == ["int32", "string", "uint64", "string", "string", "int32",
                                                   "int32", "string", "int32", "bool"]
    assert nodes.column("id").to_pylist() == list(range(len(index)))
    assert nodes.column("type").to_pylist() == [NodeType(int(t)).name for t in index.types]
    assert nodes.column("key").to_pylist() == index.keys.tolist()
    assert nodes.column("name").to_pylist() == _names(index)
    assert nodes.column("text").to_pylist() == index.texts
    assert nodes.column("doc_id").to_pylist() == [d if d >= 0 else None for d in index.doc_ids.tolist()]
    edges = pq.read_table(out / "edges.parquet")
    assert edges.schema.names == ["src", "dst", "type", "layer", "weight"]
    got = Counter((min(s, d), max(s, d), la) for s, d, la in zip(edges.column("src").to_pylist(),
                                                                  edges.column("dst").to_pylist(),
                                                                  edges.column("layer").to_pylist()))
    assert got == _edges(index) and rep.counts["edges"] == edges.num_rows
    src_t = index.types[edges.column("src").to_numpy()]
    dst_t = index.types[edges.column("dst").to_numpy()]
    assert (src_t <= dst_t).all()  # from the lower type code to the higher
    docs = pq.read_table(out / "documents.parquet")
    assert docs.to_pylist() == index.documents.select(docs.schema.names).to_pylist()
    vec = pq.read_table(out / "vectors.parquet")
    vt = vec.schema.field("vector").type
    assert pa.types.is_fixed_size_list(vt) and vt.list_size == 64 and vt.value_type == pa.float32()
    ids = vec.column("id").to_numpy()
    assert set(ids.tolist()) == set(index.vectors.keys().tolist())
    assert np.array_equal(np.stack(vec.column("vector").to_numpy(zero_copy_only=False)), index.vectors.get(ids))


def test_small_batches_give_the_same_export(index, tmp_path):
    a = export_index(index, "parquet", out=tmp_path / "a", with_vectors=True)
    b = export_index(index, "parquet", out=tmp_path / "b", with_vectors=True, batch_size=7)
    assert a.counts == b.counts
    for name in ("nodes", "edges", "documents", "vectors"):
        assert pq.read_table(tmp_path / "a" / f"{name}.parquet").equals(pq.read_table(tmp_path / "b" / f"{name}.parquet"))
    g1, g2 = tmp_path / "a.graphml", tmp_path / "b.graphml"
    export_index(index, "graphml", out=g1)
    export_index(index, "graphml", out=g2, batch_size=3)
    assert g1.read_bytes() == g2.read_bytes()


# ---------------------------------------------------------------- CLI and errors

def test_cli_export_and_one_line_errors(index, tmp_path, capsys):
    out = tmp_path / "cli-pq"
    assert main(["export", str(index.root), "--format", "parquet", "--out", str(out), "--types", "T,S",
                 "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["types"] == "TS" and rep["counts"]["nodes"] == int(np.isin(index.types, [0, 1]).sum())
    assert set(pq.read_table(out / "nodes.parquet").column("type").to_pylist()) == {"T", "S"}

    def err(*args: str) -> str:
        assert main(["export", str(index.root), *args]) == 1
        e = capsys.readouterr().err.strip()
        assert len(e.splitlines()) == 1
        return e

    e = err("--format", "parquet", "--out", str(out))
    assert "--out" in e and "already exists" in e
    assert "--types" in err("--format", "graphml", "--out", str(tmp_path / "x.graphml"), "--types", "T,Q")
    assert "--dsn" in err("--format", "postgres")
    assert "--out" in err("--format", "postgres", "--dsn", "postgresql://x@127.0.0.1:1/db", "--out", "x")
    assert "--dsn" in err("--format", "neo4j", "--out", str(tmp_path / "n"), "--dsn", "postgresql://x@h/db")
    assert not (tmp_path / "x.graphml").exists() and not (tmp_path / "n").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no partial output left
    with pytest.raises(ExportError, match="--format"):
        export_index(index, "csv")


def test_semantic_layer_is_exported_as_its_own_edges(tmp_path):
    """An index with the kNN semantic layer: its edges come out once each, with layer "semantic", beside the
    structural ones (the same pair may be linked in both layers)."""
    import noderag
    from noderag.config import NodeRAGConfig
    from noderag.data import demo_dir

    cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:64", "semantic.enabled": True})
    index = noderag.build([str(demo_dir())], str(tmp_path / "sem"), config=cfg, progress=False)
    n_sem = index.manifest["counts"]["edges"]["semantic"]
    assert n_sem > 0
    rep = export_index(index, "parquet", out=tmp_path / "pq")
    edges = pq.read_table(tmp_path / "pq" / "edges.parquet")
    assert edges.column("layer").to_pylist().count("semantic") == n_sem
    got = Counter((min(s, d), max(s, d), la) for s, d, la in zip(edges.column("src").to_pylist(),
                                                                  edges.column("dst").to_pylist(),
                                                                  edges.column("layer").to_pylist()))
    assert got == _edges(index) and rep.counts["edges"] == sum(got.values())
    export_index(index, "neo4j", out=tmp_path / "neo")
    sem_files = sorted(p.name for p in (tmp_path / "neo").glob("rels_semantic_*.csv"))
    assert sem_files and sum(len(_read_csv(tmp_path / "neo" / f)[1]) for f in sem_files) == n_sem
    assert all(row[2] == "SEMANTIC" for f in sem_files for row in _read_csv(tmp_path / "neo" / f)[1])
    g = nx.read_graphml(export_index(index, "graphml", out=tmp_path / "g.graphml").out)
    assert g.number_of_edges() == sum(got.values())
