"""Retrieval benchmark: noderag vs dense (same embedder, exact cosine) vs BM25 on one QA sample.

Usage::

    python benchmarks/bench_retrieval.py --data ../shared/data/musique --build-seeds 3

``--data DIR`` holds ``corpus.jsonl`` ({id, title, text}) and ``questions.jsonl``
({id, question, supporting_ids, ...}). The index is built in ``nlp`` mode with the embedder
``auto`` picks for the corpus (``--embed SPEC`` names another), once per build seed (``--build-seeds
N``: seeds 0..N-1; Leiden, betweenness sampling and HNSW move single-seed figures), one embedding pass
for all of them; ``--index DIR`` (repeatable) evaluates existing indexes instead.

This script is a thin caller of ``noderag.eval.evaluate`` (what ``noderag eval`` runs): the package
ranks every method on the same passages, scores each question (recall@2/5/10, all gold in the top 8,
MRR, nDCG@10), averages the per-question scores over the seeds, and computes the means with 95%
bootstrap intervals, the paired bootstrap differences (noderag against the graph's ranking alone,
``graph_only``, and against the baselines), the breakdown by question type (HotpotQA bridge/comparison,
MuSiQue 2/3/4 hops) and every ablation row. The ablations are defined here, as named search variants that
each remove one component (most of them a ranking stage list, :class:`noderag.search.ranking.StagedConfig`),
and evaluated there, each paired against the defaults. Latency: p50/p95 of one query *without* the query embedding (first seed), and
batch throughput.

Per build seed, the noderag row of that seed's index alone (``per_seed``): ``noderag eval DATA --index
DIR`` on an index built with ``noderag build DATA/corpus.jsonl --index DIR --seed S`` and the
benchmark's build settings (``[semantic] enabled = true``) gives exactly those figures.

Writes ``FILE`` (JSON), ``FILE`` with ``.md`` and ``.png`` suffixes, and the package's own results
(``results.json``/``.md``, the per-index state) in ``WORK/eval_<name>``.
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
from noderag.search import Searcher
from noderag.search.ranking import DEFAULT_NAMES, StagedConfig
from noderag.search.metrics import percentile_ms, retrieval_metrics  # noqa: F401  (bench_hnsw_leiden uses it)

REPO = Path(__file__).resolve().parents[1]
DEPTH = 10  # ranked passages kept per question


# load_jsonl, load_sample, _git_revision, MemoEmbedder, GRAPH_ONLY: also imported by other benchmarks
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


# time_noderag and noderag_row: scale_query.py's timing of one searcher (this benchmark's figures come from
# noderag.eval.evaluate)
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


def without(*names: str) -> dict:
    """A variant ranking with the default stages but ``names`` (``noderag.search.ranking.DEFAULT_NAMES``)."""
    return {"stages": [n for n in DEFAULT_NAMES if n not in names and n != "rerank"]}


ABLATIONS = {
    # the components of the hybrid search, each removed alone: a different stage list, or a user setting
    "no_lexical": {"lexical_top_k": 0, **without("lexical")},
    "no_lexical_entry_points": {"lexical_top_k": 0},
    "no_lexical_rank": without("lexical"),
    "no_propagated_mass": without("mass"),
    "no_bridging": {"bridging": False},
    "about_bridges_only": {"stages": [("bridges_about_only" if n == "bridges" else n)
                                      for n in without()["stages"]]},
    "no_agreement_cap": without("agreement_cap"),
    "no_redundancy": without("redundancy"),
    "no_fill": without("fill"),
    "no_ppr": {"use_ppr": False},
    # the default runs on the structural layer alone (semantic_weight 0, chosen by this benchmark)
    "semantic_layer_on": {"semantic_weight": 1.0},
    "rule_restart": {"rule": "restart"},
    "t=1": {"iterations": 1},
    "t=3": {"iterations": 3},
}
#: The graph's ranking alone: entry points, dense fit and propagated mass, no lexical signal, no bridging.
GRAPH_ONLY = {"lexical_top_k": 0, "stages": ["entry", "dense", "mass", "distinct"]}


METRICS = ("recall@2", "recall@5", "recall@10", "all_gold@8", "mrr", "ndcg@10")
PAIRED = ("recall@2", "recall@5", "all_gold@8")  # the paired differences this benchmark reports
TIMING = ("avg_context_tokens", "p50_ms", "p95_ms", "p50_cpu_ms", "batch_qps", "batch_qps_with_embedding")


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


def fmt_ci(row: dict, m: str) -> str:
    lo, hi = row.get(m + "_ci", (None, None))
    return f"{row[m]:.3f} [{lo:.3f}, {hi:.3f}]" if lo is not None else f"{row[m]:.3f}"


def _methods_table(out: dict) -> list[str]:
    """The methods with their intervals, context tokens and latency."""
    lines = ["| method | recall@2 | recall@5 | recall@10 | all-gold@8 | MRR | context tokens | p50 ms | p95 ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, row in out["methods"].items():
        lines.append(f"| {name} | " + " | ".join(fmt_ci(row, m) for m in METRICS[:4]) +
                     f" | {row['mrr']:.3f} | {row.get('avg_context_tokens', '')} | {row.get('p50_ms', '')} | "
                     f"{row.get('p95_ms', '')} |")
    return lines


def _paired_and_types(out: dict) -> list[str]:
    """Paired differences, then the breakdown by question type."""
    lines = ["", "## Paired differences (bootstrap over the same questions)", "",
             "| comparison | metric | difference | 95% interval | P(diff <= 0) |", "|---|---|---|---|---|"]
    for name, cmp in out["paired"].items():
        for m, d in cmp.items():
            lines.append(f"| {name} | {m} | {d['diff']:+.4f} | [{d['low']:+.4f}, {d['high']:+.4f}] | {d['p_le_0']} |")
    lines += ["", "## By question type", "",
              "| type | questions | avg. gold | method | recall@2 | recall@5 | all-gold@8 |",
              "|---|---|---|---|---|---|---|"]
    for group, per in out["breakdown"].items():
        for name, row in per["methods"].items():
            lines.append(f"| {group} | {per['n']} | {per['avg_gold']} | {name} | {row['recall@2']:.3f} | "
                         f"{row['recall@5']:.3f} | {row['all_gold@8']:.3f} |")
    return lines


def _ablations_table(out: dict) -> list[str]:
    """The ablation rows, each paired against the defaults (nothing with --no-ablations)."""
    if not out["ablations"]:
        return []
    lines = ["", "## Ablations (noderag, one setting changed from the defaults)", "",
             "| variant | change | recall@2 | recall@5 | all-gold@8 | Δ recall@5 vs default [95%] | "
             "Δ all-gold@8 [95%] | context tokens | p50 ms |", "|---|---|---|---|---|---|---|---|---|"]
    for name, row in out["ablations"].items():
        change = ", ".join(f"{k}={v}" for k, v in row["change"].items())
        d5, d8 = row["vs_default"]["recall@5"], row["vs_default"]["all_gold@8"]
        lines.append(f"| {name} | {change} | {fmt_ci(row, 'recall@2')} | {fmt_ci(row, 'recall@5')} | "
                     f"{fmt_ci(row, 'all_gold@8')} | {d5['diff']:+.3f} [{d5['low']:+.3f}, {d5['high']:+.3f}] | "
                     f"{d8['diff']:+.3f} [{d8['low']:+.3f}, {d8['high']:+.3f}] | {row.get('avg_context_tokens', '')} "
                     f"| {row.get('p50_ms', '')} |")
    return lines


def _per_seed_table(out: dict) -> list[str]:
    """noderag on each seed's index alone, and how `noderag eval` reproduces it."""
    lines = ["", "## Per build seed (noderag on that seed's index alone)", "",
             "`noderag eval DATA --index DIR` on an index built with `noderag build DATA/corpus.jsonl --index DIR "
             "--seed S` and the benchmark's build settings (a config file with `[semantic] enabled = true`"
             + (f", `--embed {out['embed_spec']}`" if out.get("embed_spec") else "") +
             ") gives exactly the figures of seed S.", "",
             "| seed | recall@2 | recall@5 | recall@10 | all-gold@8 | MRR | nDCG@10 | context tokens |",
             "|---|---|---|---|---|---|---|---|"]
    for row in out["per_seed"]:
        lines.append(f"| {row['seed']} | " + " | ".join(fmt_ci(row, m) for m in METRICS) +
                     f" | {row.get('avg_context_tokens', '')} |")
    return lines


