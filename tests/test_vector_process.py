"""The build's vector index in a worker process: the same files as in-process, errors and kills handled."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from noderag.config import EmbedConfig
from noderag.indexing.embedding import start_vector_index
from noderag.indexing.node_vectors import NodeVectors
from noderag.indexing.vector_process import VectorBuild


def _files(folder):
    return [p.read_bytes() for p in sorted(folder.iterdir())]


def _shared(tmp_path, ids, x, order=None):
    """NodeVectors holding ``x`` under ``ids`` (assigned in ``order``), moved into a shared file."""
    vec = NodeVectors(x.shape[1], np.float16)
    order = np.arange(ids.size) if order is None else order
    vec[ids[order]] = x[order]
    vec.reserve(100)
    vec.share_file(tmp_path / "shared.npy")
    return vec


@pytest.mark.parametrize("shuffled", [False, True])
def test_vector_build_writes_the_in_process_index(tmp_path, shuffled):
    rng = np.random.default_rng(6)
    ids, x = np.arange(3000) * 3, rng.standard_normal((3000, 16)).astype(np.float16)
    cfg = EmbedConfig(vector_dtype="i8", vector_shards=3)
    ref = start_vector_index(ids[:2500], x[:2500], 16, cfg, parallel=3)  # the in-process build it replaces
    ref.add_in_background(ids[2500:], x[2500:])
    ref.wait().save(tmp_path / "ref" / "vectors.usearch")
    # rows assigned out of id order (an insert reuses old vectors first): the worker gathers them
    vec = _shared(tmp_path, ids[:2500], x[:2500], rng.permutation(2500) if shuffled else None)
    build = VectorBuild(ids[:2500], vec.rows_of(ids[:2500]), tmp_path / "shared.npy", 16, cfg, tmp_path / "w", 1)
    build.widen(3)
    tail = x[2500:].copy()
    build.add(ids[2500:], tail)
    tail[:] = 0  # the caller may reuse its rows once add() returned
    assert build.finish(tmp_path / "got" / "vectors.usearch") == tmp_path / "got" / "vectors.usearch"
    assert isinstance(build.cpu_s, float) and build.cpu_s > 0  # the worker's CPU seconds, for the stage report
    # three shards and the keys in add order (the worker's shards each take their rows on one thread)
    assert _files(tmp_path / "got") == _files(tmp_path / "ref") and len(_files(tmp_path / "ref")) == 4
    np.testing.assert_array_equal(np.load(tmp_path / "got" / "vectors.keys.npy"), ids)


def test_share_file_keeps_the_vectors_and_later_assignments(tmp_path):
    vec = NodeVectors(4, np.float16)
    vec[np.array([5, 2])] = np.array([[1, 0, 0, 0], [0, 1, 0, 0]], np.float32)
    vec.reserve(1)
    vec.share_file(tmp_path / "v.npy")
    vec[np.array([9])] = np.array([[0, 0, 1, 0]], np.float32)  # fits the reserve: written to the file
    mapped = np.load(tmp_path / "v.npy", mmap_mode="r")
    assert mapped[vec.rows_of([9])[0]].tolist() == [0, 0, 1, 0]
    vec[np.arange(20, 40)] = np.ones((20, 4), np.float32)  # past the capacity: back in memory
    assert vec[np.array([2, 5, 9, 39])].tolist() == [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0], [1, 1, 1, 1]]
    with pytest.raises(KeyError, match="no vector assigned to node id"):
        vec.rows_of([3])


def test_a_failure_in_the_worker_is_raised_at_finish(tmp_path):
    ids = np.arange(200)
    x = np.random.default_rng(0).standard_normal((200, 16)).astype(np.float16)
    vec = _shared(tmp_path, ids, x)
    build = VectorBuild(ids, vec.rows_of(ids), tmp_path / "shared.npy", 16, EmbedConfig(vector_dtype="i8"),
                        tmp_path / "w", 1)
    build.add(ids[:5], x[:5])  # keys the index holds already
    with pytest.raises(RuntimeError, match="building the vector index failed"):
        build.finish(tmp_path / "vectors.usearch")
    assert not (tmp_path / "vectors.usearch").exists()


def test_cancel_stops_the_worker_and_later_calls_fail_clearly(tmp_path):
    ids = np.arange(40000)
    vec = _shared(tmp_path, ids, np.ones((40000, 32), np.float16))
    build = VectorBuild(ids, vec.rows_of(ids), tmp_path / "shared.npy", 32, EmbedConfig(vector_dtype="f32"),
                        tmp_path / "w", 1)
    build.cancel()
    assert build._proc.returncode is not None
    with pytest.raises(RuntimeError, match="ended early"):
        build.widen(2)


def test_the_worker_ends_with_a_killed_build(tmp_path):
    """SIGKILL of the build leaves no worker writing shards into its staging folder."""
    script = textwrap.dedent(f"""
        import numpy as np
        from pathlib import Path
        from noderag.config import EmbedConfig
        from noderag.indexing.node_vectors import NodeVectors
        from noderag.indexing.vector_process import VectorBuild
        tmp = Path({str(tmp_path)!r})
        ids = np.arange(200000)
        vec = NodeVectors(64, np.float16)
        vec[ids] = np.random.default_rng(0).standard_normal((200000, 64)).astype(np.float32)
        vec.share_file(tmp / "shared.npy")
        b = VectorBuild(ids, vec.rows_of(ids), tmp / "shared.npy", 64, EmbedConfig(vector_dtype="f32"), tmp / "w", 1)
        print(b._proc.pid, flush=True)
        import time; time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    worker = int(parent.stdout.readline())
    os.kill(worker, 0)  # alive, building
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    parent.stdout.close()
    for _ in range(200):
        try:
            os.kill(worker, 0)
            with open(f"/proc/{worker}/stat") as f:  # a zombie until init reaps it counts as gone
                if f.read().split(")")[-1].split()[0] == "Z":
                    break
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.05)
    else:
        os.kill(worker, signal.SIGKILL)
        pytest.fail("the vector index worker outlived the killed build")
