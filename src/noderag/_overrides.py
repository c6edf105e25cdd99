"""Keyword overrides of a configuration dataclass, shared by the backend constructors."""

from __future__ import annotations

import dataclasses
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
