"""Exports of an index to the tools people already use: GraphML, Neo4j import CSVs, PostgreSQL, Parquet.

``noderag export DIR --format graphml|neo4j|postgres|parquet`` and :func:`export_index` read one
pinned generation of the index (its own memory-mapped files stay the source of truth) and stream it
out in record batches, so the memory of an export does not grow with the index. All four formats
share one view of the graph (:mod:`noderag.export.source`): the same node ids, types, names and the
same edges, each undirected edge once. The file formats are written into a temporary name next to
``out`` and renamed when complete; the PostgreSQL export is one transaction.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .source import LETTERS, ExportSource, parse_types

from ..errors import NodeRAGError

__all__ = ["FORMATS", "ExportReport", "ExportError", "export_index", "default_out", "parse_types"]

FORMATS = ("graphml", "neo4j", "postgres", "parquet")


class ExportError(NodeRAGError, ValueError):
    """A bad export request (format, output path, missing option); the message names the option."""


@dataclass
class ExportReport:
    """What an export wrote: format, where, row counts, seconds."""

    format: str
    out: str
    counts: dict[str, int] = field(default_factory=dict)
    types: tuple[str, ...] = LETTERS
    with_vectors: bool = False
    generation: int | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"format": self.format, "out": self.out, "counts": dict(self.counts), "types": "".join(self.types),
                "with_vectors": self.with_vectors, "generation": self.generation,
                "seconds": round(self.seconds, 3)}


def default_out(index_dir: str | os.PathLike, fmt: str) -> Path:
    """Where a file format goes without ``--out``: ``<index name>.graphml``, ``<index name>-neo4j/`` or
    ``<index name>-parquet/`` in the current directory."""
    name = Path(index_dir).resolve().name or "index"
    return Path(f"{name}.graphml") if fmt == "graphml" else Path(f"{name}-{fmt}")


def _info(source: ExportSource, fmt: str, counts: dict[str, int]) -> dict[str, Any]:
    from .._version import __version__

    from .parquet import LAYOUT

    info = {"format": fmt, "generation": source.generation, "types": list(source.types),
            "with_vectors": source.with_vectors, "counts": counts, "nodes_by_type": source.node_counts(),
            "noderag": __version__}
    if fmt == "parquet":
        info = {"layout": LAYOUT, **info}
    if source.with_vectors:
        info["vector_dim"] = source.vector_dim
    return info


def export_index(index: Any, fmt: str, *, out: str | os.PathLike | None = None,
                 types: str | Sequence[str] | None = None, with_vectors: bool = False, dsn: str | None = None,
                 schema: str = "noderag", replace: bool = False, batch_size: int = 65536) -> ExportReport:
    """Export ``index`` (an index directory or an opened ``noderag.Index``) in format ``fmt``.

    Parameters
    ----------
    fmt : "graphml", "neo4j", "postgres" or "parquet"
    out : output file (graphml) or folder (neo4j, parquet); must not exist; default :func:`default_out`
    types : node type letters to export (``"T,S,N"``); edges need both ends among them; default all
    with_vectors : add the stored vectors of the embedded nodes (T, S, A, H)
    dsn, schema, replace : PostgreSQL connection string, schema name, drop existing tables first
    batch_size : nodes per record batch (edges: 16 times as many stored entries)
    """
    from ..store.tables import IndexStore

    if fmt not in FORMATS:
        raise ExportError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    if batch_size < 1:
        raise ExportError(f"batch_size must be >= 1, got {batch_size}")
    try:
        letters = parse_types(types)
    except ValueError as exc:
        raise ExportError(str(exc)) from None
    if fmt == "postgres":
        if out is not None:
            raise ExportError("--out: the postgres export writes into a database; give --dsn (and --schema)")
        if not dsn:
            raise ExportError("--dsn: the postgres export needs a connection string, e.g. "
                              "postgresql://user@localhost:5432/dbname")
    elif dsn is not None or replace:
        raise ExportError(f"--dsn/--replace: only for --format postgres, not {fmt}")
    owned = not isinstance(index, IndexStore)
    store = IndexStore.open(index) if owned else index
    t0 = time.perf_counter()
    try:
        source = ExportSource(store, letters, with_vectors, node_batch=batch_size, edge_batch=16 * batch_size)
        source.check()  # what it reads, byte for byte, before anything is written
        if fmt == "postgres":
            from .postgres import write_postgres

            counts = write_postgres(source, dsn, schema, replace=replace)
            where = f"postgres schema {schema}"
        else:
            target = Path(out) if out is not None else default_out(store.root, fmt)
            counts = _write_file_format(source, fmt, target)
            where = str(target)
    finally:
        if owned:
            store.close()
    return ExportReport(format=fmt, out=where, counts=counts, types=letters, with_vectors=with_vectors,
                        generation=int(store.generation), seconds=time.perf_counter() - t0)


def _write_file_format(source: ExportSource, fmt: str, target: Path) -> dict[str, int]:
    """Write a file format into a temporary sibling of ``target``, then rename it to ``target``."""
    if target.exists() or target.is_symlink():
        raise ExportError(f"--out: {target} already exists; remove it or give another path")
    if not target.parent.is_dir():
        raise ExportError(f"--out: folder {target.parent} does not exist")
    tmp = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        if fmt == "graphml":
            from .graphml import write_graphml

            with open(tmp, "wb") as fh:
                counts = write_graphml(source, fh)
        else:
            tmp.mkdir()
            if fmt == "neo4j":
                from .neo4j import write_neo4j

                counts = write_neo4j(source, tmp)
            else:
                from .parquet import write_parquet

                counts = write_parquet(source, tmp)
            (tmp / "export.json").write_text(json.dumps(_info(source, fmt, counts), indent=2, sort_keys=True) + "\n",
                                             encoding="utf-8")
        os.replace(tmp, target)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise
    return counts
