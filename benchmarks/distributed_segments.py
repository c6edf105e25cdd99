"""Segment-parallel builds (``noderag build --segments N``) against one build, side by side in one run.

Part of ``bench_distributed.py`` (its ``--segments`` mode). Two measurements:

* **scale** (``--segments 1,4,10 --passages N``): the scale corpus of N passages (``scale_corpus.py``), embedder
  ``--embed`` (default ``hash:64``), built (a) as one index by ``noderag build`` in one process (its local
  executor's worker processes included) and (b) with ``--segments K --executor ray`` on a real 2-node Ray
  cluster on 127.0.0.1 (``ray start --head`` plus ``ray start --address``, 1 CPU each), every build in a fresh
  driver process. Reported per setup: wall, CPU (driver plus every task's own, worker processes included;
  Ray's own daemons not counted), the driver's peak RSS, the largest task's peak RSS, then query p50/p95 over
  the corpus's questions (``retrieve``, one at a time, in a fresh process per index after 3 warm-up queries;
  the open and first query timed on their own).
* **recall** (``--recall K``): each dev sample under ``--data`` (musique, hotpotqa, drcd) built as 1 and as K
  segments (default embedder, in this process: the segments' bytes do not depend on the executor), scored by
  ``noderag.eval.evaluate`` (recall@5, all-gold@8, the per-question paired difference with its 95% bootstrap
  interval).

Writes ``OUT/distributed_segments.json`` and ``.md`` (scale) and ``OUT/distributed_segments_recall.json`` and
``.md`` (recall).
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child_build(kind: str, corpus: Path, out: Path, embed: str, address: str | None) -> dict:
    """One build in this (fresh) process; ``kind``: "one" (``noderag build``) or "seg-K" (K segments on Ray)."""
    from noderag.config import ExecutorConfig, NodeRAGConfig

    if out.exists():
        shutil.rmtree(out)
    cfg = NodeRAGConfig().with_overrides({"embed.spec": embed})
    t0 = time.perf_counter()
    if kind == "one":
        from noderag.indexing.driver import build_index

        build_index([corpus], out, cfg, progress=False)
        parts, aliases = [], {}
    else:
        from noderag.indexing.segmented import build_segmented

        rep = build_segmented([corpus], out, cfg, segments=int(kind.split("-")[1]),
                              executor=ExecutorConfig(kind="ray", address=address))
        parts = rep.parts
        aliases = rep.manifest["segments"]
    wall = time.perf_counter() - t0
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    driver_cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    tasks_cpu = sum(p["build_cpu_s"] + p["place_cpu_s"] for p in parts)
    return {"setup": kind, "wall_s": round(wall, 2), "cpu_s": round(driver_cpu + tasks_cpu, 2),
            "driver_cpu_s": round(driver_cpu, 2), "driver_peak_mb": round(own.ru_maxrss / 1024, 1),
            "driver_children_peak_mb": round(kids.ru_maxrss / 1024, 1),
            "task_peak_mb": round(max([max(p["peak_rss_mb"], p["place_peak_rss_mb"]) for p in parts] or [0]), 1),
            "aliases": aliases.get("aliases", 0), "aliased_by_type": aliases.get("aliased_by_type", {}),
            "parts": [{k: (round(v, 2) if isinstance(v, float) else v) for k, v in p.items() if k != "index"}
                      for p in parts]}


def child_query(index: Path, questions: Path, n: int) -> dict:
    """p50/p95 wall of ``retrieve`` over the first ``n`` questions (after 3 warm-up queries), this process."""
    import noderag

    qs = [json.loads(line)["question"] for line in questions.read_text("utf-8").splitlines() if line.strip()][:n]
    t0 = time.perf_counter()
    idx = noderag.Index.open(index)
    idx.retrieve(qs[0])
    first = time.perf_counter() - t0
    for q in qs[1:3]:
        idx.retrieve(q)
    times = []
    for q in qs:
        t0 = time.perf_counter()
        idx.retrieve(q)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {"queries": len(times), "open_first_s": round(first, 3), "p50_ms": round(statistics.median(times), 2),
            "p95_ms": round(times[min(len(times) - 1, int(0.95 * len(times)))], 2)}


def _child(args: list[str]) -> dict:
    p = subprocess.run([sys.executable, str(HERE / "bench_distributed.py"), "--seg-child", *args],
                       capture_output=True, text=True, timeout=7200)
    if p.returncode:
        raise RuntimeError(f"child {args} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_scale(segments: list[int], passages: int, data: Path, work: Path, out: Path, embed: str,
              questions: int, reuse: Path | None = None) -> dict:
    """The scale measurement (see the module notes); writes the JSON and markdown. ``reuse``: the log of an
    earlier run of the same command whose finished setups are taken as they are (their rows say so)."""
    sys.path.insert(0, str(HERE))
    from bench_distributed import LocalCluster
    from scale_corpus import generate

    corpus = generate(passages, work / "scale", data=data)
    done = {}
    if reuse is not None:
        for line in reuse.read_text().splitlines():
            if line.startswith('{"setup"'):
                row = json.loads(line)
                done[row["setup"]] = {**row, "reused_from": str(reuse.name)}
    rows = []
    cluster = LocalCluster()
    try:
        for kind in ["one"] + [f"seg-{k}" for k in segments]:
            if kind in done:
                rows.append(done[kind])
                continue
            idx = work / f"idx-{passages}-{kind}"
            row = _child(["build", kind, str(corpus.corpus), str(idx), embed, cluster.address])
            row.update(_child(["query", str(idx), str(corpus.questions), str(questions)]))
            rows.append(row)
            print(json.dumps(row), flush=True)
            shutil.rmtree(idx, ignore_errors=True)
    finally:
        cluster.stop()
    base = rows[0]
    for r in rows:
        r["wall_ratio"] = round(r["wall_s"] / base["wall_s"], 3)
        r["cpu_ratio"] = round(r["cpu_s"] / base["cpu_s"], 3)
        r["driver_peak_ratio"] = round(r["driver_peak_mb"] / max(base["driver_peak_mb"], base["driver_children_peak_mb"]), 3)
        r["p50_ratio"] = round(r["p50_ms"] / base["p50_ms"], 3)
        r["p95_ratio"] = round(r["p95_ms"] / base["p95_ms"], 3)
    rep = {"passages": passages, "embed": embed, "questions": questions, "machine": _machine(), "rows": rows}
    (out / "distributed_segments.json").write_text(json.dumps(rep, indent=1) + "\n")
    (out / "distributed_segments.md").write_text(render_scale(rep))
    return rep


def render_scale(rep: dict) -> str:
    lines = [f"# Segment-parallel builds vs one build: {rep['passages']:,} passages",
             "", f"`python benchmarks/bench_distributed.py --segments ... --passages {rep['passages']}` "
             f"(embedder `{rep['embed']}`, {rep['questions']} questions; machine: {rep['machine']}). "
             "`one`: `noderag build` in one process; `seg-K`: `--segments K --executor ray` on a 2-node local Ray "
             "cluster (1 CPU a node). Ratios against `one`; driver peak against the larger of `one`'s process and "
             "its largest worker process. One run each on a shared 2-core machine"
             + (" (rows marked * were measured by an earlier invocation of the same command, same machine "
                "and day)" if any(r.get("reused_from") for r in rep["rows"]) else "") + ".", "",
             "| setup | wall s | CPU s | driver peak MB | largest task peak MB | open + first query s | query p50 ms | "
             "p95 ms | wall x | CPU x | driver peak x | p50 x | p95 x |", "|---|" + "---:|" * 12]
    for r in rep["rows"]:
        lines.append(f"| {r['setup']}{'*' if r.get('reused_from') else ''} | {r['wall_s']} | {r['cpu_s']} | {r['driver_peak_mb']} | {r['task_peak_mb']} | "
                     f"{r.get('open_first_s', '-')} | {r['p50_ms']} | {r['p95_ms']} | {r['wall_ratio']} | {r['cpu_ratio']} | "
                     f"{r['driver_peak_ratio']} | {r['p50_ratio']} | {r['p95_ratio']} |")
    lines += ["", "Per part (build and place, seconds; peak RSS of the task's worker process, MB):", ""]
    for r in rep["rows"][1:]:
        parts = ", ".join(f"{p['documents']} docs {p['build_s']}+{p['place_s']} s {p['peak_rss_mb']} MB"
                          for p in r["parts"])
        lines.append(f"- {r['setup']}: {parts}")
    return "\n".join(lines) + "\n"


def run_recall(k: int, data: Path, work: Path, out: Path, samples: list[str]) -> dict:
    """The recall measurement (see the module notes); writes the JSON and markdown."""
    from noderag.config import NodeRAGConfig
    from noderag.eval.run import evaluate
    from noderag.indexing.segmented import build_segmented

    rows = []
    for name in samples:
        scores = {}
        for n in (1, k):
            idx, ev = work / f"recall-{name}-{n}", work / f"eval-{name}-{n}"
            if (ev / "results.json").is_file() and (ev / "per_question.jsonl").is_file():  # this work folder's
                scores[n] = json.loads((ev / "results.json").read_text())
                continue
            if idx.exists():
                shutil.rmtree(idx)
            build_segmented([data / name / "corpus.jsonl"], idx, NodeRAGConfig(), segments=n)
            scores[n] = evaluate(data / name, idx, methods=["noderag"], latency=False, progress=False,
                                 per_question=True, out=ev, restart=True)
        rows.append(_recall_row(name, k, scores, work))
        print(json.dumps(rows[-1]), flush=True)
    rep = {"segments": k, "machine": _machine(), "rows": rows}
    (out / "distributed_segments_recall.json").write_text(json.dumps(rep, indent=1) + "\n")
    (out / "distributed_segments_recall.md").write_text(render_recall(rep))
    return rep


def _recall_row(name: str, k: int, scores: dict, work: Path) -> dict:
    """Means of recall@5 and all-gold@8 for 1 and ``k`` segments, and the paired difference's bootstrap CI."""
    import numpy as np

    row = {"sample": name}
    per = {}
    for n in (1, k):
        m = scores[n]["methods"]["noderag"]["metrics"]
        row[f"recall@5_{n}"], row[f"all_gold@8_{n}"] = m["recall@5"]["mean"], m["all_gold@8"]["mean"]
        lines = (work / f"eval-{name}-{n}" / "per_question.jsonl").read_text().splitlines()
        per[n] = [json.loads(x) for x in lines if x.strip()]
    for metric in ("recall@5", "all_gold@8"):
        a = np.array([_metric(q, metric) for q in per[k]])
        b = np.array([_metric(q, metric) for q in per[1]])
        d = a - b
        rng = np.random.default_rng(0)
        boots = [float(rng.choice(d, d.size).mean()) for _ in range(2000)]
        row[f"{metric}_diff"] = round(float(d.mean()), 4)
        row[f"{metric}_ci"] = [round(float(np.quantile(boots, 0.025)), 4), round(float(np.quantile(boots, 0.975)), 4)]
    return row


