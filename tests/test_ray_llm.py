"""``vllm:MODEL`` on Ray (``noderag.indexing.executor.ray_llm``) at the configuration and row level.

No GPU here: the vLLM engine never starts. Checked: the ``vLLMEngineProcessorConfig`` we build, the
pre-processing (our prompts, our schema as structured outputs) and post-processing of rows, and that
``make_ray_vllm`` shares the in-process backend's cache identity. The validation/retry loop over a
CPU stand-in for the engine runs on the real cluster in ``test_ray_executor.py``.
"""

from __future__ import annotations

import json
import warnings

import pytest

from conftest import under_ci

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

try:
    with warnings.catch_warnings():  # Ray's and pydantic's own deprecation notices on import
        warnings.simplefilter("ignore")
        import ray.data.llm as llm_mod
except ImportError as exc:  # under CI (.ci/run installs the ray extra) a missing Ray fails
    if under_ci():
        raise
    pytest.skip(f"the ray extra is not installed ({exc})", allow_module_level=True)

from noderag.indexing.executor.ray_llm import (  # noqa: E402
    RayVLLMBackend, postprocess, preprocess, processor_config, raw_output, request_row)
from noderag.llm.backends.vllm import VLLMConfig  # noqa: E402
from noderag.llm.prompts import decompose_request, decompose_schema  # noqa: E402


def test_processor_config_carries_our_engine_arguments():
    cfg = VLLMConfig(model="Qwen/Qwen2.5-7B-Instruct", tensor_parallel_size=2, max_model_len=8192, seed=3)
    pc = processor_config(cfg, workers=4, batch_size=32)
    assert isinstance(pc, llm_mod.vLLMEngineProcessorConfig)
    assert pc.model_source == "Qwen/Qwen2.5-7B-Instruct"
    assert pc.concurrency == 4 and pc.batch_size == 32 and pc.should_continue_on_error
    assert pc.engine_kwargs["tensor_parallel_size"] == 2 and pc.engine_kwargs["max_model_len"] == 8192
    assert pc.engine_kwargs["enable_prefix_caching"] is True and pc.engine_kwargs["seed"] == 3
    assert "model" not in pc.engine_kwargs


def test_preprocess_sends_our_prompt_and_schema_as_structured_outputs():
    schema = decompose_schema(8, 12, 12)
    req = decompose_request("Oda Lindqvist built the lighthouse.", schema=schema, seed=5, id="chunk-1")
    row = preprocess(request_row(req, 7))
    assert row["idx"] == 7
    assert row["messages"] == [{"role": m["role"], "content": m["content"]} for m in req.messages]
    sp = row["sampling_params"]
    assert sp["structured_outputs"] == {"json": schema} and "structured_json" not in sp
    assert sp["seed"] == 5 and sp["temperature"] == 0.0 and sp["max_tokens"] == req.sampling.max_tokens
    json.dumps(row)  # a plain JSON-able row, as Ray Data carries it


def test_postprocess_reads_text_tokens_and_engine_errors():
    ok = postprocess({"idx": 3, "generated_text": '{"units": []}', "num_input_tokens": 40,
                      "num_generated_tokens": 6, "__inference_error__": ""})
    assert ok == {"idx": 3, "text": '{"units": []}', "prompt_tokens": 40, "completion_tokens": 6, "error": None}
    raw = raw_output(ok, 0.5)
    assert raw.usage.prompt == 40 and raw.usage.completion == 6 and raw.error is None
    bad = postprocess({"idx": 4, "generated_text": None, "__inference_error__": "CUDA out of memory"})
    assert bad["error"] == "CUDA out of memory" and bad["text"] == ""


def test_backend_shares_the_in_process_cache_identity_and_checks_its_config():
    b = RayVLLMBackend(VLLMConfig(model="/models/m"), workers=2, processor_factory=lambda: None)
    assert b.model_id == "vllm:/models/m" and b.distributed and b.workers == 2
    with pytest.raises(Exception, match="tensor_parallel_size"):
        RayVLLMBackend(VLLMConfig(model="m"), tensor_parallel_size=0)