def write_markdown(path: Path, out: dict) -> None:
    """Methods, paired differences, question-type breakdown, ablations and per-seed rows as markdown tables."""
    lines = [f"# Retrieval benchmark: {out['dataset']}", "",
             f"{out['n_questions']} questions, {out['n_passages']} passages; embedder `{out['embedder']}`; "
             f"{out['build_seeds']} build seed(s) (per-question scores averaged over seeds); {out['machine']}; "
             f"git {out.get('git_revision')}.", "",
             "Command: `" + out["command"] + "`", "",
             "Means with 95% bootstrap intervals over questions (2,000 resamples), all computed by "
             "`noderag.eval.evaluate`. Latency is per query without the query embedding (seed 0, one pass), on a "
             f"shared machine (load average {out['load_average']}).", ""]
    lines += _methods_table(out) + _paired_and_types(out) + _ablations_table(out) + _per_seed_table(out)
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


def build_seeds(data: Path, work: Path, seeds: int, embedder, rebuild: bool,
                embed_spec: str | None = None) -> list[tuple[Path, float | None]]:
    """Build (or reuse) one index per seed, nlp mode, the semantic layer on (for its ablation row)."""
    import shutil

    import noderag

    digest = hashlib.sha256((data / "corpus.jsonl").read_bytes()).hexdigest()
    suffix = "" if embed_spec is None else "_" + "".join(c if c.isalnum() else "-" for c in embed_spec)
    out = []
    for seed in range(seeds):
        d = work / f"{data.name}{suffix}_seed{seed}"
        stamp = d / "bench_corpus.sha256"
        if (not rebuild and stamp.is_file() and stamp.read_text().strip() == digest
                and any(d.glob("generations/*/query/lex_term_hash.npy"))):  # built with the lexical tables
            out.append((d, None))
            continue
        if d.exists():
            shutil.rmtree(d)
        t0 = time.perf_counter()
        noderag.build([str(data / "corpus.jsonl")], str(d), config=bench_build_config(seed, embed_spec),
                      embed=embedder, progress=True)
        out.append((d, time.perf_counter() - t0))
        stamp.write_text(digest + "\n")
    return out


