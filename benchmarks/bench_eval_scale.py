"""Large-set check of ``noderag eval``: memory above the open index, and resume after SIGKILL.

Usage::

    python benchmarks/bench_eval_scale.py --passages 100000 --questions 10000 --work /tmp/evscale \
        --out benchmarks/results/eval_scale.json

The corpus is ``scale_corpus.py``'s (N passages repeating the dev samples with per-copy entity
suffixes). Its questions: the dev questions rewritten for every complete copy of the pool (the
rewrite of ``scale_corpus``; ids ``<id>.c<k>``), cycled under new ids (``#r<j>``) until there are
``--questions``. The index is built once with ``noderag build`` (hash embedder, as ``bench_scale``).

Then ``noderag eval`` runs in a child process twice: the first run is SIGKILLed once ``--kill-after``
batches are on disk, the second resumes and finishes. Measured: the resident memory of a process
that only opened the index and answered one question (the open index), each eval run's peak RSS
(VmHWM, polled from /proc once a second), the questions each run scored, and whether any question
was scored twice. Writes ``--out`` (JSON) and the same name with ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_corpus import DEFAULT_DATA, _load_pool, _question_lines, generate  # noqa: E402


PROBE = """
import json, sys, noderag
ix = noderag.Index.open(sys.argv[1])
ix.retrieve("Who founded the city?")
print(json.dumps({k: int(v.split()[0]) * 1024 for k, v in
                  (ln.split(':', 1) for ln in open('/proc/self/status')) if k in ('VmRSS', 'VmHWM')}))
