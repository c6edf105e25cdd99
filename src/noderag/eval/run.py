"""``noderag.eval.evaluate``: retrieval (and answer) evaluation of an index on a dataset, with baselines.

What it does, in order: load the dataset (:mod:`noderag.eval.loaders`); open the index, building it
from the dataset's corpus when it is missing, else check that its documents are that corpus; then
stream the questions in batches. Each batch is embedded once (the index's embedder, also the dense
baseline's), ranked by every method (noderag through ``retrieve_many``, exact dense cosine, BM25),
timed (one batch call, then each question alone for latency), optionally answered by an LLM, and
appended as one JSON line to ``OUT/state/records.jsonl`` (flushed and fsynced). A killed run resumes
from the batches on disk: finished questions are never ranked or answered again. At the end the
per-question scores (:func:`noderag.eval.metrics.passage_scores`) are summarised with bootstrap
intervals, paired comparisons against noderag and breakdowns by question labels, and written as
``results.json``, ``results.md``, ``recall.png`` and (``per_question=True``) ``per_question.jsonl``.

Why batches through ``retrieve_many``: one embedding call and one threaded PPR call per batch is the
fast path, and holding only one batch of results keeps 10^4 questions on a large index in memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..store.layout import CURRENT, LLM_CACHE
from .answers import exact_match, judge_request, parse_judgement, token_f1
from .loaders import Dataset, DatasetError, load_dataset, write_corpus_jsonl
from .metrics import bootstrap_interval, breakdown, paired_bootstrap, passage_scores

__all__ = ["evaluate", "METHODS", "EvalMismatchError"]

METHODS = ("noderag", "dense", "bm25")
ALL_GOLD_K = 8
BASELINE_CONTEXT_PASSAGES = 5  # a passage retriever's context: its top 5 passages (as the benchmark)
_SCORE_CELLS = 1 << 24  # query x passage scores held at once by a baseline (128 MB of float64)


class EvalMismatchError(DatasetError):
    """The index is not the dataset's corpus, or ``OUT`` holds a run with other settings."""


# ----------------------------------------------------------------------------- small helpers

def _passage_text(row: dict) -> str:
    """A passage as the baselines see it: title and text (the benchmark's convention)."""
    return f"{row.get('title') or ''}\n{row['text']}".strip()


def git_revision() -> str | None:
    """The short git revision of the package's source tree when it runs from a checkout (``+dirty`` if changed)."""
    here = Path(__file__).resolve().parent
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=here, capture_output=True, text=True,
                             timeout=10)
        if top.returncode != 0 or not (Path(top.stdout.strip()) / "src" / "noderag" / "eval").is_dir():
            return None  # not noderag's own checkout (e.g. a venv inside some other repository)
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                             timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "src"],
                               cwd=top.stdout.strip(), capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    rev = out.stdout.strip() if out.returncode == 0 else ""
    # "+dirty": the package source differs from that commit (the figures may not reproduce from it)
    return (rev + ("+dirty" if dirty.stdout.strip() else "")) or None


def _machine() -> dict:
    return {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform()}


def _dataset_digest(ds: Dataset) -> str:
    """Digest of the corpus and the scored questions (ids, texts, gold): what a resumed run must share."""
    h = hashlib.blake2b(digest_size=16)
    for row in ds.corpus:
        h.update(json.dumps([row["id"], row["title"], row["text"]], ensure_ascii=False).encode())
    for q in ds.questions:
        h.update(json.dumps([q.id, q.question, q.gold, q.answers], ensure_ascii=False).encode())
    return h.hexdigest()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- index: build or check

def _index_documents(index: Any) -> set[tuple[str, str]]:
    docs = index.documents
    return set(zip(docs.column("source").to_pylist(), docs.column("content_hash").to_pylist()))


def _corpus_documents(corpus_path: Path) -> set[tuple[str, str]]:
    """(source id, content hash) of every document a build of ``corpus_path`` keeps (the build's own reader)."""
    from ..build.ingest import ingest

    docs, _ = ingest([str(corpus_path)])
    return {(d.source, d.content_hash) for d in docs}


