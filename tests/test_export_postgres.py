"""``noderag export --format postgres`` into a real PostgreSQL server started by the test.

The server is a throwaway cluster (``initdb`` + ``pg_ctl`` in a temporary folder, 127.0.0.1, a free
port; ``.ci/run`` installs Debian's ``postgresql`` package). SQL over the imported tables is compared
with the index: counts, an entity's neighbours, a document's passages, the vectors; the keys and
indexes exist; a failed export changes nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import under_ci  # noqa: E402
from doors import demo, need  # noqa: E402

from noderag.cli import main  # noqa: E402
from noderag.export import export_index  # noqa: E402
from noderag.export.local_pg import PostgresNotFound, temporary_cluster  # noqa: E402
from noderag.export.postgres import ExportDatabaseError  # noqa: E402
from noderag.export.source import ExportSource  # noqa: E402
from noderag.graph.types import NodeType  # noqa: E402


@pytest.fixture(scope="module")
def psycopg():
    return need("psycopg")


@pytest.fixture(scope="module")
def dsn(psycopg):
    try:
        with temporary_cluster() as d:
            yield d
    except PostgresNotFound as exc:
        if under_ci():
            raise AssertionError(f"{exc} (.ci/run installs it)") from exc
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return demo(tmp_path_factory)


@pytest.fixture(scope="module")
def exported(index, dsn):
    return export_index(index, "postgres", dsn=dsn, schema="graph", with_vectors=True)


def _q(psycopg, dsn, sql, *args):
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, args).fetchall()


def _neighbours(index, node):
    out = set()
    for layer in ("structural", "semantic"):
        out |= set(index.graph.neighbors(node, layer)[0].tolist())
    return out


def test_counts_match_the_index(index, dsn, psycopg, exported):
    counts = index.manifest["counts"]
    assert exported.counts == {"nodes": len(index), "edges": counts["edges"]["structural"] + counts["edges"]["semantic"],
                               "documents": counts["documents"], "vectors": len(index.vectors)}
    assert _q(psycopg, dsn, "SELECT count(*) FROM graph.nodes")[0][0] == len(index)
    assert _q(psycopg, dsn, "SELECT count(*) FROM graph.documents")[0][0] == counts["documents"]
    assert _q(psycopg, dsn, "SELECT count(*) FROM graph.edges")[0][0] == exported.counts["edges"]
    by_type = dict(_q(psycopg, dsn, "SELECT type, count(*) FROM graph.nodes GROUP BY type"))
    assert by_type == {t.name: int((index.types == t).sum()) for t in NodeType if (index.types == t).any()}
    kinds = dict(_q(psycopg, dsn, "SELECT type, count(*) FROM graph.edges WHERE layer = 'structural' GROUP BY type"))
    assert {f"structural.{k}": v for k, v in kinds.items()} == {
        k: v for k, v in counts["edges"].items() if k.startswith("structural.")}


def test_neighbours_of_an_entity_and_passages_of_a_document(index, dsn, psycopg, exported):
    names = index.nodes.column("name").to_pylist()
    entity = names.index("Vellmar Heritage Trust")
    assert index.types[entity] == NodeType.N
    sql_nb = {r[0] for r in _q(psycopg, dsn, "SELECT e.dst FROM graph.edges e JOIN graph.nodes n ON n.id = e.src "
                                            "WHERE n.name = %s UNION SELECT e.src FROM graph.edges e "
                                            "JOIN graph.nodes n ON n.id = e.dst WHERE n.name = %s",
                                      "Vellmar Heritage Trust", "Vellmar Heritage Trust")}
    assert sql_nb == _neighbours(index, entity) and sql_nb
    view = {r[0] for r in _q(psycopg, dsn, "SELECT neighbour_id FROM graph.neighbours WHERE node_id = %s", entity)}
    assert view == sql_nb
    for node in range(0, len(index), 17):  # the neighbour query agrees for nodes of every type
        got = {r[0] for r in _q(psycopg, dsn, "SELECT neighbour_id FROM graph.neighbours WHERE node_id = %s", node)}
        assert got == _neighbours(index, node), node

    docs = index.documents.to_pylist()
    for d in docs:
        rows = _q(psycopg, dsn, "SELECT n.id, n.text FROM graph.nodes n JOIN graph.documents d ON d.doc_id = n.doc_id "
                                "WHERE d.source = %s AND n.type = 'T' ORDER BY n.id", d["source"])
        assert [r[0] for r in rows] == sorted(d["chunk_ids"])
        assert [r[1] for r in rows] == [index.texts[i] for i in sorted(d["chunk_ids"])]
        assert _q(psycopg, dsn, "SELECT chunk_ids FROM graph.documents WHERE doc_id = %s", d["doc_id"])[0][0] == \
            list(d["chunk_ids"])


def test_vectors_keys_and_indexes(index, dsn, psycopg, exported):
    rows = _q(psycopg, dsn, "SELECT node_id, embedding FROM graph.vectors ORDER BY node_id")
    ids = np.array([r[0] for r in rows])
    assert np.array_equal(np.stack([np.asarray(r[1], np.float32) for r in rows]), index.vectors.get(ids))
    cons = {(t, c) for t, c in _q(psycopg, dsn, "SELECT conrelid::regclass::text, contype FROM pg_constraint "
                                               "WHERE connamespace = 'graph'::regnamespace")}
    assert {("graph.documents", "p"), ("graph.nodes", "p"), ("graph.edges", "p"), ("graph.vectors", "p"),
            ("graph.nodes", "f"), ("graph.edges", "f"), ("graph.vectors", "f")} <= cons
    fks = _q(psycopg, dsn, "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE contype = 'f' "
                           "AND conrelid = 'graph.edges'::regclass ORDER BY 1")
    assert [r[0] for r in fks] == ["FOREIGN KEY (dst) REFERENCES graph.nodes(id)",
                                   "FOREIGN KEY (src) REFERENCES graph.nodes(id)"]
    idx = [r[0] for r in _q(psycopg, dsn, "SELECT indexdef FROM pg_indexes WHERE schemaname = 'graph' "
                                          "AND tablename = 'edges'")]
    assert any("(src, dst, layer)" in i for i in idx) and any("(dst)" in i for i in idx)
    # an edge to a node that does not exist is refused by the foreign key
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        with psycopg.connect(dsn) as conn:
            conn.execute("INSERT INTO graph.edges VALUES (0, %s, 'T-S', 'structural', 1)", (len(index) + 5,))


def test_one_transaction_existing_tables_and_failures_change_nothing(index, dsn, psycopg, exported, monkeypatch):
    before = _q(psycopg, dsn, "SELECT count(*) FROM graph.nodes")[0][0]
    with pytest.raises(ExportDatabaseError, match="--replace"):
        export_index(index, "postgres", dsn=dsn, schema="graph")
    assert _q(psycopg, dsn, "SELECT count(*) FROM graph.nodes")[0][0] == before

    def broken(self, layers=("structural", "semantic")):
        raise RuntimeError("disk gone mid-export")
        yield  # pragma: no cover

    monkeypatch.setattr(ExportSource, "edge_batches", broken)
    with pytest.raises(RuntimeError, match="disk gone"):  # after nodes and documents were copied
        export_index(index, "postgres", dsn=dsn, schema="fresh")
    with pytest.raises(RuntimeError, match="disk gone"):
        export_index(index, "postgres", dsn=dsn, schema="graph", replace=True)
    assert _q(psycopg, dsn, "SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'fresh'") == [(0,)]
    assert _q(psycopg, dsn, "SELECT count(*) FROM graph.nodes")[0][0] == before  # the replace was rolled back
    assert _q(psycopg, dsn, "SELECT count(*) FROM graph.vectors")[0][0] == len(index.vectors)


def test_cli_dsn_schema_types(index, dsn, psycopg, capsys):
    assert main(["export", str(index.root), "--format", "postgres", "--dsn", dsn, "--schema", "Entities Only",
                 "--types", "N,R"]) == 0
    assert "postgres schema Entities Only" in capsys.readouterr().out
    assert dict(_q(psycopg, dsn, 'SELECT type, count(*) FROM "Entities Only".nodes GROUP BY type')) == {
        "N": int((index.types == NodeType.N).sum()), "R": int((index.types == NodeType.R).sum())}
    assert _q(psycopg, dsn, 'SELECT DISTINCT type FROM "Entities Only".edges') == [("N-R",)]
    assert main(["export", str(index.root), "--format", "postgres", "--dsn", dsn.rsplit(":", 1)[0] + ":1/postgres"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("noderag export: error: --dsn: cannot connect") and len(err.splitlines()) == 1
