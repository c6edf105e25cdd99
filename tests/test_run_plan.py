"""start_run resolves each kind of write into its run kind, once, as an immutable plan."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from noderag.config import NodeRAGConfig
from noderag.indexing.driver import build_index
from noderag.indexing.plan import Compaction, DeltaInsert, FreshBuild, Recompute, RunPlan, Scrub
from noderag.indexing.run import BuildReport, BuildRun, start_run
from noderag.indexing.update.survivors import Deletion

CORPUS = Path(__file__).parent / "data" / "musique" / "corpus.jsonl"
CFG = NodeRAGConfig().with_overrides({"embed.spec": "hash:64"})


def _part(tmp_path: Path, name: str, a: int, b: int) -> Path:
    lines = CORPUS.read_text("utf-8").splitlines(keepends=True)
    out = tmp_path / f"{name}.jsonl"
    out.write_text("".join(lines[a:b]), encoding="utf-8")
    return out


def _ids(part: Path) -> list[str]:
    return [json.loads(line)["id"] for line in part.read_text("utf-8").splitlines()]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """A base of 40 documents and one delta of 5."""
    tmp = tmp_path_factory.mktemp("plan")
    base, delta = _part(tmp, "base", 0, 40), _part(tmp, "delta", 40, 45)
    root = tmp / "index"
    build_index([base], root, CFG, progress=False)
    build_index([delta], root, progress=False)
    return root, tmp, base, delta


def _plan(root: Path, inputs, config=None, **kw) -> BuildRun:
    """The run start_run chooses; its claimed stages/ are dropped again (nothing is executed)."""
    try:
        run = start_run(inputs, root, config, progress=False, **kw)
    finally:
        shutil.rmtree(root / "stages", ignore_errors=True)
    assert isinstance(run, BuildRun), run
    assert isinstance(run.plan, RunPlan)
    return run


def test_a_first_build_is_a_fresh_build(tmp_path):
    (tmp_path / "new").mkdir()  # build_index makes the folder before the writer lock
    run = _plan(tmp_path / "new", [_part(tmp_path, "p", 0, 5)], CFG)
    assert run.plan.kind == FreshBuild() and run.plan.previous is None and run.plan.n_new == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.plan.run_id = "other"  # resolved once: nobody changes it


def test_an_insert_is_a_delta_on_the_segments(index, tmp_path):
    root = index[0]
    run = _plan(root, [_part(tmp_path, "more", 45, 48)])
    assert isinstance(run.plan.kind, DeltaInsert)
    assert len(run.plan.kind.segments) == 2 and run.plan.kind.rewrites is None and run.plan.kind.delta_from is None
    assert not run.plan.kind.reads_old_vectors and run.plan.first_document == 45 and run.segment_start == run.old_n


def test_an_insert_without_segments_recomputes(index, tmp_path):
    root = index[0]
    config = CFG.with_overrides({"update.segments": False})
    run = _plan(root, [_part(tmp_path, "more", 45, 48)], config)
    assert run.plan.kind == Recompute("update.segments = false", reassembles=False)
    assert run.plan.kind.reads_old_vectors


def test_a_delete_in_the_delta_rewrites_it(index):
    root, _, _, delta = index
    run = _plan(root, [], delete=Deletion((_ids(delta)[1],), ()))
    kind = run.plan.kind
    assert isinstance(kind, DeltaInsert) and kind.rewrites == 0 and kind.delta_from is not None
    assert kind.reads_old_vectors and run.plan.drop == (41,) and run.plan.first_document == 40


def test_a_delete_in_the_base_scrubs(index):
    root, _, base, _ = index
    run = _plan(root, [], delete=Deletion((_ids(base)[3],), ()))
    assert run.plan.kind == Scrub(then_insert=False) and run.plan.drop == (3,) and run.table is None


def test_compactions_and_nothing_to_do(index):
    root, _, base, _ = index
    merge = _plan(root, [], compact="merge").plan.kind
    full = _plan(root, [], compact="full").plan.kind
    assert merge == Compaction("merge") and not merge.reassembles
    assert full == Compaction("full") and full.reassembles
    report = start_run([base], root, None, progress=False)  # every document already indexed
    assert isinstance(report, BuildReport) and report.added_documents == 0 and report.duplicates == 40
    assert not (root / "stages").exists()