def open_or_build(ds: Dataset, index_dir: Path, *, build_config: Any = None, progress: bool = True,
                  log: Callable[[str], None] | None = None) -> tuple[Any, dict]:
    """Open ``index_dir``, building it from the dataset's corpus when it has no finished build.

    An existing index must hold exactly the dataset's corpus (same source ids and content hashes
    as a build of it would keep); otherwise :class:`EvalMismatchError` says how they differ.
    Returns the opened index and ``{"built", "build_s"}``.
    """
    import noderag

    index_dir = Path(index_dir)
    with tempfile.TemporaryDirectory(prefix="noderag-eval-") as tmp:
        corpus_path = ds.corpus_file or write_corpus_jsonl(ds, Path(tmp) / f"{ds.name}.corpus.jsonl")
        if not (index_dir / CURRENT).is_file():
            if log:
                log(f"index {index_dir} has no finished build: building it from the {len(ds.corpus):,} passages "
                    "of the dataset")
            t0 = time.perf_counter()
            noderag.build([str(corpus_path)], str(index_dir), config=build_config, progress=progress)
            return noderag.Index.open(index_dir), {"built": True, "build_s": round(time.perf_counter() - t0, 1)}
        index = noderag.Index.open(index_dir)
        want, have = _corpus_documents(corpus_path), _index_documents(index)
    if want != have:
        extra, missing = have - want, want - have
        eg = sorted(extra or missing)[0][0]
        index.close()
        raise EvalMismatchError(
            f"index {index_dir} does not hold the dataset's corpus: {len(extra):,} of its documents are not in "
            f"the dataset and {len(missing):,} of the dataset's passages are not in it (e.g. id {eg!r}); "
            "use another --index (it is built when missing)")
    return index, {"built": False, "build_s": None}


# ----------------------------------------------------------------------------- resumable state

