"""Byte-identical after resume: a build SIGKILLed at each stage's checkpoint and then rerun writes every file
of its generation byte for byte as a clean build does (the manifest equal but for the stage timings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from noderag.data import demo_dir
from noderag.store.decompositions import PART_ROWS, traces_columns, write_decompositions

POINTS = ("ingest", "chunk", "decompose-batch", "assemble", "embed", "attributes", "communities", "tables",
          "semantic", "finalize-files", "commit", "switch", "committed")

_SUB = """
import sys
from noderag.config import NodeRAGConfig
from noderag.indexing.driver import build_index
cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:64", "decompose.batch_size": 3, "semantic.enabled": True})
build_index([sys.argv[1]], sys.argv[2], cfg, progress=False)
"""


def _start(out: Path, kill_at: str | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "NODERAG_TEST_KILL_AT"}
    if kill_at:
        env["NODERAG_TEST_KILL_AT"] = kill_at
    return subprocess.Popen([sys.executable, "-c", _SUB, str(demo_dir()), str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_decompositions_bytes_do_not_depend_on_how_the_assembly_was_cut(tmp_path):
    # a clean build assembles chunks in groups as their records arrive, a resumed one in other groups: the
    # table is the same, its chunks are not; past one data page (1 MiB) the page cuts followed the chunks
    n = 6000
    units = [json.dumps([[3 * i + k, [f"Entity{(7919 * i + k) % 100003}" for _ in range(4)], [["a", "r", "b"]]]
                         for k in range(3)]) for i in range(n)]
    assert sum(map(len, units)) > 1 << 20
    whole = traces_columns(list(range(n)), list(range(n)), units)
    cut = pa.concat_tables([traces_columns(list(range(i, min(n, i + 7))), list(range(i, min(n, i + 7))),
                                           units[i:i + 7]) for i in range(0, n, 7)])
    assert cut.equals(whole) and cut.column("units").num_chunks > 1
    write_decompositions(tmp_path / "whole", whole)
    write_decompositions(tmp_path / "cut", cut)
    parts = sorted(p.name for p in (tmp_path / "whole").iterdir())
    assert len(parts) == -(-n // PART_ROWS) and parts == sorted(p.name for p in (tmp_path / "cut").iterdir())
    for name in parts:
        assert (tmp_path / "cut" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()


def _run_all(jobs: list[tuple[Path, str | None]], parallel: int) -> list[tuple[int, str]]:
    """Run the builds ``parallel`` at a time; (return code, stderr) of each, in order."""
    out: list[tuple[int, str]] = []
    for i in range(0, len(jobs), parallel):
        procs = [_start(path, kill) for path, kill in jobs[i:i + parallel]]
        for p in procs:
            _, err = p.communicate(timeout=600)
            out.append((p.returncode, err))
    return out


def _generation(root: Path) -> dict[str, bytes]:
    gen = root / "generations" / (root / "CURRENT").read_text().strip()
    return {p.relative_to(gen).as_posix(): p.read_bytes() for p in sorted(gen.rglob("*")) if p.is_file()}


def _without_times(manifest: bytes) -> dict:
    m = json.loads(manifest)
    m.pop("stages")
    m["checksums"].pop("manifest")  # the digest covers the stage times
    return m


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_resume_after_a_kill_in_every_stage_is_byte_identical(tmp_path):
    parallel = max(2, min(4, os.cpu_count() or 2))
    ref = tmp_path / "clean"
    jobs = [(ref, None)] + [(tmp_path / point, point) for point in POINTS]
    results = _run_all(jobs, parallel)
    assert results[0][0] == 0, results[0][1]
    for point, (rc, err) in zip(POINTS, results[1:]):
        assert rc == -9, (point, rc, err)
    results = _run_all([(tmp_path / point, None) for point in POINTS], parallel)
    for point, (rc, err) in zip(POINTS, results):
        assert rc == 0, (point, err)
    want = _generation(ref)
    assert {"decompositions/000000.parquet", "nodes.parquet", "vectors.usearch", "text/000000.bin"} <= set(want)
    for point in POINTS:
        root = tmp_path / point
        got = _generation(root)
        assert sorted(got) == sorted(want), point
        differ = [rel for rel in want if rel != "manifest.json" and got[rel] != want[rel]]
        assert differ == [], (point, differ)
        assert _without_times(got["manifest.json"]) == _without_times(want["manifest.json"]), point
        assert not (root / "stages").exists() and sorted(p.name for p in (root / "generations").iterdir()) == ["1"]
