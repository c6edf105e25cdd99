"""Parquet export: the node, edge, document (and vector) tables in a stable layout for DuckDB, Polars, Spark.

Layout ``noderag-export/1`` (a folder; columns and types are fixed for that layout name, new
columns come only with a new layout name):

- ``nodes.parquet``: ``id`` int32 (row order), ``type`` string (T S N R A H O), ``key`` uint64,
  ``name`` string (entities and overviews; null elsewhere), ``text`` string, ``doc_id`` int32,
  ``chunk_id`` int32 (null when none), ``source_id`` string, ``mentions`` int32, ``active`` bool;
- ``edges.parquet``: ``src`` int32, ``dst`` int32 (each undirected edge once, from the lower type
  code to the higher), ``type`` string (``"T-S"``...), ``layer`` string (``structural`` or
  ``semantic``), ``weight`` float32;
- ``documents.parquet``: ``doc_id`` int32, ``source``, ``title``, ``content_hash`` strings,
  ``chunk_ids`` list<int32> (T node ids);
- ``vectors.parquet`` (``--with-vectors``): ``id`` int32, ``vector`` fixed_size_list<float32>[dim];
- ``export.json``: the layout name, the index generation, the exported types, row counts.

Unlike the index's own ``nodes.parquet`` (an internal file whose layout may change), this layout
is meant to be read by other programs. Written one record batch at a time (zstd).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..store.layout import DOCUMENTS, NODES
from .source import DOCUMENT_SCHEMA, EDGE_SCHEMA, NODE_SCHEMA, ExportSource

__all__ = ["write_parquet", "LAYOUT"]

LAYOUT = "noderag-export/1"
_OPTIONS = {"compression": "zstd", "compression_level": 3}


def _vector_schema(dim: int) -> pa.Schema:
    return pa.schema([("id", pa.int32()), ("vector", pa.list_(pa.float32(), dim))])


def _vector_batch(batch: pa.RecordBatch, dim: int) -> pa.RecordBatch:
    has = batch.filter(pc.is_valid(batch.column("vector")))
    flat = pc.list_flatten(has.column("vector"))
    values = np.asarray(flat.to_numpy(zero_copy_only=False), dtype=np.float32)
    return pa.RecordBatch.from_arrays([has.column("id"), pa.FixedSizeListArray.from_arrays(pa.array(values), dim)],
                                      schema=_vector_schema(dim))


def write_parquet(source: ExportSource, root: Path) -> dict[str, int]:
    """Write the tables of ``source`` into folder ``root``; returns the row counts."""
    counts = {"nodes": 0, "edges": 0, "documents": 0}
    dim = source.vector_dim
    vw = pq.ParquetWriter(root / "vectors.parquet", _vector_schema(dim), **_OPTIONS) if dim else None
    if vw is not None:
        counts["vectors"] = 0
    try:
        with pq.ParquetWriter(root / NODES, NODE_SCHEMA, **_OPTIONS) as w:
            for batch in source.node_batches():
                if vw is not None:
                    vb = _vector_batch(batch, dim)
                    vw.write_batch(vb)
                    counts["vectors"] += vb.num_rows
                    batch = batch.drop_columns(["vector"])
                w.write_batch(batch)
                counts["nodes"] += batch.num_rows
    finally:
        if vw is not None:
            vw.close()
    with pq.ParquetWriter(root / "edges.parquet", EDGE_SCHEMA, **_OPTIONS) as w:
        for batch in source.edge_batches():
            w.write_batch(batch)
            counts["edges"] += batch.num_rows
    with pq.ParquetWriter(root / DOCUMENTS, DOCUMENT_SCHEMA, **_OPTIONS) as w:
        for batch in source.document_batches():
            w.write_batch(batch)
            counts["documents"] += batch.num_rows
    return counts
