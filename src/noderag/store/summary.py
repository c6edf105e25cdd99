"""The plain-text summary of a generation's manifest that ``noderag build`` and ``noderag stats`` print."""

from __future__ import annotations

from .manifest import bytes_by_component

__all__ = ["format_summary", "format_brief", "format_bytes", "edge_breakdown"]


#: The build's stages in the order they run (the summary table lists them so, whatever the manifest's key order).
_STAGE_ORDER = ("ingest", "chunk", "decompose", "assemble", "embed", "attributes", "communities", "tables",
                "semantic", "finalize", "segment")


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def edge_breakdown(edges: dict) -> dict:
    """The manifest's edge counts with, for each kind broken down by node types ("structural.S-N"), a row
    "KIND.in deltas" for the edges the breakdown leaves out (an insert's delta segments count in the kind's
    total but are broken down by type only when compacted), so the rows of each kind add up to its total."""
    out = dict(edges)
    for kind in dict.fromkeys(name.split(".", 1)[0] for name in edges if "." in name):
        rest = edges.get(kind, 0) - sum(v for name, v in edges.items() if name.startswith(kind + "."))
        if rest > 0:
            out[f"{kind}.in deltas"] = rest
    return out


def format_brief(manifest: dict) -> str:
    """One line of a manifest's counts: documents, chunks, nodes (active), edges."""
    counts = manifest.get("counts", {})
    nodes = sum(counts.get("nodes", {}).values())
    active = sum(counts.get("active_nodes", counts.get("nodes", {})).values())
    edges = sum(v for name, v in counts.get("edges", {}).items() if "." not in name)
    return (f"documents {counts.get('documents', 0):,}, chunks {counts.get('chunks', 0):,}, nodes {nodes:,} "
            f"({active:,} active), edges {edges:,} (noderag stats for the rest)")


def format_summary(manifest: dict) -> str:
    """Plain-text summary table of a manifest: nodes per type, edges, tokens, time, bytes."""

    counts = manifest.get("counts", {})
    lines = []
    nodes = counts.get("nodes", {})
    active = counts.get("active_nodes", nodes)
    lines.append(f"documents {counts.get('documents', 0)}   chunks {counts.get('chunks', 0)}   "
                 f"communities {counts.get('communities', 0)}")
    deltas = manifest.get("deltas") or []
    if deltas:  # what `noderag compact` would merge
        lines.append(f"segments: the base and {len(deltas)} delta(s) of {sum(d['documents'] for d in deltas)} "
                     f"document(s), {sum(d['nodes'] for d in deltas)} node(s); communities, A/H/O nodes and "
                     "importance describe the base until `noderag compact`")
    lines.append("")
    lines.append(f"{'node type':<16}{'nodes':>10}{'active':>10}")
    for name, v in nodes.items():
        lines.append(f"{name:<16}{v:>10,}{active.get(name, v):>10,}")
    lines.append(f"{'total':<16}{sum(nodes.values()):>10,}{sum(active.values()):>10,}")
    lines.append("")
    edges = edge_breakdown(counts.get("edges", {}))
    lines.append(f"{'edges':<16}{'count':>10}")
    for name, v in edges.items():
        lines.append(f"{name:<24}{v:>10,}" if "." in name else f"{name:<16}{v:>10,}")
    lines.append("")
    stages = manifest.get("stages", {})  # a manifest read back from disk has its keys sorted: pipeline order again
    stages = {k: stages[k] for k in sorted(stages, key=lambda k: (_STAGE_ORDER.index(k) if k in _STAGE_ORDER
                                                                  else len(_STAGE_ORDER)))}
    tokens = manifest.get("tokens", {})
    lines.append(f"{'stage':<16}{'time s':>10}{'LLM tokens':>12}")
    total_t = 0.0
    for name, st in stages.items():
        t = float(st.get("time_s", 0.0))
        total_t += t
        tk = {"decompose": "decompose", "attributes": "attributes", "communities": "communities"}.get(name)
        tok = tokens.get(tk, {}) if tk else {}
        ntok = int(tok.get("prompt_tokens", 0)) + int(tok.get("completion_tokens", 0))
        lines.append(f"{name:<16}{t:>10.2f}{ntok:>12,}")
    all_tok = sum(int(v.get("prompt_tokens", 0)) + int(v.get("completion_tokens", 0))
                  for v in tokens.values() if isinstance(v, dict))
    lines.append(f"{'total':<16}{total_t:>10.2f}{all_tok:>12,}")
    lines.append("")
    lines.append(f"{'component':<20}{'bytes':>12}")
    for name, b in bytes_by_component(manifest.get("bytes", {})).items():
        lines.append(f"{name:<20}{format_bytes(b):>12}")
    lines.append(f"{'total':<20}{format_bytes(manifest.get('bytes_total', 0)):>12}")
    fails = manifest.get("failures", {})
    nf = sum(len(v) for v in fails.values() if isinstance(v, dict))
    if nf:
        lines.append("")
        lines.append(f"WARNING: {nf} item(s) failed and are recorded in manifest.json 'failures':")
        for stage, items in fails.items():
            for k, v in list(items.items())[:5]:
                lines.append(f"  {stage} {k}: {v}")
    return "\n".join(lines)