def bench_build_config(seed: int, embed_spec: str | None = None):
    """The benchmark's build settings: the defaults with the semantic layer on (for its ablation row) and the seed."""
    import noderag

    change = {"semantic.enabled": True, "seed": seed, **({"embed.spec": embed_spec} if embed_spec else {})}
    return noderag.NodeRAGConfig().with_overrides(change)


def _flat(row: dict, keep: tuple[str, ...] = TIMING) -> dict:
    """A package row in this benchmark's shape: each metric's mean and ``_ci`` [low, high], then ``keep``."""
    out = {}
    for m in METRICS:
        d = row["metrics"][m]
        out[m] = d["mean"]
        out[m + "_ci"] = [d["low"], d["high"]]
    return {**out, **{k: row[k] for k in keep if row.get(k) is not None}}


def _paired3(d: dict) -> dict:
    """The paired differences this benchmark reports (recall@2/@5, all-gold@8)."""
    return {m: d[m] for m in PAIRED}


def _by_type(res: dict, ds, methods: list[str]) -> dict:
    """The breakdown by question type (HotpotQA ``type``, else MuSiQue ``hops``, else one group 'all')."""
    field = next((f for f in ("type", "hops") if f in res["breakdown"]), None)
    if field is None:
        n_gold = [len(set(q.gold)) for q in ds.questions]
        return {"all": {"n": len(n_gold), "avg_gold": round(float(np.mean(n_gold)), 2),
                        "methods": {m: {k: res["methods"][m]["metrics"][k]["mean"] for k in METRICS}
                                    for m in methods}}}
    per = res["breakdown"][field]
    return {g: {"n": d["n"], "avg_gold": round(d["avg_gold"], 2),
                "methods": {m: {k: per[m][g][k] for k in METRICS} for m in methods}}
            for g, d in per[methods[0]].items()}


def _per_seed(res: dict, built: list[tuple[Path, float | None]]) -> list[dict]:
    """noderag's row on each seed's index alone (the package's ``per_index``; one seed: the row itself)."""
    rows = [one["methods"]["noderag"] for one in res["per_index"]] if "per_index" in res else \
        [res["methods"]["noderag"]]
    return [{"seed": s, "index": str(d), **_flat(row, ("avg_context_tokens",))}
            for s, ((d, _), row) in enumerate(zip(built, rows))]


