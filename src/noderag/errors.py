"""Error types shared across the package's layers (a leaf module: it imports nothing of noderag)."""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names it (e.g. ``search.alpha``)."""
