"""Neo4j export: the CSV files of ``neo4j-admin database import`` and a ``LOAD CSV`` script for small graphs.

Files written into the output folder (each with its header on the first line):

- ``nodes_<T>.csv`` per exported node type: ``id:ID(Node)``, ``:LABEL`` (``Node;Entity``,
  ``Node;Text``, ...), ``type``, ``key`` (the uint64 content key as a string; Neo4j integers are
  signed), ``name``, ``text``, ``doc_id:int``, ``chunk_id:int``, ``source_id``, ``mentions:int``,
  ``active:boolean`` and, with vectors, ``vector:float[]``;
- ``documents.csv``: ``doc_id:ID(Document)``, ``:LABEL`` (``Document``), ``source``, ``title``,
  ``content_hash``, ``chunk_ids:int[]``;
- ``rels_<A>_<B>.csv`` per structural edge kind (relationship type ``A_B``, e.g. ``T_S``, from the
  lower type to the higher) and ``rels_semantic_<A>_<B>.csv`` (type ``SEMANTIC``):
  ``:START_ID(Node)``, ``:END_ID(Node)``, ``:TYPE``, ``weight:float``, ``kind``;
- ``rels_in_document.csv`` (when T nodes are exported): ``:START_ID(Node)`` (a T node),
  ``:END_ID(Document)``, ``:TYPE`` (``IN_DOCUMENT``);
- ``import.cypher``: the same graph through ``LOAD CSV`` (copy the CSV files into Neo4j's import
  folder; for small graphs, the bulk importer is the tool for large ones);
- ``README.txt``: the ``neo4j-admin`` command line for these files.

Arrays use ``;`` (neo4j-admin's default array delimiter); texts may span lines, hence
``--multiline-fields=true``; ids are integers, hence ``--id-type=INTEGER``.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ..graph.types import TYPE_NAMES, NodeType

from .source import LETTERS, ExportSource
from .text import join_list

__all__ = ["write_neo4j", "LABELS", "NODE_HEADER", "admin_command"]

#: Neo4j label of each node type letter (every node also has the label ``Node``)
LABELS = {t.name: "".join(w.capitalize() for w in TYPE_NAMES[t].split("_")) for t in NodeType}
#: (header entry, node column) of a node file, in file order
NODE_HEADER = (("id:ID(Node)", "id"), (":LABEL", None), ("type", "type"), ("key", "key"), ("name", "name"),
               ("text", "text"), ("doc_id:int", "doc_id"), ("chunk_id:int", "chunk_id"),
               ("source_id", "source_id"), ("mentions:int", "mentions"), ("active:boolean", "active"))
DOC_HEADER = ("doc_id:ID(Document)", ":LABEL", "source", "title", "content_hash", "chunk_ids:int[]")
REL_HEADER = (":START_ID(Node)", ":END_ID(Node)", ":TYPE", "weight:float", "kind")
IN_DOC_HEADER = (":START_ID(Node)", ":END_ID(Document)", ":TYPE")
_CSV = pacsv.WriteOptions(include_header=False, quoting_style="needed")
_BATCH_ROWS = 10000  # LOAD CSV rows per inner transaction


def _line(entries) -> bytes:
    return (",".join(entries) + "\n").encode()


def _rel_name(layer: str, kind: str) -> tuple[str, str]:
    """(file name, relationship type) of one edge kind of one layer."""
    a, b = kind.split("-")
    if layer == "structural":
        return f"rels_{a}_{b}.csv", f"{a}_{b}"
    return f"rels_{layer}_{a}_{b}.csv", layer.upper()


class _Files:
    """Output CSV files opened on first use (header first), closed together."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.open: dict[str, object] = {}
        self.rows: dict[str, int] = {}

    def get(self, name: str, header) -> object:
        fh = self.open.get(name)
        if fh is None:
            fh = open(self.root / name, "wb")
            fh.write(_line(header))
            self.open[name] = fh
            self.rows[name] = 0
        return fh

    def write(self, name: str, header, table: pa.Table) -> None:
        fh = self.get(name, header)
        if table.num_rows:
            pacsv.write_csv(table, fh, _CSV)
            self.rows[name] += table.num_rows

    def close(self) -> None:
        for fh in self.open.values():
            fh.close()


