"""Build-knob study: Leiden engine x HNSW build beam x HNSW search beam, over several seeds.

Usage::

    python benchmarks/bench_hnsw_leiden.py --data ../shared/data/musique ../shared/data/hotpotqa \
        --seeds 5 --out benchmarks/results/hnsw_leiden.json

Why: two scale defaults of issue 9 (igraph's Leiden instead of leidenalg; ``embed.expansion_add``
64 instead of usearch's 128) moved the single-seed retrieval figures by a few points. One seed
cannot tell a real loss from the spread of the Leiden partition, so every build setting is built
with ``--seeds`` seeds (``config.seed`` seeds Leiden) and every index is queried at several search
beams (``search.expansion_search``). Reports mean and min/max of recall@2/5/10 and all-gold@8.

The default embedder is memoised by text (``bench_retrieval.MemoEmbedder``) across the builds of one sample (vectors are identical;
only the H summaries of a new partition are embedded anew), so one sample costs one embedding pass.
Indexes go under ``--work`` (default ``.benchcache/hnsw_leiden``).
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
import bench_retrieval as br  # noqa: E402

import noderag  # noqa: E402
from noderag.embed import make_embedder  # noqa: E402
from noderag.search import Searcher, SearchConfig  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
METRICS = ("recall@2", "recall@5", "recall@10", "all_gold@8")


def study(data: Path, work: Path, seeds: int, engines, adds, searches) -> dict:
    corpus, questions = br.load_sample(data)
    queries = [q["question"] for q in questions]
    gold = [q["supporting_ids"] for q in questions]
    base = noderag.NodeRAGConfig()
    emb = br.MemoEmbedder(make_embedder(base.embed.spec, **base.embed.backend_options()))
    runs: dict[str, dict] = {}
    qvecs = None
    for engine in engines:
        for ea in adds:
            per_es: dict[int, list[dict]] = {es: [] for es in searches}
            build_s = []
            for seed in range(seeds):
                d = work / f"{data.name}_{engine}_ea{ea}_s{seed}"
                t0 = time.perf_counter()
                if not (d / "manifest.json").is_file():
                    cfg = base.with_overrides({"communities.engine": engine, "embed.expansion_add": ea,
                                               "seed": seed})
                    noderag.build([str(data / "corpus.jsonl")], str(d), config=cfg, embed=emb, progress=False)
                build_s.append(time.perf_counter() - t0)
                index = noderag.Index.open(d)
                for es in searches:
                    s = Searcher(index, SearchConfig(expansion_search=es), embedder=emb)
                    if qvecs is None:
                        qvecs = s.embed(queries)
                    res = [s.retrieve(q, query_vector=v) for q, v in zip(queries, qvecs)]
                    per_es[es].append(br.retrieval_metrics([r.passages[:br.DEPTH] for r in res], gold))
            for es, rows in per_es.items():
                key = f"{engine} expansion_add={ea} expansion_search={es}"
                runs[key] = {"engine": engine, "expansion_add": ea, "expansion_search": es,
                             "mean": {m: round(float(np.mean([r[m] for r in rows])), 4) for m in METRICS},
                             "min": {m: round(float(np.min([r[m] for r in rows])), 4) for m in METRICS},
                             "max": {m: round(float(np.max([r[m] for r in rows])), 4) for m in METRICS},
                             "per_seed": rows}
                print(f"{data.name}: {key}: {runs[key]['mean']}", file=sys.stderr, flush=True)
    return {"n_questions": len(questions), "n_passages": len(corpus), "seeds": seeds, "runs": runs}


def to_markdown(out: dict) -> str:
    lines = ["# Build-knob study: Leiden engine x HNSW beams, over seeds", "",
             f"Command: `{out['command']}`. Seeds 0..{out['seeds'] - 1} (`config.seed` seeds Leiden); "
             "mean over seeds, [min, max] in brackets. Default embedder; nlp mode; search defaults "
             "otherwise.", ""]
    for name, res in out["samples"].items():
        lines += [f"## {name} ({res['n_questions']} questions, {res['n_passages']} passages)", "",
                  "| engine | expansion_add | expansion_search | " + " | ".join(METRICS) + " |",
                  "|---|---:|---:|" + "---:|" * len(METRICS)]
        for run in res["runs"].values():
            cells = [f"{run['mean'][m]:.4f} [{run['min'][m]:.2f}, {run['max'][m]:.2f}]" for m in METRICS]
            lines.append(f"| {run['engine']} | {run['expansion_add']} | {run['expansion_search']} | "
                         + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", nargs="+", required=True, type=Path)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--engines", default="igraph,leidenalg")
    ap.add_argument("--expansion-add", default="64,128")
    ap.add_argument("--expansion-search", default="64,128,256")
    ap.add_argument("--work", type=Path, default=REPO / ".benchcache" / "hnsw_leiden")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "hnsw_leiden.json")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    engines = args.engines.split(",")
    adds = [int(x) for x in args.expansion_add.split(",")]
    searches = [int(x) for x in args.expansion_search.split(",")]
    out = {"command": "python benchmarks/bench_hnsw_leiden.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
           "seeds": args.seeds, "samples": {}}
    for data in args.data:
        out["samples"][data.name] = study(data, args.work, args.seeds, engines, adds, searches)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    args.out.with_suffix(".md").write_text(to_markdown(out), encoding="utf-8")
    print(to_markdown(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
