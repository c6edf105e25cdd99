"""Issue 44, faults 4 and 5: export refuses a damaged index in one line, writing nothing; damage in a delta
segment names the delta's file (``deltas/1/node_types.npy``), never the base's graph."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noderag.cli import main
from noderag.config import NodeRAGConfig
from noderag.indexing.driver import build_index
from noderag.store.errors import IndexDamagedError
from noderag.store.generations import current_path
from noderag.store.tables import IndexStore

pytestmark = pytest.mark.slow  # each case damages and reopens a freshly built index with deltas


def _rows(prefix: str, n: int) -> list[dict]:
    return [{"id": f"{prefix}-{i}", "title": f"{prefix} {i}",
             "text": f"{prefix.title()} Harbour {i} was built by Engineer {prefix.title()}{i} in {1800 + i}. "
                     f"Ships from {prefix.title()} Harbour {i} sail to the island Quell{prefix}{i}."}
            for i in range(n)]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _cfg() -> NodeRAGConfig:
    return NodeRAGConfig().with_overrides({"embed.spec": "hash:32", "update.compaction": "off"})


@pytest.fixture()
def with_delta(tmp_path) -> Path:
    root = tmp_path / "idx"
    build_index([_jsonl(tmp_path / "a.jsonl", _rows("alpha", 10))], root, _cfg(), progress=False)
    rep = build_index([_jsonl(tmp_path / "b.jsonl", _rows("beta", 2))], root, _cfg(), progress=False)
    assert [d["name"] for d in rep.manifest["deltas"]] == ["1"]
    return root


def _flip(path: Path, at: int, value: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] = value
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("fmt", ["graphml", "parquet", "neo4j"])
def test_export_refuses_a_flipped_byte_in_a_text_page(with_delta, tmp_path, capsys, fmt):
    page = current_path(with_delta) / "text" / "000000.bin"
    _flip(page, page.stat().st_size // 2, 0xFF)  # invalid UTF-8 in the middle of a node's text
    out = tmp_path / f"out-{fmt}"
    assert main(["export", str(with_delta), "--format", fmt, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "checksum mismatch in text/000000.bin; the index is damaged" in err, err
    assert not out.exists() and not list(tmp_path.glob(".out-*"))


@pytest.mark.parametrize("rel, at, value, words", [
    ("deltas/1/node_types.npy", -1, 0xFC, "invalid node type in deltas/1/node_types.npy (found 252"),
    ("deltas/1/edges/src.npy", -1, 0x7F, "id out of range in deltas/1/edges/src.npy"),
    ("deltas/1/edges/dst.npy", -1, 0x80, "id out of range in deltas/1/edges/dst.npy"),
])
def test_damage_in_a_delta_names_the_delta_file(with_delta, capsys, rel, at, value, words):
    _flip(current_path(with_delta) / rel, at, value)
    with IndexStore.open(with_delta) as st, pytest.raises(IndexDamagedError) as exc:
        st.graph
    assert exc.value.file == rel and words in str(exc.value), str(exc.value)
    assert main(["query", str(with_delta), "Which harbour did Engineer Beta1 build?"]) == 1
    err = capsys.readouterr().err
    assert words in err and "graph/" not in err.split("; the index")[0], err