def _node_table(batch: pa.RecordBatch, letter: str, with_vectors: bool) -> pa.Table:
    label = pa.repeat(pa.scalar(f"Node;{LABELS[letter]}"), batch.num_rows)
    cols, names = [], []
    for entry, col in NODE_HEADER:
        names.append(entry)
        if col is None:
            cols.append(label)
        elif col == "key":
            cols.append(pc.cast(batch.column("key"), pa.string()))
        else:
            cols.append(batch.column(col))
    if with_vectors:
        names.append("vector:float[]")
        cols.append(join_list(batch.column("vector"), ";"))
    return pa.Table.from_arrays(cols, names=names)


def admin_command(files: dict[str, str], database: str = "neo4j") -> str:
    """The ``neo4j-admin database import full`` command line for the written files (name -> kind)."""
    args = ["neo4j-admin database import full", database]
    for name, kind in files.items():
        args.append(f"--{kind}={name}")
    args += ["--id-type=INTEGER", "--multiline-fields=true", "--array-delimiter=';'"]
    return " \\\n  ".join(args)


def _cypher_value(entry: str) -> tuple[str, str]:
    """(property name, Cypher expression reading it from ``row``) of one header entry."""
    name, _, typ = entry.partition(":")
    ref = f"row.`{entry}`"
    conv = {"int": "toInteger", "float": "toFloat", "boolean": "toBoolean"}
    if typ.endswith("[]"):
        f = conv[typ[:-2]]
        return name, f"CASE WHEN coalesce({ref}, '') = '' THEN null ELSE [x IN split({ref}, ';') | {f}(x)] END"
    if typ.startswith("ID"):
        return name, f"toInteger({ref})"
    if typ in conv:
        return name, f"{conv[typ]}({ref})"
    return name, ref


def _cypher(node_files: list[tuple[str, str, tuple[str, ...]]], doc_file: tuple[str, tuple[str, ...]],
            rel_files: list[tuple[str, str, tuple[str, ...]]], in_doc: str | None) -> str:
    """The LOAD CSV script: constraints, then nodes, documents, relationships, in batched transactions."""
    tx = f"IN TRANSACTIONS OF {_BATCH_ROWS} ROWS"
    out = ["// noderag export: LOAD CSV script for small graphs (neo4j-admin import is the tool for large ones).",
           "// Copy the CSV files into the database's import folder, then run this with cypher-shell",
           "// (each LOAD CSV commits in batches: in Neo4j Browser prefix each statement with :auto).",
           "CREATE CONSTRAINT noderag_node_id IF NOT EXISTS FOR (n:Node) REQUIRE n.id IS UNIQUE;",
           "CREATE CONSTRAINT noderag_document_id IF NOT EXISTS FOR (d:Document) REQUIRE d.doc_id IS UNIQUE;"]

    def props(header) -> str:
        items = [_cypher_value(e) for e in header if not e.startswith(":")]
        return ", ".join(f"{n}: {v}" for n, v in items)

    for name, letter, header in node_files:
        out.append(f"LOAD CSV WITH HEADERS FROM 'file:///{name}' AS row CALL {{ WITH row "
                   f"CREATE (:Node:{LABELS[letter]} {{{props(header)}}}) }} {tx};")
    name, header = doc_file
    out.append(f"LOAD CSV WITH HEADERS FROM 'file:///{name}' AS row CALL {{ WITH row "
               f"CREATE (:Document {{{props(header)}}}) }} {tx};")
    for name, rtype, header in rel_files:
        out.append(f"LOAD CSV WITH HEADERS FROM 'file:///{name}' AS row CALL {{ WITH row "
                   f"MATCH (a:Node {{id: toInteger(row.`:START_ID(Node)`)}}), "
                   f"(b:Node {{id: toInteger(row.`:END_ID(Node)`)}}) "
                   f"CREATE (a)-[:{rtype} {{{props(header)}}}]->(b) }} {tx};")
    if in_doc:
        out.append(f"LOAD CSV WITH HEADERS FROM 'file:///{in_doc}' AS row CALL {{ WITH row "
                   f"MATCH (a:Node {{id: toInteger(row.`:START_ID(Node)`)}}), "
                   f"(d:Document {{doc_id: toInteger(row.`:END_ID(Document)`)}}) "
                   f"CREATE (a)-[:IN_DOCUMENT]->(d) }} {tx};")
    return "\n".join(out) + "\n"


