"""A real ``noderag serve`` process on 127.0.0.1 (ephemeral port) with a scripted OpenAI-compatible LLM server,
driven over HTTP, and the page in Debian's headless chromium (Chrome DevTools Protocol, no browser download).

The browser test saves its screenshot to ``benchmarks/results/serve_page.png``. Without chromium it is
skipped, except under ``CI`` (``.ci/run`` installs it), where it fails.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from cdp import Chromium, find_chromium  # noqa: E402
from conftest import under_ci  # noqa: E402
from scripted_openai import ScriptedOpenAIServer  # noqa: E402
from serve_index import QUESTION, demo_index  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SCREENSHOT = REPO / "benchmarks" / "results" / "serve_page.png"
SCREENSHOT_200 = REPO / "benchmarks" / "results" / "serve_page_200_nodes.png"


def _noderag_command() -> list[str]:
    exe = Path(sys.executable).with_name("noderag")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "noderag.cli"]


@pytest.fixture(scope="module")
def llm_server():
    with ScriptedOpenAIServer() as srv:
        yield srv


class _Serve:
    """``noderag serve INDEX --port 0 ...`` as a subprocess; ``url`` once it printed its address."""

    def __init__(self, index: Path, *extra: str) -> None:
        cmd = _noderag_command() + ["serve", str(index), "--port", "0", *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        url, seen, deadline = None, [], time.monotonic() + 120
        while url is None:
            if self.proc.poll() is not None:
                raise AssertionError(f"noderag serve exited with {self.proc.returncode}: "
                                     f"{''.join(seen)}{self.proc.stderr.read()}")
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"noderag serve printed no address within 120 s: {''.join(seen)}")
            if select.select([self.proc.stderr], [], [], 0.5)[0]:
                line = self.proc.stderr.readline()
                seen.append(line)
                if line.startswith("noderag serve: http://"):
                    url = line.split()[2].rstrip("/")
        self.url = url

    def stop(self) -> None:
        """SIGINT (Ctrl-C): the server shuts down cleanly with status 0."""
        self.proc.send_signal(signal.SIGINT)
        try:
            rest = self.proc.communicate(timeout=30)[1]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise AssertionError("noderag serve did not stop within 30 s of SIGINT") from None
        assert self.proc.returncode == 0, rest
        assert "Traceback" not in rest and "noderag serve: stopped" in rest, rest


@pytest.fixture(scope="module")
def server(tmp_path_factory, llm_server):
    """The default server with the scripted LLM; yields its base URL."""
    srv = _Serve(demo_index(tmp_path_factory), "--llm", f"openai:scripted@{llm_server.base_url}")
    yield srv.url
    srv.stop()


@pytest.fixture(scope="module")
def big_server(tmp_path_factory):
    """A server whose search quotas retrieve about 200 nodes (for the page's readability at 200 nodes)."""
    cfg = tmp_path_factory.mktemp("serve-cfg") / "search.toml"
    cfg.write_text("[search]\nvector_top_k = 40\nppr_candidates = 200\n"
                   "[search.quotas]\nentities = 60\nrelationships = 80\nothers = 60\noverviews = 10\n")
    srv = _Serve(demo_index(tmp_path_factory), "--config", str(cfg))
    yield srv.url
    srv.stop()


def test_real_process_over_http(server, llm_server):
    host, port = server.split("//")[1].split(":")
    assert host == "127.0.0.1" and int(port) > 0
    with httpx.Client(base_url=server, timeout=60, trust_env=False) as c:
        assert c.get("/health").json()["llm"] is True
        r = c.post("/retrieve", json={"question": QUESTION, "k": 3})
        assert r.status_code == 200 and len(r.json()["passages"]) == 3
        bad = c.post("/retrieve", content=b'{"question": "x", "k": 1000}', headers={"Content-Type": "application/json"})
        assert bad.status_code == 422 and bad.json()["field"] == "k"
        bad = c.post("/retrieve", content=b"{", headers={"Content-Type": "application/json"})
        assert bad.status_code == 400 and bad.json()["field"] == "body"
        big = c.post("/retrieve", content=b"x" * 400_000, headers={"Content-Type": "application/json"})
        assert big.status_code == 413
        many = c.post("/retrieve_many", json={"questions": [QUESTION, "Who designed Haldis Lighthouse?"]})
        assert [x["query"] for x in many.json()["results"]] == [QUESTION, "Who designed Haldis Lighthouse?"]
        # the answer streams: events arrive over the wire before the stream ends
        n_before = len(llm_server.requests)
        events, first_token_at = [], None
        with c.stream("POST", "/answer", json={"question": QUESTION}) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            for line in resp.iter_lines():
                if line.startswith("event: "):
                    events.append(line[7:])
                    if events[-1] == "token" and first_token_at is None:
                        first_token_at = time.monotonic()
        assert events[0] == "retrieval" and events[-2:] == ["answer", "done"] and events.count("token") > 5
        assert len(llm_server.requests) == n_before + 1 and llm_server.requests[-1]["stream"] is True
        stats = c.get("/stats").json()
        assert stats["llm"].startswith("openai:scripted@") and stats["server"]["queries"] >= 4


def _chromium() -> str:
    binary = find_chromium()
    if binary is None:
        if under_ci():
            pytest.fail("chromium is not installed (.ci/run installs Debian's chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return binary


def _ask(b: Chromium, url: str, question: str) -> str:
    """Load the page, ask ``question``, wait for the page to finish; returns the status line before asking."""
    b.navigate(url + "/")
    status = b.wait_for("window.noderag && document.getElementById('status').textContent.includes('nodes') && "
                        "document.getElementById('status').textContent")
    b.evaluate(f"document.getElementById('question').value = {json.dumps(question)}; "
               "document.getElementById('go').click(); true")
    state = b.wait_for("['done', 'error'].includes(document.body.dataset.state) && document.body.dataset.state",
                       timeout=60)
    assert state == "done", b.evaluate("document.getElementById('answer').textContent")
    return status


_GRAPH = """(() => {
    const g = document.getElementById('graph').getBoundingClientRect();
    const inside = r => r.left >= g.left - 1 && r.right <= g.right + 1 && r.top >= g.top - 1 && r.bottom <= g.bottom + 1;
    const labels = [...document.querySelectorAll('#graph text')].map(t => t.getBoundingClientRect());
    let overlaps = 0;
    for (let i = 0; i < labels.length; i++) for (let j = i + 1; j < labels.length; j++) {
        const a = labels[i], b = labels[j];
        if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) overlaps++;
    }
    return {
        circles: document.querySelectorAll('#graph circle').length,
        types: [...new Set([...document.querySelectorAll('#graph circle')].map(c => c.dataset.type))],
        seeds: document.querySelectorAll('#graph circle.seed').length,
        edges: document.querySelectorAll('#graph line').length,
        labels: labels.length, labelOverlaps: overlaps,
        inView: [...document.querySelectorAll('#graph circle')].every(c => inside(c.getBoundingClientRect())),
    };
})()"""


@pytest.mark.browser
def test_page_in_headless_chromium(server):
    binary = _chromium()
    with Chromium(binary, width=1400, height=1000) as b:
        assert "LLM answers" in _ask(b, server, QUESTION)
        page = b.evaluate("""(() => ({
            answer: document.getElementById('answer').textContent,
            cites: [...document.querySelectorAll('#citations .chip')].map(c => +c.dataset.node),
            passages: [...document.querySelectorAll('#passages li')].map(li => li.querySelector('.label').textContent),
            passageIds: [...document.querySelectorAll('#passages li')].map(li => li.querySelector('.pid').textContent),
            passageText: document.querySelector('#passages li .text').textContent,
        }))()""")
        graph = b.evaluate(_GRAPH)
        assert page["answer"].startswith("Scripted answer"), page
        assert len(page["cites"]) == 2
        assert len(page["passages"]) >= 3 and page["passageText"]
        assert page["passages"][0] and not page["passages"][0].endswith(".md")  # the title (the file's heading)
        assert page["passageIds"][0].endswith(".md")  # then the file
        assert graph["circles"] >= 30 and len(graph["types"]) >= 5 and graph["seeds"] >= 1 and graph["edges"] >= 20
        assert graph["inView"] and graph["labelOverlaps"] == 0, graph
        # clicking a node shows its text and source passage
        nid = b.evaluate("(() => { const c = document.querySelector('#graph circle[data-type=\"S\"]'); "
                         "c.dispatchEvent(new MouseEvent('click', {bubbles: true})); return +c.dataset.id; })()")
        b.wait_for(f"document.getElementById('detail').textContent.includes('node {nid}') && "
                   "document.getElementById('detail').textContent.includes('source passage')")
        b.screenshot(SCREENSHOT)
        assert not [m for m in b.console if m.startswith("exception")], b.console
    assert SCREENSHOT.stat().st_size > 20_000


@pytest.mark.browser
def test_page_stays_readable_at_200_nodes(big_server):
    with Chromium(_chromium(), width=1400, height=1000) as b:
        assert "retrieval only" in _ask(b, big_server, QUESTION)
        graph = b.evaluate(_GRAPH)
        b.screenshot(SCREENSHOT_200)
    assert graph["circles"] >= 180 and len(graph["types"]) == 7, graph
    # every node inside the panel; a bounded number of labels, none overlapping another
    assert graph["inView"] and 10 <= graph["labels"] <= 30 and graph["labelOverlaps"] == 0, graph
