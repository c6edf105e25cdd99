"""Shared backend machinery: accounting around ``generate`` and the validate-then-retry loop."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Sequence

from .._overrides import with_overrides
from .accounting import TokenLedger
from .types import LLMRequest, LLMResult, ResultCallback, Sampling, StreamUnavailable, Usage, now
from .validate import SchemaValidators, check_output

__all__ = [
    "RawOutput",
    "BaseBackend",
    "BatchedBackend",
    "finish_result",
    "validated_batch",
    "estimate_usage",
    "retry_request",
    "run_stage",
]


@dataclass(frozen=True)
class RawOutput:
    """What one backend call returned before validation: text, usage, timing, transport error."""

    text: str = ""
    usage: Usage = Usage()
    latency_s: float = 0.0
    error: str | None = None
    finish_reason: str | None = None


def finish_result(
    req: LLMRequest, raw: RawOutput, validators: SchemaValidators
) -> tuple[object, str | None]:
    """Validate ``raw`` for ``req``; return ``(value, error)`` (error names truncation if it happened)."""
    if raw.error is not None:
        return None, raw.error
    value, err = check_output(raw.text, req.schema, validators)
    if err is not None and raw.finish_reason == "length":
        err += f" (output cut at max_tokens={req.sampling.max_tokens})"
    return value, err


def validated_batch(
    requests: Sequence[LLMRequest],
    call_batch: Callable[[list[LLMRequest]], list[RawOutput]],
    validators: SchemaValidators,
    max_validation_retries: int,
    on_result: ResultCallback | None = None,
) -> list[LLMResult]:
    """Run ``call_batch`` on all requests, re-run invalid outputs with a shifted seed, report each result."""
    n = len(requests)
    results: list[LLMResult | None] = [None] * n
    usage = [Usage() for _ in range(n)]
    latency = [0.0] * n
    todo = list(range(n))
    attempt = 0
    while todo:
        batch = [
            requests[i]
            if attempt == 0
            else retry_request(requests[i], attempt)
            for i in todo
        ]
        try:
            raws = call_batch(batch)
            if len(raws) != len(batch):
                raise RuntimeError(f"backend returned {len(raws)} outputs for {len(batch)} requests")
        except Exception as e:  # the whole call failed: every item of it fails, the batch survives
            raws = [RawOutput(error=f"{type(e).__name__}: {e}")] * len(batch)
        retry = []
        for i, raw in zip(todo, raws):
            usage[i] = usage[i] + raw.usage
            latency[i] += raw.latency_s
            value, err = finish_result(requests[i], raw, validators)
            invalid_output = err is not None and raw.error is None
            if invalid_output and attempt < max_validation_retries:
                retry.append(i)
                continue
            res = LLMResult(
                value=value,
                text=raw.text,
                usage=usage[i],
                latency_s=latency[i],
                error=err,
                cached=False,
                attempts=attempt + 1,
                id=requests[i].id,
            )
            results[i] = res
            if on_result is not None:
                on_result(i, requests[i], res)
        todo = retry
        attempt += 1
    return [r for r in results if r is not None]


#: Temperature of a validation retry of a greedy request (greedy decoding would repeat the same output).
RETRY_TEMPERATURE = 0.3


def retry_request(req: LLMRequest, attempt: int) -> LLMRequest:
    """Return ``req`` for validation retry ``attempt`` (>= 1): seed shifted, greedy made slightly random."""
    s = req.sampling
    temp = s.temperature if s.temperature > 0 else RETRY_TEMPERATURE
    sampling = Sampling(temperature=temp, max_tokens=s.max_tokens, top_p=s.top_p, seed=s.seed + attempt)
    return LLMRequest(req.messages, req.schema, sampling, req.id)


class BaseBackend:
    """Base of concrete backends: ``run`` = ``generate`` + per-stage accounting in ``ledger``."""

    model_id: str = "unknown"

    def __init__(self, *, max_validation_retries: int = 2, ledger: TokenLedger | None = None) -> None:
        if not (isinstance(max_validation_retries, int) and max_validation_retries >= 0):
            raise ValueError(
                f"max_validation_retries must be an int >= 0, got {max_validation_retries!r}"
            )
        self.max_validation_retries = max_validation_retries
        self.ledger = ledger if ledger is not None else TokenLedger()
        self.validators = SchemaValidators()

    def generate(
        self, requests: Sequence[LLMRequest], *, on_result: ResultCallback | None = None
    ) -> list[LLMResult]:
        """Run requests without accounting; call ``on_result`` as each one finishes."""
        raise NotImplementedError

    def run(self, requests: Sequence[LLMRequest], *, stage: str) -> list[LLMResult]:
        """Run a batch for ``stage``; results in request order; failures returned, never dropped."""
        return run_stage(self, requests, stage)

    async def astream(self, request: LLMRequest) -> AsyncIterator[str]:
        """The completion of ``request`` as text pieces while the model writes them.

        Raises :class:`~noderag.llm.types.StreamUnavailable` where the backend cannot stream (the
        default); the caller then uses :meth:`run`.
        """
        raise StreamUnavailable(f"the {type(self).__name__} backend does not stream")
        yield ""  # pragma: no cover - makes this an async generator

    def streamed_result(self, request: LLMRequest, text: str, wall_s: float) -> LLMResult:
        """The checked result of a streamed completion (schema-validated as :meth:`run` would)."""
        value, err = check_output(text, request.schema, self.validators)
        return LLMResult(value=value, text=text, usage=Usage(estimated=True), latency_s=wall_s, error=err)

    def close(self) -> None:
        """Release resources (no-op by default)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class EngineConfig:
    """The settings every in-process engine backend shares (vllm, llamacpp): the model, the engine's seed,
    the retries of an output that fails its schema and extra keyword arguments of the engine's constructor.
    Each backend's settings extend it with its engine's own."""

    model: str = ""
    seed: int = 0
    max_validation_retries: int = 2
    engine_kwargs: dict[str, Any] = field(default_factory=dict)


