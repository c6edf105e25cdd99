"""Embeddings from any OpenAI-compatible ``/v1/embeddings`` server (vLLM serve, llama.cpp, Ollama, hosted)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._overrides import openai_endpoint, with_overrides
from ..retry import RetrySettings, Transient, attempts_made, retrying
from .base import check_batch_size, check_texts, l2_normalize

from ..errors import NodeRAGError

__all__ = ["EmbeddingServerError", "OpenAIEmbedConfig", "OpenAIEmbedder"]

#: The timeouts and retries of an openai embedder whose configuration leaves them unset.
_RETRY_DEFAULTS = RetrySettings(timeout_s=60.0, connect_timeout_s=10.0, max_retries=4, backoff_base_s=0.5,
                                backoff_max_s=20.0)

_RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class _Refused(Exception):
    """A response retrying cannot change (a 4xx other than 408/409/425/429)."""


class EmbeddingServerError(NodeRAGError, RuntimeError):
    """An embeddings request failed (after retries) or the server answered malformed data."""


@dataclass
class OpenAIEmbedConfig(RetrySettings):
    """Settings of :class:`OpenAIEmbedder`; unset model / base_url / api_key come from the environment.

    Environment: ``NODERAG_EMBED_MODEL``, ``NODERAG_EMBED_BASE_URL``,
    ``NODERAG_EMBED_API_KEY`` (else ``OPENAI_API_KEY``). Unset timeouts and retries
    (:class:`~noderag.retry.RetrySettings`) take :data:`_RETRY_DEFAULTS`.
    """

    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    dim: int | None = None
    batch_size: int = 128
    seed: int = 0

    def resolved(self) -> "OpenAIEmbedConfig":
        """Return a copy with environment defaults filled in and every field checked."""
        model, base_url, api_key = openai_endpoint(self.model, self.base_url, self.api_key, env="EMBED",
                                                   owner="openai embedder", error=ValueError)
        if self.dim is not None:
            check_batch_size(self.dim, "dim")
        check_batch_size(self.batch_size)
        retries = {**_RETRY_DEFAULTS.retry_settings(), **self.retry_settings()}
        for name, v, what in RetrySettings(**retries).retry_problems()[:1]:
            raise ValueError(f"openai embedder: {name} must be {what}, got {v!r}")
        return OpenAIEmbedConfig(
            model=model, base_url=base_url.rstrip("/"), api_key=api_key, dim=self.dim, batch_size=self.batch_size,
            seed=self.seed, **{k: (v if k == "max_retries" else float(v)) for k, v in retries.items()})


class OpenAIEmbedder:
    """Batched client of an OpenAI-compatible ``POST {base_url}/embeddings`` endpoint.

    Retries 408/409/425/429/5xx, timeouts and connection errors with exponential backoff
    and seeded jitter (honouring ``Retry-After`` up to ``backoff_max_s``); vectors are
    re-normalised here. ``dim`` is taken from the config or probed with one request.
    """

    def __init__(self, config: OpenAIEmbedConfig | None = None, **overrides: object) -> None:
        import httpx

        cfg = with_overrides(config or OpenAIEmbedConfig(), overrides, "OpenAIEmbedder")
        self.config = cfg.resolved()
        self.name = f"openai:{self.config.model}"
        self._rng = random.Random(self.config.seed)
        headers = {"Content-Type": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(self.config.timeout_s, connect=self.config.connect_timeout_s),
        )
        self._httpx = httpx
        self._dim = self.config.dim
        self.requests = 0
        self.retries = 0

    @property
    def dim(self) -> int:
        """Return the embedding dimension (one probe request if not configured)."""
        if self._dim is None:
            self._dim = int(self._post(["dimension probe"]).shape[1])
        return self._dim

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def __enter__(self) -> "OpenAIEmbedder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _post(self, texts: list[str]) -> np.ndarray:
        cfg = self.config
        url = f"{cfg.base_url}/embeddings"
        payload = {"model": cfg.model, "input": texts, "encoding_format": "float"}
        policy = retrying(cfg.max_retries, cfg.backoff_base_s, cfg.backoff_max_s, self._rng,
                          on_retry=self._count_retry)
        try:
            for attempt in policy:
                with attempt:
                    return self._post_once(url, payload, len(texts))
        except (Transient, _Refused) as exc:
            failed, attempts = str(exc), attempts_made(policy)
        raise EmbeddingServerError(
            f"embeddings request to {url} (model {cfg.model!r}, {len(texts)} texts) failed "
            f"after {attempts} attempt(s): {failed}"
        )

    def _count_retry(self) -> None:
        self.retries += 1

    def _post_once(self, url: str, payload: dict, n: int) -> np.ndarray:
        self.requests += 1
        try:
            resp = self._client.post(url, json=payload)
        except (self._httpx.TimeoutException, self._httpx.TransportError) as exc:
            raise Transient(f"{type(exc).__name__}: {exc}") from None
        if resp.status_code == 200:
            return self._parse(resp, n)
        failed = f"HTTP {resp.status_code}: {resp.text[:300]}"
        if resp.status_code not in _RETRY_STATUS:
            raise _Refused(failed)
        raise Transient(failed, resp.headers.get("retry-after"))

    def _parse(self, resp: object, n: int) -> np.ndarray:
        url = f"{self.config.base_url}/embeddings"
        try:
            body = resp.json()  # type: ignore[attr-defined]
            data = body["data"]
            rows = sorted(data, key=lambda d: d["index"])
            if [d["index"] for d in rows] != list(range(n)):
                raise ValueError(f"indices {[d['index'] for d in rows][:10]} do not cover 0..{n - 1}")
            vecs = np.asarray([d["embedding"] for d in rows], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingServerError(f"malformed embeddings response from {url}: {exc}") from None
        if vecs.ndim != 2 or vecs.shape[0] != n or vecs.shape[1] == 0:
            raise EmbeddingServerError(f"embeddings response from {url} has shape {vecs.shape}, expected ({n}, d)")
        if self._dim is not None and vecs.shape[1] != self._dim:
            raise EmbeddingServerError(f"server returned dim {vecs.shape[1]}, expected {self._dim}")
        if not np.isfinite(vecs).all():
            raise EmbeddingServerError(f"embeddings response from {url} contains non-finite values")
        return l2_normalize(vecs)

    def embed(self, texts: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
        """Return float32 of shape (len(texts), dim), rows L2-normalised; one request per batch."""
        texts = check_texts(texts)
        bs = self.config.batch_size if batch_size is None else check_batch_size(batch_size)
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        parts = [self._post(texts[i : i + bs]) for i in range(0, len(texts), bs)]
        out = np.concatenate(parts, axis=0)
        if self._dim is None:
            self._dim = int(out.shape[1])
        return out

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.config.model!r}, base_url={self.config.base_url!r})"
