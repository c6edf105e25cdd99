"""What the hybrid search costs per query: the defaults against the search before the lexical entry point and
the bridging round, timed side by side on one index in one process.

Usage::

    python benchmarks/bench_search_cost.py --index DIR --questions Q.jsonl [--repeats 3] [--rerank SPEC]

The questions are embedded once with the index's embedder; then for every question each configuration
retrieves it in turn (interleaved, so both see the same machine load) ``--repeats`` times and keeps its best
time: the latency of one query *without* the query embedding. Besides ``before`` and ``default``, the
defaults with one bridging component off (``COMPONENTS``) say what each component costs. Reports p50/p95 ms
per configuration, the p50 ratio against ``before``, and the process CPU time of the same calls. With ``--rerank SPEC`` a third
configuration reranks the top passages with that cross-encoder.

Writes ``--out`` (JSON) and the same name with ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_retrieval import BEFORE, _git_revision, load_jsonl  # noqa: E402

import noderag  # noqa: E402
from noderag.search import Searcher, SearchConfig  # noqa: E402
from noderag.search.metrics import percentile_ms  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
#: The defaults with one component off, timed beside them: what each costs.
COMPONENTS = {
    "about_bridges_only": {"bridge_mode": "about", "bridge_agree_top": 0, "bridge_titles": False,
                           "bridge_question_titles": False},
    "no_title_bridges": {"bridge_titles": False, "bridge_question_titles": False},
    "no_bridging": {"bridge_top": 0},
    "passage_vector_only": {"passage_unit_similarity": False},
    "no_redundancy": {"redundancy_top": 0},
    "shared_bridge_by_whole_question": {"bridge_shared_residual": False},
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True, type=Path)
    ap.add_argument("--questions", required=True, type=Path, help="JSONL with a 'question' field per line")
    ap.add_argument("--limit", type=int, default=200, help="questions used (default 200)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rerank", default=None, help="also time search.rerank = SPEC")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "search_cost.json")
    args = ap.parse_args(argv)

    questions = [q["question"] for q in load_jsonl(args.questions)][: args.limit]
    t0 = time.perf_counter()
    index = noderag.Index.open(args.index)
    open_s = time.perf_counter() - t0
    base = SearchConfig()
    configs = {"before": base.replace(**BEFORE), "default": base}
    configs.update({name: base.replace(**change) for name, change in COMPONENTS.items()})
    if args.rerank:
        configs["default+rerank"] = base.replace(rerank=args.rerank)
    searchers = {name: Searcher(index, cfg) for name, cfg in configs.items()}
    first = next(iter(searchers.values()))
    qvecs = first.embed(questions)
    for s in searchers.values():  # warm-up: kernels, mapped pages, the reranker's session
        s._embedder = first.embedder
        for q, v in zip(questions[:5], qvecs[:5]):
            s.retrieve(q, query_vector=v)
    lat = {name: np.full(len(questions), np.inf) for name in searchers}
    cpu = {name: np.full(len(questions), np.inf) for name in searchers}
    for i, (q, v) in enumerate(zip(questions, qvecs)):
        for _ in range(args.repeats):
            for name, s in searchers.items():
                c0, w0 = time.process_time(), time.perf_counter()
                s.retrieve(q, query_vector=v)
                lat[name][i] = min(lat[name][i], time.perf_counter() - w0)
                cpu[name][i] = min(cpu[name][i], time.process_time() - c0)
    rows = {}
    for name in searchers:
        rows[name] = {"p50_ms": round(percentile_ms(lat[name], 50), 3), "p95_ms": round(percentile_ms(lat[name], 95), 3),
                      "p50_cpu_ms": round(percentile_ms(cpu[name], 50), 3)}
    for name in rows:
        rows[name]["p50_ratio_vs_before"] = round(rows[name]["p50_ms"] / rows["before"]["p50_ms"], 3)
    manifest = getattr(index, "manifest", {}) or {}
    out = {"index": str(args.index), "counts": manifest.get("counts"), "n_questions": len(questions),
           "repeats": args.repeats, "open_s": round(open_s, 3),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}",
           "load_average": [round(x, 2) for x in os.getloadavg()], "git_revision": _git_revision(),
           "command": "python benchmarks/bench_search_cost.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "configs": {name: cfg.to_dict() for name, cfg in configs.items()}, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    counts = out["counts"] or {}
    lines = [f"# Search cost per query: {counts.get('chunks', '?')} passages, {sum((counts.get('nodes') or {}).values())} nodes",
             "", f"`{out['command']}`; {out['machine']}; load average {out['load_average']}; git {out['git_revision']}.",
             "", f"{len(questions)} questions, best of {args.repeats} per question, configurations interleaved per "
             "question; latency without the query embedding.", "",
             "| configuration | p50 ms | p95 ms | p50 CPU ms | p50 ratio vs before |", "|---|---|---|---|---|"]
    for name, row in rows.items():
        lines.append(f"| {name} | {row['p50_ms']} | {row['p95_ms']} | {row['p50_cpu_ms']} | {row['p50_ratio_vs_before']} |")
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
