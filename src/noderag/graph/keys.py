"""Stable content keys and canonical entity names.

A node's key is the first 8 bytes (little-endian uint64) of blake2b over its
type code and canonical text: identical in every process and on every machine,
independent of ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Iterable

import numpy as np

from ..lang.fold import fold_zh
from .types import NodeType

KEY_DTYPE = np.dtype("<u8")
_WS = re.compile(r"\s+")
# Punctuation (Unicode category P*) and symbols trimmed from both ends of a name.
_EDGE_CHARS = "".join(
    chr(c) for c in range(0x20, 0x3000) if unicodedata.category(chr(c))[0] in "PSZ"
) + "\u3000\u3001\u3002\uff0c\uff0e\uff1a\uff1b\uff01\uff1f\u300c\u300d\u300e\u300f\uff08\uff09"


def canonical_name(text: str) -> str:
    """NFKC, case-folded, Traditional Chinese folded to Simplified, whitespace collapsed, surrounding
    punctuation stripped (so 臺灣, 台灣 and 台湾 are one name; the text as written is stored elsewhere)."""
    text = fold_zh(unicodedata.normalize("NFKC", text).casefold())
    text = _WS.sub(" ", text).strip(_EDGE_CHARS)
    return text


def node_key(node_type: NodeType | int, canonical_text: str) -> int:
    """64-bit stable key of one node (as a Python int)."""
    digest = hashlib.blake2b(
        bytes([int(node_type)]) + canonical_text.encode("utf-8"), digest_size=8
    ).digest()
    return int.from_bytes(digest, "little")


def node_keys(node_types: Iterable[int], canonical_texts: Iterable[str]) -> np.ndarray:
    """Vector of stable keys, uint64 of shape (n,)."""
    keys = [node_key(t, s) for t, s in zip(node_types, canonical_texts)]
    return np.asarray(keys, dtype=KEY_DTYPE)
