"""vLLM request building / output parsing with fakes, llama.cpp kwargs, the factory, lazy imports."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from noderag.llm import CachedBackend, LLMCache, LLMError, LLMRequest, Sampling, make_llm, parse_llm_spec
from noderag.llm.backends import vllm as vb
from noderag.llm.backends.llamacpp import LlamaCppBackend, llamacpp_completion_kwargs
from noderag.llm.backends.openai import OpenAIBackend

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}


def req(i: int, schema=SCHEMA) -> LLMRequest:
    return LLMRequest([{"role": "system", "content": "static"}, {"role": "user", "content": f"item {i}"}],
                      schema, Sampling(max_tokens=32, seed=4), id=str(i))


# ---------------------------------------------------------------------------- vllm pure
class FakeSamplingParams:
    def __init__(self, **kw):
        self.kw = kw


class FakeStructured:
    def __init__(self, json=None):
        self.json = json


def fake_output(text, prompt_len=20, n_tokens=5, cached=16, finish="stop"):
    comp = SimpleNamespace(text=text, token_ids=list(range(n_tokens)), finish_reason=finish)
    return SimpleNamespace(request_id="0", prompt_token_ids=list(range(prompt_len)), outputs=[comp],
                           num_cached_tokens=cached)


def test_vllm_sampling_params_carry_structured_outputs():
    sp = vb.make_sampling_params(req(1), FakeSamplingParams, FakeStructured)
    assert sp.kw["structured_outputs"].json == SCHEMA
    assert {k: sp.kw[k] for k in ("temperature", "top_p", "max_tokens", "seed")} == {
        "temperature": 0.0, "top_p": 1.0, "max_tokens": 32, "seed": 4}
    assert "structured_outputs" not in vb.make_sampling_params(req(1, None), FakeSamplingParams, FakeStructured).kw
    assert vb.to_conversation(req(2))[-1] == {"role": "user", "content": "item 2"}


def test_vllm_parse_request_output():
    raw = vb.parse_request_output(fake_output('{"n": 1}'))
    assert raw.text == '{"n": 1}' and raw.finish_reason == "stop"
    assert (raw.usage.prompt, raw.usage.completion, raw.usage.cached) == (20, 5, 16)
    none_cached = fake_output("x", cached=None)
    assert vb.parse_request_output(none_cached).usage.cached == 0
    assert "no completion" in vb.parse_request_output(SimpleNamespace(request_id="7", outputs=[])).error


def test_vllm_engine_args_and_checks():
    cfg = vb.VLLMConfig(model="/m", tensor_parallel_size=2, max_model_len=4096, gpu_memory_utilization=0.5)
    args = cfg.engine_args()
    assert args["enable_prefix_caching"] is True and args["tensor_parallel_size"] == 2
    assert args["max_model_len"] == 4096 and args["gpu_memory_utilization"] == 0.5
    for bad, msg in [(dict(model=""), "model"), (dict(model="m", tensor_parallel_size=0), "tensor_parallel_size"),
                     (dict(model="m", gpu_memory_utilization=1.5), "gpu_memory_utilization"),
                     (dict(model="m", batch_size=0), "batch_size")]:
        with pytest.raises(LLMError, match=msg):
            vb.VLLMConfig(**bad).check()


class FakeLLM:
    """Stands in for vllm.LLM: answers item i with {"n": i}, item 1 invalid on seed 4."""

    instances: list["FakeLLM"] = []

    def __init__(self, **kw):
        self.kw = kw
        self.calls = []
        FakeLLM.instances.append(self)

    def chat(self, conversations, sampling_params=None, use_tqdm=True):
        assert isinstance(sampling_params, list) and len(sampling_params) == len(conversations)
        self.calls.append(len(conversations))
        outs = []
        for conv, sp in zip(conversations, sampling_params):
            i = int(conv[-1]["content"].split()[1])
            text = '{"n": "x"}' if (i == 1 and sp.kw["seed"] == 4) else json.dumps({"n": i})
            outs.append(fake_output(text))
        return outs


def test_vllm_backend_one_chat_call_per_batch_with_fake_engine(monkeypatch, tmp_path):
    monkeypatch.setattr(vb, "import_vllm", lambda: (FakeLLM, FakeSamplingParams, FakeStructured))
    llm = make_llm("vllm:/models/qwen", cache_path=tmp_path / "c.sqlite", tensor_parallel_size=2)
    assert isinstance(llm, CachedBackend)
    engine = FakeLLM.instances[-1]
    assert engine.kw["model"] == "/models/qwen" and engine.kw["enable_prefix_caching"]
    out = llm.run([req(i) for i in range(5)], stage="decompose")
    assert engine.calls == [5, 1]  # whole stage batch in one call, then the one invalid output re-asked
    assert [r.value["n"] for r in out] == list(range(5)) and out[1].attempts == 2
    st = llm.ledger.stages["decompose"]
    assert st.prompt_tokens == 6 * 20 and st.cached_tokens == 6 * 16
    again = llm.run([req(i) for i in range(5)], stage="decompose")
    assert engine.calls == [5, 1] and all(r.cached for r in again)


def test_vllm_batch_size_splits_calls(monkeypatch):
    monkeypatch.setattr(vb, "import_vllm", lambda: (FakeLLM, FakeSamplingParams, FakeStructured))
    llm = vb.VLLMBackend(vb.VLLMConfig(model="/m", batch_size=2))
    seen = []
    out = llm.generate([req(i) for i in (0, 2, 3, 4, 5)], on_result=lambda i, r, res: seen.append(i))
    assert FakeLLM.instances[-1].calls == [2, 2, 1] and sorted(seen) == [0, 1, 2, 3, 4]
    assert [r.value["n"] for r in out] == [0, 2, 3, 4, 5]


def test_vllm_engine_exception_fails_items_not_batch(monkeypatch):
    class Broken(FakeLLM):
        def chat(self, *a, **k):
            raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(vb, "import_vllm", lambda: (Broken, FakeSamplingParams, FakeStructured))
    out = vb.VLLMBackend(model="/m").run([req(0), req(2)], stage="decompose")
    assert all("CUDA out of memory" in r.error for r in out)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_missing_vllm_says_how_to_install():
    with pytest.raises(ImportError, match=r"pip install 'noderag\[vllm\]'"):
        make_llm("vllm:/models/x")


def test_importing_noderag_llm_never_imports_vllm_or_llama_cpp():
    code = ("import sys, noderag, noderag.llm, noderag.llm.prompts, noderag.llm.testing, noderag.llm.backends.vllm,"
            " noderag.llm.backends.llamacpp; print(sorted(m for m in ('vllm', 'llama_cpp', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ----------------------------------------------------------------------------- llamacpp
def test_llamacpp_kwargs_and_missing_model(tmp_path):
    kw = llamacpp_completion_kwargs(req(1))
    assert kw["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert kw["max_tokens"] == 32 and kw["seed"] == 4 and kw["messages"][0]["role"] == "system"
    assert "response_format" not in llamacpp_completion_kwargs(req(1, None))
    with pytest.raises(LLMError, match="does not exist"):
        LlamaCppBackend(model=str(tmp_path / "none.gguf"))


# ------------------------------------------------------------------------------ factory
def test_parse_llm_spec():
    assert parse_llm_spec("openai:qwen2.5@http://127.0.0.1:8080/v1") == ("openai", "qwen2.5", "http://127.0.0.1:8080/v1")
    assert parse_llm_spec("openai:gpt-4o-mini") == ("openai", "gpt-4o-mini", None)
    assert parse_llm_spec("openai") == ("openai", None, None)
    assert parse_llm_spec("openai:user@org/model") == ("openai", "user@org/model", None)
    assert parse_llm_spec("vllm:/models/q") == ("vllm", "/models/q", None)
    assert parse_llm_spec("llamacpp:/m.gguf") == ("llamacpp", "/m.gguf", None)
    with pytest.raises(ValueError, match="unknown backend 'ollama'"):
        parse_llm_spec("ollama:x")
    with pytest.raises(ValueError, match="needs a model path"):
        parse_llm_spec("vllm:")


def test_make_llm_openai_overrides(tmp_path):
    llm = make_llm("openai:m@http://127.0.0.1:1/v1", dialect="json_object", max_concurrency=3)
    assert isinstance(llm, OpenAIBackend) and llm.config.dialect == "json_object"
    assert llm.config.max_concurrency == 3 and llm.model_id == "openai:m@http://127.0.0.1:1/v1"
    cached = make_llm("openai:m@http://127.0.0.1:1/v1", cache_path=tmp_path / "sub" / "c.sqlite")
    assert isinstance(cached, CachedBackend) and isinstance(cached.cache, LLMCache)
    cached.close()