class _State:
    """``OUT/state/``: the run's fingerprint and one JSON line per finished batch (append-only)."""

    def __init__(self, out: Path, fingerprint: dict, restart: bool) -> None:
        self.dir = out / "state"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.records = self.dir / "records.jsonl"
        fp_path = self.dir / "run.json"
        if restart:
            for p in (fp_path, self.records, self.dir / "dense_vectors.npy"):
                p.unlink(missing_ok=True)
        if fp_path.is_file():
            old = json.loads(fp_path.read_text(encoding="utf-8"))
            diff = sorted(k for k in set(old) | set(fingerprint) if old.get(k) != fingerprint.get(k))
            if diff:
                raise EvalMismatchError(
                    f"{fp_path}: field {diff[0]!r} differs from this run's ({', '.join(diff)} changed): "
                    "use another --out, or --restart to discard the finished batches")
        else:
            self.records.unlink(missing_ok=True)
            _write_atomic(fp_path, json.dumps(fingerprint, indent=1, sort_keys=True) + "\n")
        self.batches: dict[int, dict] = {}
        self._load()

    def _load(self) -> None:
        """Read finished batches; a torn last line (killed mid-write) is cut off."""
        if not self.records.is_file():
            return
        good = 0
        with open(self.records, "rb") as fh:
            for line in fh:
                if not line.endswith(b"\n"):
                    break
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    break
                self.batches[int(rec["batch"])] = rec
                good += len(line)
        if good != self.records.stat().st_size:
            with open(self.records, "r+b") as fh:
                fh.truncate(good)

    def append(self, rec: dict) -> None:
        line = json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n"
        with open(self.records, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        self.batches[int(rec["batch"])] = rec


# ----------------------------------------------------------------------------- methods

@dataclass
class _Baselines:
    """Dense and BM25 retrievers over the corpus and lazily counted passage tokens."""

    ids: list[str]
    texts: list[str]
    dense: Any = None
    bm25: Any = None
    _tokens: dict | None = None

    def tokens(self, j: int) -> int:
        from ..tokenize import count_tokens

        if self._tokens is None:
            self._tokens = {}
        n = self._tokens.get(j)
        if n is None:
            n = self._tokens[j] = count_tokens(self.texts[j])
        return n


def _dense_vectors(state: _State, embedder: Any, texts: list[str], progress: bool) -> np.ndarray:
    """Passage vectors from the index's embedder, cached in ``state/dense_vectors.npy`` for resumed runs."""
    path = state.dir / "dense_vectors.npy"
    if path.is_file():
        vec = np.load(path, mmap_mode="r", allow_pickle=False)
        if vec.shape[0] == len(texts):
            return vec
    from tqdm.auto import tqdm

    parts = []
    step = 1024
    for s in tqdm(range(0, len(texts), step), desc="dense: passages", unit="batch", disable=not progress,
                  leave=False):
        parts.append(np.asarray(embedder.embed(texts[s:s + step]), dtype=np.float32))
    vec = np.concatenate(parts) if parts else np.zeros((0, 1), np.float32)
    tmp = path.with_name("dense_vectors.tmp.npy")
    np.save(tmp, vec, allow_pickle=False)
    os.replace(tmp, path)
    return vec


def _rank_baseline(score_fn: Callable[[Any], np.ndarray], inputs: Any, n_passages: int, depth: int) -> np.ndarray:
    """Top-``depth`` passage rows per query, scored in slices of at most _SCORE_CELLS cells."""
    from ..search.baselines import top_k_rows

    rows = max(1, _SCORE_CELLS // max(n_passages, 1))
    out = [top_k_rows(score_fn(inputs[s:s + rows]), depth)[0] for s in range(0, len(inputs), rows)]
    return np.concatenate(out) if out else np.zeros((0, depth), np.int64)


def _baseline_batch(score_fn, inputs, base: _Baselines, depth: int, latency: bool) -> dict:
    """Rank one batch with a baseline: top-``depth`` ids, top-5 context tokens, single-query latencies."""
    from ..search.baselines import top_k_rows

    t0 = time.perf_counter()
    idx = _rank_baseline(score_fn, inputs, len(base.ids), depth)
    batch_s = time.perf_counter() - t0
    lat = []
    if latency:
        for i in range(len(inputs)):
            t0 = time.perf_counter()
            top_k_rows(score_fn(inputs[i:i + 1]), depth)
            lat.append(time.perf_counter() - t0)
    rows = idx.tolist()
    return {"ranked": [[base.ids[j] for j in r] for r in rows],
            "ctx": [sum(base.tokens(j) for j in r[:BASELINE_CONTEXT_PASSAGES]) for r in rows],
            "lat": lat, "batch_s": batch_s, "_rows": rows}


def _baseline_context(rows: list[int], base: _Baselines, budget: int) -> list[tuple[str, str]]:
    """Answer context of a passage retriever: its ranked passages up to ``budget`` tokens (at least one)."""
    pairs: list[tuple[str, str]] = []
    used = 0
    for rank, j in enumerate(rows, 1):
        n = base.tokens(j) + 4
        if pairs and used + n > budget:
            break
        pairs.append((str(rank), " ".join(base.texts[j].split())))
        used += n
    return pairs


def _answers(llm: Any, judge: Any, qs: list, contexts: list, label: str) -> list[dict]:
    """Answer each question over its context; EM/F1 against its gold answers, and the judge's verdict."""
    from ..llm.answer import answer_many

    got = answer_many(llm, [(q.question, ctx) for q, ctx in zip(qs, contexts)], stage=f"answer:{label}")
    out = []
    for q, a in zip(qs, got):
        rec = {"answer": a.answer, "error": a.error, "prompt_tokens": a.usage.prompt,
               "completion_tokens": a.usage.completion}
        if q.answers:
            rec["em"] = exact_match(a.answer or "", q.answers)
            rec["f1"] = token_f1(a.answer or "", q.answers)
        out.append(rec)
    if judge is not None:
        idx = [i for i, q in enumerate(qs) if q.answers]
        res = judge.run([judge_request(qs[i].question, qs[i].answers, out[i]["answer"] or "", id=qs[i].id)
                         for i in idx], stage=f"judge:{label}") if idx else []
        for i, r in zip(idx, res):
            out[i]["judge"] = parse_judgement(r)
    return out


# ----------------------------------------------------------------------------- summary

def _percentile_ms(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)) * 1e3, 3) if values else None


def _ci(values: np.ndarray, n_resamples: int, level: float, seed: int) -> dict:
    m, lo, hi = bootstrap_interval(values, n_resamples=n_resamples, level=level, seed=seed)
    return {"mean": round(m, 4), "low": round(lo, 4), "high": round(hi, 4)}


