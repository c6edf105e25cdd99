"""``update.compaction``: an insert past ``update.max_delta_share`` returns with its delta and a detached
process compacts; any other writer stops that process and starts it again when done."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from noderag.indexing.update.background import LOG, wait_for_process
from noderag.indexing.driver import build_index
from noderag.config import NodeRAGConfig
from noderag.errors import ConfigError
from noderag.store.generations import current_path
from noderag.store.lock import LOCK_FILE

CORPUS = Path(__file__).parent / "data" / "musique" / "corpus.jsonl"
CFG = NodeRAGConfig().with_overrides({"embed.spec": "hash:64"})
BASE_DOCS = 40  # a share of 0.25 lets the deltas hold 10 documents


def _part(tmp_path: Path, name: str, a: int, b: int) -> Path:
    lines = CORPUS.read_text("utf-8").splitlines(keepends=True)
    out = tmp_path / f"{name}.jsonl"
    out.write_text("".join(lines[a:b]), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bg")
    idx = tmp / "idx"
    build_index([_part(tmp, "base", 0, BASE_DOCS)], idx, CFG, progress=False)
    return idx


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _manifest(idx: Path) -> dict:
    return json.loads((current_path(idx) / "manifest.json").read_text("utf-8"))


def _wait_until(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_an_insert_past_the_share_returns_with_its_delta_and_compacts_in_the_background(base, tmp_path):
    idx = _copy(base, tmp_path / "idx")
    messages: list[str] = []
    report = build_index([_part(tmp_path, "new", BASE_DOCS, BASE_DOCS + 12)], idx, progress=False,
                         log=messages.append)
    assert report.manifest.get("deltas") and report.background_compaction
    assert any("compacting in the background" in m for m in messages)
    assert wait_for_process(report.background_compaction, 300), (idx / LOG).read_text()
    log = (idx / LOG).read_text("utf-8")
    assert "done in" in log, log
    m = _manifest(idx)
    assert not m.get("deltas") and "communities" in m["stages"] and m["counts"]["documents"] == BASE_DOCS + 12
    assert not (idx / "stages").exists()
    # nothing more is due: an insert within the share adds a delta and starts nothing
    report = build_index([_part(tmp_path, "more", BASE_DOCS + 12, BASE_DOCS + 14)], idx, progress=False)
    assert report.manifest.get("deltas") and report.background_compaction is None


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_a_writer_stops_a_background_compaction_and_starts_it_again(base, tmp_path, monkeypatch, capsys):
    from noderag.cli import main

    idx = _copy(base, tmp_path / "idx")
    monkeypatch.setenv("NODERAG_TEST_HOLD_AT", "communities")  # the compaction stops there, lock held
    first = build_index([_part(tmp_path, "a", BASE_DOCS, BASE_DOCS + 12)], idx, progress=False)
    assert first.background_compaction
    _wait_until(lambda: "background compaction" in (idx / LOCK_FILE).read_text("utf-8")
                and "attributes" in (idx / LOG).read_text("utf-8"), 120,
                "the background compaction to hold the index at its communities stage")
    assert main(["stats", str(idx)]) == 0
    assert f"being written: background compaction (pid {first.background_compaction} " in capsys.readouterr().out
    monkeypatch.delenv("NODERAG_TEST_HOLD_AT")
    messages: list[str] = []
    t0 = time.monotonic()
    second = build_index([_part(tmp_path, "b", BASE_DOCS + 12, BASE_DOCS + 15)], idx, progress=False,
                         log=messages.append)  # no wait given: the compaction yields at once
    assert time.monotonic() - t0 < 60
    assert wait_for_process(first.background_compaction, 5)  # stopped
    assert any("dropping the unfinished stages of a stopped background compaction" in m for m in messages)
    assert [d["documents"] for d in second.manifest["deltas"]] == [12, 3]
    assert second.background_compaction and second.background_compaction != first.background_compaction
    assert wait_for_process(second.background_compaction, 300), (idx / LOG).read_text()
    m = _manifest(idx)
    assert not m.get("deltas") and m["counts"]["documents"] == BASE_DOCS + 15


def test_twice_the_share_compacts_inline_and_off_never_does(base, tmp_path):
    idx = _copy(base, tmp_path / "idx")
    small = NodeRAGConfig().with_overrides({"update.max_delta_share": 0.1})  # 12 is over twice 4
    report = build_index([_part(tmp_path, "a", BASE_DOCS, BASE_DOCS + 12)], idx, small, progress=False)
    assert not report.manifest.get("deltas") and report.background_compaction is None
    off = NodeRAGConfig().with_overrides({"update.max_delta_share": 0.1, "update.compaction": "off"})
    report = build_index([_part(tmp_path, "b", BASE_DOCS + 12, BASE_DOCS + 30)], idx, off, progress=False)
    assert report.manifest.get("deltas") and report.background_compaction is None
    assert not (idx / LOG).exists()


def test_a_background_compaction_with_nothing_due_does_nothing(base, tmp_path):
    from noderag.indexing.update.compact import compact_index

    idx = _copy(base, tmp_path / "idx")
    build_index([_part(tmp_path, "a", BASE_DOCS, BASE_DOCS + 2)], idx, progress=False)
    before = current_path(idx)
    compact_index(idx, background=0.25)  # 2 documents in the deltas, within 0.25 of the base's 40
    assert current_path(idx) == before and _manifest(idx)["deltas"]


def test_compaction_mode_is_checked():
    with pytest.raises(ConfigError, match="update.compaction"):
        NodeRAGConfig().with_overrides({"update.compaction": "later"})


def test_the_cli_says_where_the_background_compaction_runs(base, tmp_path, capsys):
    import re

    from noderag.cli import main

    idx = _copy(base, tmp_path / "idx")
    assert main(["insert", str(idx), str(_part(tmp_path, "a", BASE_DOCS, BASE_DOCS + 12)), "--no-progress"]) == 0
    out = capsys.readouterr().out
    found = re.search(r"compacting the delta segments in the background \(pid (\d+), log (.+)\)", out)
    assert found and found.group(2) == str(idx / LOG), out
    assert wait_for_process(int(found.group(1)), 300), (idx / LOG).read_text()
    assert not _manifest(idx).get("deltas")
