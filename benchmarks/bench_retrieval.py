"""Retrieval benchmark: noderag vs dense (same embedder, exact cosine) vs BM25 on one QA sample.

Usage::

    python benchmarks/bench_retrieval.py --data ../shared/data/musique --build-seeds 3

``--data DIR`` holds ``corpus.jsonl`` ({id, title, text}) and ``questions.jsonl``
({id, question, supporting_ids, ...}). The index is built in ``nlp`` mode with the embedder
``auto`` picks for the corpus, once per build seed (``--build-seeds N``: seeds 0..N-1; Leiden,
betweenness sampling and HNSW move single-seed figures), one embedding pass for all of them.
Every method ranks the same passages. Per question we score recall@2/5/10, all gold in the top 8,
MRR and nDCG@10 (``noderag.eval.metrics``), average them over the seeds, and report means with 95%
bootstrap intervals, paired bootstrap differences (noderag against the configuration before the
lexical entry point and bridging round, and against the baselines), a breakdown by question type
(HotpotQA bridge/comparison, MuSiQue 2/3/4 hops) and ablation rows that each remove one component.
Latency: p50/p95 of one query *without* the query embedding, and batch throughput.

Writes ``FILE`` (JSON), ``FILE`` with ``.md`` and ``.png`` suffixes.
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
from noderag.eval.metrics import bootstrap_interval, musique_hops, paired_bootstrap, passage_scores
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
    return _add_timing(row, lat, batch_s, n_q, embed_s), ranked


ABLATIONS = {
    # the components of the hybrid search, each removed alone
    "no_lexical": {"lexical_top_k": 0, "lexical_weight": 0.0, "passage_lexical_weight": 0.0},
    "no_lexical_seeds": {"lexical_weight": 0.0},
    "no_lexical_rank": {"passage_lexical_weight": 0.0},
    "no_bridging": {"bridge_top": 0},
    "about_bridges_only": {"bridge_mode": "about"},
    # the defaults of issue 26's first round ("about" bridges alone, no floor, no title bridges)
    "first_round_bridging": {"bridge_mode": "about", "bridge_agree_top": 0, "bridge_titles": False},
    "shared_entity_bridges": {"bridge_mode": "shared"},
    "no_agreed_floor": {"bridge_agree_top": 0},
    "no_title_bridges": {"bridge_titles": False},
    "no_fill": {"min_passages": 0},
    "no_ppr": {"use_ppr": False},
    # the default runs on the structural layer alone (semantic_weight 0, chosen by this benchmark)
    "semantic_layer_on": {"semantic_weight": 1.0},
    "rule_restart": {"rule": "restart"},
    "t=1": {"iterations": 1},
    "t=3": {"iterations": 3},
}
#: The configuration issue 26 started from (before the lexical entry point and the bridging round).
BEFORE = {"lexical_top_k": 0, "lexical_weight": 0.0, "passage_lexical_weight": 0.0, "bridge_mode": "shared",
          "bridge_top": 1, "bridge_weight": 0.4, "min_passages": 0}


METRICS = ("recall@2", "recall@5", "recall@10", "all_gold@8", "mrr", "ndcg@10")


class MemoEmbedder:
    """An embedder that returns the wrapped one's vectors, computing each distinct text once.

    The builds of one sample with different seeds embed the same texts (only H summaries of a new
    partition differ), so ``--build-seeds N`` costs one embedding pass. With ``path`` the vectors are
    also kept on disk (``.npz`` keyed by a hash of each text), so a rerun embeds only new texts.
    """

    def __init__(self, inner, path: Path | None = None) -> None:
        self.inner = inner
        self.memo: dict[str, np.ndarray] = {}
        self.name = getattr(inner, "name", type(inner).__name__)
        self.dim = int(inner.dim)
        self.path = path
        if path is not None and path.is_file():
            with np.load(path, allow_pickle=False) as z:
                self.memo = dict(zip(z["keys"].tolist(), z["vectors"]))

    def __getattr__(self, attr):
        return getattr(self.inner, attr)

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()

    def embed(self, texts, *args, **kwargs) -> np.ndarray:
        texts = list(texts)
        keys = [self._key(t) for t in texts]
        missing = {k: t for k, t in zip(keys, texts) if k not in self.memo}
        if missing:
            vecs = np.asarray(self.inner.embed(list(missing.values()), *args, **kwargs), dtype=np.float32)
            self.memo.update(zip(missing, vecs))
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.path.with_suffix(".tmp.npz")
                np.savez(tmp, keys=np.asarray(list(self.memo)), vectors=np.stack(list(self.memo.values())))
                os.replace(tmp, self.path)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self.memo[k] for k in keys])


def question_group(q: dict) -> str:
    """The question type a breakdown groups by: HotpotQA ``type``, MuSiQue hop count, else 'all'."""
    if q.get("type"):
        return str(q["type"])
    try:
        return musique_hops(q.get("id", ""))
    except ValueError:
        return "all"


def per_question(results, gold) -> dict[str, np.ndarray]:
    """Per-question passage scores of one method (noderag.eval.metrics)."""
    return passage_scores([r.passages[:DEPTH] for r in results], gold)


def summarise(values: dict[str, np.ndarray]) -> dict:
    """Mean and 95% bootstrap interval of every metric."""
    out = {}
    for m in METRICS:
        mean, lo, hi = bootstrap_interval(values[m])
        out[m] = round(mean, 4)
        out[m + "_ci"] = [round(lo, 4), round(hi, 4)]
    return out


def paired(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict:
    """Paired bootstrap of a - b on recall@2/@5 and all-gold@8."""
    return {m: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in paired_bootstrap(a[m], b[m]).items()}
            for m in ("recall@2", "recall@5", "all_gold@8")}


def mean_over_seeds(runs: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-question scores averaged over build seeds (the bootstrap then resamples questions)."""
    return {m: np.mean([r[m] for r in runs], axis=0) for m in runs[0]}


