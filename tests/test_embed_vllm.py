"""Pure parts of the vLLM embedder: engine kwargs and output parsing (vLLM itself needs a GPU)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from noderag.embed.vllm import VLLMEmbedConfig, llm_kwargs, outputs_to_array


def _out(vec):
    return SimpleNamespace(outputs=SimpleNamespace(embedding=vec))


def test_llm_kwargs_pooling_runner():
    kw = llm_kwargs(VLLMEmbedConfig(model="/m/e5", tensor_parallel_size=2, max_model_len=512))
    assert kw["runner"] == "pooling" and kw["model"] == "/m/e5"
    assert kw["tensor_parallel_size"] == 2 and kw["max_model_len"] == 512
    assert "max_model_len" not in llm_kwargs(VLLMEmbedConfig(model="x"))


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [("model", "", "model"), ("tensor_parallel_size", 0, "tensor_parallel_size"),
     ("gpu_memory_utilization", 1.5, "gpu_memory_utilization"), ("batch_size", -1, "batch_size")],
)
def test_config_validation(field, value, match):
    cfg = VLLMEmbedConfig(model="x")
    setattr(cfg, field, value)
    with pytest.raises(ValueError, match=match):
        llm_kwargs(cfg)


def test_outputs_to_array_normalises():
    arr = outputs_to_array([_out([3.0, 4.0]), _out([0.0, 2.0])], 2)
    np.testing.assert_allclose(arr, [[0.6, 0.8], [0.0, 1.0]])
    assert arr.dtype == np.float32


def test_outputs_to_array_errors():
    with pytest.raises(ValueError, match="1 embeddings for 2 texts"):
        outputs_to_array([_out([1.0])], 2)
    with pytest.raises(ValueError, match="different sizes"):
        outputs_to_array([_out([1.0]), _out([1.0, 2.0])], 2)
    with pytest.raises(ValueError, match="no .outputs.embedding"):
        outputs_to_array([SimpleNamespace()], 1)
    with pytest.raises(ValueError, match="non-finite"):
        outputs_to_array([_out([np.nan, 1.0])], 1)


class _FakeLLM:
    """Stands in for vllm.LLM: records construction kwargs and embed batches."""

    instances: list["_FakeLLM"] = []

    def __init__(self, **kw):
        if "runner" in kw and kw.get("model") == "old-api":
            raise TypeError("unexpected keyword argument 'runner'")
        self.kw = kw
        self.batches: list[int] = []
        _FakeLLM.instances.append(self)

    def embed(self, texts, use_tqdm=True):
        self.batches.append(len(texts))
        return [_out([float(len(t)), 1.0, 0.0]) for t in texts]


def test_vllm_embedder_with_fake_engine(monkeypatch):
    from noderag.embed import make_embedder

    monkeypatch.setitem(__import__("sys").modules, "vllm", SimpleNamespace(LLM=_FakeLLM))
    emb = make_embedder("vllm:/models/e5", batch_size=2, tensor_parallel_size=2)
    llm = _FakeLLM.instances[-1]
    assert llm.kw["runner"] == "pooling" and llm.kw["tensor_parallel_size"] == 2
    assert emb.dim == 3 and emb.name == "vllm:/models/e5"
    v = emb.embed(["a", "bbb", "cc"])
    assert llm.batches[1:] == [2, 1]
    np.testing.assert_allclose(v[1], np.array([3.0, 1.0, 0.0]) / np.sqrt(10.0), rtol=1e-6)
    assert emb.embed([]).shape == (0, 3)
    old = make_embedder("vllm:old-api")
    assert _FakeLLM.instances[-1].kw.get("task") == "embed" and old.dim == 3
