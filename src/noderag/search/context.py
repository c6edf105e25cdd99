"""Context assembly: selected nodes grouped by type, within a token budget."""

from __future__ import annotations

from typing import Callable, Sequence

from ..graph.types import NodeType
from .result import RetrievedNode

__all__ = ["assemble_context", "SECTION_ORDER", "SECTION_TITLES"]

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


def _line(node: RetrievedNode) -> str:
    return f"[{node.id}] " + " ".join(node.text.split())


def assemble_context(
    nodes: Sequence[RetrievedNode],
    budget: int,
    count_tokens: Callable[[str], int],
) -> tuple[str, int, list[int]]:
    """Render nodes as sections by type, keeping the highest-priority nodes that fit in ``budget`` tokens.

    ``nodes`` come in priority order; a node is kept if its line (plus, for the first
    node of a section, the section header) still fits; later, smaller nodes may fill
    the remaining space. Overview (O) nodes carry no text of their own in the context
    (their H nodes do). Entities are listed by name on one line each.

    Returns
    -------
    context : str
    n_tokens : int
        ``count_tokens(context)``, always <= budget.
    node_ids : list of int
        Ids of the nodes rendered, in priority order.
    """
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    kept: dict[NodeType, list[str]] = {t: [] for t in SECTION_ORDER}
    ids: list[int] = []
    used = 0
    for node in nodes:
        if node.type not in kept or not node.text:
            continue
        line = _line(node)
        cost = count_tokens(line) + 1  # + newline
        if not kept[node.type]:
            cost += count_tokens(f"## {SECTION_TITLES[node.type]}") + 2
        if used + cost > budget:
            continue
        kept[node.type].append(line)
        ids.append(node.id)
        used += cost
    parts = [f"## {SECTION_TITLES[t]}\n" + "\n".join(kept[t]) for t in SECTION_ORDER if kept[t]]
    text = "\n\n".join(parts)
    n_tokens = count_tokens(text) if text else 0
    # Token counts of joined text can exceed the sum of the pieces by BPE merges at the
    # seams only in pathological cases; drop lowest-priority lines until it fits.
    while n_tokens > budget and ids:
        drop = ids.pop()
        for t in SECTION_ORDER:
            kept[t] = [ln for ln in kept[t] if not ln.startswith(f"[{drop}] ")]
        parts = [f"## {SECTION_TITLES[t]}\n" + "\n".join(kept[t]) for t in SECTION_ORDER if kept[t]]
        text = "\n\n".join(parts)
        n_tokens = count_tokens(text) if text else 0
    return text, n_tokens, ids
