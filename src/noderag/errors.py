"""The package's error base and the error types shared across its layers (a leaf module: it imports nothing
of noderag).

Every error noderag raises on purpose derives from :class:`NodeRAGError`, and also from the builtin a
caller would catch for it (``ValueError`` for bad configuration, ``FileNotFoundError`` for a missing
index, ``RuntimeError`` for a failed build), so ``except NodeRAGError`` catches all of them and the
older ``except ValueError`` still works.
"""

from __future__ import annotations

__all__ = ["NodeRAGError", "ConfigError", "BuildError"]


class NodeRAGError(Exception):
    """Base of every error noderag raises on purpose; the message says what is wrong and what to do."""


class ConfigError(NodeRAGError, ValueError):
    """A configuration value or key is invalid; the message names it (e.g. ``search.alpha``)."""


class BuildError(NodeRAGError, RuntimeError):
    """A build cannot proceed; the message says why and what to do."""