"""


def _status(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for ln in fh:
                k, _, v = ln.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    out[k] = int(v.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return out


def write_questions(data: Path, corpus: Path, n: int, target: int) -> int:
    """The eval folder: corpus.jsonl (a link to the scale corpus) and ``target`` questions."""
    data.mkdir(parents=True, exist_ok=True)
    link = data / "corpus.jsonl"
    if not link.exists():
        link.symlink_to(corpus)
    pool, questions = _load_pool(DEFAULT_DATA, ("musique", "hotpotqa"))
    per_copy = [_question_lines(questions, pool, n, k) for k in range(max(1, n // len(pool)))]
    rows = [json.loads(x) for lines in per_copy for x in lines]
    out, j = [], 0
    while len(out) < target:
        for r in rows:
            if len(out) == target:
                break
            out.append({**r, "id": r["id"] if j == 0 else f"{r['id']}#r{j}"})
        j += 1
    tmp = data / "questions.jsonl.tmp"
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out), encoding="utf-8")
    os.replace(tmp, data / "questions.jsonl")
    return len(rows)


def run_eval(cmd: list[str], records: Path, kill_after: int | None, log: Path) -> dict:
    """Run one eval child; SIGKILL it once ``kill_after`` batches are written. Peak RSS polled once a second."""
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
        peak = 0
        killed = False
        while proc.poll() is None:
            peak = max(peak, _status(proc.pid).get("VmHWM", 0))
            if kill_after is not None and records.is_file() and records.read_bytes().count(b"\n") >= kill_after:
                peak = max(peak, _status(proc.pid).get("VmHWM", 0))
                os.kill(proc.pid, signal.SIGKILL)
                killed = True
                proc.wait()
                break
            time.sleep(1.0)
    return {"returncode": proc.returncode, "killed": killed, "peak_rss_bytes": peak,
            "wall_s": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--questions", type=int, default=10_000)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--embed", default="hash:384")
    ap.add_argument("--methods", default="noderag,dense,bm25")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--kill-after", type=int, default=10, help="batches on disk before the SIGKILL")
    ap.add_argument("--no-latency", action="store_true",
                    help="pass --no-latency to noderag eval (no single-query timing)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    work = args.work.resolve()
    sc = generate(args.passages, work)
    data = work / f"eval-{args.passages}"
    distinct = write_questions(data, sc.corpus, args.passages, args.questions)
    index = work / f"index-{args.passages}"
    build_s = None
    if not (index / "CURRENT").is_file():
        t0 = time.perf_counter()
        subprocess.run(["noderag", "build", str(sc.corpus), "--index", str(index), "--embed", args.embed,
                        "--no-progress"], check=True, stdout=subprocess.DEVNULL)
        build_s = round(time.perf_counter() - t0, 1)
    probe = json.loads(subprocess.run([sys.executable, "-c", PROBE, str(index)], capture_output=True, text=True,
                                      check=True).stdout)
    out_dir = work / f"eval-out-{args.passages}"
    cmd = ["noderag", "eval", str(data), "--index", str(index), "--out", str(out_dir), "--methods", args.methods,
           "--batch-size", str(args.batch_size), "--no-progress"] + (["--no-latency"] if args.no_latency else []) + [
           "--restart"]
    records = out_dir / "state" / "records.jsonl"
    first = run_eval(cmd, records, args.kill_after, work / "eval-run1.log")
    done_after_kill = records.read_bytes().count(b"\n") if records.is_file() else 0
    second = run_eval(cmd[:-1], records, None, work / "eval-run2.log")  # no --restart: resume
    res = json.loads((out_dir / "results.json").read_text())
    ids = [i for ln in records.read_text().splitlines() for i in json.loads(ln)["ids"]]
    load = [round(x, 2) for x in os.getloadavg()]
    out = {
        "passages": args.passages, "questions": len(ids), "distinct_question_texts": distinct,
        "embed": args.embed, "methods": args.methods.split(","), "batch_size": args.batch_size,
        "latency": not args.no_latency,
        "index_build_s": build_s, "index_counts": res["index"]["counts"],
        "open_index_rss_bytes": probe["VmRSS"], "open_index_peak_rss_bytes": probe["VmHWM"],
        "run1": {**first, "batches_on_disk_after_kill": done_after_kill},
        "run2": {**second, "questions_resumed": res["run"]["questions_resumed"],
                 "questions_scored": res["run"]["questions_scored"]},
        "questions_scored_twice": len(ids) - len(set(ids)),
        "rss_above_open_index_bytes": max(first["peak_rss_bytes"], second["peak_rss_bytes"]) - probe["VmRSS"],
        "figures": {m: {k: v["mean"] for k, v in row["metrics"].items()} | {
            "p50_ms": row["p50_ms"], "p95_ms": row["p95_ms"], "batch_qps": row["batch_qps"]}
            for m, row in res["methods"].items()},
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}",
        "load_average_end": load, "git_revision": res["git_revision"],  # the resumed run's, read at its start
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    gb = 1024 ** 3
    lines = [f"# noderag eval at scale: {len(ids):,} questions over {args.passages:,} passages", "",
             f"`python benchmarks/bench_eval_scale.py --passages {args.passages} --questions {args.questions} "
             f"--kill-after {args.kill_after}{' --no-latency' if args.no_latency else ''}` (methods {args.methods}, "
             f"embedder `{args.embed}`, batches of "
             f"{args.batch_size}); {out['machine']}, load {load} at the end; git {out['git_revision']}.", "",
             "| measure | value |", "|---|---|",
             f"| open index + one retrieve, RSS | {probe['VmRSS'] / gb:.2f} GB |",
             f"| run 1 (SIGKILL after {done_after_kill} batches on disk): peak RSS | "
             f"{first['peak_rss_bytes'] / gb:.2f} GB in {first['wall_s']} s |",
             f"| run 2 (resumed): peak RSS | {second['peak_rss_bytes'] / gb:.2f} GB in {second['wall_s']} s |",
             f"| peak RSS above the open index | {out['rss_above_open_index_bytes'] / gb:.2f} GB |",
             f"| questions resumed / scored by run 2 | {res['run']['questions_resumed']:,} / "
             f"{res['run']['questions_scored']:,} |",
             f"| questions scored twice | {out['questions_scored_twice']} |", "",
             "| method | " + " | ".join(next(iter(out["figures"].values()))) + " |",
             "|---" * (len(next(iter(out["figures"].values()))) + 1) + "|"]
    for m, f in out["figures"].items():
        lines.append(f"| {m} | " + " | ".join("" if v is None else str(round(v, 4)) if isinstance(v, float)
                                               else str(v) for v in f.values()) + " |")
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0 if second["returncode"] == 0 and out["questions_scored_twice"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
