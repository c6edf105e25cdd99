"""In-process llama-cpp-python backend (optional extra ``noderag[llamacpp]``): GGUF on CPU, grammar-constrained JSON."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..accounting import TokenLedger
from ..base import BatchedBackend, EngineConfig, RawOutput
from ..types import LLMError, LLMRequest, now
from .openai import parse_chat_response

__all__ = ["LlamaCppConfig", "LlamaCppBackend", "llamacpp_completion_kwargs"]

_INSTALL_HINT = "the llamacpp backend needs llama-cpp-python: pip install 'noderag[llamacpp]'"


@dataclass
class LlamaCppConfig(EngineConfig):
    """Settings of :class:`LlamaCppBackend`: the shared engine settings (:class:`~noderag.llm.base.EngineConfig`;
    ``model`` is the GGUF file) plus llama.cpp's context, threads and GPU layers."""

    n_ctx: int = 4096
    n_threads: int | None = None
    n_gpu_layers: int = 0

    def check(self) -> None:
        """Raise LLMError naming the first bad field."""
        if not self.model:
            raise LLMError("llamacpp backend: model is required (llamacpp:/path/model.gguf)")
        p = Path(self.model)
        if not p.is_file():
            raise LLMError(f"llamacpp backend: model file {str(p)!r} does not exist")
        if not (isinstance(self.n_ctx, int) and self.n_ctx > 0):
            raise LLMError(f"llamacpp backend: n_ctx must be a positive int, got {self.n_ctx!r}")


def llamacpp_completion_kwargs(req: LLMRequest) -> dict[str, Any]:
    """Keyword arguments of ``Llama.create_chat_completion`` for ``req`` (schema as a JSON grammar)."""
    s = req.sampling
    kw: dict[str, Any] = {
        "messages": [{"role": m["role"], "content": m["content"]} for m in req.messages],
        "temperature": float(s.temperature),
        "top_p": float(s.top_p),
        "max_tokens": int(s.max_tokens),
        "seed": int(s.seed),
    }
    if req.schema is not None:
        kw["response_format"] = {"type": "json_object", "schema": req.schema}
    return kw


class LlamaCppBackend(BatchedBackend):
    """llama.cpp in this process; requests run one after another (the model is not thread-safe)."""

    def __init__(self, config: LlamaCppConfig | None = None, *, ledger: TokenLedger | None = None, **overrides: Any):
        cfg = self._configure(config or LlamaCppConfig(), overrides, ledger, "LlamaCppBackend")
        self.model_id = f"llamacpp:{Path(cfg.model).name}"
        try:
            from llama_cpp import Llama
        except ImportError as e:
            raise ImportError(f"{_INSTALL_HINT} ({e})") from e
        self.llm = Llama(
            model_path=str(cfg.model), n_ctx=cfg.n_ctx, n_threads=cfg.n_threads,
            n_gpu_layers=cfg.n_gpu_layers, seed=cfg.seed, verbose=False, **cfg.engine_kwargs,
        )

    def _batch_size(self, n: int) -> int:
        """One request per batch, so each result is reported (and cached) as it lands."""
        return 1

    def _call_batch(self, batch: list[LLMRequest]) -> list[RawOutput]:
        raws = []
        for r in batch:
            t0 = now()
            try:
                resp = self.llm.create_chat_completion(**llamacpp_completion_kwargs(r))
            except Exception as e:  # e.g. prompt longer than n_ctx: this item fails, not the batch
                raws.append(RawOutput(latency_s=now() - t0, error=f"{type(e).__name__}: {e}"))
                continue
            raw = parse_chat_response(resp)
            raws.append(RawOutput(raw.text, raw.usage, now() - t0, raw.error, raw.finish_reason))
        return raws