def _metric(q: dict, metric: str) -> float:
    """One question's score of ``metric`` for noderag from a ``per_question.jsonl`` record."""
    return float(q["methods"]["noderag"]["scores"][metric])


def render_recall(rep: dict) -> str:
    k = rep["segments"]
    lines = [f"# Recall of a {k}-segment index vs one segment (dev samples)", "",
             f"`python benchmarks/bench_distributed.py --recall {k}` (default embedder, search defaults; "
             f"machine: {rep['machine']}). Difference: {k} segments minus 1, per question, mean and 95% "
             "bootstrap interval.", "",
             f"| sample | recall@5 (1) | recall@5 ({k}) | diff [95% CI] | all-gold@8 (1) | all-gold@8 ({k}) | "
             "diff [95% CI] |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rep["rows"]:
        lines.append(f"| {r['sample']} | {r['recall@5_1']:.4f} | {r[f'recall@5_{k}']:.4f} | {r['recall@5_diff']:+.4f} "
                     f"{r['recall@5_ci']} | {r['all_gold@8_1']:.4f} | {r[f'all_gold@8_{k}']:.4f} | "
                     f"{r['all_gold@8_diff']:+.4f} {r['all_gold@8_ci']} |")
    return "\n".join(lines) + "\n"


def _machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the end"


def child_open(index: Path, questions: Path, merge: str) -> dict:
    """Open + first query of a segmented index in this (fresh) process, the later segments' name and BM25 tables
    merged into one part at open (``merge`` "merged") or looked up per segment ("per-segment")."""
    import noderag
    from noderag.search.segments import SegmentedTables

    SegmentedTables.MERGE_PARTS = merge == "merged"
    qs = [json.loads(line)["question"] for line in questions.read_text("utf-8").splitlines() if line.strip()][:50]
    t0 = time.perf_counter()
    idx = noderag.Index.open(index)
    idx.retrieve(qs[0])
    first = time.perf_counter() - t0
    times = []
    for q in qs[1:]:
        t1 = time.perf_counter()
        idx.retrieve(q)
        times.append((time.perf_counter() - t1) * 1000)
    return {"mode": merge, "open_first_s": round(first, 3), "p50_ms": round(statistics.median(times), 2)}


def run_open(passages: int, k: int, data: Path, work: Path, out: Path, embed: str, repeats: int = 3) -> dict:
    """Open + first query of a ``k``-segment index of the scale corpus, merged vs per-segment tables, each in a
    fresh process, interleaved ``repeats`` times; medians."""
    from noderag.config import NodeRAGConfig
    from noderag.indexing.segmented import build_segmented

    sys.path.insert(0, str(HERE))
    from scale_corpus import generate

    corpus = generate(passages, work / "scale", data=data)
    idx = work / f"open-{passages}-{k}"
    if idx.exists():
        shutil.rmtree(idx)
    build_segmented([corpus.corpus], idx, NodeRAGConfig().with_overrides({"embed.spec": embed}), segments=k)
    runs: dict[str, list[dict]] = {"merged": [], "per-segment": []}
    for _ in range(repeats):
        for mode in runs:
            runs[mode].append(_child(["open", str(idx), str(corpus.questions), mode]))
    rows = [{"mode": m, "open_first_s": statistics.median(r["open_first_s"] for r in rs),
             "p50_ms": statistics.median(r["p50_ms"] for r in rs), "runs": rs} for m, rs in runs.items()]
    rep = {"passages": passages, "segments": k, "embed": embed, "repeats": repeats, "machine": _machine(),
           "rows": rows, "open_ratio": round(rows[1]["open_first_s"] / rows[0]["open_first_s"], 3)}
    (out / "distributed_segments_open.json").write_text(json.dumps(rep, indent=1) + "\n")
    md = [f"# Opening a {k}-segment index of {passages:,} passages: merged vs per-segment tables", "",
          f"`python benchmarks/bench_distributed.py --open-check {k} --passages {passages}` (embedder `{embed}`; "
          f"{repeats} interleaved runs, each in a fresh process, medians; machine: {rep['machine']}).", "",
          "| later segments' name and BM25 tables | open + first query s | query p50 ms (49 queries) |",
          "|---|---:|---:|"]
    md += [f"| {r['mode']} | {r['open_first_s']} | {r['p50_ms']} |" for r in rows]
    md += ["", f"Per-segment / merged open + first query: {rep['open_ratio']}x."]
    (out / "distributed_segments_open.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return rep


def run_shards(passages: int, k: int, data: Path, work: Path, out: Path, embed: str, repeats: int = 3) -> dict:
    """Query p50/p95 of a ``k``-segment index whose parts have ``embed.vector_shards`` "auto" vs 1 (built here,
    the parts one after another: the bytes do not depend on the executor); each index queried in a fresh
    process, interleaved ``repeats`` times; medians."""
    from noderag.config import NodeRAGConfig
    from noderag.indexing.segmented import build_segmented

    sys.path.insert(0, str(HERE))
    from scale_corpus import generate

    corpus = generate(passages, work / "scale", data=data)
    idx = {}
    for shards in ("auto", 1):
        idx[shards] = work / f"shards-{passages}-{k}-{shards}"
        if idx[shards].exists():
            shutil.rmtree(idx[shards])
        cfg = NodeRAGConfig().with_overrides({"embed.spec": embed, "embed.vector_shards": shards})
        build_segmented([corpus.corpus], idx[shards], cfg, segments=k)
    runs: dict[str, list[dict]] = {str(s): [] for s in idx}
    for _ in range(repeats):
        for s, path in idx.items():
            runs[str(s)].append(_child(["query", str(path), str(corpus.questions), "100"]))
    rows = [{"vector_shards": s, "p50_ms": statistics.median(r["p50_ms"] for r in rs),
             "p95_ms": statistics.median(r["p95_ms"] for r in rs), "runs": rs} for s, rs in runs.items()]
    rep = {"passages": passages, "segments": k, "embed": embed, "repeats": repeats, "machine": _machine(),
           "rows": rows, "p50_ratio": round(rows[1]["p50_ms"] / rows[0]["p50_ms"], 3),
           "p95_ratio": round(rows[1]["p95_ms"] / rows[0]["p95_ms"], 3)}
    (out / "distributed_segments_shards.json").write_text(json.dumps(rep, indent=1) + "\n")
    md = [f"# Query latency of a {k}-segment index of {passages:,} passages: parts' HNSW shards auto vs 1", "",
          f"`python benchmarks/bench_distributed.py --shards-check {k} --passages {passages}` (embedder `{embed}`; "
          f"100 questions, {repeats} interleaved runs, each in a fresh process, medians; machine: {rep['machine']}).",
          "", "| parts' embed.vector_shards | query p50 ms | p95 ms |", "|---|---:|---:|"]
    md += [f"| {r['vector_shards']} | {r['p50_ms']} | {r['p95_ms']} |" for r in rows]
    md += ["", f"1 shard / auto: p50 {rep['p50_ratio']}x, p95 {rep['p95_ratio']}x."]
    (out / "distributed_segments_shards.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return rep


def child_main(argv: list[str]) -> int:
    """``bench_distributed.py --seg-child build KIND CORPUS OUT EMBED ADDRESS`` or ``... query INDEX QUESTIONS N``."""
    if argv[0] == "build":
        kind, corpus, out, embed, address = argv[1:6]
        print(json.dumps(child_build(kind, Path(corpus), Path(out), embed, address)))
    elif argv[0] == "open":
        print(json.dumps(child_open(Path(argv[1]), Path(argv[2]), argv[3])))
    else:
        print(json.dumps(child_query(Path(argv[1]), Path(argv[2]), int(argv[3]))))
    return 0
