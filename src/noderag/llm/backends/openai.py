"""Any OpenAI-compatible chat-completions server: async, bounded concurrency, retries, JSON dialects."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import threading
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Sequence

import httpx

from ..._overrides import openai_endpoint, with_overrides
from ...retry import Transient, async_retrying
from ..accounting import TokenLedger
from ..base import BaseBackend, RawOutput, _check_requests, estimate_usage, finish_result, retry_request
from ..options import LLM_OPTIONS, ClientOptions, OptionError
from ..types import LLMError, LLMRequest, LLMResult, ResultCallback, StreamUnavailable, Usage, now

__all__ = ["DIALECTS", "OpenAIConfig", "OpenAIBackend", "build_chat_body", "parse_chat_response",
           "is_permanent_http_error", "rejects_response_format"]

#: Structured-output dialects: OpenAI ``json_schema``, llama-cpp-python ``json_object`` with a
#: ``schema`` field, vLLM's ``structured_outputs`` extra body, or ``none`` (prompt only).
#: ``auto`` (the default) sends ``json_schema`` and switches once to ``json_object`` when the
#: server rejects it (llama-cpp-python answers ``json_schema`` with an HTTP 500 naming
#: ``response_format``).
DIALECTS: tuple[str, ...] = LLM_OPTIONS["dialect"].choices or ()

_RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_TRANSIENT_4XX = frozenset({408, 409, 425, 429})
#: A request-validation message (pydantic / FastAPI / OpenAI style): the request is wrong, retrying cannot help.
_VALIDATION_MSG = re.compile(r"Input should be|validation error|Field required|Extra inputs are not permitted|"
                             r"extra_forbidden|invalid_request_error|Unrecognized request argument", re.I)

log = logging.getLogger("noderag.llm")


def _names_field(text: str, body: dict[str, Any]) -> bool:
    """Whether an error text names a field of the request body (``response_format.type: Input should be``)."""
    keys = "|".join(re.escape(k) for k in body if k != "model")
    if re.search(r"(?<![\w.])(?:%s)(?:\.\w+)+\s*:|(?<![\w.])(?:%s)\s*:\s*\w" % (keys, keys), text):
        return True
    return _VALIDATION_MSG.search(text) is not None and re.search(r"['\"](?:%s)['\"]" % keys, text) is not None


def is_permanent_http_error(status: int, text: str, body: dict[str, Any]) -> bool:
    """A 4xx other than 408/409/425/429, or a 5xx whose message names a request field: never retried."""
    if 400 <= status < 500:
        return status not in _TRANSIENT_4XX
    return status >= 500 and _names_field(text, body)


def rejects_response_format(status: int, text: str) -> bool:
    """Whether an HTTP error says the server does not accept the request's ``response_format``."""
    return status in (400, 422, 500) and "response_format" in text


@dataclass
class OpenAIConfig(ClientOptions):
    """Settings of :class:`OpenAIBackend`: the endpoint, the client settings it shares with the ``[llm]``
    section (:class:`~noderag.llm.options.ClientOptions`; ``None`` is the default) and the request flags.
    Unset model / base_url / api_key come from the environment; :meth:`resolved` fills and checks everything."""

    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    send_seed: bool = True
    #: ``strict`` flag of the json_schema dialect (hosted OpenAI rejects maxLength under strict).
    strict: bool = True
    extra_body: dict[str, Any] = field(default_factory=dict)

    def resolved(self) -> "OpenAIConfig":
        """Return a copy with environment defaults and the client settings' defaults filled in, every field
        checked (:class:`~noderag.llm.types.LLMError` naming it)."""
        model, base_url, api_key = openai_endpoint(self.model, self.base_url, self.api_key, env="LLM",
                                                   owner="openai backend", error=LLMError)
        try:
            client = self.client_settings("openai backend:")
        except OptionError as exc:
            raise LLMError(str(exc)) from None
        return OpenAIConfig(model=model, base_url=base_url.rstrip("/"), api_key=api_key, send_seed=self.send_seed,
                            strict=self.strict, extra_body=dict(self.extra_body), **client)


