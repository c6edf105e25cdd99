"""Automatic compaction benchmark: the insert that takes the deltas past ``update.max_delta_share``,
compacting inline against in the background (``update.compaction``), side by side.

The base index of the first N passages (``scale_corpus``) is built once; then, on a fresh copy each
time, the next C passages (C just over the share: ``max_delta_share * N + 1``) are inserted in a child
process with ``update.compaction = "inline"`` (the insert recomputes the whole index) and with
``"background"`` (the insert writes its delta, returns, and a detached process compacts). Per run: the
wall of the insert call (what the writer waits for), and for the background mode the time until the
compaction has committed and its own wall from ``compaction.log``; both end with no delta segment.

    python benchmarks/bench_compaction.py [--passages 10000] [--repeats 3] [--embed hash:384]

Writes ``OUT/compaction.json`` and ``OUT/compaction.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_scale import REPO, run_child  # noqa: E402
from bench_update import _lines  # noqa: E402
from scale_corpus import DEFAULT_DATA, generate  # noqa: E402

_INSERT = """
import json, sys, time
from noderag.indexing.update.background import LOG, wait_for_process
from noderag.indexing.driver import build_index
from noderag.config import NodeRAGConfig
from noderag.store.generations import current_path
mode, idx, part, embed, share = sys.argv[1:6]
cfg = NodeRAGConfig().with_overrides({"embed.spec": embed, "update.compaction": mode,
                                      "update.max_delta_share": float(share)})
t0 = time.perf_counter()
rep = build_index([part], idx, cfg, progress=False)
insert_s = time.perf_counter() - t0
out = {"insert_s": round(insert_s, 3), "deltas_after_insert": len(rep.manifest.get("deltas") or [])}
if rep.background_compaction:
    assert wait_for_process(rep.background_compaction, 7200)
    out["compacted_s"] = round(time.perf_counter() - t0, 3)
    log = open(f"{idx}/{LOG}").read()
    out["compaction_log_s"] = [float(x) for x in __import__("re").findall(r"done in ([0-9.]+) s: generation", log)]
m = json.loads((current_path(idx) / "manifest.json").read_text())
out["deltas_at_end"] = len(m.get("deltas") or [])
out["documents"] = m["counts"]["documents"]
print(json.dumps(out))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passages", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--share", type=float, default=0.25, help="update.max_delta_share")
    ap.add_argument("--embed", default="hash:384")
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--max-seconds", type=float, default=3600)
    ap.add_argument("--work", type=Path, default=REPO / ".benchcache" / "compaction")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args(argv)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    n = args.passages
    change = int(args.share * n) + 1
    sc = generate(n + change, work, data=args.data)
    base_part = _lines(sc.corpus, 0, n, work / f"base-{n}.jsonl")
    new_part = _lines(sc.corpus, n, n + change, work / f"new-{n}-{change}.jsonl")
    base = work / f"index-{n}"
    shutil.rmtree(base, ignore_errors=True)
    print(f"== base build of {n:,} passages", file=sys.stderr, flush=True)
    b = run_child([sys.executable, "-m", "noderag.cli", "build", str(base_part), "--index", str(base), "--embed",
                   args.embed, "--no-progress"], work / "build.log", args.max_seconds, None)
    if not b["ok"]:
        raise SystemExit(f"base build failed: {(work / 'build.log').read_text()[-2000:]}")
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {"inline": [], "background": []}
    for k in range(args.repeats):
        for mode in ("inline", "background"):  # interleaved: both see the same machine
            print(f"== insert {change} ({mode}, run {k + 1})", file=sys.stderr, flush=True)
            copy = work / "copy"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(base, copy)
            r = run_child([sys.executable, "-c", _INSERT, mode, str(copy), str(new_part), args.embed,
                           repr(args.share)], work / f"insert-{mode}-{k}.log", args.max_seconds, None)
            if not r["ok"]:
                raise SystemExit(f"{mode} insert failed: {(work / f'insert-{mode}-{k}.log').read_text()[-2000:]}")
            r.update(json.loads(r.pop("stdout").strip().splitlines()[-1]))
            runs[mode].append(r)
            shutil.rmtree(copy, ignore_errors=True)
    shutil.rmtree(base, ignore_errors=True)

    def med(mode: str, key: str):
        vals = [r[key] for r in runs[mode] if isinstance(r.get(key), (int, float))]
        return statistics.median(vals) if vals else None

    inline, bg = med("inline", "insert_s"), med("background", "insert_s")
    res = {"passages": n, "inserted": change, "max_delta_share": args.share, "embed": args.embed,
           "base_build_s": b["wall_s"], "runs": runs, "repeats": args.repeats,
           "median": {"inline_insert_s": inline, "background_insert_s": bg,
                      "background_compacted_s": med("background", "compacted_s")},
           "ratio_inline_over_background_insert": round(inline / bg, 2) if inline and bg else None,
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                       "load_before": [round(x, 2) for x in load_before],
                       "load_after": [round(x, 2) for x in os.getloadavg()]},
           "command": "python benchmarks/bench_compaction.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compaction.json").write_text(json.dumps(res, indent=1) + "\n")
    (args.out / "compaction.md").write_text(_markdown(res))
    print(_markdown(res))
    return 0


def _markdown(res: dict) -> str:
    m = res["median"]
    rows = []
    for mode in ("inline", "background"):
        for k, r in enumerate(res["runs"][mode]):
            log_s = ", ".join(f"{x:.1f}" for x in r.get("compaction_log_s") or []) or "–"
            rows.append(f"| {mode} | {k + 1} | {r['insert_s']:.2f} | {r['deltas_after_insert']} | "
                        f"{r.get('compacted_s', '–')} | {log_s} | {r['deltas_at_end']} | {r['documents']:,} |")
    return "\n".join([
        "# Automatic compaction: the insert past update.max_delta_share, inline against background", "",
        f"Base: {res['passages']:,} passages (`scale_corpus`, embedder `{res['embed']}`, built in "
        f"{res['base_build_s']:.1f} s); inserted: {res['inserted']:,} passages, just over "
        f"update.max_delta_share = {res['max_delta_share']} of the base. Machine: {res['machine']['cpus']} CPUs, "
        f"load {res['machine']['load_before'][0]} before, {res['machine']['load_after'][0]} after.", "",
        f"Command: `{res['command']}`", "",
        f"Median of {res['repeats']}: the insert call took **{m['inline_insert_s']:.2f} s inline** against "
        f"**{m['background_insert_s']:.2f} s in the background mode** (ratio "
        f"**{res['ratio_inline_over_background_insert']}x**); there the index was compacted "
        f"{m['background_compacted_s']:.2f} s after the insert began.", "",
        "| mode | run | insert call s | deltas after the call | compacted after s | compaction's own s (log) "
        "| deltas at the end | documents |",
        "|---|---:|---:|---:|---:|---|---:|---:|", *rows, ""])


if __name__ == "__main__":
    sys.exit(main())
