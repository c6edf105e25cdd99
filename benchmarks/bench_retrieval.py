"""Retrieval benchmark: noderag vs dense (same embedder, exact cosine) vs BM25 on one QA sample.

Usage::

    python benchmarks/bench_retrieval.py --data ../shared/data/musique --out benchmarks/results/retrieval_musique.json

``--data DIR`` holds ``corpus.jsonl`` ({id, title, text}) and ``questions.jsonl``
({id, question, supporting_ids, ...}). The index is built in ``nlp`` mode with the
default embedder (or reused from ``--index DIR`` when it already holds a finished
build of the same corpus). Every method ranks the same passages; we report
recall@2/5/10 over source passages, the share of questions with every gold passage
in the top 8, average context tokens, p50/p95 single-query latency *without* the
query embedding, and batch throughput (with and without the query embedding).
Ablations rerun noderag with one setting changed: no PPR, no semantic layer, the
other update rule, and t = 1/2/3.

Writes ``FILE`` (JSON: ``{"methods": {...}, "ablations": {...}}``), ``FILE`` with
``.md`` and ``.png`` suffixes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from noderag.lang import corpus_language
from noderag.search import Searcher, SearchConfig
from noderag.search.baselines import BM25Retriever, DenseRetriever, top_k_rows
from noderag.search.metrics import percentile_ms, retrieval_metrics

REPO = Path(__file__).resolve().parents[1]
DEPTH = 10  # ranked passages kept per question


def load_jsonl(path: Path) -> list[dict]:
    """Rows of a JSON Lines file; a malformed line is an error naming file and line."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise SystemExit(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
    return rows


def load_sample(data: Path) -> tuple[list[dict], list[dict]]:
    """Corpus and questions of one benchmark folder, checked for the needed fields."""
    corpus = load_jsonl(data / "corpus.jsonl")
    questions = load_jsonl(data / "questions.jsonl")
    ids = {c["id"] for c in corpus}
    for i, q in enumerate(questions):
        if not q.get("supporting_ids"):
            raise SystemExit(f"{data / 'questions.jsonl'}:{i + 1}: no supporting_ids")
        missing = [s for s in q["supporting_ids"] if s not in ids]
        if missing:
            raise SystemExit(f"{data / 'questions.jsonl'}:{i + 1}: supporting ids {missing} not in the corpus")
    return corpus, questions


def _git_revision() -> str | None:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except OSError:
        return None


def build_or_open(corpus_path: Path, index_dir: Path, rebuild: bool):
    """Open the index in ``index_dir``, building it (nlp mode, default embedder) when needed."""
    import noderag
    from noderag.graph.storage import FormatVersionError
    from noderag.index.store import IndexNotFoundError

    stamp = index_dir / "bench_corpus.sha256"
    digest = hashlib.sha256(corpus_path.read_bytes()).hexdigest()
    if not rebuild and stamp.is_file() and stamp.read_text().strip() == digest:
        try:
            return noderag.Index.open(index_dir), None
        except (IndexNotFoundError, FormatVersionError):  # unfinished, or an older format: rebuild
            pass
    if index_dir.is_dir() and any(index_dir.iterdir()):  # a fresh build, never an insert into an old index
        import shutil

        shutil.rmtree(index_dir)
    t0 = time.perf_counter()
    # the semantic layer is off by default; the ablation "semantic_layer_on" needs it built
    config = noderag.NodeRAGConfig().with_overrides({"semantic.enabled": True})
    noderag.build([str(corpus_path)], str(index_dir), config=config, progress=True)
    build_s = time.perf_counter() - t0
    stamp.write_text(digest + "\n")
    return noderag.Index.open(index_dir), build_s


def time_noderag(searcher: Searcher, queries: list[str], qvecs: np.ndarray, repeats: int = 3):
    """Ranked passages, context tokens, per-query latencies (best of ``repeats``) and batch times."""
    results = [searcher.retrieve(q, query_vector=v) for q, v in zip(queries, qvecs)]  # warm-up + results
    lat = np.full(len(queries), np.inf)
    cpu = np.full(len(queries), np.inf)
    for _ in range(repeats):
        for i, (q, v) in enumerate(zip(queries, qvecs)):
            c0 = time.process_time()
            t0 = time.perf_counter()
            searcher.retrieve(q, query_vector=v)
            lat[i] = min(lat[i], time.perf_counter() - t0)
            cpu[i] = min(cpu[i], time.process_time() - c0)
    batch = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        many = searcher.retrieve_many(queries, query_vectors=qvecs)
        batch.append(time.perf_counter() - t0)
    if [r.passages for r in many] != [r.passages for r in results]:
        raise RuntimeError("retrieve_many ranked passages differently from retrieve")
    return results, (lat, cpu), min(batch)


