"""GraphML export: one ``.graphml`` file that networkx, igraph, Gephi and Cytoscape read.

Layout: an undirected ``<graph>``; node ``n<ID>`` per index node with data keys ``type`` (letter),
``key`` (the uint64 content key, as a string: GraphML's long is signed), ``name``, ``text``,
``doc_id``, ``chunk_id``, ``source_id``, ``mentions``, ``active`` and, with vectors, ``vector``
(space-separated floats); an ``<edge>`` per undirected edge with ``type`` (``"T-S"``...), ``layer``
and ``weight``. A null value (no name, no document) is left out of its node. Documents are not
graph nodes and are not in this file (the other formats carry them).

Text is escaped for XML; characters XML 1.0 cannot hold (C0 controls other than tab and newline)
become U+FFFD. Written a record batch at a time into a temporary file, renamed when complete.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from .source import ExportSource
from .text import concat_bytes, join_list, to_str, wrap, xml_escape

__all__ = ["write_graphml", "NODE_KEYS", "EDGE_KEYS"]

#: (attribute, GraphML type) of the node and edge data keys, in file order
NODE_KEYS = (("type", "string"), ("key", "string"), ("name", "string"), ("text", "string"),
             ("doc_id", "long"), ("chunk_id", "long"), ("source_id", "string"), ("mentions", "long"),
             ("active", "boolean"))
EDGE_KEYS = (("type", "string"), ("layer", "string"), ("weight", "double"))
_TEXT_COLUMNS = {"type", "name", "text", "source_id"}


def _header(with_vectors: bool, generation: int) -> str:
    keys = list(NODE_KEYS) + ([("vector", "string")] if with_vectors else [])
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             '<graphml xmlns="http://graphml.graphdrawing.org/xmlns" '
             'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
             'xsi:schemaLocation="http://graphml.graphdrawing.org/xmlns '
             'http://graphml.graphdrawing.org/xmlns/1.0/graphml.xsd">']
    for name, typ in keys:
        lines.append(f'<key id="v_{name}" for="node" attr.name="{name}" attr.type="{typ}"/>')
    for name, typ in EDGE_KEYS:
        lines.append(f'<key id="e_{name}" for="edge" attr.name="{name}" attr.type="{typ}"/>')
    lines.append(f'<graph id="noderag-generation-{generation}" edgedefault="undirected">')
    return "\n".join(lines) + "\n"


def _node_lines(batch: pa.RecordBatch) -> pa.Array:
    parts = [wrap('<node id="n', batch.column("id"), '">')]
    for name, _ in NODE_KEYS:
        col = batch.column(name)
        if name in _TEXT_COLUMNS:
            col = xml_escape(col)
        parts.append(wrap(f'<data key="v_{name}">', col, "</data>"))
    if "vector" in batch.schema.names:
        parts.append(wrap('<data key="v_vector">', join_list(batch.column("vector"), " "), "</data>"))
    parts.append(pa.scalar("</node>\n"))
    return pc.binary_join_element_wise(*parts, "")


def _edge_lines(batch: pa.RecordBatch) -> pa.Array:
    return pc.binary_join_element_wise(
        '<edge source="n', to_str(batch.column("src")), '" target="n', to_str(batch.column("dst")), '">',
        wrap('<data key="e_type">', batch.column("type"), "</data>"),
        wrap('<data key="e_layer">', batch.column("layer"), "</data>"),
        wrap('<data key="e_weight">', batch.column("weight"), "</data>"),
        "</edge>\n", "")


def write_graphml(source: ExportSource, fh) -> dict[str, int]:
    """Write the GraphML document of ``source`` to the binary file ``fh``; returns the counts written."""
    fh.write(_header(source.with_vectors, source.generation).encode())
    nodes = edges = 0
    for batch in source.node_batches():
        fh.write(concat_bytes(_node_lines(batch)))
        nodes += batch.num_rows
    for batch in source.edge_batches():
        fh.write(concat_bytes(_edge_lines(batch)))
        edges += batch.num_rows
    fh.write(b"</graph>\n</graphml>\n")
    return {"nodes": nodes, "edges": edges}
