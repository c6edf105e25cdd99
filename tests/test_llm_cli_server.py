"""LLM mode from the command line against the real llama.cpp server (SmolLM2-135M GGUF) on 127.0.0.1.

1. ``noderag build DEMO --llm openai:smollm2@URL`` with no options succeeds (the openai backend detects
   that llama-cpp-python rejects ``json_schema`` and switches to ``json_object`` once); every LLM stage
   ran, the token ledger is filled per stage and the manifest records it.
2. ``noderag query --answer`` answers 2 of the demo questions in one call: an answer or a per-question error
   each, citations only of context nodes.
3. ``benchmarks/bench_qa.py`` on 2 questions of the MuSiQue slice in ``tests/data``: well-formed JSON + markdown,
   EM/F1 computed by ``noderag.eval``; a rerun is served from the LLM cache.

Requirements as in ``tests/test_llm_server.py`` (``.ci/run`` installs them). Quality is not tested: a
135M model answers badly; the mechanics are.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from noderag.data import demo_dir, demo_questions
from noderag.eval import exact_match, token_f1
from conftest import MUSIQUE, REPO

pytestmark = pytest.mark.server



def _cli(*args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "noderag.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def llm_demo(llama_server, tmp_path_factory):
    index = tmp_path_factory.mktemp("llm_demo") / "index"
    t0 = time.perf_counter()
    p = _cli("build", str(demo_dir()), "--index", str(index), "--llm", f"openai:smollm2@{llama_server.url}",
             "--no-progress")
    wall = time.perf_counter() - t0
    assert p.returncode == 0, f"build failed ({wall:.0f}s):\n{p.stderr[-3000:]}\nserver:\n{llama_server.tail()}"
    manifest = json.loads((index / "manifest.json").read_text()) if (index / "manifest.json").is_file() else None
    if manifest is None:  # generations: the pointer names the current folder
        from noderag.store.tables import IndexStore

        manifest = dict(IndexStore.open(index).manifest)
    print(f"\nLLM-mode demo build: {wall:.1f}s\n" + json.dumps(manifest.get("tokens"), indent=1))
    return index, manifest, p


def test_cli_llm_build_with_no_options_succeeds(llm_demo):
    index, manifest, p = llm_demo
    assert "rejected response_format json_schema; using json_object" in p.stderr  # detected once, said so
    assert p.stderr.count("using json_object") == 1
    assert not manifest.get("failures", {}).get("decompose")
    assert manifest["config"]["decompose"]["method"] == "llm"
    assert manifest["config"]["llm"]["spec"].startswith("openai:smollm2@")


def test_every_llm_stage_ran_and_the_ledger_is_filled_per_stage(llm_demo):
    index, manifest, _ = llm_demo
    stages, tokens = manifest["stages"], manifest["tokens"]
    for name in ("decompose", "attributes", "communities", "embed"):
        assert name in stages, sorted(stages)
    chunks = manifest["counts"]["chunks"]
    dec = tokens["decompose"]
    assert dec["requests"] == chunks and dec["failures"] == 0
    assert dec["prompt_tokens"] > 100 * chunks and dec["completion_tokens"] > 0
    for name in ("attributes", "communities"):
        st = tokens[name]
        assert st["requests"] >= 1 and st["prompt_tokens"] > 0 and st["completion_tokens"] > 0, (name, st)
    nodes = manifest["counts"]["nodes"]
    names = ("text", "semantic_unit", "entity", "relationship", "attribute", "high_level", "overview")
    assert all(nodes.get(t, 0) > 0 for t in names), nodes  # every stage produced its nodes


def test_query_answers_demo_questions(llm_demo, llama_server):
    index, _, _ = llm_demo
    qs = [q["question"] for q in demo_questions()][:2]  # two questions test the batch; each costs ~9 s of CI
    p = _cli("query", str(index), *qs, "--answer", "--json", "--context-tokens", "400")
    assert p.returncode in (0, 3), p.stderr[-2000:]  # 3: some question got no answer (reported)
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    assert len(rows) == len(qs)  # one record per question, none dropped
    for q, row in zip(qs, rows):
        assert row["retrieval"]["query"] == q
        assert (row["answer"] != "") != (row["error"] is not None)
        assert set(row["cited_ids"]) <= set(row["retrieval"]["context_node_ids"])
        assert row["usage"]["prompt_tokens"] > 0
        print(f"  {q[:60]!r} -> {row['answer']!r} cites {row['cited_ids']} error={row['error']}")
    if p.returncode == 3:
        assert "no answer for" in p.stderr


def test_bench_qa_smoke_on_two_questions(llama_server, tmp_path):
    out = tmp_path / "qa.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_qa.py"), "--data", str(MUSIQUE),
           "--llm", f"openai:smollm2@{llama_server.url}", "--limit", "2", "--subset", "--distractors", "10",
           "--context-tokens", "400", "--index", str(tmp_path / "index"), "--out", str(out)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    wall = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(out.read_text())
    md = out.with_suffix(".md").read_text()
    print(f"\nbench_qa smoke: {wall:.1f}s\n{md}")
    assert res["n_questions"] == 2 and set(res["methods"]) == {"noderag", "dense"}
    assert len(res["records"]) == 4
    for r in res["records"]:
        # the scores are the package scorer's on the recorded answer and gold
        assert r["em"] == exact_match(r["answer"], r["gold"]) and r["f1"] == round(token_f1(r["answer"], r["gold"]), 4)
        assert 0 < r["context_tokens"] <= 400 and r["prompt_tokens"] > r["context_tokens"] // 2
        assert (r["answer"] != "") != (r["error"] is not None)
        assert not r["cached"]
    for m, row in res["methods"].items():
        recs = [r for r in res["records"] if r["method"] == m]
        assert row["questions"] == 2 and row["exact_match"] == round(sum(r["em"] for r in recs) / 2, 4)
        assert row["completion_tokens_per_s"] > 0
    assert "| noderag |" in md and "| dense |" in md
    # resumable: the rerun answers from the LLM cache, no call made
    p2 = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p2.returncode == 0, p2.stderr[-2000:]
    res2 = json.loads(out.read_text())
    assert all(r["cached"] for r in res2["records"] if r["error"] is None)
    assert [r["answer"] for r in res2["records"]] == [r["answer"] for r in res["records"]]
