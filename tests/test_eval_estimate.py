"""``noderag build --estimate``: prompts rendered on the real chunks, counted without calling a model."""

from __future__ import annotations

from pathlib import Path

import pytest

from noderag.cli import main
from noderag.config import NodeRAGConfig
from noderag.build.chunk import chunk_text
from noderag.build.decompose.llm import LLMDecomposer
from noderag.build.decompose.base import ChunkInput
from noderag.build.estimate import _DryRunLLM, estimate_build
from noderag.build.ingest import ingest
from noderag.build.driver import build_index
from noderag.llm.base import estimate_usage
from noderag.llm.testing import ScriptedLLM

CORPUS = Path(__file__).parent / "data" / "eval" / "noderag" / "corpus.jsonl"


def test_decompose_prompts_are_the_decomposers_on_the_real_chunks():
    cfg = NodeRAGConfig()
    est = estimate_build([CORPUS], cfg)
    docs, _ = ingest([str(CORPUS)])
    chunks = [ChunkInput(i, c, d.title) for i, (d, c) in
              enumerate((d, c) for d in docs for c in chunk_text(d.text, cfg.chunk.max_tokens, cfg.chunk.min_tokens))]
    reqs = LLMDecomposer(None, cfg.decompose, seed=cfg.seed)._requests(chunks, 0)
    want = sum(estimate_usage(r, "").prompt for r in reqs)
    d = est["stages"]["decompose"]
    assert (d["requests"], d["prompt_tokens"], d["exact"]) == (len(chunks), want, True)
    assert est["chunks"] == len(chunks) == 10 and not est["extrapolated"]
    assert d["completion_tokens"] == round(want * d["completion_ratio"])
    assert est["stages"]["attributes"]["requests"] > 0 and est["stages"]["communities"]["requests"] > 0
    assert est["embedding"]["texts"] > est["chunks"]


def test_dry_run_matches_a_real_build_given_the_same_replies(tmp_path):
    """A real LLM build whose model answers as the stand-in does sends exactly the counted prompts."""
    cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:64"})
    est = estimate_build([CORPUS], cfg)
    stand_in = _DryRunLLM(cfg.decompose)
    stand_in.summary_tokens = cfg.attributes.summary_tokens
    sent = {"decompose": 0, "attributes": 0, "communities": 0}

    def respond(req):
        props = (req.schema or {}).get("properties", {})
        stage = "attributes" if req.schema is None else "decompose" if "units" in props else "communities"
        sent[stage] += estimate_usage(req, "").prompt
        return stand_in._reply(req)

    build_index([str(CORPUS)], tmp_path / "ix", cfg, llm=ScriptedLLM(respond), progress=False)
    assert sent == {s: est["stages"][s]["prompt_tokens"] for s in sent}


def test_sample_extrapolates_and_says_so():
    est = estimate_build([CORPUS], NodeRAGConfig(), sample=5, tps=100.0)
    assert est["extrapolated"] and est["sampled_chunks"] == 5 and est["scale_factor"] == 2.0
    assert est["stages"]["decompose"]["requests"] == 10 and not est["stages"]["decompose"]["exact"]
    full = estimate_build([CORPUS], NodeRAGConfig())["stages"]["decompose"]["prompt_tokens"]
    assert abs(est["stages"]["decompose"]["prompt_tokens"] - full) / full < 0.2
    t = est["time_s"]
    total = est["total"]
    assert t["low"] == round(total["completion_tokens"] / 100.0, 1)
    assert t["high"] == round((total["prompt_tokens"] + total["completion_tokens"]) / 100.0, 1)


def test_cli_estimate_builds_nothing(tmp_path, capsys):
    ix = tmp_path / "ix"
    assert main(["build", str(CORPUS), "--index", str(ix), "--estimate", "--estimate-tps", "50",
                 "--estimate-sample", "4", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "extrapolated from 4 of 10 chunks" in out and "time at 50.0 tokens/s" in out
    assert not ix.exists()
    assert main(["build", str(CORPUS), "--index", str(ix), "--estimate", "--estimate-sample", "0",
                 "--no-progress"]) == 1
    assert "--estimate-sample must be >= 1" in capsys.readouterr().err


def test_existing_index_counts_only_new_documents(tmp_path):
    cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:64"})
    build_index([str(CORPUS)], tmp_path / "ix", cfg, progress=False)
    est = estimate_build([CORPUS], cfg, index_dir=tmp_path / "ix")
    assert (est["documents"], est["chunks"], est["total"]["prompt_tokens"]) == (0, 0, 0)
    assert est["documents_known_or_duplicate"] == 10


def test_bad_sample_is_an_error():
    with pytest.raises(ValueError, match="must be >= 1"):
        estimate_build([CORPUS], NodeRAGConfig(), sample=0)
