"""Decompose + embed throughput of the local executor and of Ray with 1 and 2 workers, side by side.

The MuSiQue dev sample's passages (the first ``--passages`` of ``DATA/musique/corpus.jsonl``) are
built from scratch three times in one run, nlp decomposition and the default embedder:

* ``local``: the in-process executor (the default);
* ``ray-1``: ``--executor ray`` with one worker;
* ``ray-2``: ``--executor ray`` with two workers.

Ray runs on a cluster this script starts on 127.0.0.1 (``ray start --head`` plus one more node,
1 CPU each, as in the tests) and stops afterwards. Each setup runs ``--repeats`` times, the setups
interleaved (the machine is shared: a change of load then hits all of them); medians are reported. Reported per setup: the wall time of the
decompose and embed stages (from the manifest; Ray's connect, dataset and actor start-up
included), passages/s and corpus tokens/s over them, the Ray/local wall ratio and whether the
index is byte-identical to the local one. The markdown adds a projection for N GPU workers from
the measured per-worker figures, labelled as such.

    python benchmarks/bench_distributed.py [--data DIR] [--passages N] [--repeats K] [--out DIR] [--work DIR]

Writes ``OUT/distributed.json`` and ``OUT/distributed.md`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGES = ("decompose", "embed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """Two Ray nodes (1 CPU each) on 127.0.0.1 under a private temp dir; ``stop`` kills every process of it."""

    def __init__(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="nrbench", dir="/tmp")
        self.address = f"127.0.0.1:{_free_port()}"
        os.environ.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
        ray = str(Path(sys.executable).parent / "ray")
        common = ["--num-cpus", "1", "--object-store-memory", "200000000", "--disable-usage-stats",
                  "--node-ip-address", "127.0.0.1"]
        port = self.address.rsplit(":", 1)[1]
        for cmd in ([ray, "start", "--head", "--port", port, "--temp-dir", self.tmp, "--include-dashboard=False",
                     *common], [ray, "start", "--address", self.address, *common]):
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
            if p.returncode:
                self.stop()
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")

    def stop(self) -> None:
        marks = [self.tmp, self.address]
        for _ in range(3):
            procs = {}
            for d in os.listdir("/proc"):
                if d.isdigit():
                    try:
                        cmd = Path(f"/proc/{d}/cmdline").read_bytes().decode("utf-8", "replace")
                        ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
                    except (OSError, ValueError, IndexError):
                        continue
                    procs[int(d)] = (ppid, cmd)
            found = {p for p, (_, c) in procs.items() if any(m in c for m in marks) and p != os.getpid()}
            while True:
                kids = {p for p, (pp, _) in procs.items() if pp in found and p not in found}
                if not kids:
                    break
                found |= kids
            for p in found:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.5)
        shutil.rmtree(self.tmp, ignore_errors=True)


def _digest(index: Path) -> str:
    """One hash over the files that must be identical between equivalent builds."""
    from noderag.index.generations import current_path

    index = current_path(index)  # the index's live generation folder
    h = hashlib.blake2b(digest_size=16)
    for rel in ("node_types.npy", "node_keys.npy", "graph/indptr.npy", "graph/indices.npy", "graph/weights.npy",
                "vectors.usearch", "nodes.parquet", "linked.parquet", "documents.parquet"):
        h.update((index / rel).read_bytes())
    return h.hexdigest()


def run_setup(name: str, corpus: Path, work: Path, executor) -> dict:
    from noderag.config import NodeRAGConfig
    from noderag.index.pipeline import build_index

    out = work / name
    if out.exists():
        shutil.rmtree(out)
    t0 = time.perf_counter()
    rep = build_index([corpus], out, NodeRAGConfig(), progress=False, executor=executor)
    wall = time.perf_counter() - t0
    st = rep.manifest["stages"]
    stage_wall = sum(float(st[s]["time_s"]) for s in STAGES)
    return {"setup": name, "build_wall_s": round(wall, 3),
            "stage_wall_s": {s: float(st[s]["time_s"]) for s in STAGES},
            "decompose_embed_wall_s": round(stage_wall, 3),
            "driver_cpu_s": {s: float(st[s]["cpu_s"]) for s in STAGES},
            "embedded": int(st["embed"].get("embedded", 0)), "digest": _digest(out)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--passages", type=int, default=300, help="first N passages of the MuSiQue dev sample")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--work", type=Path, default=REPO / ".benchcache" / "distributed")
    ap.add_argument("--repeats", type=int, default=3, help="runs per setup, interleaved; medians reported")
    ap.add_argument("--render", action="store_true", help="only rewrite OUT/distributed.md from its JSON")
    args = ap.parse_args(argv)
    if args.render:
        (args.out / "distributed.md").write_text(render(json.loads((args.out / "distributed.json").read_text())))
        return 0

    from noderag.config import ExecutorConfig
    from noderag.tokenize import count_tokens_batch

    rows = [json.loads(x) for x in (args.data / "musique" / "corpus.jsonl").read_text("utf-8").splitlines()
            if x.strip()][: args.passages]
    args.work.mkdir(parents=True, exist_ok=True)
    corpus = args.work / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    tokens = int(sum(count_tokens_batch([r["text"] for r in rows])))
    load0 = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {"local": [], "ray-1": [], "ray-2": []}
    cluster = LocalCluster()
    try:
        for _ in range(args.repeats):  # interleaved, so a load change on the shared machine hits every setup
            runs["local"].append(run_setup("local", corpus, args.work, None))
            for n in (1, 2):
                runs[f"ray-{n}"].append(run_setup(f"ray-{n}", corpus, args.work,
                                                  ExecutorConfig(kind="ray", address=cluster.address, workers=n)))
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        cluster.stop()
    results = []
    for name, rs in runs.items():
        med = sorted(rs, key=lambda r: r["decompose_embed_wall_s"])[len(rs) // 2]
        results.append({**med, "runs_decompose_embed_wall_s": [r["decompose_embed_wall_s"] for r in rs],
                        "identical_across_runs": len({r["digest"] for r in rs}) == 1})
    local = results[0]
    for r in results:
        w = r["decompose_embed_wall_s"]
        r["passages_per_s"] = round(len(rows) / w, 2)
        r["tokens_per_s"] = round(tokens / w, 1)
        r["ratio_vs_local"] = round(w / local["decompose_embed_wall_s"], 3)
        r["identical_to_local"] = r["digest"] == local["digest"]
    report = {"dataset": "musique", "passages": len(rows), "corpus_tokens": tokens, "repeats": args.repeats,
              "embedded_texts": local["embedded"], "embedder": "default (all-MiniLM-L6-v2 int8 ONNX)",
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "loadavg_1m_start": round(load0, 2), "loadavg_1m_end": round(os.getloadavg()[0], 2)},
              "results": results}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "distributed.json").write_text(json.dumps(report, indent=1) + "\n", "utf-8")
    (args.out / "distributed.md").write_text(render(report), "utf-8")
    print(render(report))
    return 0


def render(rep: dict) -> str:
    res = {r["setup"]: r for r in rep["results"]}
    lines = [
        "# Distributed build: local executor vs Ray (decompose + embed)",
        "",
        f"MuSiQue dev sample, first {rep['passages']} passages ({rep['corpus_tokens']} cl100k tokens, "
        f"{rep['embedded_texts']} T/S texts embedded), nlp decomposition, {rep['embedder']}. "
        f"Machine: {rep['machine']['cpus']} CPUs shared with other sessions (load average "
        f"{rep['machine']['loadavg_1m_start']} at start, {rep['machine']['loadavg_1m_end']} at end). "
        "Ray: two nodes of 1 CPU on 127.0.0.1; wall = the decompose and embed stages of the manifest "
        f"(Ray's connect, dataset and actor start-up included); median of {rep.get('repeats', 1)} interleaved "
        "runs per setup. Command: `python benchmarks/bench_distributed.py`.",
        "",
        "## Measured",
        "",
        "| setup | decompose s | embed s | decompose+embed s (runs) | passages/s | tokens/s | wall vs local "
        "| identical index |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, r in res.items():
        lines.append(f"| {name} | {r['stage_wall_s']['decompose']:.2f} | {r['stage_wall_s']['embed']:.2f} | "
                     f"{r['decompose_embed_wall_s']:.2f} ({', '.join(f'{x:.1f}' for x in r.get('runs_decompose_embed_wall_s', []))}) | "
                     f"{r['passages_per_s']:.1f} | {r['tokens_per_s']:.0f} | "
                     f"{r['ratio_vs_local']:.2f}x | {'yes' if r['identical_to_local'] and r.get('identical_across_runs', True) else 'NO'} |")
    r1, r2, lo = res["ray-1"], res["ray-2"], res["local"]
    eff = r2["passages_per_s"] / (2 * r1["passages_per_s"])
    lines += [
        "",
        f"Ray overhead at equal cores (ray-2 on 2 CPUs vs local on the same 2 CPUs): "
        f"{(r2['ratio_vs_local'] - 1) * 100:+.0f}% wall. Scaling 1 -> 2 workers: "
        f"{r2['passages_per_s'] / r1['passages_per_s']:.2f}x ({eff:.0%} efficiency). "
        "The local executor already runs the ONNX embedder on both cores (2 threads); a Ray worker runs one "
        "thread on its one CPU.",
        "",
        "## Projected (not measured): N workers",
        "",
        "N times the per-worker throughput measured above with one Ray worker on one CPU (ray-1, start-up "
        "included, so conservative for long runs). Linear because the stages are independent per chunk and "
        "the driver only writes shards; the 2-worker figure above does not contradict it: on this 2-core "
        "machine, shared with other sessions, the second worker competes for the same cores that the local "
        "executor's two embedder threads already used. Network and object-store limits of a real "
        "multi-machine cluster are not modelled.",
        "",
        "| workers | passages/s (projected) | tokens/s (projected) |",
        "|---:|---:|---:|",
    ]
    for n in (1, 2, 4, 8, 16, 32):
        lines.append(f"| {n} | {r1['passages_per_s'] * n:.0f} | {r1['tokens_per_s'] * n:.0f} |")
    lines += [
        "",
        "GPU workers: with `--llm vllm:MODEL --executor ray` the decomposition is LLM-bound and runs in vLLM "
        "engine replicas (one per GPU, `ray.data.llm`); its throughput is the engine's per-GPU generation "
        "rate, which was not measured here (no GPU lent to this run). Expected for N GPUs: "
        "N x (per-GPU decomposed passages/s), the same projection as above with the per-GPU figure in place "
        "of the CPU one; the embed stage scales the same way with `embed.spec = vllm:...` "
        "(one GPU per worker).",
        "",
        f"Baseline for the projection: local executor {lo['passages_per_s']:.1f} passages/s on 2 CPUs "
        "(measured).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
