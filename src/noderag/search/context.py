"""Context assembly: selected nodes grouped by type, within a token budget."""

from __future__ import annotations

from typing import Callable, Sequence

from ..graph.types import NodeType
from .result import RetrievedNode

__all__ = ["assemble_context", "header_tokens", "SECTION_ORDER", "SECTION_TITLES", "HEADER_TOKENS"]

#: Sections of the context, in order.
SECTION_ORDER = (NodeType.N, NodeType.T, NodeType.S, NodeType.A, NodeType.H, NodeType.R)
SECTION_TITLES = {
    NodeType.N: "Entities",
    NodeType.T: "Passages",
    NodeType.S: "Semantic units",
    NodeType.A: "Entity attributes",
    NodeType.H: "High-level themes",
    NodeType.R: "Relationships",
}


def render_line(node: RetrievedNode) -> str:
    """One context line: ``[id] text`` with whitespace collapsed, ending in a newline."""
    return f"[{node.id}] " + " ".join(node.text.split()) + "\n"


def section_header(node_type: NodeType) -> str:
    """The header line of a section, ending in a newline."""
    return f"## {SECTION_TITLES[node_type]}\n"


#: cl100k_base tokens of each section header (:func:`section_header`; tests check them against the tokenizer): with
#: the build's line-token table a query then counts nothing, and never loads the tokenizer's ranks (~0.15 s).
HEADER_TOKENS = {"## Entities\n": 3, "## Passages\n": 4, "## Semantic units\n": 4, "## Entity attributes\n": 4,
                 "## High-level themes\n": 5, "## Relationships\n": 3}


def header_tokens(count_tokens: Callable[[str], int]) -> Callable[[str], int]:
    """``count_tokens`` that answers the section headers from :data:`HEADER_TOKENS` (for the cl100k_base
    counter the package ships)."""
    def count(text: str) -> int:
        n = HEADER_TOKENS.get(text)
        return n if n is not None else count_tokens(text)
    return count


def assemble_context(
    nodes: Sequence[RetrievedNode],
    budget: int,
    count_tokens: Callable[[str], int],
    line_tokens: Callable[[RetrievedNode, str], int] | None = None,
) -> tuple[str, int, list[int]]:
    """Render nodes as sections by type, keeping the highest-priority nodes that fit in ``budget`` tokens.

    ``nodes`` come in priority order; a node is kept if its line (plus, for the first
    node of a section, the section header) still fits; later, smaller nodes may fill
    the remaining space. Overview (O) nodes carry no text of their own in the context
    (their H nodes do).

    Every piece (header or line) ends with a newline and the next starts with ``#`` or
    ``[``, so no BPE pre-token spans two pieces: the token count of the context is
    exactly the sum of its pieces' counts, and each piece is counted once
    (``line_tokens(node, line)`` may serve cached per-node counts).

    Returns
    -------
    context : str
    n_tokens : int
        Tokens of ``context``, always <= budget.
    node_ids : list of int
        Ids of the nodes rendered, in priority order.
    """
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if line_tokens is None:
        def line_tokens(_node: RetrievedNode, line: str) -> int:
            return count_tokens(line)
    kept: dict[NodeType, list[str]] = {t: [] for t in SECTION_ORDER}
    ids: list[int] = []
    used = 0
    for node in nodes:
        if node.type not in kept or not node.text or not node.text.strip():
            continue
        line = render_line(node)
        cost = line_tokens(node, line)
        if not kept[node.type]:
            cost += count_tokens(section_header(node.type))
        if used + cost > budget:
            continue
        kept[node.type].append(line)
        ids.append(node.id)
        used += cost
    text = "".join(section_header(t) + "".join(kept[t]) for t in SECTION_ORDER if kept[t])
    return text, used, ids