def noderag_row(results, lat, batch_s, gold, n_q, embed_s=None) -> dict:
    """One result row for a noderag configuration."""
    lat, cpu = lat
    row = retrieval_metrics([r.passages[:DEPTH] for r in results], gold)
    row["avg_context_tokens"] = round(float(np.mean([r.context_tokens for r in results])), 1)
    return _add_timing(row, lat, batch_s, n_q, embed_s, cpu)


def _add_timing(row: dict, lat, batch_s: float, n_q: int, embed_s=None, cpu=None) -> dict:
    """Add latency percentiles (and CPU p50 when measured) and batch throughput to ``row``."""
    row["p50_ms"] = round(percentile_ms(lat, 50), 3)
    row["p95_ms"] = round(percentile_ms(lat, 95), 3)
    if cpu is not None:
        row["p50_cpu_ms"] = round(percentile_ms(cpu, 50), 3)
    row["batch_qps"] = round(n_q / batch_s, 1)
    if embed_s is not None:
        row["batch_qps_with_embedding"] = round(n_q / (batch_s + embed_s), 1)
    return row


def baseline_row(name, score_fn, queries_in, ids, gold, n_q, contexts, embed_s=None) -> dict:
    """Rank with ``score_fn`` (batch of inputs -> score matrix); time single queries and one batch."""
    scores = score_fn(queries_in)
    idx, _ = top_k_rows(scores, DEPTH)
    ranked = [[ids[j] for j in row] for row in idx.tolist()]
    lat = []
    for i in range(n_q):
        t0 = time.perf_counter()
        top_k_rows(score_fn(queries_in[i:i + 1]), DEPTH)
        lat.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    top_k_rows(score_fn(queries_in), DEPTH)
    batch_s = time.perf_counter() - t0
    row = retrieval_metrics(ranked, gold)
    # context of a passage retriever: its top-5 passages (title + text)
    row["avg_context_tokens"] = round(float(np.mean([sum(contexts[j] for j in r[:5]) for r in idx.tolist()])), 1)
    return _add_timing(row, lat, batch_s, n_q, embed_s)


ABLATIONS = {
    "no_ppr": {"use_ppr": False},
    # the default runs on the structural layer alone (semantic_weight 0, chosen by this benchmark)
    "semantic_layer_on": {"semantic_weight": 1.0},
    "no_semantic_layer": {"semantic_weight": 0.0},
    "rule_lazy": {"rule": "lazy"},
    "rule_restart": {"rule": "restart"},
    "t=1": {"iterations": 1},
    "t=2": {"iterations": 2},
    "t=3": {"iterations": 3},
}


