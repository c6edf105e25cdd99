"""The seven NodeRAG node types and their uint8 codes."""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class NodeType(IntEnum):
    """Node type codes, stored as ``uint8`` in every node table and array."""

    T = 0  # text chunk
    S = 1  # semantic unit
    N = 2  # entity
    R = 3  # relationship
    A = 4  # attribute
    H = 5  # high-level element
    O = 6  # overview  # noqa: E741


#: The type codes as plain ints (numpy comparisons and indexing, without the enum's per-use cost); ``O`` is the
#: paper's letter of the overview type.
T, S, N, R, A, H, O = (int(t) for t in NodeType)  # noqa: E741
N_TYPES = len(NodeType)
TYPE_NAMES = {t: n for t, n in zip(NodeType, (
    "text", "semantic_unit", "entity", "relationship", "attribute", "high_level", "overview"))}
EMBEDDED_TYPES = (NodeType.T, NodeType.S, NodeType.A, NodeType.H)
TYPE_DTYPE = np.dtype(np.uint8)


def parse_type(value: str | int | NodeType) -> NodeType:
    """Return the NodeType for a letter ('T'), a name ('entity') or a code (2)."""
    if isinstance(value, NodeType):
        return value
    if isinstance(value, (int, np.integer)):
        try:
            return NodeType(int(value))
        except ValueError:
            raise ValueError(f"node type code must be in 0..{N_TYPES - 1}, got {value!r}") from None
    text = str(value).strip()
    if text.upper() in NodeType.__members__:
        return NodeType[text.upper()]
    for t, name in TYPE_NAMES.items():
        if name == text.lower():
            return t
    raise ValueError(f"unknown node type {value!r}; expected one of T S N R A H O")
