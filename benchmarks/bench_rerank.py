"""Cross-encoder reranking of the dense top-N: recall with and without, and latency per question.

    python benchmarks/bench_rerank.py --spec onnx:/models/ms-marco-MiniLM-L-6-v2 \\
        --data ../shared/data/musique --data ../shared/data/hotpotqa

For each dev sample, passages (``title + "\\n" + text``) and questions are embedded with
``--embed`` (default: the default embedder; vectors cached as in ``bench_embedders.py``), the
top ``--depth`` passages per question by exact cosine are reranked by
``noderag.search.rerank.CrossEncoderReranker.from_spec(--spec)``, and recall@2, recall@5 and
all-gold@8 are reported for the dense order and the reranked order (95% bootstrap intervals,
paired bootstrap of the difference). Latency is the wall time of one ``score(question, top-N
passages)`` call per question (p50 / p95 / mean ms), with the load average alongside: on a
shared machine it includes waiting for a CPU.
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

from bench_embedders import METRICS, cached_vectors, dense_rankings, load_sample, passage_text
from noderag.embed import make_embedder
from noderag.eval.metrics import bootstrap_interval, paired_bootstrap, passage_scores
from noderag.search.rerank import CrossEncoderReranker

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", required=True, help="reranker spec, e.g. onnx:/path/to/cross-encoder")
    ap.add_argument("--data", type=Path, action="append", required=True)
    ap.add_argument("--embed", default="default", help="embedder spec of the dense first stage")
    ap.add_argument("--depth", type=int, default=20, help="passages reranked per question")
    ap.add_argument("--threads", type=int, default=None, help="reranker n_threads (default: its own)")
    ap.add_argument("--batch-size", type=int, default=None, help="reranker batch_size (default: its own)")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/embcache"))
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)

    kw = {k: v for k, v in (("n_threads", args.threads), ("batch_size", args.batch_size)) if v is not None}
    t0 = time.perf_counter()
    reranker = CrossEncoderReranker.from_spec(args.spec, **kw)
    load_s = time.perf_counter() - t0
    emb = make_embedder(args.embed)
    results: dict[str, dict] = {}
    for data in args.data:
        corpus, questions = load_sample(data)
        ids = [p["id"] for p in corpus]
        texts = [passage_text(p) for p in corpus]
        P = cached_vectors(emb, texts, "p", args.cache, [])
        Q = cached_vectors(emb, [q["question"] for q in questions], "q", args.cache, [])
        dense, top = dense_rankings(P, Q, ids, args.depth)
        reranker.score(questions[0]["question"], [texts[j] for j in top[0]])  # warm-up
        reranked, ms, loads = [], [], [os.getloadavg()[0]]
        for q, row in zip(questions, top):
            t = time.perf_counter()
            s = reranker.score(q["question"], [texts[j] for j in row])
            ms.append((time.perf_counter() - t) * 1e3)
            reranked.append([ids[row[i]] for i in np.argsort(-s, kind="stable")])
        loads.append(os.getloadavg()[0])
        gold = [q["supporting_ids"] for q in questions]
        before = passage_scores(dense, gold, ks=(2, 5, 10), all_gold_k=8)
        after = passage_scores(reranked, gold, ks=(2, 5, 10), all_gold_k=8)
        res = {"questions": len(questions), "passages": len(corpus), "depth": args.depth,
               "latency_ms": {"p50": round(float(np.percentile(ms, 50)), 1), "p95": round(float(np.percentile(ms, 95)), 1),
                              "mean": round(float(np.mean(ms)), 1)},
               "load_min": round(min(loads), 2), "load_max": round(max(loads), 2)}
        for label, sc in (("dense", before), ("reranked", after)):
            res[label] = {}
            for m in METRICS:
                mean, lo, hi = bootstrap_interval(sc[m], args.resamples)
                res[label][m] = {"mean": round(mean, 4), "low": round(lo, 4), "high": round(hi, 4)}
        res["reranked_minus_dense"] = {
            m: {k: (round(v, 4) if isinstance(v, float) else v)
                for k, v in paired_bootstrap(after[m], before[m], args.resamples).items()} for m in METRICS}
        results[data.name] = res
        print(data.name, json.dumps({k: res[k] for k in ("dense", "reranked", "latency_ms")}), flush=True)

    meta = {"machine": f"{os.cpu_count()} CPUs, {platform.platform()}", "reranker": reranker.name,
            "reranker_load_s": round(load_s, 2), "n_threads": reranker.n_threads, "batch_size": reranker.batch_size,
            "embedder": emb.name,
            "command": f"python benchmarks/bench_rerank.py --spec {args.spec} " + " ".join(f"--data {d}" for d in args.data)
            + (f" --embed {args.embed}" if args.embed != "default" else "") + (f" --depth {args.depth}" if args.depth != 20 else "")
            + "".join(f" {k} {v}" for k, v in (("--threads", args.threads), ("--batch-size", args.batch_size)) if v is not None)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rerank.json").write_text(json.dumps({"meta": meta, "samples": results}, indent=1) + "\n")
    lines = ["# Cross-encoder reranking of the dense top-N", "", f"`{meta['command']}`", "",
             f"Machine: {meta['machine']}. First stage: {meta['embedder']}, exact cosine, top {args.depth}; reranker "
             f"{meta['reranker']} (n_threads {meta['n_threads']}, batch {meta['batch_size']}). 95% bootstrap intervals "
             "in brackets; latency is one score() call per question over its top-N passages.", "",
             "| sample | order | " + " | ".join(METRICS) + " | p50 ms | p95 ms | load avg |",
             "|---|---|" + "---|" * (len(METRICS) + 3)]
    for name, r in results.items():
        for label in ("dense", "reranked"):
            cells = " | ".join(f"{r[label][m]['mean']:.3f} [{r[label][m]['low']:.2f}, {r[label][m]['high']:.2f}]" for m in METRICS)
            lat = (f"{r['latency_ms']['p50']:.1f} | {r['latency_ms']['p95']:.1f} | {r['load_min']:.1f}–{r['load_max']:.1f}"
                   if label == "reranked" else " | | ")
            lines.append(f"| {name} | {label} | {cells} | {lat} |")
        d = r["reranked_minus_dense"]
        lines.append(f"| {name} | difference | " + " | ".join(
            f"{d[m]['diff']:+.3f} [{d[m]['low']:+.3f}, {d[m]['high']:+.3f}]" for m in METRICS) + " | | | |")
    (args.out / "rerank.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out / 'rerank.json'} and rerank.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
