"""An index in the layout written before the node texts were paged (texts inside nodes.parquet and in
query/text.npy, one decompositions.parquet) still opens, searches, takes a delete in place that leaves no
deleted text, verifies, and compacts to the fresh build of the survivors."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from noderag.api import Index
from noderag.indexing.update.compact import compact_index
from noderag.indexing.update.delete import delete_documents
from noderag.indexing.driver import build_index
from noderag.graph.storage import atomic_write_json
from noderag.store.generations import current_path
from noderag.store.manifest import dir_sizes
from noderag.store.node_texts import TEXT_META
from noderag.store.tables import read_nodes_file
from noderag.store.verify import CHECKSUMS, file_checksums, verify_index

from test_delete import _files_with
from test_scrub import SECRET, _config, _files, _jsonl, _rows


def _to_legacy(gen) -> None:
    """Rewrite a generation's files in the older layout, and its manifest's sizes and checksums."""
    tab = read_nodes_file(gen / "nodes.parquet")
    meta = {k: v for k, v in (pq.read_schema(gen / "nodes.parquet").metadata or {}).items() if k != TEXT_META}
    names = [c for c in ("id", "type", "name", "text", "doc_id", "chunk_id", "source_id", "mentions", "active")
             if c in tab.column_names and (c != "name" or b"noderag.name" not in meta)]
    out = tab.select(names)
    out = out.cast(pa.schema([f if f.name != "text" else pa.field("text", pa.string()) for f in out.schema]))
    pq.write_table(out.replace_schema_metadata(meta), gen / "nodes.parquet")
    off = np.load(gen / "text_off.npy")
    data = np.concatenate([np.fromfile(p, np.uint8) for p in sorted((gen / "text").iterdir())])
    (gen / "text_off.npy").unlink()
    shutil.rmtree(gen / "text")
    np.save(gen / "query" / "text_off.npy", off)
    np.save(gen / "query" / "text.npy", data)
    qmeta = json.loads((gen / "query" / "meta.json").read_text())
    qmeta["format"] = 1
    qmeta.pop("text_page", None)
    (gen / "query" / "meta.json").write_text(json.dumps(qmeta, sort_keys=True) + "\n")
    parts = sorted((gen / "decompositions").iterdir())
    pq.write_table(pa.concat_tables([pq.read_table(p) for p in parts]), gen / "decompositions.parquet")
    shutil.rmtree(gen / "decompositions")
    manifest = json.loads((gen / "manifest.json").read_text())
    manifest.pop(CHECKSUMS, None)
    manifest["bytes"] = {k: v for k, v in dir_sizes(gen).items() if k != "manifest.json"}
    manifest[CHECKSUMS] = file_checksums(gen, manifest)
    atomic_write_json(gen / "manifest.json", manifest)


def test_an_index_in_the_older_layout_opens_deletes_in_place_and_compacts(tmp_path):
    rows = _rows()
    idx = tmp_path / "idx"
    build_index([_jsonl(tmp_path / "all.jsonl", rows)], idx, _config(), progress=False)
    gen = current_path(idx)
    _to_legacy(gen)
    assert not (gen / "text").exists() and (gen / "query" / "text.npy").is_file()
    verify_index(gen, "full")
    with Index.open(idx) as index:
        assert index.retrieve(f"Who founded the Grey Heron ferry line? {SECRET}").passages[0] == "d5"
    delete_documents(idx, ["d5", "d9"])
    gen = current_path(idx)
    assert (gen / "decompositions.parquet").is_file() and _files_with(gen, SECRET) == []
    verify_index(gen, "full")
    with Index.open(idx) as index:
        assert "d5" not in index.retrieve(f"Who founded the Grey Heron ferry line? {SECRET}").passages
        assert "d10" in index.retrieve("Where does Alder Town 10 lie?").passages[:2]
    ref = tmp_path / "ref"
    build_index([_jsonl(tmp_path / "keep.jsonl", [r for r in rows if r["id"] not in ("d5", "d9")])], ref, _config(),
                progress=False)
    compact_index(idx, full=True)
    assert _files(current_path(idx)) == _files(current_path(ref))
