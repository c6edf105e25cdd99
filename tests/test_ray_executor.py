"""Builds on a real two-node Ray cluster on 127.0.0.1 (``--executor ray``) equal the local build.

One cluster for the module: ``ray start --head`` plus a second ``ray start --address`` (1 CPU and a
100 MB object store each, under a private temp dir and port), stopped afterwards; every process of
it (found by its temp dir / GCS address and their descendants) is killed, and the teardown fails if
one survives. Needs the ``ray`` extra (``.ci/run`` installs it); under ``CI`` a missing Ray fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from noderag.config import ExecutorConfig, NodeRAGConfig
from noderag.data import demo_dir
from noderag.indexing.driver import build_index
from conftest import RAY_PORTS, free_port, under_ci, wait_for_port

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")]

CONFIG = {"decompose": {"batch_size": 2}, "embed": {"batch_size": 16}}


def _require_ray() -> None:
    try:
        import ray  # noqa: F401
        import ray.data  # noqa: F401
    except ImportError as exc:
        if under_ci():
            pytest.fail(f"CI is set but Ray is not installed ({exc}): pip install -e '.[ray]'")
        pytest.skip(f"Ray not installed ({exc})")


def _free_port(*taken: int) -> int:
    """A free loopback port off Ray's own default and worker ports (``conftest.RAY_PORTS``) and off ``taken``."""
    return free_port(avoid=RAY_PORTS | set(taken))


def _procs() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out[int(d)] = (ppid, cmd)
    return out


def _cluster_pids(marks: list[str]) -> set[int]:
    """Processes whose command line names our temp dir or GCS address, and all their descendants."""
    procs = _procs()
    found = {p for p, (_, cmd) in procs.items() if any(m in cmd for m in marks) and p != os.getpid()}
    grew = True
    while grew:
        kids = {p for p, (pp, _) in procs.items() if pp in found and p not in found}
        grew = bool(kids)
        found |= kids
    return found


class Cluster:
    def __init__(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="nrray", dir="/tmp")  # short: Ray's socket paths must fit 107 chars
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.marks = [self.tmp, self.address]
        # the head's Ray Client proxy waits up to 30 s by default for the per-client server it spawns: too
        # short for a loaded 2-core machine, where starting that Python process alone can take longer
        self.env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0",
                        RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S="120")
        self.ray = str(Path(sys.executable).parent / "ray")
        common = ["--num-cpus", "1", "--object-store-memory", "100000000", "--disable-usage-stats",
                  "--node-ip-address", "127.0.0.1"]
        # the Ray Client server (ray://) on the head: drawn fresh for each cluster, never the GCS port
        self.client_port = _free_port(self.port)
        self._run([self.ray, "start", "--head", "--port", str(self.port), "--temp-dir", self.tmp,
                   "--ray-client-server-port", str(self.client_port), "--include-dashboard=False", *common])
        self._run([self.ray, "start", "--address", self.address, *common])

    def _run(self, cmd: list[str]) -> None:
        p = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=180)
        if p.returncode != 0:
            self.stop()
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")

    def client_server_log(self) -> str:
        """The tail of the head's Ray Client server logs, for a failure message."""
        logs = sorted(Path(self.tmp).glob("session_*/logs/ray_client_server*"))
        tails = [f"\n--- {p.name}:\n{p.read_text(errors='replace')[-1500:]}" for p in logs if p.is_file()]
        return "".join(tails) or f"\n(no ray_client_server log under {self.tmp})"

    def workers(self) -> list[int]:
        """pids of the Ray Data actors (map workers) of this cluster."""
        procs = _procs()
        return sorted(p for p in _cluster_pids(self.marks) if any(m in procs.get(p, (0, ""))[1] for m in ("MapWorker", "MapBatches(")))

    def stop(self) -> list[int]:
        """Kill every process of the cluster; returns the pids still alive afterwards."""
        for _ in range(3):
            pids = _cluster_pids(self.marks)
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.5)
        left = sorted(_cluster_pids(self.marks))
        shutil.rmtree(self.tmp, ignore_errors=True)
        return left


@pytest.fixture(scope="module")
def cluster():
    _require_ray()
    old = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED")}
    os.environ.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    c = Cluster()
    try:
        yield c
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        left = c.stop()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        assert not left, f"Ray processes outlived the cluster: {left}"


def _config() -> NodeRAGConfig:
    return NodeRAGConfig.from_dict(CONFIG)