class BatchedBackend(BaseBackend):
    """A backend that answers a list of requests in one ``_call_batch``: ``generate`` runs the requests in
    batches of ``_batch_size`` through the validate-then-retry loop, reporting each result as it lands."""

    def _configure(self, config: Any, overrides: dict[str, Any], ledger: TokenLedger | None, owner: str) -> Any:
        """Apply ``overrides`` to the settings dataclass ``config``, check it and set up the base (``owner``
        names the backend in the error of an unknown option); the settings become ``self.config``."""
        cfg = with_overrides(config, overrides, owner)
        cfg.check()
        super().__init__(max_validation_retries=cfg.max_validation_retries, ledger=ledger)
        self.config = cfg
        return cfg

    def _batch_size(self, n: int) -> int:
        """Requests per ``_call_batch`` in a call of ``n`` requests (default: all of them at once)."""
        return max(1, n)

    def _call_batch(self, batch: list[LLMRequest]) -> list[RawOutput]:
        """The raw outputs of ``batch``, one per request (a failing item is an error output, not a raise)."""
        raise NotImplementedError

    def generate(
        self, requests: Sequence[LLMRequest], *, on_result: ResultCallback | None = None
    ) -> list[LLMResult]:
        """Run requests in batches of ``_batch_size``, validating each output and retrying invalid ones."""
        reqs = _check_requests(requests)
        bs = self._batch_size(len(reqs))
        results: list[LLMResult] = []
        for start in range(0, len(reqs), bs):

            def cb(j: int, r: LLMRequest, res: LLMResult, _o: int = start) -> None:
                if on_result is not None:
                    on_result(_o + j, r, res)

            results += validated_batch(reqs[start : start + bs], self._call_batch, self.validators,
                                       self.max_validation_retries, cb)
        return results


def run_stage(backend: Any, requests: Sequence[LLMRequest], stage: str) -> list[LLMResult]:
    """``backend.generate(requests)`` with its results and wall time recorded under ``stage`` in
    ``backend.ledger``: the ``run`` of every backend and wrapper (no call for no requests)."""
    requests = _check_requests(requests)
    t0 = now()
    results = backend.generate(requests) if requests else []
    backend.ledger.record(stage, results, now() - t0)
    return results


def _check_requests(requests: Sequence[LLMRequest]) -> list[LLMRequest]:
    reqs = list(requests)
    for i, r in enumerate(reqs):
        if not isinstance(r, LLMRequest):
            raise TypeError(f"requests[{i}] must be an LLMRequest, got {type(r).__name__}")
    return reqs


def estimate_usage(req: LLMRequest, text: str) -> Usage:
    """Count prompt and completion tokens offline (for backends that report no usage)."""
    from .accounting import count_tokens_offline

    prompt = sum(count_tokens_offline(m["content"]) + 4 for m in req.messages)
    return Usage(prompt=prompt, completion=count_tokens_offline(text), cached=0, estimated=True)
