"""One check for every configuration table: its keys must be fields of the dataclass it fills."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Mapping

from ..errors import ConfigError

__all__ = ["reject_unknown_keys"]


def reject_unknown_keys(data: Mapping[str, Any], cls: type, section: str = "") -> None:
    """Raise ``ConfigError`` naming every key of ``data`` that ``cls`` lacks, dotted with ``section``."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        named = [f"{section}.{k}" if section else k for k in unknown]
        raise ConfigError(f"unknown config key(s) {named}; known: {sorted(known)}")