def summarise(ds: Dataset, batches: dict[int, dict], methods: Sequence[str], ks: Sequence[int], *,
              n_resamples: int, level: float, seed: int, by: Sequence[str] | None) -> tuple[dict, dict, dict, dict]:
    """(methods, paired, breakdowns, scores) from the finished batches, in question order."""
    order = sorted(batches)
    ids = [i for b in order for i in batches[b]["ids"]]
    qpos = {q.id: i for i, q in enumerate(ds.questions)}
    gold = [ds.questions[qpos[i]].gold for i in ids]
    rows: dict[str, dict] = {}
    scores: dict[str, dict[str, np.ndarray]] = {}
    for m in methods:
        recs = [batches[b]["methods"][m] for b in order]
        ranked = [r for rec in recs for r in rec["ranked"]]
        s = passage_scores(ranked, gold, ks=ks, all_gold_k=ALL_GOLD_K)
        scores[m] = s
        lat = [x for rec in recs for x in rec["lat"]]
        batch_s = sum(rec["batch_s"] for rec in recs)
        embed_s = sum(batches[b].get("embed_s", 0.0) for b in order) if m != "bm25" else 0.0
        ctx = [x for rec in recs for x in rec["ctx"]]
        row = {"metrics": {k: _ci(v, n_resamples, level, seed) for k, v in s.items()},
               "avg_context_tokens": round(float(np.mean(ctx)), 1) if ctx else None,
               "p50_ms": _percentile_ms(lat, 50), "p95_ms": _percentile_ms(lat, 95),
               "batch_qps": round(len(ids) / batch_s, 1) if batch_s > 0 else None}
        if m != "bm25":
            row["batch_qps_with_embedding"] = round(len(ids) / (batch_s + embed_s), 1) if batch_s + embed_s else None
        ans = [a for rec in recs for a in rec.get("answers") or []]
        if ans:
            em = np.array([a["em"] for a in ans if "em" in a], dtype=np.float64)
            f1 = np.array([a["f1"] for a in ans if "f1" in a], dtype=np.float64)
            judged = np.array([a["judge"] for a in ans if a.get("judge") is not None], dtype=np.float64)
            row["answers"] = {"answered": len(ans), "failed": sum(a["error"] is not None for a in ans),
                              "exact_match": _ci(em, n_resamples, level, seed) if em.size else None,
                              "f1": _ci(f1, n_resamples, level, seed) if f1.size else None,
                              "judge_accuracy": _ci(judged, n_resamples, level, seed) if judged.size else None,
                              "judged": int(judged.size),
                              "mean_prompt_tokens": round(float(np.mean([a["prompt_tokens"] for a in ans])), 1),
                              "mean_completion_tokens": round(float(np.mean([a["completion_tokens"] for a in ans])), 1)}
            if em.size == len(ans):
                scores[m] = {**s, "exact_match": em, "f1": f1}
        rows[m] = row
    paired: dict[str, dict] = {}
    ref = methods[0]
    for m in methods[1:]:
        common = [k for k in scores[ref] if k in scores[m]]
        paired[f"{ref} - {m}"] = {k: {kk: (round(v, 4) if isinstance(v, float) else v) for kk, v in
                                      paired_bootstrap(scores[ref][k], scores[m][k], n_resamples=n_resamples,
                                                       level=level, seed=seed).items()} for k in common}
    labels = [ds.questions[qpos[i]].labels for i in ids]
    fields = list(by) if by else sorted({k for lab in labels for k in lab})
    breakdowns: dict[str, dict] = {}
    for f in fields:
        have = [i for i, lab in enumerate(labels) if f in lab]
        if not have:
            continue
        groups = [labels[i][f] for i in have]
        sel = np.asarray(have)
        breakdowns[f] = {m: {g: {k: (round(v, 4) if k != "n" else v) for k, v in d.items()}
                             for g, d in breakdown({k: v[sel] for k, v in scores[m].items()}, groups).items()}
                         for m in methods}
    return rows, paired, breakdowns, {"ids": ids, "gold": gold, "scores": scores}


# ----------------------------------------------------------------------------- outputs

