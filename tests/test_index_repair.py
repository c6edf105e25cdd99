"""A missing or bad ``CURRENT`` never costs a generation: every command names the damage and the newest
complete generation in one line, writers and ``gc`` touch nothing, ``noderag repair`` restores the pointer;
temporary files of a killed commit are removed by the next writer, ``gc`` and ``repair``."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from noderag.cli import main
from noderag.config import NodeRAGConfig
from noderag.indexing.update.delete import delete_documents
from noderag.store.generations import (CURRENT, IndexPointerError, current_generation, generation_path,
                                       remove_old_generations)
from noderag.store.repair import repair_pointer
from noderag.indexing.driver import build_index
from noderag.store.tables import IndexNotFoundError, IndexStore


def _rows(prefix: str, n: int) -> list[dict]:
    return [{"id": f"{prefix}-{i}", "title": f"{prefix} {i}",
             "text": f"{prefix.title()} Harbour {i} was built by Engineer {prefix.title()}{i} in {1800 + i}. "
                     f"Ships from {prefix.title()} Harbour {i} sail to the island Quell{prefix}{i}."}
            for i in range(n)]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _cfg() -> NodeRAGConfig:
    # no background compaction: these tests pin the files and generations their own writes leave
    return NodeRAGConfig().with_overrides({"embed.spec": "hash:32", "update.compaction": "off"})


@pytest.fixture(scope="module")
def two_generations(tmp_path_factory) -> Path:
    """An index with generation 1 (12 'base' documents) and generation 2 (+3 'extra' documents)."""
    d = tmp_path_factory.mktemp("repair")
    root = d / "idx"
    build_index([_jsonl(d / "base.jsonl", _rows("base", 12))], root, _cfg(), progress=False)
    build_index([_jsonl(d / "extra.jsonl", _rows("extra", 3))], root, _cfg(), progress=False)
    return root  # generation 1 was removed by the second commit


@pytest.fixture()
def idx(tmp_path, two_generations) -> Path:
    root = tmp_path / "idx"
    shutil.copytree(two_generations, root)
    return root


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _docs(root: Path) -> int:
    with IndexStore.open(root) as st:
        return st.documents.num_rows


@pytest.mark.parametrize("damage, problem", [
    ("missing", "CURRENT: missing, but generations/ holds generation(s) 2"),
    ("garbage", "CURRENT: expected a generation number, found 'not-a-number' (a malformed pointer)"),
    ("dangling", "CURRENT: names generation 9, which does not exist (no folder generations/9)"),
])
def test_damaged_pointer_every_command_refuses_and_nothing_changes(idx, tmp_path, capsys, damage, problem):
    assert current_generation(idx) == 2 and _docs(idx) == 15
    if damage == "missing":
        (idx / CURRENT).unlink()
    else:
        (idx / CURRENT).write_text("not-a-number\n" if damage == "garbage" else "9\n")
    before = _files(idx)
    new = _jsonl(tmp_path / "new.jsonl", _rows("new", 2))
    want = f"{idx}/{problem}; the index is damaged: the newest complete generation is 2 (generations/2): run " \
           f"`noderag repair {idx}`"
    with pytest.raises(IndexPointerError) as ei:
        build_index([new], idx, _cfg(), progress=False)
    assert str(ei.value).startswith(want) and ei.value.newest == 2
    with pytest.raises(IndexPointerError, match="newest complete generation is 2"):
        remove_old_generations(idx)
    with pytest.raises(IndexPointerError, match="newest complete generation is 2"):
        delete_documents(idx, ["base-1"])
    with pytest.raises(IndexPointerError, match="newest complete generation is 2"):
        IndexStore.open(idx)
    for argv in (["build", str(new), "--index", str(idx), "--embed", "hash:32", "--no-progress"],
                 ["insert", str(idx), str(new), "--no-progress"], ["delete", str(idx), "base-1", "--no-progress"],
                 ["gc", str(idx)], ["stats", str(idx)], ["verify", str(idx)], ["query", str(idx), "Harbour 3"],
                 ["serve", str(idx), "--port", "0"]):
        rc, out, err = _cli(capsys, *argv)
        assert rc == 1, (argv, err)
        assert err == f"noderag {argv[0]}: error: {want} to point CURRENT at the newest generation that passes the full " \
                      "check\n", argv
    assert _files(idx) == before  # no writer and no gc touched anything
    rc, out, err = _cli(capsys, "repair", str(idx))
    assert rc == 0, err
    assert out.startswith(f"index {idx}: CURRENT now names generation 2 (was ")
    assert current_generation(idx) == 2 and _docs(idx) == 15
    rc, out, _ = _cli(capsys, "repair", str(idx))
    assert rc == 0 and "nothing to repair" in out


def test_repair_skips_a_damaged_newer_generation(idx, two_generations):
    # generation 1 again beside 2 (as a reader would have kept it), then 2's nodes damaged and CURRENT lost
    gen1 = generation_path(idx, 1)
    assert not gen1.exists()
    shutil.copytree(generation_path(two_generations, 2), gen1)
    m = json.loads((gen1 / "manifest.json").read_text())
    assert m["state"] == "complete"
    data = bytearray((generation_path(idx, 2) / "nodes.parquet").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (generation_path(idx, 2) / "nodes.parquet").write_bytes(bytes(data))
    (idx / CURRENT).unlink()
    (idx / ".CURRENT.x1y2.tmp").write_text("3\n")
    (idx / "generations" / ".trash-7").mkdir()
    report = repair_pointer(idx)
    assert report.generation == 1 and report.changed and report.before is None
    # the flipped byte is caught by the checksum or, where it lands in the footer, by the cheap check first
    assert len(report.skipped) == 1 and re.fullmatch(r"generation 2: (checksum mismatch|damaged footer) in "
                                                     r"nodes\.parquet", report.skipped[0])
    assert report.removed == [".CURRENT.x1y2.tmp", "generations/.trash-7"]
    assert (idx / CURRENT).read_text() == "1\n" and not (idx / ".CURRENT.x1y2.tmp").exists()
    assert not (idx / "generations" / ".trash-7").exists()
    # gc keeps generation 2, the newest complete one, although CURRENT names 1
    removed, left = remove_old_generations(idx)
    assert removed == [] and left == []
    assert generation_path(idx, 2).is_dir()


def test_repair_fails_when_no_generation_passes(idx):
    npy = generation_path(idx, 2) / "node_types.npy"
    data = bytearray(npy.read_bytes())
    data[-1] ^= 0x7F
    npy.write_bytes(bytes(data))
    (idx / CURRENT).unlink()
    with pytest.raises(IndexPointerError, match=r"CURRENT: no generation passes the full check \(generation 2: "
                                                r"checksum mismatch in node_types.npy\); the index is damaged: no "
                                                r"complete generation is left"):
        repair_pointer(idx)
    assert not (idx / CURRENT).exists()
    empty = idx.parent / "empty-dir"
    empty.mkdir()
    with pytest.raises(IndexNotFoundError, match="no generations/ to repair from"):
        repair_pointer(empty)


def test_gc_keeps_the_newest_complete_generation(idx, two_generations):
    shutil.copytree(generation_path(two_generations, 2), generation_path(idx, 1))
    (idx / CURRENT).write_text("1\n")  # a pointer restored from an old backup
    removed, left = remove_old_generations(idx)
    assert removed == [] and sorted(p.name for p in (idx / "generations").iterdir()) == ["1", "2"]


def test_temp_files_of_a_killed_commit_are_removed(idx, tmp_path, capsys):
    (idx / ".CURRENT.k9f_a2.tmp").write_text("3")  # what a writer killed inside atomic_write_bytes leaves
    rc, out, err = _cli(capsys, "gc", str(idx))
    assert rc == 0, err
    assert not (idx / ".CURRENT.k9f_a2.tmp").exists()
    (idx / ".CURRENT.zz81q.tmp").write_text("3")
    rep = build_index([_jsonl(tmp_path / "more.jsonl", _rows("more", 2))], idx, _cfg(), progress=False)
    assert rep.added_documents == 2 and not (idx / ".CURRENT.zz81q.tmp").exists()
    (idx / ".CURRENT.dd.tmp").write_text("3")
    delete_documents(idx, ["more-0"], config=_cfg())
    assert sorted(p.name for p in idx.iterdir()) == [".writer.lock", CURRENT, "generations"]


def test_insert_command(idx, tmp_path, capsys):
    new = _jsonl(tmp_path / "new.jsonl", _rows("new", 2))
    rc, out, err = _cli(capsys, "insert", str(idx), str(new), "--no-progress")
    assert rc == 0, err
    assert out.startswith(f"index {idx}: 2 new document(s), 0 duplicate(s) skipped")
    assert _docs(idx) == 17 and current_generation(idx) == 3
    rc, _, err = _cli(capsys, "insert", str(tmp_path / "nope"), str(new))
    assert rc == 1 and err == (f"noderag insert: error: {tmp_path / 'nope'}: no finished index to insert into; build one "
                               f"first with `noderag build INPUT... --index {tmp_path / 'nope'}`\n")
    assert not (tmp_path / "nope").exists()


def test_negative_wait_is_one_line(idx, capsys):
    for argv in (["gc", str(idx), "--wait", "-5"], ["delete", str(idx), "x", "--wait", "-1"],
                 ["repair", str(idx), "--wait", "nan"]):
        rc, out, err = _cli(capsys, *argv)
        assert rc == 2 and err.startswith(f"noderag {argv[0]}: error: --wait must be a number of seconds >= 0, got ") \
            and err.count("\n") == 1, (argv, err)