def build_chat_body(
    req: LLMRequest, *, model: str, dialect: str, send_seed: bool = True, strict: bool = True,
    extra_body: dict | None = None,
) -> dict[str, Any]:
    """Return the JSON body of ``POST /chat/completions`` for ``req`` in the given dialect."""
    s = req.sampling
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": m["role"], "content": m["content"]} for m in req.messages],
        "temperature": s.temperature,
        "top_p": s.top_p,
        "max_tokens": s.max_tokens,
        "stream": False,
    }
    if send_seed:
        body["seed"] = s.seed
    if req.schema is not None:
        if dialect in ("json_schema", "auto"):
            name = str(req.schema.get("title") or "output")
            name = "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:64]
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": req.schema, "strict": bool(strict)},
            }
        elif dialect == "json_object":
            body["response_format"] = {"type": "json_object", "schema": req.schema}
        elif dialect == "vllm":
            body["structured_outputs"] = {"json": req.schema}
        elif dialect != "none":
            raise LLMError(f"unknown dialect {dialect!r}; expected one of {DIALECTS}")
    if extra_body:
        body.update(extra_body)
    return body


def parse_chat_response(data: Any) -> RawOutput:
    """Read text, finish reason and usage from a chat-completions response body."""
    try:
        choice = data["choices"][0]
        msg = choice.get("message") or {}
        content = msg.get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        return RawOutput(error=f"malformed chat response: {str(data)[:200]}")
    finish = choice.get("finish_reason")
    if content is None:
        refusal = msg.get("refusal")
        return RawOutput(error=f"empty message content (finish_reason={finish!r}, refusal={refusal!r})")
    u = data.get("usage") or {}
    details = u.get("prompt_tokens_details") or {}
    usage = Usage(
        prompt=int(u.get("prompt_tokens") or 0),
        completion=int(u.get("completion_tokens") or 0),
        cached=int(details.get("cached_tokens") or 0),
        estimated=False,
    )
    if not u:
        usage = Usage(estimated=True)  # filled offline by the caller
    return RawOutput(text=str(content), usage=usage, finish_reason=finish)


class _RetryableError(Transient):
    """A transient failure of one request (retried by the policy of :mod:`noderag.retry`)."""