def write_markdown(path: Path, res: dict) -> None:
    """Tables of ``results.json``: metrics with intervals, timing, answers, paired differences, breakdowns."""
    lv = int(round(100 * res["config"]["level"]))
    ds = res["dataset"]
    first = next(iter(res["methods"].values()))
    metrics = list(first["metrics"])
    lines = [f"# noderag eval: {ds['name']} ({ds['format']})", "",
             f"{ds['n_questions']:,} questions scored ({ds['stats']['questions_skipped']:,} skipped without mapped "
             f"gold; {ds['stats']['gold_unmapped']:,} of {ds['stats']['gold_total']:,} gold passages unmapped), "
             f"{ds['n_passages']:,} passages; index `{res['index']['path']}` (generation "
             f"{res['index']['generation']}, embedder `{res['index']['embedder']}`); noderag "
             f"{res['noderag_version']} ({res['git_revision'] or 'no git revision'}); {res['machine']['cpus']} CPUs, "
             f"load {res['load_average']['start']} -> {res['load_average']['end']}.", "",
             f"Mean [{lv}% bootstrap interval, {res['config']['n_resamples']} resamples over questions].", "",
             "| method | " + " | ".join(metrics) + " |", "|---" * (len(metrics) + 1) + "|"]
    for m, row in res["methods"].items():
        lines.append(f"| {m} | " + " | ".join(f"{row['metrics'][k]['mean']:.4f} [{row['metrics'][k]['low']:.3f}, "
                                               f"{row['metrics'][k]['high']:.3f}]" for k in metrics) + " |")
    tcols = ["avg_context_tokens", "p50_ms", "p95_ms", "batch_qps", "batch_qps_with_embedding"]
    lines += ["", "Latency: one question alone, without its embedding; batch q/s: `retrieve_many` (baselines: one "
              "scoring call) per batch of questions, with the embedding where the method uses one. Context tokens "
              f"of dense/BM25: their top {BASELINE_CONTEXT_PASSAGES} passages.", "",
              "| method | " + " | ".join(tcols) + " |", "|---" * (len(tcols) + 1) + "|"]
    for m, row in res["methods"].items():
        lines.append(f"| {m} | " + " | ".join("" if row.get(c) is None else str(row.get(c)) for c in tcols) + " |")
    if any("answers" in row for row in res["methods"].values()):
        lines += ["", f"Answers by `{res['config']['llm']}`" + (f", judged by `{res['config']['judge']}`"
                                                                if res["config"]["judge"] else "") + ".", "",
                  "| method | answered | failed | EM | F1 | judge | prompt tokens | completion tokens |",
                  "|---|---|---|---|---|---|---|---|"]
        for m, row in res["methods"].items():
            a = row.get("answers")
            if not a:
                continue
            cell = (lambda d: "" if not d else f"{d['mean']:.4f} [{d['low']:.3f}, {d['high']:.3f}]")
            lines.append(f"| {m} | {a['answered']} | {a['failed']} | {cell(a['exact_match'])} | {cell(a['f1'])} | "
                         f"{cell(a['judge_accuracy'])} | {a['mean_prompt_tokens']} | {a['mean_completion_tokens']} |")
    if res["paired"]:
        lines += ["", f"## Paired differences (same questions resampled together; {lv}% interval; "
                  "p(<=0): share of resamples where the first method is not ahead)", "",
                  "| comparison | metric | diff | low | high | p(<=0) |", "|---|---|---|---|---|---|"]
        for name, d in res["paired"].items():
            for k, v in d.items():
                lines.append(f"| {name} | {k} | {v['diff']:+.4f} | {v['low']:+.4f} | {v['high']:+.4f} | "
                             f"{v['p_le_0']:.3f} |")
    for f, per in res["breakdown"].items():
        lines += ["", f"## By {f}", "", "| method | " + f + " | n | " + " | ".join(metrics) + " |",
                  "|---" * (len(metrics) + 3) + "|"]
        for m, groups in per.items():
            for g, d in groups.items():
                lines.append(f"| {m} | {g} | {d['n']} | " + " | ".join(f"{d[k]:.4f}" for k in metrics) + " |")
    lines += ["", "## Configuration", "", "```json", json.dumps(res["config"], indent=1, sort_keys=True), "```", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def write_plot(path: Path, res: dict) -> str | None:
    """recall@k per method with interval whiskers; returns why it was not written (no matplotlib), else None."""
    try:
        import matplotlib
    except ImportError:
        return "matplotlib is not installed (pip install 'noderag[eval]')"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(res["methods"])
    keys = [k for k in next(iter(res["methods"].values()))["metrics"] if k.startswith(("recall@", "all_gold@"))]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(keys) * len(methods) / 2), 4.6))
    width = 0.8 / max(len(methods), 1)
    x = np.arange(len(keys))
    for i, m in enumerate(methods):
        d = res["methods"][m]["metrics"]
        mean = np.array([d[k]["mean"] for k in keys])
        err = np.array([[d[k]["mean"] - d[k]["low"] for k in keys], [d[k]["high"] - d[k]["mean"] for k in keys]])
        ax.bar(x + (i - (len(methods) - 1) / 2) * width, mean, width, yerr=err, capsize=3, label=m)
    ax.set_xticks(x, keys)
    ax.set_ylim(0, 1)
    ax.set_ylabel("score")
    lv = int(round(100 * res["config"]["level"]))
    ax.set_title(f"{res['dataset']['name']}: {res['dataset']['n_questions']:,} questions ({lv}% bootstrap intervals)")
    ax.legend(loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def _write_per_question(path: Path, ds: Dataset, batches: dict, methods: Sequence[str], summ: dict) -> None:
    qpos = {q.id: i for i, q in enumerate(ds.questions)}
    n = 0
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for b in sorted(batches):
            rec = batches[b]
            for j, qid in enumerate(rec["ids"]):
                q = ds.questions[qpos[qid]]
                row = {"id": qid, "question": q.question, "gold": q.gold, "labels": q.labels, "methods": {}}
                for m in methods:
                    mr = rec["methods"][m]
                    d = {"ranked": mr["ranked"][j],
                         "scores": {k: round(float(v[n]), 4) for k, v in summ["scores"][m].items()},
                         "context_tokens": mr["ctx"][j]}
                    if mr["lat"]:
                        d["latency_ms"] = round(mr["lat"][j] * 1e3, 3)
                    if mr.get("answers"):
                        d["answer"] = mr["answers"][j]
                    row["methods"][m] = d
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                n += 1
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- the run

def evaluate(data: str | os.PathLike | Dataset, index: str | os.PathLike, *, out: str | os.PathLike | None = None,
             methods: Sequence[str] = METHODS, ks: Sequence[int] = (2, 5, 10), format: str | None = None,
             split: str | None = None, llm: Any = None, judge: Any = None, search_config: Any = None,
             build_config: Any = None, batch_size: int = 256, latency: bool = True, per_question: bool = False,
             n_resamples: int = 2000, level: float = 0.95, seed: int = 0, by: Sequence[str] | None = None,
             limit: int | None = None, restart: bool = False, progress: bool = True,
             log: Callable[[str], None] | None = None) -> dict:
    """Evaluate an index on a dataset; returns the results dict (also written to ``out`` when given).

    Parameters
    ----------
    data : dataset folder or file (any format of :mod:`noderag.eval.loaders`), or a loaded Dataset
    index : index directory; built from the dataset's corpus when it has no finished build
    out : folder for results.json/.md/.png, per_question.jsonl and the resumable ``state/``
        (None: a temporary folder, so nothing is kept and nothing resumes)
    methods : any of "noderag", "dense", "bm25"; the first is the reference of the paired comparisons
    ks : recall@k cut-offs (all-gold is at 8, nDCG at 10, MRR within the kept depth max(ks, 10))
    llm, judge : LLM backends or spec strings: answer each question over each method's context (EM, F1),
        and judge those answers
    search_config : noderag.search.SearchConfig (default: the search defaults)
    build_config : NodeRAGConfig of the build when the index is missing
    batch_size : questions per retrieve_many call and per resumable record
    latency : also time each question alone (p50/p95)
    n_resamples, level, seed : bootstrap settings (deterministic by seed)
    by : question label fields to break the scores down by (default: every categorical field found)
    limit : evaluate only the first ``limit`` scorable questions
    restart : discard the finished batches in ``out``
    """
    methods = list(dict.fromkeys(methods))
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise DatasetError(f"unknown method(s) {bad}: choose from {', '.join(METHODS)}")
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise DatasetError(f"recall cut-offs must be >= 1, got {ks}")
    if int(batch_size) < 1:
        raise DatasetError(f"batch size must be >= 1, got {batch_size}")
    depth = max(ks[-1], 10, ALL_GOLD_K)
    t_start = time.perf_counter()
    load_start = [round(x, 2) for x in os.getloadavg()]
    revision = git_revision()  # at the start: the code that runs, even if the checkout moves meanwhile
    ds = data if isinstance(data, Dataset) else load_dataset(data, format=format, split=split)
    if limit is not None:
        ds = replace(ds, questions=ds.questions[:int(limit)])
    if not ds.questions:
        raise DatasetError(f"{ds.files[-1]}: no question has any gold passage in the corpus: nothing to score")
    if log:
        st = ds.stats
        log(f"{ds.name} ({ds.format}): {len(ds.questions):,} questions to score, {st['questions_skipped']:,} "
            f"skipped without mapped gold, {st['gold_unmapped']:,} of {st['gold_total']:,} gold passages unmapped, "
            f"{len(ds.corpus):,} passages ({st['duplicate_passages']:,} duplicates merged)")

    tmp_out = None
    if out is None:
        tmp_out = tempfile.TemporaryDirectory(prefix="noderag-eval-out-")
        out = tmp_out.name
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        ix, build_info = open_or_build(ds, Path(index), build_config=build_config, progress=progress, log=log)
        try:
            return _run(ds, ix, build_info, out, methods, ks, depth, llm, judge, search_config, int(batch_size),
                        latency, per_question and tmp_out is None, n_resamples, level, seed, by, restart, progress,
                        log, t_start, load_start, revision, write=tmp_out is None)
        finally:
            ix.close()
    finally:
        if tmp_out is not None:
            tmp_out.cleanup()


def _resolve_llm(spec: Any, out: Path) -> Any:
    if spec is None or not isinstance(spec, str):
        return spec
    from ..llm import make_llm

    return make_llm(spec, cache_path=out / LLM_CACHE)


def _score_batch(b: int, batch: list, methods: Sequence[str], searcher, base: "_Baselines", depth: int, latency: bool,
                 llm_b, judge_b, budget: int) -> dict[str, Any]:
    """The record of one batch of questions: each method's ranked passages (and timings, answers)."""
    texts = [q.question for q in batch]
    rec: dict[str, Any] = {"batch": b, "ids": [q.id for q in batch], "methods": {}}
    qvecs = None
    if "noderag" in methods or "dense" in methods:
        t0 = time.perf_counter()
        qvecs = searcher.embed(texts)
        rec["embed_s"] = time.perf_counter() - t0
    res = None
    if "noderag" in methods:
        t0 = time.perf_counter()
        res = searcher.retrieve_many(texts, query_vectors=qvecs)
        batch_s = time.perf_counter() - t0
        lat = []
        if latency:
            for q, v in zip(texts, qvecs):
                t0 = time.perf_counter()
                searcher.retrieve(q, query_vector=v)
                lat.append(time.perf_counter() - t0)
        rec["methods"]["noderag"] = {"ranked": [list(r.passages[:depth]) for r in res],
                                     "ctx": [int(r.context_tokens) for r in res], "lat": lat,
                                     "batch_s": batch_s}
    if "dense" in methods:
        rec["methods"]["dense"] = _baseline_batch(base.dense.scores, qvecs, base, depth, latency)
    if "bm25" in methods:
        rec["methods"]["bm25"] = _baseline_batch(base.bm25.scores, texts, base, depth, latency)
    if llm_b is not None:
        from ..llm.answer import retrieval_context

        for m in methods:
            ctxs = ([retrieval_context(r) for r in res] if m == "noderag" else
                    [_baseline_context(rows, base, budget) for rows in rec["methods"][m]["_rows"]])
            rec["methods"][m]["answers"] = _answers(llm_b, judge_b, batch, ctxs, m)
    for m in methods:
        rec["methods"][m].pop("_rows", None)
    return rec


def _run(ds, ix, build_info, out, methods, ks, depth, llm, judge, search_config, batch_size, latency, per_question,
         n_resamples, level, seed, by, restart, progress, log, t_start, load_start, revision, write) -> dict:
    from tqdm.auto import tqdm

    import noderag
    from ..search import SearchConfig

    cfg = (search_config or SearchConfig()).validate()
    searcher = ix.searcher(cfg)
    embedder = searcher.embedder
    emb_name = getattr(embedder, "name", type(embedder).__name__)
    llm_spec = llm if isinstance(llm, str) or llm is None else getattr(llm, "model_id", type(llm).__name__)
    judge_spec = judge if isinstance(judge, str) or judge is None else getattr(judge, "model_id", type(judge).__name__)
    config = {"methods": methods, "ks": ks, "all_gold_k": ALL_GOLD_K, "depth": depth, "batch_size": batch_size,
              "latency": latency, "n_resamples": n_resamples, "level": level, "seed": seed,
              "search_config": cfg.to_dict(), "llm": llm_spec, "judge": judge_spec}
    fingerprint = {"dataset": _dataset_digest(ds), "index_generation": ix.generation, "index_path": str(ix.root),
                   "embedder": emb_name, **{k: config[k] for k in ("methods", "ks", "depth", "batch_size", "latency",
                                                                    "search_config", "llm", "judge")}}
    state = _State(out, fingerprint, restart)
    llm_b, judge_b = _resolve_llm(llm, out), _resolve_llm(judge, out)

    base = _Baselines([r["id"] for r in ds.corpus], [_passage_text(r) for r in ds.corpus])
    if "dense" in methods:
        from ..search.baselines import DenseRetriever

        base.dense = DenseRetriever(base.ids, _dense_vectors(state, embedder, base.texts, progress))
    if "bm25" in methods:
        from ..search.baselines import BM25Retriever

        if log:
            log(f"bm25: indexing {len(base.ids):,} passages")
        base.bm25 = BM25Retriever(base.ids, base.texts)

    qs = ds.questions
    n_batches = (len(qs) + batch_size - 1) // batch_size
    done = [b for b in range(n_batches) if b in state.batches]
    for b in done:  # a finished batch must hold the questions this run would put there
        want = [q.id for q in qs[b * batch_size:(b + 1) * batch_size]]
        if state.batches[b]["ids"] != want:
            raise EvalMismatchError(f"{state.records}: batch {b} holds other questions: use --restart")
    resumed = sum(len(state.batches[b]["ids"]) for b in done)
    if resumed and log:
        log(f"resuming: {resumed:,} of {len(qs):,} questions were scored by an earlier run ({out / 'state'})")
    bar = tqdm(total=len(qs), initial=resumed, desc="questions", unit="q", disable=not progress)
    try:
        for b in range(n_batches):
            if b in state.batches:
                continue
            batch = qs[b * batch_size:(b + 1) * batch_size]
            rec = _score_batch(b, batch, methods, searcher, base, depth, latency, llm_b, judge_b, cfg.context_tokens)
            state.append(rec)
            bar.update(len(batch))
    finally:
        bar.close()

    rows, paired, breakdowns, summ = summarise(ds, state.batches, methods, ks, n_resamples=n_resamples, level=level,
                                               seed=seed, by=by)
    res = {
        "noderag_version": noderag.__version__, "git_revision": revision,
        "dataset": {"name": ds.name, "format": ds.format, "files": ds.files, "stats": ds.stats,
                    "n_questions": len(summ["ids"]), "n_passages": len(ds.corpus)},
        "index": {"path": str(ix.root), "generation": ix.generation, "embedder": emb_name,
                  "embed_config": ix.manifest.get("config", {}).get("embed"), "counts": ix.manifest.get("counts"),
                  **build_info},
        "config": config, "machine": _machine(),
        "load_average": {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]},
        "run": {"questions_resumed": resumed, "questions_scored": len(summ["ids"]) - resumed,
                "wall_s": round(time.perf_counter() - t_start, 1)},
        "methods": rows, "paired": paired, "breakdown": breakdowns,
    }
    if write:
        _write_atomic(out / "results.json", json.dumps(res, indent=1, ensure_ascii=False) + "\n")
        write_markdown(out / "results.md", res)
        why = write_plot(out / "recall.png", res)
        if why and log:
            log(f"{why}: {out / 'recall.png'} not written")
        if per_question:
            _write_per_question(out / "per_question.jsonl", ds, state.batches, methods, summ)
    return res
