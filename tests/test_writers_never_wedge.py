"""Issue 44, fault 1: a failed or killed writer never wedges the index.

A second merging compaction after a delete in place once failed ("ids not in the index": the scrubbed
nodes keep their ids, but the first compaction stored no vector for them) and left ``stages/`` behind,
which refused every later writer. Now: the compaction works; ``stages/`` of an unfinished run is resumed by
that run and discarded by any other writer and by ``noderag repair``, the index unchanged; an orphan
generation (a kill at the switch) is removed by ``gc`` and ``repair``; a compaction with nothing to do
commits nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from noderag.cli import main
from noderag.config import NodeRAGConfig
from noderag.indexing import driver
from noderag.indexing.driver import build_index
from noderag.indexing.run import STAGES_RULE
from noderag.indexing.update.compact import compact_index
from noderag.indexing.update.delete import delete_documents
from noderag.store.generations import current_generation, generation_numbers, remove_old_generations
from noderag.store.repair import repair_pointer
from noderag.store.tables import IndexStore
from noderag.store.verify import verify_index

pytestmark = pytest.mark.slow  # each test builds, deletes and compacts real indexes


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


def _sources(root: Path) -> list[str]:
    with IndexStore.open(root) as st:
        return sorted(s for s in st.documents.column("source").to_pylist() if s)


@pytest.fixture()
def deleted_in_place(tmp_path) -> Path:
    root = tmp_path / "idx"
    build_index([_jsonl(tmp_path / "a.jsonl", _rows("alpha", 12))], root, _cfg(), progress=False)
    rep = delete_documents(root, ["alpha-1"], config=_cfg())
    assert rep.manifest["runs"][-1].get("scrubbed") is True  # deleted in place
    return root


@pytest.mark.slow
def test_second_merging_compaction_after_a_delete_in_place(deleted_in_place):
    root = deleted_in_place
    first = compact_index(root)
    assert first.generation == 3 and not (root / "stages").exists()
    # the scrubbed nodes keep their ids and have no stored vector now: a second merge must not ask for one
    insert = build_index([_jsonl(root.parent / "b.jsonl", _rows("beta", 2))], root, _cfg(), progress=False)
    assert insert.manifest.get("deltas")
    second = compact_index(root)
    assert second.generation == 5 and not (root / "stages").exists()
    verify_index(root, "full")
    assert _sources(root) == sorted([f"alpha-{i}" for i in range(12) if i != 1] + ["beta-0", "beta-1"])
    third = compact_index(root, full=True)
    assert third.generation == 6
    verify_index(root, "full")


def test_an_empty_compaction_is_a_no_op(deleted_in_place, capsys):
    root = deleted_in_place
    compact_index(root)
    gen = current_generation(root)
    rep = compact_index(root)
    assert rep.nothing_done and rep.generation == gen == current_generation(root)
    assert main(["compact", str(root), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out == (f"index {root}: nothing to compact (no delta segments and no nodes deleted in place since the "
                   f"last compaction); generation {gen} is unchanged\n")
    assert compact_index(root, full=True).generation == gen + 1  # the scrubbed nodes are still there to drop
    assert compact_index(root, full=True).nothing_done and current_generation(root) == gen + 1


def test_a_failed_writer_leaves_the_index_writable(deleted_in_place, monkeypatch, capsys):
    root = deleted_in_place
    before = current_generation(root)

    def broken(*a, **k):
        raise RuntimeError("injected failure in the tables stage")

    with monkeypatch.context() as m:
        m.setattr(driver, "_tables", broken)
        with pytest.raises(RuntimeError, match="injected failure"):
            compact_index(root)
    assert (root / "stages" / "run.json").is_file() and current_generation(root) == before
    # a different operation discards the failed run's stages (the index was never changed) and goes on
    said: list[str] = []
    rep = build_index([_jsonl(root.parent / "c.jsonl", _rows("gamma", 2))], root, _cfg(), progress=False,
                      log=said.append)
    assert rep.added_documents == 2 and current_generation(root) == before + 1
    assert any(s.startswith("discarded the unfinished a compaction") or "discarded the unfinished" in s
               for s in said), said
    assert not (root / "stages").exists()
    # a failed insert, then a delete: not blocked
    with monkeypatch.context() as m:
        m.setattr(driver, "_tables", broken)
        m.setattr(driver, "_execute_delta", lambda run: broken())
        with pytest.raises(RuntimeError, match="injected failure"):
            build_index([_jsonl(root.parent / "d.jsonl", _rows("delta", 2))], root, _cfg(), progress=False)
    assert (root / "stages").is_dir()
    delete_documents(root, ["gamma-0"], config=_cfg())
    assert "gamma-0" not in _sources(root) and "delta-0" not in _sources(root)
    verify_index(root, "full")
    # repair clears a failed run's stages too
    with monkeypatch.context() as m:
        m.setattr(driver, "_execute_delta", lambda run: broken())
        with pytest.raises(RuntimeError):
            build_index([_jsonl(root.parent / "e.jsonl", _rows("eps", 2))], root, _cfg(), progress=False)
    gen = current_generation(root)
    assert main(["repair", str(root)]) == 0
    err = capsys.readouterr().err
    assert f"discarded the unfinished run in {root / 'stages'}" in err
    assert not (root / "stages").exists() and current_generation(root) == gen
    assert "stages/" in STAGES_RULE and "resumes" in STAGES_RULE


def _sub(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "noderag.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


def test_an_orphan_generation_is_removed_by_gc_and_repair(deleted_in_place, tmp_path):
    root = deleted_in_place
    new = _jsonl(tmp_path / "f.jsonl", _rows("phi", 2))
    gen = current_generation(root)
    r = _sub(["insert", str(root), str(new), "--no-progress"], {"NODERAG_TEST_KILL_AT": "switch"})
    assert r.returncode == -9, r.stderr
    assert current_generation(root) == gen and generation_numbers(root)[-1] == gen + 1  # the orphan
    removed, left = remove_old_generations(root)
    assert removed == [gen + 1] and left == [] and generation_numbers(root) == [gen]
    assert (root / "stages").is_dir()  # gc leaves the unfinished run to be resumed
    r = _sub(["insert", str(root), str(new), "--no-progress"], {"NODERAG_TEST_KILL_AT": "switch"})
    assert r.returncode == -9 and generation_numbers(root) == [gen, gen + 1]
    rep = repair_pointer(root)
    assert rep.generation == gen and rep.discarded is not None
    assert generation_numbers(root) == [gen] and not (root / "stages").exists()
    assert "phi-0" not in _sources(root)


def test_a_replacement_of_a_few_documents_keeps_bm25_weights_positive(tmp_path):
    # found by tests/test_random_writes.py: the delta of a replacement counted the passages BM25 knows without the
    # scrubbed old version, whose postings stay: a term's document frequency exceeded it, its idf went negative
    # and every query failed in PPR ("seed_weights must be finite float32 values >= 0")
    from noderag.api import Index

    root = tmp_path / "idx"
    rows = _rows("alpha", 4)
    build_index([_jsonl(tmp_path / "a.jsonl", rows)], root, _cfg(), progress=False)
    new = dict(rows[0], text=rows[0]["text"].replace("Engineer", "Architect"))
    rep = build_index([_jsonl(tmp_path / "b.jsonl", [new])], root, _cfg(), progress=False)
    assert rep.deleted_documents == 1 and rep.manifest.get("deltas")
    with Index.open(root) as ix:
        for row in [new] + rows[1:]:
            assert ix.retrieve(row["text"]).passages[0] == row["id"]


def test_update_settings_are_stored_and_insert_takes_a_config(tmp_path, capsys):
    # fault 6: [update] reached an insert only through `build --config` and was not stored: a later insert without
    # a configuration silently went back to the defaults (here: a delta segment instead of the whole index)
    root = tmp_path / "idx"
    whole = _cfg().with_overrides({"update.segments": False})
    build_index([_jsonl(tmp_path / "a.jsonl", _rows("alpha", 8))], root, whole, progress=False)
    rep = build_index([_jsonl(tmp_path / "b.jsonl", _rows("beta", 1))], root, None, progress=False)
    assert rep.manifest["update"]["segments"] is False and not rep.manifest.get("deltas")
    cfg = tmp_path / "update.toml"
    cfg.write_text('[embed]\nspec = "hash:32"\n[update]\nsegments = true\ncompaction = "off"\n', encoding="utf-8")
    assert main(["insert", str(root), str(_jsonl(tmp_path / "c.jsonl", _rows("gamma", 1))), "--config", str(cfg),
                 "--no-progress"]) == 0
    capsys.readouterr()
    with IndexStore.open(root) as st:
        assert st.manifest["update"] == {"segments": True, "max_delta_share": 0.25, "compaction": "off"}
        assert [d["name"] for d in st.manifest["deltas"]] == ["1"]
    verify_index(root, "full")
