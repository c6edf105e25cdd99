"""noderag: NodeRAG heterograph retrieval on a compiled core.

``noderag.build(inputs, index_dir)`` builds an index; ``noderag.Index.open(dir)``
opens one. Both are imported lazily, so ``import noderag`` stays cheap.
"""

from __future__ import annotations

from typing import Any

from ._version import __version__

__all__ = ["build", "Index", "IndexClosedError", "NodeRAGConfig", "SearchConfig", "load_config", "__version__"]

_LAZY = {"build": "api", "Index": "api", "IndexClosedError": "api", "NodeRAGConfig": "config",
         "load_config": "config", "SearchConfig": "search"}


def __dir__() -> list[str]:
    """The API (what completion offers), not this module's own imports."""
    return sorted(set(__all__) | {n for n in globals() if n.startswith("__") and n.endswith("__")})


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'noderag' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{module}", __name__), name)
