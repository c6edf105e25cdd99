"""``decompositions/``: what each assembled chunk contributed, so survivors can be re-assembled.

One row per chunk in assembly order: its document, the T node it became (or merged into)
and, per unit that created an S node, that S id with the unit's entity surface forms and
relation triples. Texts are not stored twice: chunk and unit texts are the T and S node
texts. Re-assembling the rows of the documents that survive a delete, in this order,
gives exactly the T/S/N/R nodes (first-seen entity display names and relation texts
included) and decomposed edges a fresh build of those documents gives.

The rows are stored in parts of :func:`part_rows_for` rows, ``decompositions/NNNNNN.parquet``, so that a delete
in place (:func:`filter_decompositions`) rewrites only the parts that held the deleted documents' rows and
shares the others.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .layout import DECOMPOSITIONS

__all__ = ["DECOMPOSITIONS", "ChunkTrace", "read_decompositions", "traces_columns", "traces_table",
           "write_decompositions", "filter_decompositions", "PART_ROWS", "part_rows_for"]

#: Rows (chunks) per part at least: ~50 KB of Parquet each; a hundred scattered deletes at 10^5 passages rewrite
#: about a fifth of the parts.
PART_ROWS = 256
#: Parts grow past :data:`PART_ROWS` rows to keep their count near this (fewer files for every commit to link).
TARGET_PARTS = 1024


def part_rows_for(rows: int) -> int:
    """Rows a part for a table of ``rows`` rows: a power of two, at least :data:`PART_ROWS`, giving at most about
    :data:`TARGET_PARTS` parts."""
    size = PART_ROWS
    while size * TARGET_PARTS < rows:
        size <<= 1
    return size


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


def _part(p: int) -> str:
    return f"{p:06d}.parquet"


def _write_part(path: Path, tab, **options) -> None:
    from ..graph.storage import atomic_write_parquet

    from .tables import PARQUET_OPTIONS

    # one chunk per column: the assembly's groups (which differ between a clean build and one resumed after a
    # kill, as records arrive) must not shape the pages, so that the file's bytes depend on its content only
    atomic_write_parquet(path, tab.combine_chunks(), **{**PARQUET_OPTIONS, **options})


def write_decompositions(folder: str | os.PathLike, rows) -> Path:
    """Write the chunk traces (``ChunkTrace`` rows or their :func:`traces_table`) as the parts of the new folder
    ``folder`` (zstd Parquet, each file atomically; at least one part, empty for no rows)."""
    import shutil

    import pyarrow as pa

    folder = Path(folder)
    tab = rows if isinstance(rows, pa.Table) else traces_table(rows)
    if folder.exists():  # left by a killed run: its parts may outnumber these
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    size = part_rows_for(tab.num_rows)
    for p in range(max(1, -(-tab.num_rows // size))):
        _write_part(folder / _part(p), tab.slice(p * size, size))
    return folder


def _part_files(path: Path) -> list[Path]:
    """The parts holding a generation's traces, in order (``path``: its ``decompositions/`` folder)."""
    if not path.is_dir():
        from .errors import IndexNotFoundError

        raise IndexNotFoundError(f"{path}: missing")
    return sorted(path.glob("*.parquet"))


def read_decompositions(path: str | os.PathLike) -> list[ChunkTrace]:
    """The chunk traces of a generation (``path``: its ``decompositions`` folder); errors name the file and row."""
    import pyarrow.parquet as pq

    out = []
    for f in _part_files(Path(path)):
        tab = pq.ParquetFile(f).read()
        missing = [c for c in ("doc_id", "t", "units") if c not in tab.column_names]
        if missing:
            raise ValueError(f"{f}: missing column(s) {missing}")
        for i, (d, t, u) in enumerate(zip(tab.column("doc_id").to_pylist(), tab.column("t").to_pylist(),
                                          tab.column("units").to_pylist())):
            try:
                units = tuple((int(s), tuple(str(x) for x in e), tuple((str(a), str(r), str(b)) for a, r, b in rel))
                              for s, e, rel in json.loads(u))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{f}: row {i}: malformed units ({exc})") from None
            out.append(ChunkTrace(int(d), int(t), units))
    return out


def filter_decompositions(src: str | os.PathLike, dst: str | os.PathLike, gone, **options) -> int:
    """Write the traces of ``src`` (a generation's ``decompositions`` folder) into ``dst`` without the rows of the
    documents ``gone``: the parts that held such rows are written anew (Parquet ``options`` on top of the
    build's), the others hard-linked. Returns the parts written."""
    import shutil

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    src, dst = Path(src), Path(dst)
    gone = np.asarray(sorted(gone), dtype=np.int64)
    files = _part_files(src)
    dst.mkdir(parents=True, exist_ok=False)
    written = 0
    for f in files:
        docs = pq.ParquetFile(f).read(columns=["doc_id"]).column("doc_id").to_numpy()
        hit = np.isin(docs, gone)
        if hit.any():
            tab = pq.ParquetFile(f).read()
            _write_part(dst / f.name, tab.filter(pa.array(~hit)), **options)
            written += 1
        else:
            try:
                os.link(f, dst / f.name)
            except OSError:
                shutil.copyfile(f, dst / f.name)
    return written
