"""Offline embeddings with an in-process ``vllm.LLM`` pooling model (optional extra ``vllm``, GPU)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._overrides import with_overrides
from .base import check_batch_size, check_texts, l2_normalize

__all__ = ["VLLMEmbedConfig", "VLLMEmbedder", "llm_kwargs", "outputs_to_array"]


@dataclass
class VLLMEmbedConfig:
    """Settings of :class:`VLLMEmbedder` (model path or name, engine sizing)."""

    model: str = ""
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.5
    max_model_len: int | None = None
    dtype: str = "auto"
    batch_size: int = 4096
    seed: int = 0

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"vllm embedder: model must be a non-empty path or name, got {self.model!r}")
        check_batch_size(self.tensor_parallel_size, "tensor_parallel_size")
        check_batch_size(self.batch_size, "batch_size")
        g = self.gpu_memory_utilization
        if isinstance(g, bool) or not isinstance(g, (int, float)) or not 0 < g <= 1:
            raise ValueError(f"vllm embedder: gpu_memory_utilization must be in (0, 1], got {g!r}")
        if self.max_model_len is not None:
            check_batch_size(self.max_model_len, "max_model_len")


def llm_kwargs(config: VLLMEmbedConfig) -> dict[str, Any]:
    """Return the keyword arguments of ``vllm.LLM`` for a pooling (embedding) engine."""
    config.validate()
    kw: dict[str, Any] = {
        "model": config.model,
        "runner": "pooling",
        "tensor_parallel_size": config.tensor_parallel_size,
        "gpu_memory_utilization": float(config.gpu_memory_utilization),
        "dtype": config.dtype,
        "seed": config.seed,
    }
    if config.max_model_len is not None:
        kw["max_model_len"] = config.max_model_len
    return kw


def outputs_to_array(outputs: Sequence[Any], n: int) -> np.ndarray:
    """Return L2-normalised float32 (n, d) from ``LLM.embed`` outputs (``out.outputs.embedding``)."""
    if len(outputs) != n:
        raise ValueError(f"vllm returned {len(outputs)} embeddings for {n} texts")
    rows = []
    for i, out in enumerate(outputs):
        emb = getattr(getattr(out, "outputs", None), "embedding", None)
        if emb is None:
            raise ValueError(f"vllm output {i} has no .outputs.embedding")
        rows.append(np.asarray(emb, dtype=np.float32).reshape(-1))
    dims = {r.shape[0] for r in rows}
    if len(dims) > 1:
        raise ValueError(f"vllm returned embeddings of different sizes {sorted(dims)}")
    if not rows:
        raise ValueError("vllm returned no embeddings")
    arr = np.stack(rows)
    if not np.isfinite(arr).all():
        raise ValueError("vllm returned non-finite embedding values")
    return l2_normalize(arr)


class VLLMEmbedder:
    """Embed with ``vllm.LLM(..., runner="pooling").embed`` in large batches (needs a GPU)."""

    def __init__(self, config: VLLMEmbedConfig | None = None, **overrides: Any) -> None:
        cfg = with_overrides(config or VLLMEmbedConfig(), overrides, "VLLMEmbedder")
        kw = llm_kwargs(cfg)
        try:
            import vllm
        except ImportError as exc:
            raise ImportError("the 'vllm:' embedder needs vLLM (pip install 'noderag[vllm]')") from exc
        try:
            self._llm = vllm.LLM(**kw)
        except TypeError:
            # vLLM releases before the runner= API selected pooling with task="embed".
            kw.pop("runner")
            self._llm = vllm.LLM(task="embed", **kw)
        self.config = cfg
        self.name = f"vllm:{cfg.model}"
        self.dim = int(self._embed_batch(["dimension probe"]).shape[1])

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        return outputs_to_array(self._llm.embed(texts, use_tqdm=False), len(texts))

    def embed(self, texts: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
        """Return float32 of shape (len(texts), dim), rows L2-normalised."""
        texts = check_texts(texts)
        bs = self.config.batch_size if batch_size is None else check_batch_size(batch_size)
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        return np.concatenate([self._embed_batch(texts[i : i + bs]) for i in range(0, len(texts), bs)])
