"""Parse model output as JSON and validate it against the request's JSON schema (always, on our side)."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema

__all__ = ["canonical_json", "parse_json_text", "SchemaValidators", "check_output"]

_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*\n?(.*?)\n?\s*```\s*$", re.S)


def canonical_json(obj: Any) -> str:
    """Return a canonical JSON string (sorted keys, no spaces, UTF-8 kept)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def parse_json_text(text: str) -> Any:
    """Parse ``text`` as JSON, tolerating one surrounding Markdown code fence; raise ValueError."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        pass
    m = _FENCE.match(text or "")
    if m:
        try:
            return json.loads(m.group(1))
        except json.JSONDecodeError as e:
            raise ValueError(f"invalid JSON inside code fence: {e.msg} at char {e.pos}") from None
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        snippet = (text[:80] + "...") if len(text) > 80 else text
        raise ValueError(f"invalid JSON: {e.msg} at char {e.pos} in {snippet!r}") from None
    raise ValueError("invalid JSON")  # pragma: no cover - unreachable


class SchemaValidators:
    """Compiled jsonschema validators, kept per instance (keyed by the schema's canonical JSON)."""

    def __init__(self) -> None:
        self._by_key: dict[str, jsonschema.protocols.Validator] = {}

    def get(self, schema: dict[str, Any]) -> "jsonschema.protocols.Validator":
        """Return a validator for ``schema``; raise ValueError if the schema itself is invalid."""
        key = canonical_json(schema)
        v = self._by_key.get(key)
        if v is None:
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            try:
                cls.check_schema(schema)
            except jsonschema.SchemaError as e:
                raise ValueError(f"invalid JSON schema: {e.message}") from None
            v = cls(schema)
            self._by_key[key] = v
        return v


def check_output(
    text: str, schema: dict[str, Any] | None, validators: SchemaValidators
) -> tuple[Any, str | None]:
    """Return ``(value, None)`` for valid output or ``(None, error)``; text requests pass through."""
    if schema is None:
        return text, None
    try:
        value = parse_json_text(text)
    except ValueError as e:
        return None, str(e)
    errors = sorted(validators.get(schema).iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.absolute_path) or "<root>"
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        return None, f"schema violation at {where}: {e.message[:200]}{more}"
    return value, None
