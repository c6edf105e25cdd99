"""noderag: NodeRAG heterograph retrieval on a compiled core.

``noderag.build(inputs, index_dir)`` builds an index; ``noderag.Index.open(dir)``
opens one. Both are imported lazily, so ``import noderag`` stays cheap.
"""

from __future__ import annotations

from typing import Any

from ._version import __version__
__all__ = ["build", "Index", "NodeRAGConfig", "load_config", "__version__"]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    if name in ("build", "Index"):
        from . import api

        return getattr(api, name)
    if name in ("NodeRAGConfig", "load_config"):
        from . import config

        return getattr(config, name)
    raise AttributeError(f"module 'noderag' has no attribute {name!r}")