def fmt_ci(row: dict, m: str) -> str:
    lo, hi = row.get(m + "_ci", (None, None))
    return f"{row[m]:.3f} [{lo:.3f}, {hi:.3f}]" if lo is not None else f"{row[m]:.3f}"


def write_markdown(path: Path, out: dict) -> None:
    """Methods, paired differences, question-type breakdown and ablations as markdown tables."""
    lines = [f"# Retrieval benchmark: {out['dataset']}", "",
             f"{out['n_questions']} questions, {out['n_passages']} passages; embedder `{out['embedder']}`; "
             f"{out['build_seeds']} build seed(s) (per-question scores averaged over seeds); {out['machine']}; "
             f"git {out.get('git_revision')}.", "",
             "Command: `" + out["command"] + "`", "",
             "Means with 95% bootstrap intervals over questions (2,000 resamples). Latency is per query without "
             "the query embedding (seed 0, best of 3), on a shared machine (load average "
             f"{out['load_average']}).", "",
             "| method | recall@2 | recall@5 | recall@10 | all-gold@8 | MRR | context tokens | p50 ms | p95 ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, row in out["methods"].items():
        lines.append(f"| {name} | " + " | ".join(fmt_ci(row, m) for m in METRICS[:4]) +
                     f" | {row['mrr']:.3f} | {row.get('avg_context_tokens', '')} | {row.get('p50_ms', '')} | "
                     f"{row.get('p95_ms', '')} |")
    lines += ["", "## Paired differences (bootstrap over the same questions)", "",
              "| comparison | metric | difference | 95% interval | P(diff <= 0) |", "|---|---|---|---|---|"]
    for name, cmp in out["paired"].items():
        for m, d in cmp.items():
            lines.append(f"| {name} | {m} | {d['diff']:+.4f} | [{d['low']:+.4f}, {d['high']:+.4f}] | {d['p_le_0']} |")
    lines += ["", "## By question type", "",
              "| type | questions | avg. gold | method | recall@2 | recall@5 | all-gold@8 |", "|---|---|---|---|---|---|---|"]
    for group, per in out["breakdown"].items():
        for name, row in per["methods"].items():
            lines.append(f"| {group} | {per['n']} | {per['avg_gold']} | {name} | {row['recall@2']:.3f} | "
                         f"{row['recall@5']:.3f} | {row['all_gold@8']:.3f} |")
    if out["ablations"]:
        lines += ["", "## Ablations (noderag, one setting changed from the defaults)", "",
                  "| variant | change | recall@2 | recall@5 | all-gold@8 | Δ recall@5 vs default [95%] | "
                  "Δ all-gold@8 [95%] | context tokens | p50 ms |", "|---|---|---|---|---|---|---|---|---|"]
        for name, row in out["ablations"].items():
            change = ", ".join(f"{k}={v}" for k, v in row["change"].items())
            d5, d8 = row["vs_default"]["recall@5"], row["vs_default"]["all_gold@8"]
            lines.append(f"| {name} | {change} | {fmt_ci(row, 'recall@2')} | {fmt_ci(row, 'recall@5')} | "
                         f"{fmt_ci(row, 'all_gold@8')} | {d5['diff']:+.3f} [{d5['low']:+.3f}, {d5['high']:+.3f}] | "
                         f"{d8['diff']:+.3f} [{d8['low']:+.3f}, {d8['high']:+.3f}] | {row.get('avg_context_tokens', '')} "
                         f"| {row.get('p50_ms', '')} |")
    lines += ["", "## Search defaults", "", "```json", json.dumps(out["search_config"], indent=1), "```", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def write_plot(path: Path, out: dict) -> bool:
    """recall@2/5/10 and all-gold@8 per method and ablation, with 95% intervals; False without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib is not installed (pip install 'noderag[bench]'): {path.name} not written", file=sys.stderr)
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = {**out["methods"], **{f"abl:{k}": v for k, v in out["ablations"].items()}}
    metrics = ["recall@2", "recall@5", "recall@10", "all_gold@8"]
    fig, ax = plt.subplots(figsize=(max(8, 1.0 * len(rows)), 5.4))
    width = 0.2
    x = np.arange(len(rows))
    for i, m in enumerate(metrics):
        vals = np.array([r[m] for r in rows.values()])
        ci = np.array([r.get(m + "_ci", [r[m], r[m]]) for r in rows.values()])
        ax.bar(x + (i - 1.5) * width, vals, width, label=m,
               yerr=np.vstack([vals - ci[:, 0], ci[:, 1] - vals]), capsize=2, error_kw={"lw": 0.8})
    ax.set_xticks(x, list(rows), rotation=35, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("score (95% bootstrap interval)")
    ax.set_title(f"Passage retrieval on {out['dataset']} ({out['n_questions']} questions, "
                 f"{out['build_seeds']} build seed(s))")
    ax.legend(ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.45))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def build_seeds(data: Path, work: Path, seeds: int, embedder, rebuild: bool) -> list[tuple[Path, float | None]]:
    """Build (or reuse) one index per seed, nlp mode, the semantic layer on (for its ablation row)."""
    import shutil

    import noderag

    digest = hashlib.sha256((data / "corpus.jsonl").read_bytes()).hexdigest()
    out = []
    for seed in range(seeds):
        d = work / f"{data.name}_seed{seed}"
        stamp = d / "bench_corpus.sha256"
        if (not rebuild and stamp.is_file() and stamp.read_text().strip() == digest
                and any(d.glob("generations/*/query/lex_term_hash.npy"))):  # built with the lexical tables
            out.append((d, None))
            continue
        if d.exists():
            shutil.rmtree(d)
        cfg = noderag.NodeRAGConfig().with_overrides({"semantic.enabled": True, "seed": seed})
        t0 = time.perf_counter()
        noderag.build([str(data / "corpus.jsonl")], str(d), config=cfg, embed=embedder, progress=True)
        out.append((d, time.perf_counter() - t0))
        stamp.write_text(digest + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, type=Path, help="folder with corpus.jsonl and questions.jsonl")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON output file (default benchmarks/results/retrieval_<name>.json)")
    ap.add_argument("--work", type=Path, default=None,
                    help="folder of the per-seed indexes (default .benchcache/retrieval)")
    ap.add_argument("--build-seeds", type=int, default=1, help="build the index with seeds 0..N-1 and average")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the indexes even if they are up to date")
    ap.add_argument("--no-ablations", action="store_true")
    args = ap.parse_args(argv)
    if args.build_seeds < 1:
        ap.error(f"--build-seeds must be >= 1, got {args.build_seeds}")

    import noderag
    from noderag.embed import make_embedder
    from noderag.embed.base import embed_queries
    from noderag.embed.factory import resolve_auto_spec

    data = args.data.resolve()
    for f in ("corpus.jsonl", "questions.jsonl"):
        if not (data / f).is_file():
            ap.error(f"--data {data}: missing {f}")
    name = data.name
    out_path = args.out or REPO / "benchmarks" / "results" / f"retrieval_{name}.json"
    work = (args.work or REPO / ".benchcache" / "retrieval").resolve()
    work.mkdir(parents=True, exist_ok=True)

    corpus, questions = load_sample(data)
    queries = [q["question"] for q in questions]
    gold = [q["supporting_ids"] for q in questions]
    groups = [question_group(q) for q in questions]
    pids = [c["id"] for c in corpus]
    ptexts = [f"{c.get('title') or ''}\n{c['text']}".strip() for c in corpus]
    spec, _ = resolve_auto_spec(c["text"] for c in corpus)
    cfg0 = noderag.NodeRAGConfig()
    embedder = MemoEmbedder(make_embedder(spec, **cfg0.embed.backend_options()), work / f"embed_memo_{spec}.npz")
    built = build_seeds(data, work, args.build_seeds, embedder, args.rebuild)

    t0 = time.perf_counter()
    qvecs = np.asarray(embed_queries(embedder.inner, queries), dtype=np.float32)
    embed_s = time.perf_counter() - t0

    base = SearchConfig()
    variants = {"noderag": {}, "before_issue_26": BEFORE}
    if not args.no_ablations:
        variants.update(ABLATIONS)
    scores: dict[str, list[dict[str, np.ndarray]]] = {v: [] for v in variants}
    rows: dict[str, dict] = {}
    for seed, (d, _) in enumerate(built):
        index = noderag.Index.open(d)
        for v, change in variants.items():
            s = Searcher(index, base.replace(**change), embedder=embedder)
            if seed == 0:
                res, lat, batch_s = time_noderag(s, queries, qvecs, repeats=3 if v == "noderag" else 1)
                rows[v] = noderag_row(res, lat, batch_s, gold, len(queries), embed_s)
            else:
                res = s.retrieve_many(queries, query_vectors=qvecs)
            scores[v].append(per_question(res, gold))
            print(f"  seed {seed} {v}: recall@5 {scores[v][-1]['recall@5'].mean():.4f}", file=sys.stderr, flush=True)
        index.close()
    pq = {v: mean_over_seeds(r) for v, r in scores.items()}

    from noderag.tokenize import count_tokens

    ptokens = [count_tokens(t) for t in ptexts]
    pvecs = np.asarray(embedder.embed(ptexts), dtype=np.float32)
    dense = DenseRetriever(pids, pvecs)
    bm25 = BM25Retriever(pids, ptexts)
    baselines = {"dense": (dense.scores, qvecs, embed_s), "bm25": (bm25.scores, queries, None)}
    if corpus_language(ptexts).chinese:  # Chinese terms: bigrams above, segmenter words here
        baselines["bm25_segmenter"] = (BM25Retriever(pids, ptexts, cjk="segment").scores, queries, None)
    for b, (fn, inputs, es) in baselines.items():
        row, ranked = baseline_row(b, fn, inputs, pids, gold, len(queries), ptokens, es)
        rows[b] = row
        pq[b] = passage_scores(ranked, gold)

    keep = ("avg_context_tokens", "p50_ms", "p95_ms", "p50_cpu_ms", "batch_qps", "batch_qps_with_embedding")
    methods = {m: {**summarise(pq[m]), **{k: rows[m][k] for k in keep if k in rows[m]}}
               for m in ("noderag", "before_issue_26", *baselines)}
    cmp = {f"noderag - {m}": paired(pq["noderag"], pq[m]) for m in ("before_issue_26", *baselines)}
    ablations = {v: {"change": change, **summarise(pq[v]), "vs_default": paired(pq[v], pq["noderag"]),
                     **{k: rows[v][k] for k in ("avg_context_tokens", "p50_ms") if k in rows[v]}}
                 for v, change in variants.items() if v in ABLATIONS}
    n_gold = np.array([len(set(g)) for g in gold], dtype=np.float64)
    by_type = {}
    for g in sorted(set(groups)):
        mask = np.array([x == g for x in groups])
        by_type[g] = {"n": int(mask.sum()), "avg_gold": round(float(n_gold[mask].mean()), 2),
                      "methods": {m: {k: round(float(pq[m][k][mask].mean()), 4) for k in METRICS}
                                  for m in ("noderag", "before_issue_26", *baselines)}}
    out = {
        "dataset": name,
        "command": "python benchmarks/bench_retrieval.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "n_questions": len(questions),
        "n_passages": len(corpus),
        "embedder": embedder.name,
        "build_seeds": args.build_seeds,
        "index_build_s": [None if b is None else round(b, 1) for _, b in built],
        "query_embedding_ms_per_query_batched": round(1e3 * embed_s / len(queries), 3),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}",
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "git_revision": _git_revision(),
        "search_config": base.to_dict(),
        "methods": methods,
        "paired": cmp,
        "breakdown": by_type,
        "ablations": ablations,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    write_markdown(out_path.with_suffix(".md"), out)
    plotted = write_plot(out_path.with_suffix(".png"), out)
    for m, row in methods.items():
        print(f"{m:16s} " + " ".join(f"{k} {row[k]}" for k in METRICS[:4]))
    print(f"wrote {out_path}, {out_path.with_suffix('.md')}" + (f", {out_path.with_suffix('.png')}" if plotted else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
