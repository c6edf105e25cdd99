"""A closed stdout after the work is committed exits 0 quietly (``noderag delete ... | head -1``), and every
file and folder of an index gets the mode the umask gives (0644/0755 under 022), not 0600."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from noderag.config import NodeRAGConfig
from noderag.indexing.driver import build_index
from noderag.store.tables import IndexStore


def _docs(path: Path, prefix: str, n: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"{prefix}{i}", "title": f"Mill {i}",
                                        "text": f"Mill {i} on the river Wend was built by Miller Arno{i} in "
                                                f"{1700 + i}."}) + "\n" for i in range(n)), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def small_index(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pipes")
    root = d / "idx"
    build_index([_docs(d / "a.jsonl", "m", 8)], root, NodeRAGConfig().with_overrides({"embed.spec": "hash:32"}),
                progress=False)
    return root


def _run_with_closed_stdout(*argv: str) -> subprocess.CompletedProcess:
    """Run ``noderag ARGV`` with stdout a pipe whose reader has already gone (as after ``| head -1`` exits)."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([sys.executable, "-m", "noderag.cli", *argv], stdout=w, stderr=subprocess.PIPE,
                              text=True, timeout=300)
    finally:
        os.close(w)


def test_closed_stdout_after_commit_exits_0_quietly(small_index):
    p = _run_with_closed_stdout("delete", str(small_index), "m3", "--no-progress")
    assert (p.returncode, p.stderr) == (0, "")
    with IndexStore.open(small_index) as st:  # the delete was committed before the report was written
        sources = st.documents.column("source").to_pylist()  # m3's row is a tombstone: no source
        assert "m3" not in sources and sum(s is not None for s in sources) == 7
    for argv in (["stats", str(small_index)], ["stats", str(small_index), "--json"],
                 ["query", str(small_index), "Who built Mill 2?"]):
        p = _run_with_closed_stdout(*argv)
        assert (p.returncode, p.stderr) == (0, ""), argv


def test_an_error_is_still_reported_with_a_closed_stdout(small_index):
    p = _run_with_closed_stdout("delete", str(small_index), "no-such-doc", "--no-progress")
    assert p.returncode == 1 and p.stderr.startswith("noderag delete: error: 1 document(s) to delete are not in the index")


_MODES = r"""
import json, os, stat, sys
from pathlib import Path
from noderag.config import NodeRAGConfig
from noderag.indexing.driver import build_index
from noderag.indexing.update.delete import delete_documents
out = {}
for mask in (0o022, 0o027):
    os.umask(mask)
    root = Path(sys.argv[1]) / f"idx-{mask:03o}"
    build_index([sys.argv[2]], root, NodeRAGConfig().with_overrides({"embed.spec": "hash:32"}), progress=False)
    delete_documents(root, ["m1"])  # a second generation, written onto the existing folder
    out[f"{mask:03o}"] = {p.relative_to(root).as_posix(): [p.is_dir(), stat.S_IMODE(p.stat().st_mode)]
                          for p in sorted(root.rglob("*"))}
print(json.dumps(out))
"""


def test_file_modes_follow_the_umask(tmp_path):
    src = _docs(tmp_path / "a.jsonl", "m", 6)
    r = subprocess.run([sys.executable, "-c", _MODES, str(tmp_path), str(src)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    modes = json.loads(r.stdout)
    for mask, want_file, want_dir in (("022", 0o644, 0o755), ("027", 0o640, 0o750)):
        entries = modes[mask]
        names = set(entries)
        assert {"CURRENT", ".writer.lock", "generations/2/vectors.usearch", "generations/2/.readers",
                "generations/2/nodes.parquet", "generations/2/manifest.json", "generations/2/text/000000.bin",
                "generations/2/graph/indptr.npy"} <= names, sorted(names)
        wrong = {name: oct(mode) for name, (is_dir, mode) in entries.items()
                 if mode != (want_dir if is_dir else want_file)}
        assert not wrong, (mask, wrong)
