"""The BM25 postings and line token counts made by a forked child beside the name index
(:mod:`noderag.indexing.query_early`): the same bytes as making every table in one process, and a child that
fails or dies fails the build with its error."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import noderag
import noderag.indexing.query_early as query_early
import noderag.search.query_index as query_index
from noderag.errors import BuildError
from noderag.search.query_index import QUERY_DIR, write_early_tables, write_query_index
from noderag.store.node_texts import node_texts
from noderag.store.tables import read_nodes_file
from conftest import MUSIQUE


def _corpus(root: Path, n: int = 120) -> Path:
    corpus = root / "corpus.jsonl"
    with open(MUSIQUE / "corpus.jsonl", encoding="utf-8") as fh:
        corpus.write_text("".join(line for _, line in zip(range(n), fh)), encoding="utf-8")
    return corpus


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _generation(root: Path) -> Path:
    return root / "generations" / (root / "CURRENT").read_text().strip()


def _forking(mp: pytest.MonkeyPatch) -> None:
    """Let the build fork its child in this test process: a long pytest run may have imported Ray or left idle
    pool threads from other tests, which the build's own check (rightly) refuses to fork beside; the tests of the
    child need it to run. The check itself is pinned by ``test_no_child_while_another_thread_runs``."""
    mp.setattr(query_early, "fork_is_safe", lambda: True)


@pytest.fixture
def forking(monkeypatch):
    _forking(monkeypatch)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """The same corpus built with the early child and without it (forking switched off: every table at finalize)."""
    root = tmp_path_factory.mktemp("early")
    corpus = _corpus(root)
    mp = pytest.MonkeyPatch()
    try:
        _forking(mp)
        with_child = noderag.build([str(corpus)], str(root / "early"), embed="hash:64", progress=False)
        mp.setattr(query_early, "fork_is_safe", lambda: False)
        without = noderag.build([str(corpus)], str(root / "main"), embed="hash:64", progress=False)
    finally:
        mp.undo()
    return Path(with_child.path), Path(without.path)


def test_the_build_with_the_early_child_writes_the_same_files(builds):
    early, main = builds
    fin = json.loads((early / "manifest.json").read_text())["stages"]["finalize"]
    assert fin["query_early_cpu_s"] > 0 and fin["query_early_wait_s"] >= 0  # the child made them
    assert "query_early_cpu_s" not in json.loads((main / "manifest.json").read_text())["stages"]["finalize"]
    a, b = _files(early), _files(main)
    assert sorted(a) == sorted(b) and sum(k.startswith(f"{QUERY_DIR}/lex_") for k in a) == 4
    differ = [k for k in a if a[k] != b[k] and k != "manifest.json"]
    assert differ == []
    assert not (early.parent.parent / "stages").exists()  # the child's folder went with the stages


class _Ready:
    def __init__(self, folder: Path, nodes: int) -> None:
        self.folder, self.nodes, self.waited = folder, nodes, 0

    def wait(self) -> Path:
        self.waited += 1
        return self.folder


@pytest.mark.parametrize("cut", ["first_late", "all", "none", "middle"])
def test_early_tables_of_any_head_give_the_same_query_tables(builds, tmp_path, cut):
    gen = builds[1]
    nodes = read_nodes_file(gen / "nodes.parquet", columns=("type", "doc_id", "active"))
    types = nodes.column("type").to_numpy()
    n = int(types.shape[0])
    t_all = np.flatnonzero((types == 0) & nodes.column("active").to_numpy(zero_copy_only=False))
    late = int(np.flatnonzero(types >= 5)[0])
    head = {"first_late": late, "all": n, "none": int(t_all[-1]) + 1, "middle": (int(t_all[-1]) + 1 + n) // 2}[cut]
    pages = node_texts(gen / "nodes.parquet", n)
    off = np.asarray(pages.offsets)
    seen = []

    def texts_of(ids):
        seen.append(len(ids))
        return pages.pages.strings(off[ids].tolist(), off[np.asarray(ids) + 1].tolist())

    doc = nodes.column("doc_id").to_numpy().astype(np.int64)
    write_early_tables(tmp_path / "early", head, texts_of, t_all, doc[t_all], pq.read_table(gen / "documents.parquet"),
                       batch=64)
    assert max(seen) == 64  # read a batch at a time
    copy = tmp_path / "copy"
    copy.mkdir()
    for p in gen.iterdir():
        if p.name != QUERY_DIR:
            os.symlink(p, copy / p.name)
    ready = _Ready(tmp_path / "early", head)
    write_query_index(copy, early=ready)
    assert ready.waited == 1
    assert _files(copy / QUERY_DIR) == _files(gen / QUERY_DIR)


def _fail(*args, **kwargs):
    raise RuntimeError("the postings could not be made")


def test_a_failing_child_fails_the_build_with_its_error(forking, tmp_path, monkeypatch):
    monkeypatch.setattr(query_index, "write_early_tables", _fail)  # what the forked child calls
    with pytest.raises(BuildError, match=r"beside the name index ended with status 1: RuntimeError: the "
                                         r"postings could not be made"):
        noderag.build([str(_corpus(tmp_path, 20))], str(tmp_path / "idx"), embed="hash:64", progress=False)
    assert not (tmp_path / "idx" / "CURRENT").exists()


def _die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_killed_child_fails_the_build(forking, tmp_path, monkeypatch):
    monkeypatch.setattr(query_index, "write_early_tables", _die)
    with pytest.raises(BuildError, match=rf"ended with status -{int(signal.SIGKILL)}: no error recorded"):
        noderag.build([str(_corpus(tmp_path, 20))], str(tmp_path / "idx"), embed="hash:64", progress=False)


def _sleep(*args, **kwargs):
    time.sleep(60)


def test_cancel_stops_the_child_at_once(forking, builds, tmp_path, monkeypatch):
    monkeypatch.setattr(query_index, "write_early_tables", _sleep)
    early = query_early.EarlyTables.start(builds[1], tmp_path / "early")
    n = len(np.load(builds[1] / "node_types.npy"))
    assert early is not None and 0 < early.nodes < n  # the writer counts the lines after the middle byte
    t0 = time.perf_counter()
    early.cancel()
    assert time.perf_counter() - t0 < 10
    with pytest.raises(ProcessLookupError):
        os.kill(early.pid, 0)  # reaped
    with pytest.raises(BuildError, match=rf"status -{int(signal.SIGKILL)}"):
        early.wait()


def test_the_child_writes_what_the_build_writes(forking, builds, tmp_path):
    early = query_early.EarlyTables.start(builds[1], tmp_path / "early")
    assert early is not None
    folder = early.wait()
    assert early.cpu_s > 0 and early.wait_s >= 0 and early.maxrss_mb > 0
    got = _files(folder)
    want = _files(builds[1] / QUERY_DIR)
    assert sorted(got) == sorted([k for k in want if k.startswith("lex_")] + ["line_tok_head.npy"])
    assert all(got[k] == want[k] for k in got if k.startswith("lex_"))
    head = np.load(folder / "line_tok_head.npy")
    assert head.shape == (early.nodes,) and head.tolist() == np.load(builds[1] / QUERY_DIR / "line_tok.npy")[
        :early.nodes].tolist()


def test_no_child_while_another_thread_runs(builds, tmp_path):
    import threading

    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert query_early.EarlyTables.start(builds[1], tmp_path / "early") is None
    finally:
        stop.set()
        t.join()


def test_the_child_is_forked_in_a_build_with_progress_bars(tmp_path):
    """A build with progress bars (the CLI's default) forks its child: tqdm's monitor thread is stopped first. Run in
    a fresh interpreter, since this test process may hold Ray or other tests' threads, which the check refuses."""
    import subprocess
    import sys

    corpus, index = _corpus(tmp_path, 20), tmp_path / "idx"
    script = ("import json, pathlib, sys, noderag\n"
              f"i = noderag.build([{str(corpus)!r}], {str(index)!r}, embed='hash:64', progress=True)\n"
              "f = json.loads((pathlib.Path(i.path) / 'manifest.json').read_text())['stages']['finalize']\n"
              "print(f.get('query_early_cpu_s', 0))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.strip().splitlines()[-1]) > 0  # the child made the early tables
    assert "query tables" in out.stderr
