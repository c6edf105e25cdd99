"""Open + first retrieve and per-query latency: the build-time query index vs the in-memory preparation, side by side.

    python benchmarks/bench_open_query.py INDEX QUESTIONS.jsonl [INDEX QUESTIONS.jsonl ...] [--rounds 3]
                                          [--work DIR] [--before-json scale.json] [--out DIR]

For each built index (e.g. the ``--keep-index`` indexes of ``bench_scale.py``), a hard-linked copy
without ``query/`` is made under ``--work``: opened, it takes the searcher's in-memory path
(node table read, name indexes built in Python, texts taken from the whole text column per
query), i.e. the preparation an index had before ``query/`` existed. Then, alternating in
``--rounds`` rounds, ``scale_query.py`` runs in a fresh process on each (``Index.open`` + first
``retrieve`` through the public API, p50/p95 per query without embedding, batch q/s, peak RSS).
One more process retrieves every question on both and checks that the ranked passages and
node ids are identical. Reported: medians over rounds and ratios in-memory / mapped.
``--before-json`` quotes the same figures from a ``bench_scale.py`` run at the base commit.

Writes ``OUT/open_query.json`` and ``OUT/open_query.md`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
KEYS = ("open_plus_first_retrieve_s", "first_retrieve_s", "p50_ms", "p95_ms", "batch_qps", "peak_rss_bytes",
        "recall@10")

_SAME = """
import json, sys
import noderag
from noderag.search import Searcher
a, b, qfile = sys.argv[1:4]
qs = [json.loads(l)["question"] for l in open(qfile, encoding="utf-8")]
ra = Searcher(noderag.Index.open(a)).retrieve_many(qs)
sb = Searcher(noderag.Index.open(b))
assert type(sb.tables).__name__ == "InMemoryTables"
rb = sb.retrieve_many(qs)
same_p = sum(x.passages == y.passages for x, y in zip(ra, rb))
same_all = sum(x.to_dict() == y.to_dict() for x, y in zip(ra, rb))
print(json.dumps({"questions": len(qs), "identical_passages": same_p, "identical_results": same_all}))
"""


def _query(index: Path, questions: Path, repeats: int) -> dict:
    out = subprocess.run([sys.executable, str(HERE / "scale_query.py"), str(index), str(questions),
                          "--repeats", str(repeats)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"scale_query.py {index} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _memory_copy(index: Path, work: Path) -> Path:
    dst = work / f"{index.name}-in-memory"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(index, dst, copy_function=os.link, ignore=shutil.ignore_patterns("query"))
    return dst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs", nargs="+", help="INDEX QUESTIONS.jsonl pairs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3, help="single-query timing runs per process (best of)")
    ap.add_argument("--work", type=Path, default=HERE.parent / ".benchcache" / "open_query")
    ap.add_argument("--before-json", type=Path, default=None, help="bench_scale scale.json of the base commit")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args(argv)
    if len(args.pairs) % 2:
        ap.error("give INDEX QUESTIONS pairs")
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for index, questions in zip(args.pairs[::2], args.pairs[1::2]):
        index, questions = Path(index), Path(questions)
        manifest = json.loads((index / "manifest.json").read_text())
        nodes = sum(manifest["counts"]["nodes"].values())
        memory = _memory_copy(index, args.work)
        runs: dict[str, list[dict]] = {"mapped": [], "in_memory": []}
        for r in range(args.rounds):
            for name, path in (("mapped", index), ("in_memory", memory)):
                runs[name].append(_query(path, questions, args.repeats))
                print(f"{index.name} round {r + 1} {name}: open+first {runs[name][-1]['open_plus_first_retrieve_s']} s, "
                      f"p50 {runs[name][-1]['p50_ms']} ms", file=sys.stderr)
        same = subprocess.run([sys.executable, "-c", _SAME, str(index), str(memory), str(questions)],
                              capture_output=True, text=True, check=False)
        if same.returncode != 0:
            raise SystemExit(f"identity check failed:\n{same.stderr[-3000:]}")
        med = {name: {k: statistics.median(x[k] for x in rs) for k in KEYS} for name, rs in runs.items()}
        ratio = {k: round(med["in_memory"][k] / med["mapped"][k], 3) for k in
                 ("open_plus_first_retrieve_s", "first_retrieve_s", "p50_ms", "p95_ms", "peak_rss_bytes")}
        ratio["batch_qps"] = round(med["mapped"]["batch_qps"] / med["in_memory"]["batch_qps"], 3)
        rows.append({"index": str(index), "nodes": nodes, "documents": manifest["counts"]["documents"],
                     "median": med, "ratio_in_memory_over_mapped": ratio, "runs": runs,
                     "identity": json.loads(same.stdout.strip().splitlines()[-1]),
                     "query_bytes": sum(p.stat().st_size for p in (index / "query").iterdir())})
        shutil.rmtree(memory)
    before = None
    if args.before_json is not None:
        data = json.loads(args.before_json.read_text())
        before = {str(s.get("passages")): {k: s.get("query", s).get(k) for k in
                                           ("open_plus_first_retrieve_s", "p50_ms", "p95_ms", "batch_qps")}
                  for s in data.get("sizes", [])}
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"command": "python " + " ".join([str(Path(sys.argv[0]))] + sys.argv[1:]), "rounds": args.rounds,
              "load_average": os.getloadavg(), "rows": rows, "before_bench_scale": before}
    (args.out / "open_query.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# Open + first retrieve and query latency: build-time query index (mapped) vs in-memory preparation", "",
             f"`{result['command']}`", "",
             "Same index, fresh process per measurement, medians over rounds; *in-memory* is a hard-linked copy "
             "without `query/` (the preparation before this change: node table read, name indexes built in "
             "Python, per-query `take` on the whole text column). Ratio = in-memory / mapped "
             "(batch q/s: mapped / in-memory).", "",
             "| nodes | docs | open+first retrieve (s) mapped / in-memory / ratio | p50 ms mapped / in-memory / ratio "
             "| p95 ms | batch q/s | query RSS GB | identical passages / results | query/ MB |",
             "|---:|---:|---|---|---|---|---|---|---:|"]
    for r in rows:
        m, i, q = r["median"]["mapped"], r["median"]["in_memory"], r["ratio_in_memory_over_mapped"]
        lines.append(
            f"| {r['nodes']:,} | {r['documents']:,} | {m['open_plus_first_retrieve_s']:.3f} / "
            f"{i['open_plus_first_retrieve_s']:.3f} / {q['open_plus_first_retrieve_s']:.2f}x | {m['p50_ms']:.2f} / "
            f"{i['p50_ms']:.2f} / {q['p50_ms']:.2f}x | {m['p95_ms']:.2f} / {i['p95_ms']:.2f} | {m['batch_qps']:.0f} / "
            f"{i['batch_qps']:.0f} | {m['peak_rss_bytes'] / 1e9:.2f} / {i['peak_rss_bytes'] / 1e9:.2f} | "
            f"{r['identity']['identical_passages']}/{r['identity']['questions']} / "
            f"{r['identity']['identical_results']}/{r['identity']['questions']} | {r['query_bytes'] / 1e6:.1f} |")
    if before:
        lines += ["", "Base commit (`bench_scale.py` before the change, its own builds, same corpora):", "",
                  "| passages | open+first retrieve (s) | p50 ms | p95 ms | batch q/s |", "|---:|---:|---:|---:|---:|"]
        for size, b in before.items():
            lines.append(f"| {size} | {b['open_plus_first_retrieve_s']} | {b['p50_ms']} | {b['p95_ms']} | {b['batch_qps']} |")
    lines += ["", f"Load average at the end: {', '.join(f'{x:.1f}' for x in result['load_average'])} "
              "(2 cores shared with other sessions: absolute times are inflated, the ratios are the comparison)."]
    (args.out / "open_query.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