@pytest.fixture(scope="module")
def local_index(tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "idx"
    build_index([demo_dir()], out, _config(), progress=False)
    return out


def _snapshot(path: Path) -> dict:
    from noderag.store.generations import current_path

    path = current_path(path)
    snap = {}
    for rel in ("node_types.npy", "node_keys.npy", "graph/indptr.npy", "graph/indices.npy", "graph/weights.npy",
                "semantic/indptr.npy", "semantic/indices.npy", "semantic/weights.npy"):
        snap[rel] = np.load(path / rel, allow_pickle=False).tobytes()
    for name in ("nodes", "linked", "documents"):
        snap[name] = pq.read_table(path / f"{name}.parquet").to_pydict()
    snap["vectors"] = (path / "vectors.usearch").read_bytes()
    snap["counts"] = json.loads((path / "manifest.json").read_text())["counts"]
    return snap


def test_cluster_build_equals_local_build(cluster, local_index, tmp_path):
    out = tmp_path / "ray"
    logs: list[str] = []
    rep = build_index([demo_dir()], out, _config(), progress=False, log=logs.append,
                      executor=ExecutorConfig(kind="ray", address=cluster.address))
    assert any("ray: connected (2 CPUs" in m for m in logs), logs
    assert rep.manifest["counts"]["chunks"] == 12
    assert _snapshot(out) == _snapshot(local_index)


def test_ray_client_address_builds_the_local_index(cluster, local_index, tmp_path):
    """``ray://HOST:PORT``: the driver is a Ray Client; Ray Data runs in a cluster-side actor, shards land here."""
    out = tmp_path / "ray-client"
    logs: list[str] = []
    # `ray start --head` returns before the client server listens; the driver retries a refused port for
    # only 5 s, which a loaded machine outlasts: wait for the port first, then connect
    wait_for_port("127.0.0.1", cluster.client_port, 120, "the head's Ray Client server", cluster.client_server_log)
    try:
        build_index([demo_dir()], out, _config(), progress=False, log=logs.append,
                    executor=ExecutorConfig(kind="ray", address=f"ray://127.0.0.1:{cluster.client_port}"))
    except Exception as exc:  # the head's client-server logs say why a connection failed
        pytest.fail(f"{type(exc).__name__}: {exc}{cluster.client_server_log()}")
    finally:
        import ray

        ray.shutdown()  # leave no client connection to the next test
    assert any("ray: connected (2 CPUs" in m for m in logs), logs
    assert _snapshot(out) == _snapshot(local_index)


def test_only_row_independent_stages_are_split_and_pieces_reassemble_in_order():
    _require_ray()
    import math

    import pyarrow as pa

    from noderag.indexing.executor.ray_exec import RayExecutor
    from noderag.indexing.executor.stages import DecomposeStage, EmbedStage, text_table

    ex = RayExecutor.__new__(RayExecutor)  # pieces() needs no connection
    texts = [f"text {i}" for i in range(1367)]
    shards = {0: text_table(np.arange(1024), texts[:1024]), 1: text_table(np.arange(1024, 1367), texts[1024:])}
    split = ex.pieces(EmbedStage("default"), shards, 2)  # the MuSiQue sample's 1024 + 343 texts on 2 workers
    for i, t in shards.items():
        assert pa.concat_tables(split[i]).equals(t)
    sizes = [p.num_rows for ps in split.values() for p in ps]
    assert len(sizes) >= 2 * ex.PIECES_PER_WORKER and max(sizes) <= math.ceil(1367 / (2 * ex.PIECES_PER_WORKER))
    # a batch-dependent embedder (ONNX at batch size 8, sentence-transformers) and decomposition keep whole shards
    for stage in (EmbedStage("default", {"batch_size": 8}), EmbedStage("st:some/model"),
                  DecomposeStage(NodeRAGConfig().decompose)):
        assert {i: len(ps) for i, ps in ex.pieces(stage, shards, 2).items()} == {0: 1, 1: 1}
    assert EmbedStage("hash:64").row_independent and EmbedStage("onnx:/m", {"batch_size": 1}).row_independent


def _cli_build(out: Path, address: str, cfg: Path, env_extra: dict | None = None, **kw) -> subprocess.Popen:
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.Popen([sys.executable, "-m", "noderag.cli", "build", str(demo_dir()), "--index", str(out),
                             "--config", str(cfg), "--executor", "ray", "--ray-address", address, "--no-progress"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _toml(tmp_path: Path) -> Path:
    cfg = tmp_path / "cfg.toml"
    cfg.write_text("[decompose]\nbatch_size = 2\n[embed]\nbatch_size = 16\n", encoding="utf-8")
    return cfg


def test_kill_9_of_a_worker_mid_stage_still_gives_the_identical_index(cluster, local_index, tmp_path):
    out = tmp_path / "ray"
    proc = _cli_build(out, cluster.address, _toml(tmp_path), {"NODERAG_TEST_SHARD_DELAY_S": "1.5"})
    shards = out / "stages" / "decompose" / "pass-000"
    killed = None
    deadline = time.monotonic() + 240
    while killed is None and time.monotonic() < deadline and proc.poll() is None:
        workers = cluster.workers()
        if workers and shards.is_dir() and list(shards.glob("part-*.parquet")):
            os.kill(workers[0], signal.SIGKILL)
            killed = workers[0]
            break
        time.sleep(0.1)
    assert killed is not None, "no worker to kill before the build ended"
    n_done = len(list(shards.glob("part-*.parquet")))
    assert n_done < 6, "the stage had finished before the kill"
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    assert _snapshot(out) == _snapshot(local_index)


def test_unreachable_address_fails_clearly_within_30_s(cluster, tmp_path):
    port = _free_port()  # nothing listens there
    t0 = time.monotonic()
    proc = _cli_build(tmp_path / "idx", f"127.0.0.1:{port}", _toml(tmp_path))
    _, stderr = proc.communicate(timeout=60)
    wall = time.monotonic() - t0
    assert proc.returncode == 1, stderr[-2000:]
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}" in stderr and "ray start --head" in stderr
    assert "Traceback" not in stderr
    assert wall < 30, wall


def test_a_client_server_that_fails_to_start_once_is_retried_and_other_errors_are_not(monkeypatch):
    """A Ray Client head may fail to start a client's server under load; the next try usually works."""
    _require_ray()
    import ray

    from noderag.indexing.executor import ray_exec
    from noderag.indexing.executor.stages import ExecutorError

    calls: list[str] = []

    def flaky_init(address=None, **kw):
        calls.append(address)
        if len(calls) == 1:
            raise ConnectionError("Initialization failure from server: RuntimeError: Starting Ray client server "
                                  "failed. See ray_client_server_23000.err for detailed logs.")

    monkeypatch.setattr(ray_exec, "_check_reachable", lambda address, timeout_s: None)
    monkeypatch.setattr(ray_exec.time, "sleep", lambda s: None)
    monkeypatch.setattr(ray, "init", flaky_init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(ray_exec, "_CONNECTED", None)
    ray_exec.connect("ray://127.0.0.1:1", timeout_s=5)
    assert calls == ["ray://127.0.0.1:1"] * 2 and ray_exec._CONNECTED == "ray://127.0.0.1:1"

    def zombie_then_up(address=None, **kw):  # the new server exited while the head read its command line
        calls.append(address)
        if len(calls) == 1:
            raise ConnectionError("Initialization failure from server:\n  psutil.ZombieProcess: PID still exists "
                                  "but it's a zombie (pid=30967)")

    calls.clear()
    monkeypatch.setattr(ray, "init", zombie_then_up)
    monkeypatch.setattr(ray_exec, "_CONNECTED", None)
    ray_exec.connect("ray://127.0.0.1:1", timeout_s=5)
    assert calls == ["ray://127.0.0.1:1"] * 2

    def never_starts(address=None, **kw):
        calls.append(address)
        raise ConnectionError("Initialization failure from server: Starting Ray client server failed.")

    calls.clear()
    monkeypatch.setattr(ray, "init", never_starts)
    monkeypatch.setattr(ray_exec, "_CONNECTED", None)
    with pytest.raises(ExecutorError, match=r"ray://127\.0\.0\.1:1 \(attempt 3\)"):
        ray_exec.connect("ray://127.0.0.1:1", timeout_s=5)
    assert len(calls) == 3  # bounded

    def refused(address=None, **kw):
        calls.append(address)
        raise ConnectionError("GCS refused")

    calls.clear()
    monkeypatch.setattr(ray, "init", refused)
    with pytest.raises(ExecutorError, match="cannot connect to the Ray cluster at 10.0.0.1:6379"):
        ray_exec.connect("10.0.0.1:6379", timeout_s=5)
    assert calls == ["10.0.0.1:6379"]  # not a client-server start: no retry


# ----------------------------------------------------------------------------- openai server through Ray

@pytest.mark.server
def test_openai_server_through_ray_workers_shares_the_cache(cluster, llama_server, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("Oda Lindqvist built the Haldis Lighthouse on Skarn Island in 1887.", "utf-8")
    (corpus / "b.txt").write_text("The Grey Heron Line ferry links Kessel with Port Emmerich.", "utf-8")
    cfg = NodeRAGConfig.from_dict({"decompose": {"batch_size": 1, "method": "llm"},
                                   "communities": {"enabled": False}, "attributes": {"summary_tokens": 16},
                                   "llm": {"spec": f"openai:smollm2@{llama_server.url}"}})
    ex = ExecutorConfig(kind="ray", address=cluster.address, llm_concurrency=2)
    a = tmp_path / "a"
    rep = build_index([corpus], a, cfg, progress=False, executor=ex, allow_failures=True)
    dec = rep.manifest["tokens"]["decompose"]
    # every chunk went to the server from a worker; the workers' ledgers reached the manifest
    assert dec["requests"] >= 2 and dec["prompt_tokens"] > 0 and dec["cache_hits"] == 0, dec
    # a second index with a copy of the first one's cache: the workers answer every call from it
    b = tmp_path / "b"
    b.mkdir()
    shutil.copy(a / "llm_cache.sqlite", b / "llm_cache.sqlite")
    rep_b = build_index([corpus], b, cfg, progress=False, executor=ex, allow_failures=True)
    dec_b = rep_b.manifest["tokens"]["decompose"]
    if not rep.manifest["failures"]["decompose"]:  # (failed calls are not cached)
        assert dec_b["cache_hits"] == dec_b["requests"] and dec_b["prompt_tokens"] == 0, dec_b
    # ... and the local executor over the same cache gives the same index as the cluster
    c = tmp_path / "c"
    c.mkdir()
    shutil.copy(a / "llm_cache.sqlite", c / "llm_cache.sqlite")
    build_index([corpus], c, cfg, progress=False, allow_failures=True)
    assert _snapshot(b) == _snapshot(a) == _snapshot(c)


# ----------------------------------------------------------------------------- vllm on Ray: our validation loop

def test_vllm_on_ray_validates_and_retries_invalid_items(cluster):
    import ray

    from noderag.indexing.decompose.base import ChunkInput
    from noderag.indexing.decompose.llm import LLMDecomposer
    from noderag.indexing.executor.ray_exec import connect
    from noderag.indexing.executor.ray_llm import RayVLLMBackend, postprocess, preprocess
    from noderag.llm.backends.vllm import VLLMConfig

    connect(cluster.address)

    def _fake_engine(row: dict) -> dict:
        """CPU stand-in for Ray's vLLM stage: invalid JSON at seed 0, a valid decomposition after the retry."""
        sp = row["sampling_params"]
        assert sp["structured_outputs"]["json"]["type"] == "object"  # the schema reached the engine
        text = row["messages"][-1]["content"]
        ok = sp["seed"] != 0
        reply = json.dumps({"units": [{"text": "Oda Lindqvist built the lighthouse.", "entities": ["Oda Lindqvist"],
                                       "relations": []}]}) if ok else "{not json"
        return {"idx": row["idx"], "generated_text": reply, "num_input_tokens": len(text.split()),
                "num_generated_tokens": 9, "__inference_error__": ""}

    def factory():
        return lambda ds: ds.map(preprocess).map(_fake_engine).map(postprocess)

    backend = RayVLLMBackend(VLLMConfig(model="m"), processor_factory=factory)
    dec = LLMDecomposer(backend, NodeRAGConfig().decompose, seed=0)
    out = dec.decompose([ChunkInput(0, "Oda Lindqvist built the lighthouse.", None),
                         ChunkInput(1, "The ferry links Kessel with Port Emmerich.", None)])
    assert [r.error for r in out] == [None, None]
    assert out[0].units[0].entities == ["Oda Lindqvist"]
    st = backend.ledger.to_dict()["decompose"]
    assert backend.calls == 2 and st["requests"] == 2 and st["attempts"] == 4 and st["completion_tokens"] == 36
    assert ray.is_initialized()
