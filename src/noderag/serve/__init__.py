"""``noderag serve``: an HTTP API and an offline web page over one opened index (optional extra ``serve``).

The index opens once; one thread embeds queued questions (a few per call) and one thread retrieves the
embedded ones in small ``retrieve_many`` parts, so 32 concurrent clients share the compiled kernels
instead of contending for them, and under overload they queue in front of the embedder. FastAPI and
uvicorn are imported only here.
"""

from __future__ import annotations

__all__ = ["create_app", "ServeSettings"]


def __getattr__(name: str):  # lazy: importing noderag.serve must not need the extra until it is used
    if name in __all__:
        from . import app

        return getattr(app, name)
    raise AttributeError(name)
