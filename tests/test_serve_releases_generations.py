"""Issue 44, fault 2: a ``noderag serve`` process lets go of every superseded generation.

Its open files and memory-mapped index files stay flat over 50 generation switches (each insert and each
delete commits one), with no handle on a deleted file left; under a low ``ulimit -n`` it keeps serving the live
generation (never the deleted document); running out of file descriptors is reported as that, never as damage.
"""

from __future__ import annotations

import json
import os
import resource
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
import httpx  # noqa: E402

from noderag.config import NodeRAGConfig  # noqa: E402
from noderag.indexing.driver import build_index  # noqa: E402
from noderag.indexing.update.delete import delete_documents  # noqa: E402
from noderag.store.generations import current_generation, remove_old_generations  # noqa: E402
from noderag.store.tables import IndexStore  # noqa: E402

pytestmark = [pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/PID/fd (Linux)"),
              pytest.mark.slow]  # real server processes over many generation switches


def _rows(prefix: str, n: int) -> list[dict]:
    return [{"id": f"{prefix}-{i}", "title": f"{prefix} {i}",
             "text": f"{prefix.title()} Harbour {i} was built by Engineer {prefix.title()}{i} in {1800 + i}. "
                     f"Ships from {prefix.title()} Harbour {i} sail to the island Quell{prefix}{i}."}
            for i in range(n)]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _cfg() -> NodeRAGConfig:
    return NodeRAGConfig().with_overrides({"embed.spec": "hash:32", "update.compaction": "inline",
                                           "update.max_delta_share": 0.25})


def handles(pid: int) -> dict[str, int]:
    """Open files, open deleted files and memory-mapped deleted files of process ``pid`` (Linux /proc)."""
    fds = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            fds.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed meanwhile
            pass
    maps = {line.split(None, 5)[5] for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
            if len(line.split(None, 5)) == 6}
    return {"open_files": len(fds), "deleted_open": sum(f.endswith(" (deleted)") for f in fds),
            "deleted_mapped": sum(m.endswith(" (deleted)") for m in maps)}


class Server:
    """``noderag serve INDEX --port 0`` as a subprocess (optionally with a lower open-files limit)."""

    def __init__(self, index: Path, nofile: int | None = None) -> None:
        def limit() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

        self.proc = subprocess.Popen([sys.executable, "-m", "noderag.cli", "serve", str(index), "--port", "0"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=limit,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.log: list[str] = []
        deadline = time.monotonic() + 120
        self.url = None
        while self.url is None:
            assert self.proc.poll() is None, "".join(self.log) + self.proc.stderr.read()
            assert time.monotonic() < deadline, "".join(self.log)
            if select.select([self.proc.stderr], [], [], 0.5)[0]:
                line = self.proc.stderr.readline()
                self.log.append(line)
                if line.startswith("noderag serve: http://"):
                    self.url = line.split()[2].rstrip("/")
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def follows(self, gen: int, timeout: float = 60.0) -> None:
        """Wait until the server serves generation ``gen``."""
        deadline = time.monotonic() + timeout
        while self.client.get("/stats").json()["generation"] != gen:
            assert time.monotonic() < deadline, f"still not serving generation {gen}: {self.stderr_now()}"
            time.sleep(0.2)

    def stderr_now(self) -> str:
        while select.select([self.proc.stderr], [], [], 0)[0]:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
        return "".join(self.log[-20:])

    def stop(self) -> None:
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()


def _switch(root: Path, tmp: Path, i: int) -> tuple[int, str]:
    """One generation switch: an insert (even ``i``) or the delete of what the insert before added (odd ``i``);
    returns (new generation, the id of a document deleted by it or "")."""
    if i % 2 == 0:
        build_index([_jsonl(tmp / f"w{i}.jsonl", _rows(f"wave{i}", 1))], root, _cfg(), progress=False)
        gone = ""
    else:
        gone = f"wave{i - 1}-0"
        delete_documents(root, [gone], config=_cfg())
    remove_old_generations(root)
    return current_generation(root), gone


@pytest.fixture()
def index(tmp_path) -> Path:
    root = tmp_path / "idx"
    build_index([_jsonl(tmp_path / "base.jsonl", _rows("base", 16))], root, _cfg(), progress=False)
    return root


def test_open_files_stay_flat_over_50_switches(index, tmp_path):
    srv = Server(index)
    try:
        seen = []
        for i in range(50):
            gen, gone = _switch(index, tmp_path, i)
            srv.follows(gen)
            r = srv.client.post("/retrieve", json={"question": "Which harbour was built by Engineer Wave?"})
            assert r.status_code == 200, r.text
            if gone:
                assert gone not in r.json()["passages"]
            time.sleep(1.2)  # one watcher tick: the superseded generation's objects are collected
            seen.append(handles(srv.proc.pid))
        first, last = seen[4], seen[-1]
        assert last["deleted_open"] == 0 and last["deleted_mapped"] == 0, seen[-5:]
        assert max(h["open_files"] for h in seen[4:]) <= first["open_files"] + 12, seen
        assert srv.client.get("/stats").json()["generation"] == current_generation(index)
    finally:
        srv.stop()


def test_a_low_open_files_limit_keeps_serving_the_live_generation(index, tmp_path):
    srv = Server(index, nofile=160)
    try:
        for i in range(12):
            gen, gone = _switch(index, tmp_path, i)
            srv.follows(gen)
            for _ in range(2):
                r = srv.client.post("/retrieve", json={"question": f"Harbour built by Engineer Wave{i - i % 2}"})
                assert r.status_code == 200, r.text
                if gone:
                    assert gone not in r.json()["passages"]
        assert "Too many open files" not in srv.stderr_now() and "damaged" not in srv.stderr_now()
    finally:
        srv.stop()


_FILL_FDS = """
import os, sys
from noderag.store.tables import IndexStore
store = IndexStore.open(sys.argv[1])  # opened; its tables are read lazily, as a server's next searcher reads them
held = []
try:
    while True:
        held.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
for name in ("nodes", "documents", "vectors", "graph"):
    try:
        getattr(store, name)
        print(name, "read")
    except Exception as exc:
        print(name, type(exc).__name__, exc)
"""


def test_running_out_of_file_descriptors_is_not_called_damage(index):
    r = subprocess.run([sys.executable, "-c", _FILL_FDS, str(index)], capture_output=True, text=True, timeout=120,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 4 and not any(line.endswith(" read") for line in lines), lines
    for line in lines:
        assert "the index is damaged" not in line and "too many open files" in line.lower(), line
    assert any(line.split()[1] == "TooManyOpenFilesError" for line in lines), lines
    with IndexStore.open(index, verify="full"):  # and the index is fine
        pass
