"""What the lexical tables add to a build: ``query/`` written with and without them, side by side.

Usage::

    python benchmarks/bench_lexical_build.py --index DIR [--repeats 3]

Copies the index's live generation to a scratch folder and rewrites its ``query/`` folder
``--repeats`` times with the BM25 postings (the build's path) and as many times without them
(the same function with the lexical step skipped), alternating, and reports the median CPU seconds
(process time: a shared machine's load does not move it), their difference, the lexical tables'
bytes, and that difference as a share of the build's recorded CPU time (``manifest.json``'s stages).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_retrieval import _git_revision  # noqa: E402

from noderag.search import query_index  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def live_generation(index: Path) -> Path:
    return index / "generations" / (index / "CURRENT").read_text().strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True, type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "lexical_build.json")
    args = ap.parse_args(argv)
    gen = live_generation(args.index)
    manifest = json.loads((gen / "manifest.json").read_text())
    stage_s = sum(float(v.get("cpu_s") or 0.0) for v in (manifest.get("stages") or {}).values() if isinstance(v, dict))
    times = {"with": [], "without": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "gen"
        shutil.copytree(gen, work)
        for _ in range(args.repeats):
            for kind in ("with", "without"):
                t0 = time.process_time()
                if kind == "with":
                    query_index.write_query_index(work)
                else:
                    with mock.patch.object(query_index, "_save_lexical", lambda *a, **k: None):
                        query_index.write_query_index(work)
                times[kind].append(time.process_time() - t0)
        query_index.write_query_index(work)
        lex_bytes = sum(p.stat().st_size for p in (work / "query").glob("lex_*.npy"))
        all_bytes = sum(p.stat().st_size for p in work.rglob("*") if p.is_file())
    med = {k: statistics.median(v) for k, v in times.items()}
    extra = med["with"] - med["without"]
    out = {"index": str(args.index), "passages": (manifest.get("counts") or {}).get("chunks"),
           "repeats": args.repeats, "query_dir_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
           "median_with_s": round(med["with"], 3), "median_without_s": round(med["without"], 3),
           "lexical_s": round(extra, 3), "ratio_with_vs_without": round(med["with"] / med["without"], 3),
           "recorded_build_cpu_s": round(stage_s, 1) if stage_s else None,
           "lexical_share_of_build": round(extra / stage_s, 4) if stage_s else None,
           "lexical_bytes": lex_bytes, "index_bytes": all_bytes,
           "machine": f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}",
           "load_average": [round(x, 2) for x in os.getloadavg()], "git_revision": _git_revision(),
           "command": "python benchmarks/bench_lexical_build.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    md = ["# Lexical tables at build time", "", f"`{out['command']}`; {out['machine']}; load average "
          f"{out['load_average']}; git {out['git_revision']}.", "",
          "| passages | query/ with lexical (median CPU s) | without | ratio | lexical CPU s | share of the "
          "build's CPU | lexical MB | index MB |", "|---|---|---|---|---|---|---|---|",
          f"| {out['passages']} | {out['median_with_s']} | {out['median_without_s']} | {out['ratio_with_vs_without']} | "
          f"{out['lexical_s']} | {out['lexical_share_of_build']} | {lex_bytes / 1e6:.1f} | {all_bytes / 1e6:.1f} |", ""]
    args.out.with_suffix(".md").write_text("\n".join(md), encoding="utf-8")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
