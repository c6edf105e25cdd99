"""Embedding backends behind one protocol: ``make_embedder(spec).embed(texts) -> float32 (n, dim)``.

Backends import their heavy dependencies only when constructed.
"""

from __future__ import annotations

from .base import Embedder, check_texts, embed_queries, l2_normalize
from .factory import EMBED_KINDS, from_config, make_embedder, parse_embed_spec, resolve_auto_spec
from .hashing import HashEmbedder

__all__ = [
    "EMBED_KINDS",
    "Embedder",
    "HashEmbedder",
    "check_texts",
    "embed_queries",
    "from_config",
    "l2_normalize",
    "make_embedder",
    "parse_embed_spec",
    "resolve_auto_spec",
]