class OpenAIBackend(BaseBackend):
    """OpenAI-compatible chat backend; ``run`` is synchronous, ``arun`` is its async twin."""

    def __init__(
        self, config: OpenAIConfig | None = None, *, ledger: TokenLedger | None = None,
        transport: httpx.AsyncBaseTransport | None = None, **overrides: Any,
    ):
        cfg = with_overrides(config or OpenAIConfig(), overrides, "OpenAIBackend")
        self.config = cfg.resolved()
        super().__init__(max_validation_retries=self.config.max_validation_retries, ledger=ledger)
        self.model_id = f"openai:{self.config.model}@{self.config.base_url}"
        self._rng = random.Random()
        #: Optional httpx transport (e.g. ``httpx.MockTransport`` in tests); None = real network.
        self.transport = transport
        self._count_lock = threading.Lock()
        #: The dialect in use: ``auto`` starts as json_schema and may switch once to json_object.
        self.dialect = "json_schema" if self.config.dialect == "auto" else self.config.dialect
        #: Why the dialect switched (None while it has not).
        self.dialect_switch: str | None = None
        #: HTTP POSTs made (including retries), and the largest number in flight at once.
        self.http_calls = 0
        self.peak_in_flight = 0
        self._in_flight = 0

    # ------------------------------------------------------------------ sync API
    def generate(
        self, requests: Sequence[LLMRequest], *, on_result: ResultCallback | None = None
    ) -> list[LLMResult]:
        """Run requests (own event loop; a fresh thread if one is already running here)."""
        reqs = _check_requests(requests)
        if not reqs:
            return []
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.agenerate(reqs, on_result=on_result))
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["out"] = asyncio.run(self.agenerate(reqs, on_result=on_result))
            except BaseException as e:  # re-raised in the caller's thread
                box["err"] = e

        t = threading.Thread(target=target, name="noderag-llm-openai")
        t.start()
        t.join()
        if "err" in box:
            raise box["err"]
        return box["out"]

    # ----------------------------------------------------------------- async API
    async def arun(self, requests: Sequence[LLMRequest], *, stage: str) -> list[LLMResult]:
        """Async :meth:`run`: results in request order, accounted under ``stage``."""
        reqs = _check_requests(requests)
        t0 = now()
        results = await self.agenerate(reqs) if reqs else []
        self.ledger.record(stage, results, now() - t0)
        return results

    async def agenerate(
        self, requests: Sequence[LLMRequest], *, on_result: ResultCallback | None = None
    ) -> list[LLMResult]:
        """Run requests concurrently (at most ``max_concurrency`` in flight) without accounting."""
        reqs = _check_requests(requests)
        cfg = self.config
        sem = asyncio.Semaphore(cfg.max_concurrency)
        headers = {"Content-Type": "application/json"}
        if cfg.api_key:
            headers["Authorization"] = f"Bearer {cfg.api_key}"
        timeout = httpx.Timeout(cfg.timeout_s, connect=cfg.connect_timeout_s)
        limits = httpx.Limits(max_connections=cfg.max_concurrency, max_keepalive_connections=cfg.max_concurrency)
        async with httpx.AsyncClient(
            base_url=cfg.base_url, headers=headers, timeout=timeout, limits=limits, trust_env=False,
            transport=self.transport,
        ) as client:
            tasks = [self._one(client, sem, i, r, on_result) for i, r in enumerate(reqs)]
            return list(await asyncio.gather(*tasks))

    async def _one(
        self, client: httpx.AsyncClient, sem: asyncio.Semaphore, i: int, req: LLMRequest,
        on_result: ResultCallback | None,
    ) -> LLMResult:
        total = Usage()
        latency = 0.0
        value: Any = None
        err: str | None = None
        raw = RawOutput()
        attempt = 0
        for attempt in range(self.config.max_validation_retries + 1):
            r = req if attempt == 0 else retry_request(req, attempt)
            try:
                async with sem:
                    raw = await self._post_with_retries(client, r)
            except Exception as e:  # unexpected (bad URL, unserialisable body): this item fails, not the batch
                raw = RawOutput(error=f"{type(e).__name__}: {e}")
            value, err, usage = await asyncio.to_thread(self._finish, req, raw)
            total = total + usage
            latency += raw.latency_s
            if err is None or raw.error is not None:
                break  # success, or transport failure already retried
        res = LLMResult(
            value=value, text=raw.text, usage=total, latency_s=latency, error=err, cached=False,
            attempts=attempt + 1, id=req.id,
        )
        if on_result is not None:
            await asyncio.to_thread(on_result, i, req, res)
        return res

    def _finish(self, req: LLMRequest, raw: RawOutput) -> tuple[Any, str | None, Usage]:
        value, err = finish_result(req, raw, self.validators)
        usage = raw.usage
        if raw.error is None and usage.estimated:
            try:
                usage = estimate_usage(req, raw.text)
            except ImportError:
                usage = Usage(estimated=True)
        return value, err, usage

    async def _post_with_retries(self, client: httpx.AsyncClient, req: LLMRequest) -> RawOutput:
        cfg = self.config
        t0 = now()
        try:
            async for attempt in async_retrying(cfg.max_retries, cfg.backoff_base_s, cfg.backoff_max_s, self._rng):
                with attempt:
                    return await self._post_once(client, req, t0)
        except _RetryableError as e:
            return RawOutput(
                latency_s=now() - t0,
                error=f"{cfg.base_url}/chat/completions failed after {cfg.max_retries + 1} attempts: {e}",
            )
        raise AssertionError("unreachable: the retry loop returns or raises")  # pragma: no cover

    async def _post_once(self, client: httpx.AsyncClient, req: LLMRequest, t0: float) -> RawOutput:
        """One attempt (a dialect the server rejects is switched and resent within it)."""
        cfg = self.config
        while True:
            dialect = self.dialect
            body = build_chat_body(
                req, model=cfg.model, dialect=dialect, send_seed=cfg.send_seed, strict=cfg.strict,
                extra_body=cfg.extra_body,
            )
            try:
                data = await self._post(client, body)
            except _DialectRejected as e:
                if self._switch_dialect(dialect, str(e)):
                    continue  # the same request in the fallback dialect; not counted as a retry
                return RawOutput(latency_s=now() - t0, error=str(e))
            except _FatalHTTPError as e:
                return RawOutput(latency_s=now() - t0, error=str(e))
            out = parse_chat_response(data)
            return RawOutput(out.text, out.usage, now() - t0, out.error, out.finish_reason)

    async def astream(self, request: LLMRequest) -> AsyncIterator[str]:
        """Text pieces of one streamed chat completion (``stream: true``); :class:`StreamUnavailable` when the
        server refuses it or fails (the caller falls back to :meth:`run`, with its retries)."""
        cfg = self.config
        body = build_chat_body(request, model=cfg.model, dialect=self.dialect, send_seed=cfg.send_seed,
                               strict=cfg.strict, extra_body=cfg.extra_body)
        body["stream"] = True
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if cfg.api_key:
            headers["Authorization"] = f"Bearer {cfg.api_key}"
        timeout = httpx.Timeout(cfg.timeout_s, connect=cfg.connect_timeout_s)
        async with httpx.AsyncClient(base_url=cfg.base_url, headers=headers, timeout=timeout, trust_env=False,
                                     transport=self.transport) as client:
            try:
                async with client.stream("POST", "/chat/completions", json=body) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        raise StreamUnavailable(f"HTTP {resp.status_code}")
                    if "text/event-stream" not in resp.headers.get("content-type", ""):
                        raw = parse_chat_response(json.loads(await resp.aread()))  # the server ignored stream
                        if raw.error is not None:
                            raise StreamUnavailable(raw.error)
                        yield raw.text
                        return
                    async for line in resp.aiter_lines():
                        if not line.startswith("data:"):
                            continue
                        data = line[5:].strip()
                        if data == "[DONE]":
                            break
                        try:
                            choices = json.loads(data).get("choices") or []
                        except (ValueError, AttributeError):
                            continue
                        if choices and isinstance(choices[0], dict):
                            piece = (choices[0].get("delta") or {}).get("content")
                            if piece:
                                yield str(piece)
            except httpx.HTTPError as exc:
                raise StreamUnavailable(f"{type(exc).__name__}") from None

    def _switch_dialect(self, rejected: str, why: str) -> bool:
        """Switch an ``auto`` backend from json_schema to json_object once; False when no fallback is left."""
        if self.config.dialect != "auto":
            return False
        with self._count_lock:
            if self.dialect != rejected:
                return True  # another request already switched: retry with the current dialect
            if rejected != "json_schema":
                return False
            self.dialect = "json_object"
            self.dialect_switch = why
        log.warning("%s rejected response_format json_schema; using json_object with the schema from now on (%s)",
                    self.config.base_url, why[:200])
        return True

    async def _post(self, client: httpx.AsyncClient, body: dict[str, Any]) -> Any:
        with self._count_lock:
            self.http_calls += 1
            self._in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        try:
            resp = await client.post("/chat/completions", json=body)
        except httpx.TimeoutException as e:
            raise _RetryableError(f"timeout ({type(e).__name__}) after {self.config.timeout_s:g}s") from None
        except httpx.TransportError as e:
            raise _RetryableError(f"connection error ({type(e).__name__}: {e})") from None
        finally:
            with self._count_lock:
                self._in_flight -= 1
        if resp.status_code >= 400 and "response_format" in body and rejects_response_format(
                resp.status_code, resp.text):
            raise _DialectRejected(f"HTTP {resp.status_code} from {self.config.base_url} "
                                   f"(dialect {body['response_format'].get('type')!r} rejected): {resp.text[:300]}")
        if resp.status_code >= 400 and is_permanent_http_error(resp.status_code, resp.text, body):
            raise _FatalHTTPError(f"HTTP {resp.status_code} from {self.config.base_url} (not retried: the request "
                                  f"was rejected): {resp.text[:300]}")
        if resp.status_code in _RETRY_STATUS:
            ra = resp.headers.get("retry-after")
            try:
                retry_after = float(ra) if ra is not None else None
            except ValueError:
                retry_after = None
            raise _RetryableError(f"HTTP {resp.status_code}: {resp.text[:300]}", retry_after)
        if resp.status_code >= 400:
            raise _FatalHTTPError(f"HTTP {resp.status_code} from {self.config.base_url}: {resp.text[:300]}")
        try:
            return resp.json()
        except ValueError:
            raise _RetryableError(f"non-JSON response body: {resp.text[:200]!r}") from None


class _FatalHTTPError(Exception):
    pass


class _DialectRejected(Exception):
    pass
