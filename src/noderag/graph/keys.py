"""Stable content keys (names are canonicalised by :func:`noderag.lang.entities.canonical_name`).

A node's key is the first 8 bytes (little-endian uint64) of blake2b over its
type code and canonical text: identical in every process and on every machine,
independent of ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

import numpy as np

from ..lang.entities import canonical_name  # re-exported: the one canonical form of names
from .types import NodeType

__all__ = ["KEY_DTYPE", "canonical_name", "node_key", "node_keys"]

KEY_DTYPE = np.dtype("<u8")


#: The one-byte prefix of each type code (building it per call was half of a key's cost).
_TYPE_BYTE = tuple(bytes([t]) for t in range(256))


def node_key(node_type: NodeType | int, canonical_text: str) -> int:
    """64-bit stable key of one node (as a Python int)."""
    digest = hashlib.blake2b(_TYPE_BYTE[node_type] + canonical_text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def node_keys(node_types: Iterable[int], canonical_texts: Iterable[str]) -> np.ndarray:
    """Vector of stable keys, uint64 of shape (n,)."""
    keys = [node_key(t, s) for t, s in zip(node_types, canonical_texts)]
    return np.asarray(keys, dtype=KEY_DTYPE)
