"""``noderag export DIR --format ...``: argument wiring (called from ``noderag.cli``)."""

from __future__ import annotations

import argparse
import json
import sys

from . import FORMATS, ExportError, export_index

__all__ = ["add_export_arguments", "run_export"]


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``noderag export`` arguments to ``parser``."""
    parser.add_argument("index", metavar="DIR", help="index directory built by `noderag build`")
    parser.add_argument("--format", required=True, choices=FORMATS,
                        help="graphml (one file), neo4j (neo4j-admin import CSVs + LOAD CSV script), "
                             "postgres (COPY into a database), parquet (stable table layout)")
    parser.add_argument("--out", metavar="PATH", default=None,
                        help="output file (graphml) or folder (neo4j, parquet); must not exist "
                             "(default: <index name>.graphml / <index name>-<format>/ here)")
    parser.add_argument("--types", metavar="T,S,N,...", default=None,
                        help="node types to export (letters of T S N R A H O); edges need both ends among them "
                             "(default: all)")
    parser.add_argument("--with-vectors", action="store_true",
                        help="add the stored vectors of the embedded nodes (T, S, A, H)")
    parser.add_argument("--dsn", metavar="DSN", default=None,
                        help="postgres: connection string (postgresql://user@host:port/db); needs noderag[postgres]")
    parser.add_argument("--schema", metavar="NAME", default="noderag", help="postgres: schema name (default noderag)")
    parser.add_argument("--replace", action="store_true",
                        help="postgres: drop the schema's export tables first (in the same transaction)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run_export(args: argparse.Namespace) -> int:
    """Run one export and print what it wrote; a bad option or a refused import is a one-line error."""
    from .postgres import ExportDatabaseError

    try:
        report = export_index(args.index, args.format, out=args.out, types=args.types,
                              with_vectors=args.with_vectors, dsn=args.dsn, schema=args.schema,
                              replace=args.replace)
    except (ExportError, ExportDatabaseError, ImportError) as exc:
        print(f"noderag export: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report.to_dict(), sort_keys=True))
    else:
        counts = ", ".join(f"{v:,} {k}" for k, v in report.counts.items())
        print(f"exported generation {report.generation} as {report.format} to {report.out}: {counts} "
              f"({report.seconds:.2f} s)")
    return 0
