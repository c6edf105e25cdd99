"""Keyword overrides of a configuration dataclass and environment defaults, shared by the backend constructors."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping, TypeVar

C = TypeVar("C")


def with_overrides(config: C, overrides: Mapping[str, Any], owner: str) -> C:
    """Return a copy of ``config`` with ``overrides`` applied; the caller's object is left as it was.

    An unknown name raises ``TypeError("<owner>: unknown option 'name'")``.
    """
    names = {f.name for f in dataclasses.fields(config)}
    for key in overrides:
        if key not in names:
            raise TypeError(f"{owner}: unknown option {key!r}")
    return dataclasses.replace(config, **overrides)


def openai_endpoint(model: str | None, base_url: str | None, api_key: str | None, *, env: str, owner: str,
                    error: type[Exception]) -> tuple[str, str, str]:
    """Model, base URL and API key of an OpenAI-compatible endpoint: the given values, else the environment's
    ``NODERAG_<env>_MODEL`` / ``_BASE_URL`` / ``_API_KEY`` (then ``OPENAI_API_KEY``), the URL defaulting to
    OpenAI's. No model, or a URL that is not http(s), raises ``error`` naming ``owner``."""
    environ = os.environ
    model = model or environ.get(f"NODERAG_{env}_MODEL")
    base_url = base_url or environ.get(f"NODERAG_{env}_BASE_URL") or "https://api.openai.com/v1"
    api_key = api_key or environ.get(f"NODERAG_{env}_API_KEY") or environ.get("OPENAI_API_KEY") or ""
    if not model:
        raise error(f"{owner}: no model given (pass model= or set NODERAG_{env}_MODEL)")
    if not base_url.startswith(("http://", "https://")):
        raise error(f"{owner}: base_url must start with http:// or https://, got {base_url!r}")
    return model, base_url, api_key
