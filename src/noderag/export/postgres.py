"""PostgreSQL export: ``documents``, ``nodes``, ``edges`` (and ``vectors``) written with COPY in one transaction.

Tables, in the schema given (``--schema``, default ``noderag``; created when missing):

- ``documents (doc_id integer PRIMARY KEY, source text, title text, content_hash text, chunk_ids integer[])``
- ``nodes (id integer PRIMARY KEY, type char(1), key numeric(20,0), name text, text text,
  doc_id integer REFERENCES documents, chunk_id integer REFERENCES nodes (when T nodes are exported),
  source_id text, mentions integer, active boolean)``, indexed on ``type`` and ``doc_id``
- ``edges (src integer REFERENCES nodes, dst integer REFERENCES nodes, type text, layer text,
  weight real, PRIMARY KEY (src, dst, layer))``, with an index on ``dst`` too: both ends are indexed
- ``vectors (node_id integer PRIMARY KEY REFERENCES nodes, embedding real[])`` with ``--with-vectors``
- view ``neighbours (node_id, neighbour_id, type, layer, weight)``: every edge in both directions

Edges are undirected and stored once, ``src`` the end of the lower type code (T, S, N, R, A, H, O).
Everything (schema, tables, COPY, keys, indexes, ANALYZE) is one transaction: a failed export leaves
the database as it was. Tables that already exist are an error unless ``replace`` drops them in that
same transaction. NUL characters (which PostgreSQL text cannot hold) become U+FFFD.
Needs the ``postgres`` extra (psycopg 3).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from .source import ExportSource
from .text import drop_nul, join_list

from ..errors import NodeRAGError

__all__ = ["write_postgres", "TABLES", "ExportDatabaseError"]

TABLES = ("documents", "nodes", "edges", "vectors")
_CSV = pacsv.WriteOptions(include_header=False, quoting_style="needed")


class ExportDatabaseError(NodeRAGError, RuntimeError):
    """The database refused the export (connection, permissions, existing tables); nothing was changed."""


def _psycopg():
    try:
        import psycopg
    except ImportError:
        raise ImportError("the postgres export needs psycopg 3: pip install 'noderag[postgres]'") from None
    return psycopg


def _csv_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink, _CSV)
    return sink.getvalue()


def _ddl(s, sql, with_vectors: bool) -> list:
    q = sql.Identifier(s)
    stmts = [
        sql.SQL("CREATE TABLE {}.documents (doc_id integer NOT NULL, source text, title text, "
                "content_hash text, chunk_ids integer[])").format(q),
        sql.SQL("CREATE TABLE {}.nodes (id integer NOT NULL, type char(1) NOT NULL, key numeric(20,0) NOT NULL, "
                "name text, text text, doc_id integer, chunk_id integer, source_id text, "
                "mentions integer NOT NULL, active boolean NOT NULL)").format(q),
        sql.SQL("CREATE TABLE {}.edges (src integer NOT NULL, dst integer NOT NULL, type text NOT NULL, "
                "layer text NOT NULL, weight real NOT NULL)").format(q),
    ]
    if with_vectors:
        stmts.append(sql.SQL("CREATE TABLE {}.vectors (node_id integer NOT NULL, embedding real[] NOT NULL)")
                     .format(q))
    return stmts


def _constraints(s, sql, with_vectors: bool, chunk_fk: bool) -> list:
    q = sql.Identifier(s)
    stmts = [
        sql.SQL("ALTER TABLE {}.documents ADD PRIMARY KEY (doc_id)").format(q),
        sql.SQL("ALTER TABLE {}.nodes ADD PRIMARY KEY (id)").format(q),
        sql.SQL("ALTER TABLE {0}.nodes ADD FOREIGN KEY (doc_id) REFERENCES {0}.documents (doc_id)").format(q),
        sql.SQL("ALTER TABLE {}.edges ADD PRIMARY KEY (src, dst, layer)").format(q),
        sql.SQL("ALTER TABLE {0}.edges ADD FOREIGN KEY (src) REFERENCES {0}.nodes (id)").format(q),
        sql.SQL("ALTER TABLE {0}.edges ADD FOREIGN KEY (dst) REFERENCES {0}.nodes (id)").format(q),
        sql.SQL("CREATE INDEX edges_dst_idx ON {}.edges (dst)").format(q),
        sql.SQL("CREATE INDEX nodes_type_idx ON {}.nodes (type)").format(q),
        sql.SQL("CREATE INDEX nodes_doc_id_idx ON {}.nodes (doc_id)").format(q),
        sql.SQL("CREATE VIEW {0}.neighbours AS SELECT src AS node_id, dst AS neighbour_id, type, layer, weight "
                "FROM {0}.edges UNION ALL SELECT dst, src, type, layer, weight FROM {0}.edges").format(q),
    ]
    if chunk_fk:
        stmts.append(sql.SQL("ALTER TABLE {0}.nodes ADD FOREIGN KEY (chunk_id) REFERENCES {0}.nodes (id)").format(q))
    if with_vectors:
        stmts += [sql.SQL("ALTER TABLE {}.vectors ADD PRIMARY KEY (node_id)").format(q),
                  sql.SQL("ALTER TABLE {0}.vectors ADD FOREIGN KEY (node_id) REFERENCES {0}.nodes (id)").format(q)]
    stmts += [sql.SQL("ANALYZE {}.{}").format(q, sql.Identifier(t))
              for t in TABLES if with_vectors or t != "vectors"]
    return stmts


def _copy(cur, sql, schema: str, table: str, columns, data: bytes) -> None:
    stmt = sql.SQL("COPY {}.{} ({}) FROM STDIN (FORMAT csv)").format(
        sql.Identifier(schema), sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns)))
    with cur.copy(stmt) as cp:
        cp.write(data)


def write_postgres(source: ExportSource, dsn: str, schema: str = "noderag", *, replace: bool = False) -> dict[str, int]:
    """COPY the tables of ``source`` into the database at ``dsn`` (schema ``schema``), one transaction."""
    psycopg = _psycopg()
    from psycopg import sql

    if not schema:
        raise ValueError("--schema: empty schema name")
    counts = {"nodes": 0, "edges": 0, "documents": 0}
    with_vectors = source.with_vectors
    if with_vectors:
        counts["vectors"] = 0
    try:
        conn = psycopg.connect(dsn, autocommit=False)
    except psycopg.Error as exc:
        raise ExportDatabaseError(f"--dsn: cannot connect: {str(exc).strip().splitlines()[0]}") from None
    try:
        with conn.transaction():
            cur = conn.cursor()
            cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                        "AND table_name = ANY(%s) ORDER BY table_name", (schema, list(TABLES) + ["neighbours"]))
            existing = [r[0] for r in cur.fetchall()]
            if existing and not replace:
                raise ExportDatabaseError(
                    f"--schema {schema}: already has {', '.join(existing)}; pass --replace to drop them in the "
                    "export's transaction, or choose another --schema")
            if existing:
                cur.execute(sql.SQL("DROP VIEW IF EXISTS {}.neighbours").format(sql.Identifier(schema)))
                cur.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.SQL(", ").join(
                    sql.Identifier(schema, t) for t in TABLES)))
            for stmt in _ddl(schema, sql, with_vectors):
                cur.execute(stmt)
            for batch in source.document_batches():
                tab = pa.Table.from_arrays([
                    batch.column("doc_id"), drop_nul(batch.column("source")), drop_nul(batch.column("title")),
                    batch.column("content_hash"), join_list(batch.column("chunk_ids"), ",", "{", "}")],
                    names=["doc_id", "source", "title", "content_hash", "chunk_ids"])
                _copy(cur, sql, schema, "documents", tab.column_names, _csv_bytes(tab))
                counts["documents"] += tab.num_rows
            for batch in source.node_batches():
                tab = pa.Table.from_arrays([
                    batch.column("id"), batch.column("type"), batch.column("key"), drop_nul(batch.column("name")),
                    drop_nul(batch.column("text")), batch.column("doc_id"), batch.column("chunk_id"),
                    drop_nul(batch.column("source_id")), batch.column("mentions"), batch.column("active")],
                    names=["id", "type", "key", "name", "text", "doc_id", "chunk_id", "source_id", "mentions",
                           "active"])
                _copy(cur, sql, schema, "nodes", tab.column_names, _csv_bytes(tab))
                counts["nodes"] += tab.num_rows
                if with_vectors:
                    has = batch.filter(pc.is_valid(batch.column("vector")))
                    if has.num_rows:
                        vt = pa.Table.from_arrays([has.column("id"), join_list(has.column("vector"), ",", "{", "}")],
                                                  names=["node_id", "embedding"])
                        _copy(cur, sql, schema, "vectors", vt.column_names, _csv_bytes(vt))
                        counts["vectors"] += vt.num_rows
            for batch in source.edge_batches():
                tab = pa.Table.from_batches([batch])
                _copy(cur, sql, schema, "edges", tab.column_names, _csv_bytes(tab))
                counts["edges"] += tab.num_rows
            for stmt in _constraints(schema, sql, with_vectors, source.exports_type("T")):
                cur.execute(stmt)
    except psycopg.Error as exc:
        raise ExportDatabaseError(f"PostgreSQL refused the export (nothing was changed): "
                                  f"{str(exc).strip().splitlines()[0]}") from None
    finally:
        conn.close()
    return counts
