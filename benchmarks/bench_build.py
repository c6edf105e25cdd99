"""Index build benchmark: nlp-mode builds of the MuSiQue and HotpotQA samples with the default embedder.

Reports wall time per stage, nodes and edges per type, bytes per index component and
the index size in MB (10^6 bytes) per million corpus tokens (cl100k tokens of the
passage texts), beside the NodeRAG paper's reported ~136 MB per million tokens
(250 MB for MuSiQue's 1.84M tokens; a cited figure, not re-measured here).

    python benchmarks/bench_build.py [--data DIR] [--out DIR] [--datasets musique hotpotqa] [--embed SPEC]
                                     [--compare-late]

``--compare-late`` also builds each corpus with ``embed.late_units = true`` (semantic
units pooled from their chunk's forward pass) right after the default build and
reports both wall times and their ratio; its retrieval effect is measured by
``bench_retrieval.py --index`` on the ``<dataset>-late`` index left in ``--work``.

Writes ``OUT/build.json`` and ``OUT/build.md`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

PAPER_MB_PER_M_TOKENS = 250 / 1.84  # NodeRAG paper, MuSiQue: 250 MB for 1.84M tokens
TARGETS = {"musique": {"wall_s": 180.0, "mb_per_m_tokens": 40.0, "llm_tokens": 0}}


def bench_one(name: str, corpus: Path, embed: str, work: Path, overrides: dict | None = None,
              folder: str | None = None) -> dict:
    """Build one corpus from scratch (config ``overrides`` on the defaults); return its measurements."""
    from noderag.config import NodeRAGConfig
    from noderag.store.manifest import bytes_by_component
    from noderag.indexing.driver import build_index
    from noderag.tokenize import count_tokens_batch

    texts = [json.loads(line)["text"] for line in corpus.read_text("utf-8").splitlines() if line.strip()]
    corpus_tokens = int(sum(count_tokens_batch(texts)))
    out = work / (folder or name)
    if out.exists():
        shutil.rmtree(out)
    config = NodeRAGConfig().with_overrides({"embed.spec": embed, **(overrides or {})})
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    report = build_index([corpus], out, config, progress=True)
    wall = time.perf_counter() - t0
    load1 = os.getloadavg()[0]
    m = report.manifest
    tokens = m.get("tokens", {})
    llm_tokens = sum(int(v.get("prompt_tokens", 0)) + int(v.get("completion_tokens", 0))
                     for v in tokens.values() if isinstance(v, dict))
    total = int(m["bytes_total"])
    res = {
        "corpus": str(corpus),
        "passages": len(texts),
        "corpus_tokens": corpus_tokens,
        "embedder": m.get("embedder"),
        "wall_s": round(wall, 2),
        "stages_s": {k: v.get("time_s") for k, v in m["stages"].items()},
        "nodes": m["counts"]["nodes"],
        "edges": m["counts"]["edges"],
        "communities": m["counts"]["communities"],
        "important_entities": m["counts"]["important_entities"],
        "bytes": bytes_by_component(m["bytes"], "node arrays (types, keys, key order)"),
        "bytes_total": total,
        "mb_per_m_tokens": round(total / 1e6 / (corpus_tokens / 1e6), 2),
        "paper_mb_per_m_tokens": round(PAPER_MB_PER_M_TOKENS, 1),
        "llm_tokens": llm_tokens,
        "loadavg_1m": [round(load0, 2), round(load1, 2)],
    }
    tgt = TARGETS.get(name)
    if tgt:
        res["targets"] = {
            "wall_s<=180": res["wall_s"] <= tgt["wall_s"],
            "mb_per_m_tokens<=40": res["mb_per_m_tokens"] <= tgt["mb_per_m_tokens"],
            "llm_tokens==0": llm_tokens == 0,
        }
    return res


def _table(corner: str, columns: list[str], rows: list[tuple[str, list]]) -> list[str]:
    """Markdown table lines (and a blank line after): one row per (label, cells), numbers right-aligned."""
    head = f"| {corner} |" if corner else "| |"
    lines = [f"{head} " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    lines += [f"| {label} | " + " | ".join(str(c) for c in cells) + " |" for label, cells in rows]
    return lines + [""]


def to_markdown(results: dict) -> str:
    lines = ["# Index build benchmark (nlp mode, default embedder)", ""]
    meta = results["machine"]
    lines.append(f"Machine: {meta['cpus']} CPUs, {meta['platform']}, Python {meta['python']}; "
                 "shared and busy (1-minute load average at start/end of each build shown). "
                 "MB = 10^6 bytes; corpus tokens = cl100k tokens of the passage texts.")
    if results.get("note"):
        lines.append("")
        lines.append(f"Note: {results['note']}.")
    lines.append("")
    names = list(results["datasets"])
    rows = [("passages", "passages"), ("corpus tokens", "corpus_tokens"), ("wall time (s)", "wall_s"),
            ("index bytes", "bytes_total"), ("MB per M corpus tokens", "mb_per_m_tokens"),
            ("paper-reported MB per M tokens", "paper_mb_per_m_tokens"), ("LLM tokens", "llm_tokens"),
            ("communities", "communities"), ("important entities", "important_entities"),
            ("load average start/end", "loadavg_1m")]
    for n in names:
        d = results["datasets"][n]
        emb = float(d["stages_s"].get("embed", 0.0))
        d["embed_share"] = round(emb / d["wall_s"], 3) if d["wall_s"] else None
        d["wall_s_without_embedding"] = round(d["wall_s"] - emb, 2)
        d["embed_texts_per_s"] = round((d["nodes"]["text"] + d["nodes"]["semantic_unit"]) / emb, 2) if emb else None
    rows[3:3] = [("wall time without the embedding stage (s)", "wall_s_without_embedding"),
                 ("embedding share of wall time", "embed_share"),
                 ("embedder throughput (T+S texts/s)", "embed_texts_per_s")]
    ds = results["datasets"]
    lines += _table("", names, [(label, [ds[n].get(key) for n in names]) for label, key in rows])
    lines += ["## Time per stage (s)", ""]
    lines += _table("stage", names, [(st, [f"{ds[n]['stages_s'].get(st, 0):.2f}" for n in names])
                                     for st in ds[names[0]]["stages_s"]])
    lines += ["## Nodes per type", ""]
    lines += _table("type", names, [(t, [f"{ds[n]['nodes'][t]:,}" for n in names]) for t in ds[names[0]]["nodes"]])
    for title, corner, field in (("Edges (undirected) per layer and type pair", "edges", "edges"),
                                 ("Bytes per component", "component", "bytes")):
        keys = sorted({k for n in names for k in ds[n][field]})
        lines += [f"## {title}", ""]
        lines += _table(corner, names, [(k, [f"{ds[n][field].get(k, 0):,}" for n in names]) for k in keys])
    late = results.get("late_units") or {}
    if late:
        lines += ["## Late chunking (`embed.late_units = true`, opt-in) vs the default", "",
                  "Same corpus and config except that each semantic unit's vector is pooled from its "
                  "chunk's forward pass (with the passage title as a head) instead of its own model call. "
                  "Built right after the default build, same machine state.", ""]
        lines += _table("", list(late), [(label, [late[n].get(key) for n in late]) for label, key in (
            ("default wall time (s)", "default_wall_s"), ("late wall time (s)", "late_wall_s"),
            ("default embed stage (s)", "default_embed_s"), ("late embed stage (s)", "late_embed_s"),
            ("wall time ratio default/late", "wall_ratio"), ("embed stage ratio default/late", "embed_ratio"),
            ("late index MB per M corpus tokens", "late_mb_per_m_tokens"))])
    for n in names:
        tg = results["datasets"][n].get("targets")
        if tg:
            lines.append(f"Targets ({n}): " + ", ".join(f"{k}: {'met' if v else 'NOT met'}" for k, v in tg.items()))
    return "\n".join(lines) + "\n"


def render(json_path: Path, md_path: Path) -> None:
    """Re-render ``build.md`` from a saved ``build.json``."""
    results = json.loads(json_path.read_text("utf-8"))
    md_path.write_text(to_markdown(results), encoding="utf-8")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"),
                   help="folder with <dataset>/corpus.jsonl (default ../shared/data)")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"), help="output folder")
    p.add_argument("--datasets", nargs="+", default=["musique", "hotpotqa"])
    p.add_argument("--embed", default="default", help="embedder spec (default: the offline default)")
    p.add_argument("--work", default=None, help="where to build the indexes (default: a temporary folder)")
    p.add_argument("--compare-late", action="store_true",
                   help="also build with embed.late_units=true and report the time ratio")
    args = p.parse_args(argv)
    data = Path(args.data)
    missing = [d for d in args.datasets if not (data / d / "corpus.jsonl").is_file()]
    if missing:
        print(f"bench_build: no corpus.jsonl for {missing} under {data}", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work_ctx = tempfile.TemporaryDirectory(prefix="noderag-bench-build-") if args.work is None else None
    work = Path(args.work) if args.work else Path(work_ctx.name)
    results = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
               "embed": args.embed, "datasets": {}}
    try:
        for name in args.datasets:
            print(f"== {name}", file=sys.stderr)
            results["datasets"][name] = bench_one(name, data / name / "corpus.jsonl", args.embed, work)
            print(json.dumps(results["datasets"][name], indent=1), file=sys.stderr)
            if args.compare_late:
                print(f"== {name} (late units)", file=sys.stderr)
                d = results["datasets"][name]
                lt = bench_one(name, data / name / "corpus.jsonl", args.embed, work,
                               {"embed.late_units": True}, f"{name}-late")
                results.setdefault("late_units", {})[name] = {
                    "default_wall_s": d["wall_s"], "late_wall_s": lt["wall_s"],
                    "default_embed_s": round(d["stages_s"]["embed"], 2),
                    "late_embed_s": round(lt["stages_s"]["embed"], 2),
                    "wall_ratio": round(d["wall_s"] / lt["wall_s"], 2),
                    "embed_ratio": round(d["stages_s"]["embed"] / lt["stages_s"]["embed"], 2),
                    "late_mb_per_m_tokens": lt["mb_per_m_tokens"], "late_loadavg_1m": lt["loadavg_1m"]}
    finally:
        if work_ctx is not None:
            work_ctx.cleanup()
    (out / "build.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (out / "build.md").write_text(to_markdown(results), encoding="utf-8")
    print(to_markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
