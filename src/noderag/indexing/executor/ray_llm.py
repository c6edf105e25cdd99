"""``--llm vllm:MODEL`` with ``--executor ray``: every LLM stage through Ray Data's batch LLM API.

The backend sends each stage batch through a ``ray.data.llm`` processor
(``vLLMEngineProcessorConfig`` + ``build_processor``): vLLM engine actors, one per GPU
(``tensor_parallel_size`` GPUs each), fed by Ray Data. Prompts and the JSON schema are ours
(the schema goes to vLLM's structured outputs, i.e. guided decoding); the replies are
validated here and invalid items are re-asked with a shifted seed (``validated_batch``),
exactly as the in-process vLLM backend does, so the index's LLM cache and token ledger work
unchanged (the cache key uses the same model id as ``vllm:MODEL`` in-process).

Needs ``ray[llm]`` (vLLM) and GPUs on the cluster; nothing here runs on import.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from ...llm.backends.vllm import VLLMConfig, sampling_kwargs, to_conversation
from ...llm.base import BaseBackend, RawOutput, _check_requests, validated_batch
from ..._overrides import with_overrides
from ...llm.types import LLMRequest, LLMResult, ResultCallback, Usage, now

__all__ = ["RayVLLMBackend", "make_ray_vllm", "processor_config", "request_row", "preprocess", "postprocess",
           "raw_output"]


def request_row(req: LLMRequest, index: int) -> dict[str, Any]:
    """One dataset row per request; the request travels as JSON (the schema is no fixed Arrow type)."""
    return {"idx": index, "request": json.dumps({"messages": to_conversation(req),
                                                 "sampling": sampling_kwargs(req)}, ensure_ascii=False)}


def preprocess(row: dict[str, Any]) -> dict[str, Any]:
    """Row -> what the vLLM engine stage reads: chat ``messages`` and ``sampling_params``.

    The schema becomes ``sampling_params["structured_outputs"] = {"json": schema}``, which
    Ray's vLLM stage turns into ``vllm.sampling_params.StructuredOutputsParams`` (guided decoding).
    """
    req = json.loads(row["request"])
    sampling = dict(req["sampling"])
    schema = sampling.pop("structured_json", None)
    if schema is not None:
        sampling["structured_outputs"] = {"json": schema}
    return {"idx": row["idx"], "messages": req["messages"], "sampling_params": sampling}


def postprocess(row: dict[str, Any]) -> dict[str, Any]:
    """Engine output row -> ``idx``, ``text``, token counts and the engine's error (if any)."""
    err = row.get("__inference_error__") or None
    return {"idx": int(row["idx"]), "text": row.get("generated_text") or "",
            "prompt_tokens": int(row.get("num_input_tokens") or 0),
            "completion_tokens": int(row.get("num_generated_tokens") or 0),
            "error": None if err is None else str(err)}


def raw_output(row: dict[str, Any], wall_s: float) -> RawOutput:
    """A postprocessed row as the validator's input."""
    usage = Usage(prompt=int(row["prompt_tokens"]), completion=int(row["completion_tokens"]))
    return RawOutput(text=row["text"], usage=usage, latency_s=wall_s, error=row["error"])


def processor_config(config: VLLMConfig, *, workers: int = 1, batch_size: int = 64,
                     max_concurrent_batches: int = 4):
    """The ``vLLMEngineProcessorConfig``: our engine arguments, ``workers`` engine replicas, errors per row."""
    from ray.data.llm import vLLMEngineProcessorConfig

    engine = config.engine_args()
    model = engine.pop("model")
    return vLLMEngineProcessorConfig(
        model_source=model,
        engine_kwargs=engine,
        concurrency=workers,
        batch_size=batch_size,
        max_concurrent_batches=max_concurrent_batches,
        should_continue_on_error=True,  # a failed row comes back with its error: validated_batch reports it
    )


class RayVLLMBackend(BaseBackend):
    """LLM backend whose batches run on the Ray cluster's GPUs through ``ray.data.llm``.

    Parameters
    ----------
    config : VLLMConfig (``model`` required); overrides as for ``VLLMBackend``
    workers : int, default=1
        vLLM engine replicas (each ``tensor_parallel_size`` GPUs).
    processor_factory : callable, optional
        Returns the processor (dataset -> dataset of postprocessed rows). Default:
        ``build_processor(processor_config(...), preprocess=..., postprocess=...)``; the tests
        pass a CPU stand-in for the engine.
    """

    distributed = True

    def __init__(self, config: VLLMConfig | None = None, *, workers: int = 1, ledger=None,
                 processor_factory: Callable[[], Any] | None = None, **overrides: Any) -> None:
        cfg = with_overrides(config or VLLMConfig(), overrides, "RayVLLMBackend")
        cfg.check()
        super().__init__(max_validation_retries=cfg.max_validation_retries, ledger=ledger)
        self.config = cfg
        self.model_id = f"vllm:{cfg.model}"  # as in-process vLLM: one cache serves both
        self.workers = int(workers)
        self._factory = processor_factory or self._build_processor
        self._processor = None
        self.calls = 0

    def _build_processor(self):
        from ray.data.llm import build_processor

        return build_processor(processor_config(self.config, workers=self.workers,
                                                batch_size=self.config.batch_size or 64),
                               preprocess=preprocess, postprocess=postprocess)

    def generate(self, requests: Sequence[LLMRequest], *,
                 on_result: ResultCallback | None = None) -> list[LLMResult]:
        """One processor run per attempt over the batch; invalid replies re-asked (our validation)."""
        reqs = _check_requests(requests)
        if not reqs:
            return []
        return validated_batch(reqs, self._call_batch, self.validators, self.max_validation_retries, on_result)

    def _call_batch(self, batch: list[LLMRequest]) -> list[RawOutput]:
        import ray.data

        if self._processor is None:
            self._processor = self._factory()
        t0 = now()
        self.calls += 1
        ds = ray.data.from_items([request_row(r, i) for i, r in enumerate(batch)])
        rows = {int(r["idx"]): r for r in self._processor(ds).iter_rows()}
        wall = now() - t0
        return [raw_output(rows[i], wall) if i in rows else RawOutput(error=f"no output for request {i}")
                for i in range(len(batch))]


def make_ray_vllm(spec: str, executor, *, cache_path=None, **options: Any):
    """``make_llm`` for ``vllm:MODEL`` on Ray: engine replicas = the cluster's GPUs / tensor_parallel_size."""
    from ...llm import CachedBackend, LLMCache
    from ...llm.factory import parse_llm_spec
    from ...llm.options import LLM_OPTIONS, split_llm_options
    from ...llm.sampling import SamplingOverride

    _, model, _ = parse_llm_spec(spec)
    options = {k: v for k, v in options.items() if v is not None}
    shared = {k: v for k, v in options.items() if k in LLM_OPTIONS}
    opts, sampling = split_llm_options("vllm", shared)
    rest = {k: v for k, v in options.items() if k not in LLM_OPTIONS}
    cfg = with_overrides(VLLMConfig(model=model or ""), {**rest, **opts}, "RayVLLMBackend")
    backend: Any = RayVLLMBackend(cfg, workers=executor.workers(float(cfg.tensor_parallel_size)))
    if cache_path is not None:
        backend = CachedBackend(backend, LLMCache(cache_path))
    if sampling:
        backend = SamplingOverride(backend, **sampling)
    return backend