def bench_output(res: dict, ds, built, ablations: dict, baselines: list[str], args, argv, eval_out: Path) -> dict:
    """The benchmark's JSON from the package's results: the same keys as before, plus ``per_seed``."""
    heads = ["noderag", "graph_only", *baselines]
    n_q = res["dataset"]["n_questions"]
    return {
        "dataset": ds.name,
        "command": "python benchmarks/bench_retrieval.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "n_questions": n_q, "n_passages": res["dataset"]["n_passages"], "embedder": res["index"]["embedder"],
        "embed_spec": args.embed, "build_seeds": len(built),
        "index_build_s": [None if b is None else round(b, 1) for _, b in built],
        "query_embedding_ms_per_query_batched": round(1e3 * res["run"]["query_embedding_s"] / n_q, 3),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}",
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "git_revision": res["git_revision"],
        "search_config": res["config"]["search_config"],
        "methods": {m: _flat(res["methods"][m]) for m in heads},
        "paired": {f"noderag - {m}": _paired3(res["paired"][f"noderag - {m}"]) for m in heads[1:]},
        "breakdown": _by_type(res, ds, heads),
        "ablations": {v: {"change": change, **_flat(res["methods"][v], ("avg_context_tokens", "p50_ms")),
                          "vs_default": _paired3(res["paired"][f"{v} - noderag"])}
                      for v, change in ablations.items()},
        "per_seed": _per_seed(res, built),
        "eval_results": str(eval_out),
    }


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    """The command line, checked (a missing --data file is a usage error)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, type=Path, help="folder with corpus.jsonl and questions.jsonl")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON output file (default benchmarks/results/retrieval_<name>.json)")
    ap.add_argument("--work", type=Path, default=None,
                    help="folder of the per-seed indexes and the evaluation's state (default .benchcache/retrieval)")
    ap.add_argument("--build-seeds", type=int, default=1, help="build the index with seeds 0..N-1 and average")
    ap.add_argument("--index", type=Path, action="append", default=None, metavar="DIR",
                    help="evaluate this existing index (repeatable: one per seed) instead of building")
    ap.add_argument("--embed", default=None, metavar="SPEC",
                    help="embedder of the builds (default: what 'auto' picks for the corpus)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the indexes even if they are up to date")
    ap.add_argument("--no-ablations", action="store_true")
    args = ap.parse_args(argv)
    if args.build_seeds < 1:
        ap.error(f"--build-seeds must be >= 1, got {args.build_seeds}")
    for f in ("corpus.jsonl", "questions.jsonl"):
        if not (args.data / f).is_file():
            ap.error(f"--data {args.data.resolve()}: missing {f}")
    return args


def _indexes(args, data: Path, work: Path, texts: list[str]) -> list[tuple[Path, float | None]]:
    """The indexes to evaluate: ``--index`` as given, else one build per seed (one embedding pass for all)."""
    if args.index:
        return [(d.resolve(), None) for d in args.index]
    import noderag
    from noderag.embed import make_embedder
    from noderag.embed.factory import resolve_auto_spec

    spec = args.embed or resolve_auto_spec(texts)[0]
    opts = noderag.NodeRAGConfig().embed.backend_options()
    embedder = MemoEmbedder(make_embedder(spec, **opts), work / f"embed_memo_{spec.replace(':', '-')}.npz")
    return build_seeds(data, work, args.build_seeds, embedder, args.rebuild, args.embed)


def main(argv: list[str] | None = None) -> int:
    """Build (or reuse) the seeds' indexes, evaluate them through noderag.eval, write JSON, markdown and plot."""
    args = _arguments(argv)
    from noderag.eval import evaluate, load_dataset

    data = args.data.resolve()
    out_path = args.out or REPO / "benchmarks" / "results" / f"retrieval_{data.name}.json"
    work = (args.work or REPO / ".benchcache" / "retrieval").resolve()
    work.mkdir(parents=True, exist_ok=True)
    ds = load_dataset(data, format="noderag")
    texts = [r["text"] for r in ds.corpus]
    built = _indexes(args, data, work, texts)
    ablations = {} if args.no_ablations else dict(ABLATIONS)
    baselines = ["dense", "bm25"] + (["bm25_segmenter"] if corpus_language(texts).chinese else [])
    compare = [("noderag", m) for m in ("graph_only", *baselines)] + [(v, "noderag") for v in ablations]
    eval_out = work / (f"eval_{data.name}" + (f"_{args.embed.replace(':', '-')}" if args.embed else ""))
    res = evaluate(ds, [d for d, _ in built], out=eval_out, methods=["noderag", "graph_only", *baselines,
                                                                     *ablations],
                   variants={"graph_only": GRAPH_ONLY, **ablations}, search_config=StagedConfig(), compare=compare,
                   restart=True,
                   log=lambda msg: print(f"bench_retrieval: {msg}", file=sys.stderr, flush=True))
    out = bench_output(res, ds, built, ablations, baselines, args, argv, eval_out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    write_markdown(out_path.with_suffix(".md"), out)
    plotted = write_plot(out_path.with_suffix(".png"), out)
    for m, row in out["methods"].items():
        print(f"{m:16s} " + " ".join(f"{k} {row[k]}" for k in METRICS[:4]))
    for row in out["per_seed"]:
        print(f"seed {row['seed']} noderag " + " ".join(f"{k} {row[k]}" for k in METRICS[:4]))
    print(f"wrote {out_path}, {out_path.with_suffix('.md')}" + (f", {out_path.with_suffix('.png')}" if plotted else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
