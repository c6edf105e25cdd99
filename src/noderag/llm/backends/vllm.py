"""In-process vLLM offline batch backend (optional extra ``noderag[vllm]``; needs a GPU).

Request building and result parsing are pure functions (tested without vLLM); vLLM itself is
imported only when a :class:`VLLMBackend` is constructed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..accounting import TokenLedger
from ..base import BatchedBackend, EngineConfig, RawOutput
from ..types import LLMError, LLMRequest, Usage, now

__all__ = [
    "VLLMConfig",
    "VLLMBackend",
    "import_vllm",
    "to_conversation",
    "sampling_kwargs",
    "make_sampling_params",
    "parse_request_output",
]

_INSTALL_HINT = "the vllm backend needs vLLM: pip install 'noderag[vllm]' (GPU machine)"


@dataclass
class VLLMConfig(EngineConfig):
    """Settings of :class:`VLLMBackend`: the shared engine settings (:class:`~noderag.llm.base.EngineConfig`)
    plus vLLM's engine arguments and batching."""

    tensor_parallel_size: int = 1
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.90
    enable_prefix_caching: bool = True
    dtype: str = "auto"
    trust_remote_code: bool = False
    #: Requests per ``LLM.chat`` call; None = the whole stage batch in one call. A smaller value
    #: commits finished work to the cache more often (less lost if the build is killed).
    batch_size: int | None = None

    def check(self) -> None:
        """Raise LLMError naming the first bad field."""
        if not self.model:
            raise LLMError("vllm backend: model path or name is required (vllm:/path/to/model)")
        if not (isinstance(self.tensor_parallel_size, int) and self.tensor_parallel_size >= 1):
            raise LLMError(f"vllm backend: tensor_parallel_size must be an int >= 1, got {self.tensor_parallel_size!r}")
        if self.max_model_len is not None and not (isinstance(self.max_model_len, int) and self.max_model_len > 0):
            raise LLMError(f"vllm backend: max_model_len must be a positive int or None, got {self.max_model_len!r}")
        if not (0.0 < float(self.gpu_memory_utilization) <= 1.0):
            raise LLMError(
                f"vllm backend: gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}"
            )
        if self.batch_size is not None and not (isinstance(self.batch_size, int) and self.batch_size >= 1):
            raise LLMError(f"vllm backend: batch_size must be an int >= 1 or None, got {self.batch_size!r}")

    def engine_args(self) -> dict[str, Any]:
        """Keyword arguments for ``vllm.LLM(...)``."""
        args: dict[str, Any] = {
            "model": self.model,
            "tensor_parallel_size": self.tensor_parallel_size,
            "gpu_memory_utilization": float(self.gpu_memory_utilization),
            "enable_prefix_caching": bool(self.enable_prefix_caching),
            "dtype": self.dtype,
            "seed": int(self.seed),
            "trust_remote_code": bool(self.trust_remote_code),
        }
        if self.max_model_len is not None:
            args["max_model_len"] = self.max_model_len
        args.update(self.engine_kwargs)
        return args


def import_vllm() -> tuple[Any, Any, Any]:
    """Return ``(LLM, SamplingParams, StructuredOutputsParams)``; ImportError says how to install."""
    try:
        from vllm import LLM, SamplingParams
        from vllm.sampling_params import StructuredOutputsParams
    except ImportError as e:
        raise ImportError(f"{_INSTALL_HINT} ({e})") from e
    return LLM, SamplingParams, StructuredOutputsParams


def to_conversation(req: LLMRequest) -> list[dict[str, str]]:
    """Return the chat messages of ``req`` as vLLM expects them."""
    return [{"role": m["role"], "content": m["content"]} for m in req.messages]


def sampling_kwargs(req: LLMRequest) -> dict[str, Any]:
    """Return ``SamplingParams`` keyword arguments of ``req`` (schema under ``structured_json``)."""
    s = req.sampling
    return {
        "temperature": float(s.temperature),
        "top_p": float(s.top_p),
        "max_tokens": int(s.max_tokens),
        "seed": int(s.seed),
        "structured_json": req.schema,
    }


def make_sampling_params(req: LLMRequest, sampling_params_cls: Any, structured_cls: Any) -> Any:
    """Build a ``SamplingParams`` for ``req`` with ``structured_outputs=StructuredOutputsParams(json=...)``."""
    kw = sampling_kwargs(req)
    schema = kw.pop("structured_json")
    if schema is not None:
        kw["structured_outputs"] = structured_cls(json=schema)
    return sampling_params_cls(**kw)


def parse_request_output(out: Any) -> RawOutput:
    """Read text, finish reason and usage (prompt, completion, cached tokens) from a RequestOutput."""
    try:
        comp = out.outputs[0]
    except (AttributeError, IndexError, TypeError):
        return RawOutput(error=f"vLLM returned no completion for request {getattr(out, 'request_id', '?')}")
    prompt_ids = getattr(out, "prompt_token_ids", None) or []
    token_ids = getattr(comp, "token_ids", None) or []
    cached = getattr(out, "num_cached_tokens", None) or 0
    usage = Usage(prompt=len(prompt_ids), completion=len(token_ids), cached=int(cached))
    return RawOutput(text=comp.text or "", usage=usage, finish_reason=getattr(comp, "finish_reason", None))


class VLLMBackend(BatchedBackend):
    """vLLM in-process: each stage batch goes to one ``LLM.chat`` call (structured outputs, prefix cache)."""

    def __init__(self, config: VLLMConfig | None = None, *, ledger: TokenLedger | None = None, **overrides: Any):
        cfg = self._configure(config or VLLMConfig(), overrides, ledger, "VLLMBackend")
        self.model_id = f"vllm:{cfg.model}"
        LLM, self._SamplingParams, self._Structured = import_vllm()
        self.llm = LLM(**cfg.engine_args())
        self.chat_calls = 0

    def _batch_size(self, n: int) -> int:
        """``config.batch_size`` requests per ``LLM.chat`` call (default: all at once)."""
        return self.config.batch_size or max(1, n)

    def _call_batch(self, batch: list[LLMRequest]) -> list[RawOutput]:
        convs = [to_conversation(r) for r in batch]
        params = [make_sampling_params(r, self._SamplingParams, self._Structured) for r in batch]
        t0 = now()
        self.chat_calls += 1
        outs = self.llm.chat(convs, sampling_params=params, use_tqdm=False)
        wall = now() - t0
        raws = []
        for o in outs:
            r = parse_request_output(o)
            raws.append(RawOutput(r.text, r.usage, wall, r.error, r.finish_reason))
        return raws
