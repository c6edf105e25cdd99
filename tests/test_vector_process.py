"""The build's vector index in a child process: the same files as in-process, errors and kills handled."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from noderag.config import EmbedConfig
from noderag.index.enrich import start_vector_index
from noderag.index import vector_process
from noderag.index.executor.local import can_fork

needs_fork = pytest.mark.skipif(not can_fork(), reason="the child process is forked")


def _data(n=3000, dim=16, seed=6):
    rng = np.random.default_rng(seed)
    return np.arange(n) * 3, rng.standard_normal((n, dim)).astype(np.float16)


def _files(folder):
    return [p.read_bytes() for p in sorted(folder.iterdir())]


@pytest.mark.parametrize("kind", ["process", "threads"])
def test_vector_build_writes_the_in_process_index(tmp_path, kind):
    if kind == "process" and not can_fork():
        pytest.skip("no fork")
    ids, x = _data()
    cfg = EmbedConfig(vector_dtype="i8", vector_shards=3)
    ref = start_vector_index(ids[:2500], x[:2500], 16, cfg, parallel=3)  # the in-process build it replaces
    ref.add_in_background(ids[2500:], x[2500:])
    ref.wait().save(tmp_path / "ref" / "vectors.usearch")
    make = vector_process.VectorBuild if kind == "process" else vector_process._ThreadedBuild
    build = make(ids[:2500], x[:2500], 16, cfg, 1)
    build.widen(3)
    tail = x[2500:].copy()
    build.add(ids[2500:], tail)
    tail[:] = 0  # the caller may reuse its rows once add() returned
    assert build.finish(tmp_path / "got" / "vectors.usearch") == tmp_path / "got" / "vectors.usearch"
    assert _files(tmp_path / "got") == _files(tmp_path / "ref") and len(_files(tmp_path / "ref")) == 3


@needs_fork
def test_a_failure_in_the_child_is_raised_at_finish(tmp_path):
    ids, x = _data(200)
    build = vector_process.VectorBuild(ids, x, 16, EmbedConfig(vector_dtype="i8"), 1)
    build.add(ids[:5], x[:5])  # keys the index holds already
    with pytest.raises(RuntimeError, match="building the vector index failed"):
        build.finish(tmp_path / "vectors.usearch")
    assert not (tmp_path / "vectors.usearch").exists()


@needs_fork
def test_cancel_stops_the_child_and_later_calls_fail_clearly(tmp_path):
    ids, x = _data(40000, 32)
    build = vector_process.VectorBuild(ids, x, 32, EmbedConfig(vector_dtype="f32"), 1)
    pid = build._proc.pid
    build.cancel()
    assert build._proc.exitcode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises((RuntimeError, OSError)):
        build.widen(2)


@needs_fork
def test_the_child_dies_with_a_killed_build(tmp_path):
    """SIGKILL of the build leaves no orphan writing shards into its staging folder."""
    script = textwrap.dedent("""
        import sys, time, numpy as np
        from noderag.config import EmbedConfig
        from noderag.index.vector_process import VectorBuild
        x = np.random.default_rng(0).standard_normal((200000, 64)).astype(np.float32)
        b = VectorBuild(np.arange(200000), x, 64, EmbedConfig(vector_dtype="f32"), 1)
        print(b._proc.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    os.kill(child, 0)  # alive, building
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    parent.stdout.close()
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        try:  # a zombie until its new parent (init) reaps it: count that as gone
            with open(f"/proc/{child}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the vector index process outlived the killed build")
