"""What a query's ``prepare`` (query entities, name matches, BM25 entry points, seeds) and ``bridges`` phases cost,
this package beside an earlier one, and whether they rank alike.

Usage::

    python benchmarks/bench_prepare.py --index DIR --questions Q.jsonl --before-package DIR [--limit 200]
        [--repeats 3] [--out FILE]

Per question (best of ``--repeats``, the two packages interleaved per question, thread CPU time as
``bench_search_cost.py`` measures phases): the ``prepare`` and ``bridges`` phases and the whole query, and, inside
``prepare``, the name matching and the BM25 entry points alone. Then, per question, whether the two packages
return the same passages with the same scores, the same nodes and the same context.

Writes ``--out`` (JSON) and the same name with ``.md``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_retrieval import _git_revision, load_jsonl  # noqa: E402
from bench_search_cost import per_stage  # noqa: E402

import noderag  # noqa: E402
from noderag.search import Searcher  # noqa: E402
from noderag.search.lexical import passage_terms  # noqa: E402
from noderag.search.metrics import percentile_ms  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _before(folder: Path, index_dir: Path):
    sys.path.insert(0, str(folder))
    old = importlib.import_module("noderag_before")
    importlib.import_module("noderag_before.search")
    return old.search.Searcher(old.Index.open(index_dir), old.search.SearchConfig())


def _inner(searchers: dict, questions: list[str], repeats: int) -> dict[str, dict[str, np.ndarray]]:
    """Per searcher, the thread CPU time of its name matching and of its BM25 entry points, per question (best of
    ``repeats``, interleaved)."""
    out = {name: {"names": np.full(len(questions), np.inf), "bm25": np.full(len(questions), np.inf)}
           for name in searchers}
    for i, q in enumerate(questions):
        for _ in range(repeats):
            for name, s in searchers.items():
                ents = s.query_entities(q)
                t0 = time.thread_time()
                s.matcher.match(ents, q, limit=s.config.max_name_matches)
                t1 = time.thread_time()
                s._lexical_hits(sorted(set(passage_terms(q))))
                t2 = time.thread_time()
                out[name]["names"][i] = min(out[name]["names"][i], t1 - t0)
                out[name]["bm25"][i] = min(out[name]["bm25"][i], t2 - t1)
    return out


def _same(a, b) -> bool:
    return (a.passages == b.passages and a.passage_scores == b.passage_scores and a.context == b.context
            and [(n.id, n.score) for n in a.nodes] == [(n.id, n.score) for n in b.nodes])


def measure(args) -> dict:
    questions = [r["question"] for r in load_jsonl(args.questions)[: args.limit]]
    ours = Searcher(noderag.Index.open(args.index))
    searchers = {"ours": ours, "before": _before(args.before_package, args.index)}
    qvecs = ours.embed(questions)
    for s in searchers.values():  # warm-up: mapped pages, title links
        for q, v in zip(questions[:5], qvecs[:5]):
            s.retrieve(q, query_vector=v)
    phases, raw = per_stage(searchers, questions, qvecs, args.repeats)
    inner = _inner(searchers, questions, args.repeats)
    differ = [i for i, (q, v) in enumerate(zip(questions, qvecs))
              if not _same(ours.retrieve(q, query_vector=v), searchers["before"].retrieve(q, query_vector=v))]
    rows = {}
    for phase in ("prepare", "names", "bm25", "bridges"):
        per = {name: (inner[name][phase] if phase in ("names", "bm25") else raw[name].get(phase)) for name in searchers}
        if any(v is None for v in per.values()):
            continue
        rows[phase] = {name: {"p50_ms": round(percentile_ms(v, 50), 3), "p95_ms": round(percentile_ms(v, 95), 3)}
                       for name, v in per.items()}
        rows[phase]["p50_ratio"] = round(rows[phase]["ours"]["p50_ms"] / max(rows[phase]["before"]["p50_ms"], 1e-9), 3)
        rows[phase]["p95_ratio"] = round(rows[phase]["ours"]["p95_ms"] / max(rows[phase]["before"]["p95_ms"], 1e-9), 3)
    whole = {name: sum(raw[name].values()) for name in searchers}
    rows["all phases"] = {name: {"p50_ms": round(percentile_ms(v, 50), 3), "p95_ms": round(percentile_ms(v, 95), 3)}
                          for name, v in whole.items()}
    manifest = getattr(ours.store, "manifest", {}) or {}
    return {"index": str(args.index), "counts": manifest.get("counts"), "n_questions": len(questions),
            "repeats": args.repeats,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}",
            "load_average": [round(x, 2) for x in os.getloadavg()], "git_revision": _git_revision(),
            "command": "python benchmarks/bench_prepare.py " + " ".join(args.argv), "phases": rows,
            "rankings_differ": len(differ), "differing_questions": differ[:50], "all_phases_p50": phases}


def markdown(out: dict) -> list[str]:
    lines = [f"# prepare and bridges per query: {out['index']}", "", f"`{out['command']}`; {out['machine']}; load "
             f"average {out['load_average']}; git {out['git_revision']}.",
             "", f"{out['n_questions']} questions, best of {out['repeats']} per question, thread CPU time, the two "
             "packages interleaved per question.", "",
             "| phase | ours p50 ms | ours p95 ms | before p50 ms | before p95 ms | p50 ratio | p95 ratio |",
             "|---|---|---|---|---|---|---|"]
    for phase, r in out["phases"].items():
        o, b = r["ours"], r["before"]
        lines.append(f"| {phase} | {o['p50_ms']} | {o['p95_ms']} | {b['p50_ms']} | {b['p95_ms']} | "
                     f"{r.get('p50_ratio', '')} | {r.get('p95_ratio', '')} |")
    lines += ["", f"Rankings (passages, scores, nodes, context) that differ from the before package's: "
              f"{out['rankings_differ']} of {out['n_questions']}.", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True, type=Path)
    ap.add_argument("--questions", required=True, type=Path)
    ap.add_argument("--before-package", required=True, type=Path, metavar="DIR")
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "search_prepare_issue45.json")
    args = ap.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    out = measure(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    args.out.with_suffix(".md").write_text("\n".join(markdown(out)))
    print("\n".join(markdown(out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
