"""An index written with an earlier format version is refused, by readers and writers alike, with one line
that names the file, both versions and the command that rebuilds it (no reader of an older layout is kept)."""

from __future__ import annotations

import json

import pytest

from noderag.api import Index, build
from noderag.cli import main
from noderag.graph.storage import FORMAT_VERSION, FormatVersionError
from noderag.store.generations import current_path

OLD = FORMAT_VERSION - 1
HINT = "rebuild it with `noderag build SOURCES --index NEW_DIR`"


@pytest.fixture()
def old_index(tmp_path):
    """A fresh index whose manifest and graph metadata say it was written with the previous format version."""
    src = tmp_path / "docs.jsonl"
    src.write_text(json.dumps({"id": "a", "title": "Kessel", "text": "Kessel Harbour was built in 1801."}) + "\n",
                   encoding="utf-8")
    idx = tmp_path / "idx"
    build([src], idx, embed="hash:32", progress=False)
    gen = current_path(idx)
    for rel in ("manifest.json", "graph/meta.json"):
        meta = json.loads((gen / rel).read_text(encoding="utf-8"))
        assert meta["format_version"] == FORMAT_VERSION  # every file that carries the version has the current one
        meta["format_version"] = OLD
        (gen / rel).write_text(json.dumps(meta), encoding="utf-8")
    return idx


def _message(idx) -> str:
    return (f"{current_path(idx) / 'manifest.json'}: format version {OLD} is not supported; "
            f"this noderag reads format version {FORMAT_VERSION} only: {HINT}")


def test_open_refuses_an_older_format_naming_the_rebuild(old_index):
    with pytest.raises(FormatVersionError) as exc:
        Index(old_index)
    assert str(exc.value) == _message(old_index)


@pytest.mark.parametrize("command", ["query", "insert", "stats"])
def test_cli_refuses_an_older_format_in_one_line(old_index, tmp_path, capsys, command):
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"id": "b", "text": "Lorn Bay lies north of Kessel."}) + "\n", encoding="utf-8")
    argv = {"query": ["query", str(old_index), "where is Kessel?"],
            "insert": ["insert", str(old_index), str(more), "--no-progress"],
            "stats": ["stats", str(old_index)]}[command]
    before = sorted(p.relative_to(old_index) for p in old_index.rglob("*"))
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 1
    assert err.strip().splitlines() == [f"noderag {command}: error: {_message(old_index)}"]
    assert sorted(p.relative_to(old_index) for p in old_index.rglob("*")) == before  # nothing written


def test_api_insert_refuses_an_older_format(old_index, tmp_path):
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"id": "b", "text": "Lorn Bay lies north of Kessel."}) + "\n", encoding="utf-8")
    from noderag.indexing.driver import build_index

    with pytest.raises(FormatVersionError) as exc:
        build_index([more], old_index, progress=False)
    assert str(exc.value) == _message(old_index)
