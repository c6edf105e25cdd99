"""``decompositions.parquet``: what each assembled chunk contributed, so survivors can be re-assembled.

One row per chunk in assembly order: its document, the T node it became (or merged into)
and, per unit that created an S node, that S id with the unit's entity surface forms and
relation triples. Texts are not stored twice: chunk and unit texts are the T and S node
texts. Re-assembling the rows of the documents that survive a delete, in this order,
gives exactly the T/S/N/R nodes (first-seen entity display names and relation texts
included) and decomposed edges a fresh build of those documents gives.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .layout import DECOMPOSITIONS
__all__ = ["DECOMPOSITIONS", "ChunkTrace", "read_decompositions", "traces_columns", "traces_table",
           "write_decompositions"]



@dataclass(frozen=True)
class ChunkTrace:
    """One assembled chunk: document id, T node id, and (S id, entity surfaces, relation triples) per new unit."""

    doc_id: int
    t: int
    units: tuple[tuple[int, tuple[str, ...], tuple[tuple[str, str, str], ...]], ...]


def _units_json(units) -> str:
    return json.dumps([[int(s), list(e), [list(r) for r in rel]] for s, e, rel in units], ensure_ascii=False,
                      separators=(",", ":"))


def traces_table(rows: Sequence[ChunkTrace]):
    """The chunk traces as the Arrow table of ``decompositions.parquet`` (compact: a build keeps this, not the tuples)."""
    return traces_columns([r.doc_id for r in rows], [r.t for r in rows], [_units_json(r.units) for r in rows])


def traces_columns(doc_ids: Sequence[int], ts: Sequence[int], units_json: Sequence[str]):
    """The Arrow table of ``decompositions.parquet`` from its columns (``units`` already JSON, as
    :func:`traces_table` writes it)."""
    import pyarrow as pa

    return pa.Table.from_arrays([pa.array(doc_ids, pa.int32()), pa.array(ts, pa.int32()),
                                 pa.array(units_json, pa.string())], names=["doc_id", "t", "units"])


def write_decompositions(path: str | os.PathLike, rows) -> Path:
    """Write the chunk traces (``ChunkTrace`` rows or their :func:`traces_table`) atomically (zstd Parquet)."""
    import pyarrow as pa

    from ..graph.storage import atomic_write_parquet

    from .tables import PARQUET_OPTIONS

    tab = rows if isinstance(rows, pa.Table) else traces_table(rows)
    # one chunk per column: the assembly's groups (which differ between a clean build and one resumed after a
    # kill, as records arrive) must not shape the pages, so that the file's bytes depend on its content only
    return atomic_write_parquet(path, tab.combine_chunks(), **PARQUET_OPTIONS)


def read_decompositions(path: str | os.PathLike) -> list[ChunkTrace]:
    """The chunk traces of a generation; errors name the file and row."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        from .tables import IndexNotFoundError

        raise IndexNotFoundError(f"{path}: missing")
    tab = pq.read_table(path)
    missing = [c for c in ("doc_id", "t", "units") if c not in tab.column_names]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}")
    out = []
    for i, (d, t, u) in enumerate(zip(tab.column("doc_id").to_pylist(), tab.column("t").to_pylist(),
                                      tab.column("units").to_pylist())):
        try:
            units = tuple((int(s), tuple(str(x) for x in e), tuple((str(a), str(r), str(b)) for a, r, b in rel))
                          for s, e, rel in json.loads(u))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{path}: row {i}: malformed units ({exc})") from None
        out.append(ChunkTrace(int(d), int(t), units))
    return out
