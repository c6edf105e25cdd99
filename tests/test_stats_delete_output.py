"""What ``stats`` and ``delete`` print after an insert: edge rows that add up, no empty bars, no stats dump."""

from __future__ import annotations

import re

import pytest

import noderag
from noderag.cli import main
from noderag.data import demo_dir
from noderag.indexing.progress import NullBar, Progress
from noderag.store.summary import edge_breakdown, format_summary


@pytest.fixture(scope="module")
def inserted(tmp_path_factory):
    root = tmp_path_factory.mktemp("stats-delete")
    docs = sorted(demo_dir().glob("*.md"))
    base = root / "base"
    base.mkdir()
    for p in docs[:6]:
        (base / p.name).write_bytes(p.read_bytes())
    index = noderag.build([str(base)], str(root / "ix"), embed="hash:32", progress=False)
    return index.insert([str(docs[-1])])


def test_the_edge_rows_of_stats_add_up_to_the_total_after_an_insert(inserted, capsys):
    edges = inserted.manifest["counts"]["edges"]
    assert inserted.manifest.get("deltas"), "the insert made a delta segment"
    rows = edge_breakdown(edges)
    assert sum(v for k, v in rows.items() if k.startswith("structural.")) == edges["structural"]
    assert rows["structural.in deltas"] > 0
    assert main(["stats", str(inserted.root)]) == 0
    out = capsys.readouterr().out
    table = {m.group(1).strip(): int(m.group(2).replace(",", ""))
             for m in re.finditer(r"^(structural[^\d\n]*?)\s+([\d,]+)$", out, re.M)}
    assert sum(v for k, v in table.items() if k != "structural") == table["structural"], out
    assert "structural.in deltas" in format_summary(inserted.manifest)


def test_delete_prints_one_line_and_no_empty_bars(inserted, capsys):
    doc = str(sorted(demo_dir().glob("*.md"))[-1])
    source = next(s for s in inserted.documents.column("source").to_pylist() if s and s.endswith(doc.split("/")[-1]))
    assert main(["delete", str(inserted.root), source]) == 0
    captured = capsys.readouterr()
    out = captured.out.strip().splitlines()
    assert len(out) == 1 and re.match(r"index .*: 1 document\(s\) deleted, generation \d+; documents 6, chunks \d+, "
                                      r"nodes [\d,]+ \([\d,]+ active\), edges [\d,]+ \(noderag stats for the rest\)$",
                                      out[0]), out
    assert " 0it" not in captured.err and "0/0" not in captured.err, captured.err


def test_a_bar_of_nothing_is_no_bar():
    assert isinstance(Progress(True).bar(0, "chunk"), NullBar)
    assert isinstance(Progress(False).bar(5, "chunk"), NullBar)