def write_neo4j(source: ExportSource, root: Path) -> dict[str, int]:
    """Write the neo4j-admin import files and ``import.cypher`` of ``source`` into folder ``root``."""
    files = _Files(root)
    nodes = edges = 0
    node_header = tuple(e for e, _ in NODE_HEADER) + (("vector:float[]",) if source.with_vectors else ())
    in_doc = "rels_in_document.csv" if source.exports_type("T") else None
    try:
        for letter in LETTERS:  # every exported type has its file, even when it has no node
            if source.exports_type(letter):
                files.get(f"nodes_{letter}.csv", node_header)
        files.get("documents.csv", DOC_HEADER)
        if in_doc:
            files.get(in_doc, IN_DOC_HEADER)
        for batch in source.node_batches():
            types = batch.column("type")
            for letter in pc.unique(types).to_pylist():
                part = batch.filter(pc.equal(types, letter))
                files.write(f"nodes_{letter}.csv", node_header, _node_table(part, letter, source.with_vectors))
                nodes += part.num_rows
                if letter == "T" and in_doc:
                    has_doc = part.filter(pc.is_valid(part.column("doc_id")))
                    files.write(in_doc, IN_DOC_HEADER, pa.Table.from_arrays(
                        [has_doc.column("id"), has_doc.column("doc_id"),
                         pa.repeat(pa.scalar("IN_DOCUMENT"), has_doc.num_rows)], names=list(IN_DOC_HEADER)))
        for batch in source.document_batches():
            files.write("documents.csv", DOC_HEADER, pa.Table.from_arrays([
                batch.column("doc_id"), pa.repeat(pa.scalar("Document"), batch.num_rows), batch.column("source"),
                batch.column("title"), batch.column("content_hash"), join_list(batch.column("chunk_ids"), ";"),
            ], names=list(DOC_HEADER)))
        rel_types: dict[str, str] = {}
        for batch in source.edge_batches():
            layer = batch.column("layer")[0].as_py()
            kinds = batch.column("type")
            for kind in pc.unique(kinds).to_pylist():
                part = batch.filter(pc.equal(kinds, kind))
                name, rtype = _rel_name(layer, kind)
                rel_types[name] = rtype
                files.write(name, REL_HEADER, pa.Table.from_arrays(
                    [part.column("src"), part.column("dst"), pa.repeat(pa.scalar(rtype), part.num_rows),
                     part.column("weight"), part.column("type")], names=list(REL_HEADER)))
                edges += part.num_rows
    finally:
        files.close()
    node_files = [(f"nodes_{t}.csv", t, node_header) for t in LETTERS if f"nodes_{t}.csv" in files.rows]
    rel_files = [(name, rel_types[name], REL_HEADER) for name in sorted(rel_types)]
    (root / "import.cypher").write_text(_cypher(node_files, ("documents.csv", DOC_HEADER), rel_files, in_doc),
                                        encoding="utf-8")
    listing = {name: "nodes" for name, _, _ in node_files}
    listing["documents.csv"] = "nodes"
    listing.update({name: "relationships" for name, _, _ in rel_files})
    if in_doc:
        listing[in_doc] = "relationships"
    (root / "README.txt").write_text(
        "noderag export for Neo4j. Bulk import into a new database (Neo4j 5; stop the database first):\n\n"
        + admin_command(listing) + "\n\nSmall graphs: copy the CSV files into the import folder and run "
        "import.cypher with cypher-shell.\n", encoding="utf-8")
    return {"nodes": nodes, "edges": edges, "documents": files.rows.get("documents.csv", 0),
            "in_document": files.rows.get(in_doc, 0) if in_doc else 0}
