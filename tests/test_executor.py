"""The executor setting without Ray: config section, CLI flags, Ray never imported by default, a clear error without it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from noderag.config import ConfigError, ExecutorConfig, NodeRAGConfig
from noderag.data import demo_dir


def test_executor_section_defaults_and_validation():
    cfg = NodeRAGConfig.from_dict({"executor": {"kind": "ray", "address": "10.0.0.1:6379", "workers": 4}})
    assert cfg.executor == ExecutorConfig(kind="ray", address="10.0.0.1:6379", workers=4)
    assert NodeRAGConfig().executor.kind == "local"
    with pytest.raises(ConfigError, match="executor.kind must be 'local' or 'ray'"):
        NodeRAGConfig.from_dict({"executor": {"kind": "spark"}})
    with pytest.raises(ConfigError, match="executor.workers"):
        NodeRAGConfig.from_dict({"executor": {"workers": 0}})
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) \['executor.nodes'\]"):
        NodeRAGConfig.from_dict({"executor": {"nodes": 2}})


def test_default_path_never_imports_ray():
    code = ("import sys, noderag, noderag.cli, noderag.indexing.driver, noderag.indexing.executor, "
            "noderag.indexing.executor.local, noderag.indexing.executor.stages\n"
            "bad = sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.'))\n"
            "assert not bad, bad")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_ray_executor_without_ray_names_the_install_command(tmp_path):
    code = ("import sys; sys.modules['ray'] = None\n"  # as if Ray were not installed
            "from noderag.cli import main\n"
            f"sys.exit(main(['build', {str(demo_dir())!r}, '--index', {str(tmp_path / 'idx')!r}, "
            "'--executor', 'ray', '--no-progress']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "pip install 'noderag[ray]'" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow
def test_local_worker_processes_give_the_in_process_index(tmp_path, monkeypatch):
    """nlp decomposition and the hash embedder in 2 spawned worker processes: the same index as in-process."""
    import pyarrow.parquet as pq

    from noderag.config import NodeRAGConfig
    from noderag.data import demo_dir
    from noderag.indexing.executor import stages
    from noderag.store.generations import current_path
    from noderag.indexing.driver import build_index

    from noderag.indexing.executor.local import LocalExecutor

    calls = []
    real = LocalExecutor._run_in_processes

    def spy(stage, shards, sink, n):
        calls.append((type(stage).__name__, n))
        return real(stage, shards, sink, n)

    monkeypatch.setattr(stages.DecomposeStage, "process_min_rows", 0)
    monkeypatch.setattr(stages.EmbedStage, "process_min_rows", 0)
    monkeypatch.setattr(LocalExecutor, "_run_in_processes", staticmethod(spy))
    out = {}
    for workers in (1, 2):
        cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:64", "decompose.batch_size": 2,
                                              "embed.batch_size": 16, "executor.workers": workers})
        build_index([demo_dir()], tmp_path / f"w{workers}", cfg, progress=False)
        root = current_path(tmp_path / f"w{workers}")
        out[workers] = {rel: (root / rel).read_bytes() for rel in
                        ("node_keys.npy", "graph/indices.npy", "graph/weights.npy", "vectors.usearch")}
        out[workers]["nodes"] = pq.read_table(root / "nodes.parquet").to_pydict()
    assert calls == [("DecomposeStage", 2), ("EmbedStage", 2)]  # only the workers=2 build used processes
    assert out[1] == out[2]


_WORKERS_THEN_WAIT = """
import os, sys, time
from noderag.indexing.executor.local import fork_map

def note_and_sleep(path):
    with open(path, "a") as fh:
        fh.write(f"{os.getpid()}\\n")
    time.sleep(120)

list(fork_map(note_and_sleep, [(sys.argv[1],), (sys.argv[1],)], 2))
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")
def test_forked_workers_die_with_a_killed_build(tmp_path):
    """A build killed outright (SIGKILL) takes its forked workers with it, instead of leaving them
    blocked forever on a pipe their siblings hold open."""
    import os
    import signal
    import time

    pids = tmp_path / "pids"
    child = subprocess.Popen([sys.executable, "-c", _WORKERS_THEN_WAIT, str(pids)])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not pids.exists() or len(pids.read_text().split()) < 2):
            time.sleep(0.05)
        workers = [int(x) for x in pids.read_text().split()]
        assert len(workers) == 2 and all(_alive(p) for p in workers)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in workers):
        time.sleep(0.05)
    assert not any(_alive(p) for p in workers)


def test_embed_shards_carry_the_builds_vector_type():
    """An embed shard for a float16 build holds float16 vectors: exactly the float32 ones rounded as the
    build rounds them, in half the bytes."""
    import numpy as np

    from noderag.embed import make_embedder
    from noderag.indexing.executor.stages import embed_batch, text_table, vectors_of

    emb = make_embedder("hash:64")
    batch = text_table(np.arange(5), ["alpha beta", "gamma", "delta epsilon zeta", "eta", "theta iota"])
    rows32, v32 = vectors_of(embed_batch(batch, emb), 64)
    half = embed_batch(batch, emb, "float16")
    rows16, v16 = vectors_of(half, 64)
    assert v32.dtype == np.float32 and v16.dtype == np.float16
    np.testing.assert_array_equal(rows16, rows32)
    np.testing.assert_array_equal(v16, v32.astype(np.float16))
    assert half.nbytes < embed_batch(batch, emb).nbytes * 0.6