def write_markdown(path: Path, out: dict) -> None:
    """Methods and ablations as markdown tables."""
    cols = ["recall@2", "recall@5", "recall@10", "all_gold@8", "avg_context_tokens", "p50_ms", "p95_ms",
            "p50_cpu_ms", "batch_qps", "batch_qps_with_embedding"]
    lines = [f"# Retrieval benchmark: {out['dataset']}", "",
             f"{out['n_questions']} questions, {out['n_passages']} passages; embedder `{out['embedder']}`; "
             f"{out['machine']}.", "",
             f"Index embedding config: `{json.dumps(out.get('index_embed_config'), sort_keys=True)}`.", "",
             f"Load average while measuring: {out['load_average']} (shared machine: wall-clock latency includes "
             "waiting for a core; `p50_cpu_ms` is the process CPU time of the same calls).", "",
             "Latency is per query without the query embedding (best of 3 runs); batch q/s is "
             "`retrieve_many` over all questions (with the embedding: plus one batched embedding call). "
             "Context tokens for dense/BM25 are their top-5 passages.", "",
             "| method | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, row in out["methods"].items():
        lines.append(f"| {name} | " + " | ".join(str(row.get(c, "")) for c in cols) + " |")
    lines += ["", "## Ablations (noderag, one setting changed from the defaults)", "",
              "| variant | change | " + " | ".join(cols[:9]) + " |", "|---" * (len(cols[:9]) + 2) + "|"]
    for name, row in out["ablations"].items():
        change = ", ".join(f"{k}={v}" for k, v in row["change"].items())
        lines.append(f"| {name} | {change} | " + " | ".join(str(row.get(c, "")) for c in cols[:9]) + " |")
    lines += ["", "## Search defaults", "", "```json", json.dumps(out["search_config"], indent=1), "```", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def write_plot(path: Path, out: dict) -> bool:
    """Bar chart of recall@2/5/10 and all-gold@8 per method and ablation; False without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib is not installed (pip install 'noderag[bench]'): {path.name} not written", file=sys.stderr)
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = {**out["methods"], **{f"abl:{k}": v for k, v in out["ablations"].items()}}
    metrics = ["recall@2", "recall@5", "recall@10", "all_gold@8"]
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(rows)), 5.2))
    width = 0.2
    x = np.arange(len(rows))
    for i, m in enumerate(metrics):
        ax.bar(x + (i - 1.5) * width, [r[m] for r in rows.values()], width, label=m)
    ax.set_xticks(x, list(rows), rotation=30, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("score")
    ax.set_title(f"Passage retrieval on {out['dataset']} ({out['n_questions']} questions)")
    ax.legend(ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.42))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, type=Path, help="folder with corpus.jsonl and questions.jsonl")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON output file (default benchmarks/results/retrieval_<name>.json)")
    ap.add_argument("--index", type=Path, default=None,
                    help="index directory to build or reuse (default .benchcache/retrieval/<name>)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the index even if it is up to date")
    ap.add_argument("--no-ablations", action="store_true")
    args = ap.parse_args(argv)

    data = args.data.resolve()
    for f in ("corpus.jsonl", "questions.jsonl"):
        if not (data / f).is_file():
            ap.error(f"--data {data}: missing {f}")
    name = data.name
    out_path = args.out or REPO / "benchmarks" / "results" / f"retrieval_{name}.json"
    index_dir = (args.index or REPO / ".benchcache" / "retrieval" / name).resolve()
    index_dir.parent.mkdir(parents=True, exist_ok=True)

    corpus, questions = load_sample(data)
    queries = [q["question"] for q in questions]
    gold = [q["supporting_ids"] for q in questions]
    index, build_s = build_or_open(data / "corpus.jsonl", index_dir, args.rebuild)
    store = index.store if hasattr(index, "store") else index
    searcher = Searcher(store, SearchConfig())
    embedder = searcher.embedder

    t0 = time.perf_counter()
    qvecs = searcher.embed(queries)
    embed_s = time.perf_counter() - t0

    methods: dict[str, dict] = {}
    results, lat, batch_s = time_noderag(searcher, queries, qvecs)
    methods["noderag"] = noderag_row(results, lat, batch_s, gold, len(queries), embed_s)

    from noderag.tokenize import count_tokens

    pids = [c["id"] for c in corpus]
    ptexts = [f"{c.get('title') or ''}\n{c['text']}".strip() for c in corpus]
    ptokens = [count_tokens(t) for t in ptexts]
    pvecs = np.asarray(embedder.embed(ptexts), dtype=np.float32)
    dense = DenseRetriever(pids, pvecs)
    methods["dense"] = baseline_row("dense", dense.scores, qvecs, pids, gold, len(queries), ptokens, embed_s)
    bm25 = BM25Retriever(pids, ptexts)
    methods["bm25"] = baseline_row("bm25", bm25.scores, queries, pids, gold, len(queries), ptokens)
    if corpus_language(ptexts).chinese:  # Chinese terms: bigrams above, segmenter words here
        seg = BM25Retriever(pids, ptexts, cjk="segment")
        methods["bm25_segmenter"] = baseline_row("bm25_segmenter", seg.scores, queries, pids, gold, len(queries),
                                                 ptokens)

    ablations: dict[str, dict] = {}
    if not args.no_ablations:
        base = SearchConfig()
        for abl, change in ABLATIONS.items():
            s = Searcher(store, base.replace(**change), embedder=embedder)
            res, alat, abatch = time_noderag(s, queries, qvecs, repeats=1)
            row = noderag_row(res, alat, abatch, gold, len(queries))
            ablations[abl] = {"change": change, **row}
            print(f"  ablation {abl}: {row}", file=sys.stderr)

    out = {
        "dataset": name,
        "n_questions": len(questions),
        "n_passages": len(corpus),
        "embedder": getattr(embedder, "name", type(embedder).__name__),
        "query_embedding_ms_per_query_batched": round(1e3 * embed_s / len(queries), 3),
        "index_build_s": None if build_s is None else round(build_s, 1),
        "index_counts": getattr(store, "manifest", {}).get("counts"),
        "index_embed_config": getattr(store, "manifest", {}).get("config", {}).get("embed"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}",
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "git_revision": _git_revision(),
        "search_config": SearchConfig().to_dict(),
        "methods": methods,
        "ablations": ablations,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    write_markdown(out_path.with_suffix(".md"), out)
    plotted = write_plot(out_path.with_suffix(".png"), out)
    for m, row in methods.items():
        print(f"{m:8s} {row}")
    print(f"wrote {out_path}, {out_path.with_suffix('.md')}" + (f", {out_path.with_suffix('.png')}" if plotted else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
