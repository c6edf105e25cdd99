"""Parquet shards of one stage in the index's staging folder, reused on a rerun while the plan matches."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from ...graph.storage import atomic_write_json, atomic_write_parquet, read_json

__all__ = ["ShardStore"]

_PART = re.compile(r"^part-(\d{6})\.parquet$")


class ShardStore:
    """``DIR/part-NNNNNN.parquet`` per finished shard plus ``DIR/meta.json`` with the plan's digest.

    A different digest (other texts, batch size or model) discards the folder. Each shard is
    written atomically (temp file, fsync, rename) with its metadata (token ledger) in the
    Parquet schema metadata, so a kill never leaves a torn shard behind.
    """

    def __init__(self, directory: Path, digest: str, n_shards: int) -> None:
        self.dir = Path(directory)
        meta_path = self.dir / "meta.json"
        meta = None
        if meta_path.is_file():
            try:
                meta = read_json(meta_path)
            except ValueError:
                meta = None
        if not isinstance(meta, dict) or meta.get("digest") != digest or meta.get("shards") != n_shards:
            if self.dir.exists():
                shutil.rmtree(self.dir)
            self.dir.mkdir(parents=True)
            atomic_write_json(meta_path, {"digest": digest, "shards": n_shards})

    def path(self, i: int) -> Path:
        return self.dir / f"part-{i:06d}.parquet"

    def done(self) -> set[int]:
        """Indexes of the shards on disk."""
        return {int(m.group(1)) for p in self.dir.iterdir() if (m := _PART.match(p.name))}

    def write(self, i: int, table, meta: dict[str, Any] | None = None) -> None:
        """Save shard ``i`` (a ``pyarrow.Table``) with ``meta`` as JSON in the schema metadata."""
        if meta:
            table = table.replace_schema_metadata({b"noderag": json.dumps(meta, sort_keys=True).encode()})
        atomic_write_parquet(self.path(i), table, compression="zstd", use_dictionary=False)

    def read(self, i: int):
        """(table, meta) of shard ``i``."""
        import pyarrow.parquet as pq

        tab = pq.read_table(self.path(i))
        raw = (tab.schema.metadata or {}).get(b"noderag")
        meta = json.loads(raw) if raw else {}
        return tab.replace_schema_metadata(None), meta
