"""The figures of an evaluation, from its finished batch records: per-question scores, rows with bootstrap
intervals, paired comparisons, breakdowns, and their average over several builds of an index.

Why apart from the run: the figures are a pure function of the records (ranked ids, timings, answers)
and the dataset, so a fresh run, a resumed run, a run over several indexes (one per build seed) and the
repository's retrieval benchmark all summarise through this one code path, and agree to the last digit.

Several indexes: the methods that rank with the index (noderag and its search variants) are scored on
each; the baselines (dense, BM25), which do not depend on the build, on the first only. A method's
per-question scores are averaged over the indexes *before* the bootstrap (which resamples questions), and
each index also gets its own rows, equal to what an evaluation of that index alone gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from .metrics import bootstrap_interval, breakdown, paired_bootstrap, passage_scores

__all__ = ["ALL_GOLD_K", "BASELINES", "Scored", "score_batches", "figures"]

ALL_GOLD_K = 8
#: methods that rank passages without the index's graph: scored once, on the first index
BASELINES = ("dense", "bm25", "bm25_segmenter")
ANSWER_KEYS = ("exact_match", "f1")


@dataclass
class Scored:
    """One index's finished batches in question order: ids, gold, per-question scores and records per method."""

    ids: list[str]
    gold: list[list[str]]
    scores: dict[str, dict[str, np.ndarray]]
    records: dict[str, list[dict]]


def _answer_arrays(answers: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact match, token F1 and judge verdicts of the answered questions (each where it exists)."""
    em = np.array([a["em"] for a in answers if "em" in a], dtype=np.float64)
    f1 = np.array([a["f1"] for a in answers if "f1" in a], dtype=np.float64)
    judged = np.array([a["judge"] for a in answers if a.get("judge") is not None], dtype=np.float64)
    return em, f1, judged


def score_batches(ds: Any, batches: Mapping[int, dict], methods: Sequence[str], ks: Sequence[int]) -> Scored:
    """Per-question passage scores (and EM/F1 where every question was answered) of each method's batches."""
    order = sorted(batches)
    ids = [i for b in order for i in batches[b]["ids"]]
    qpos = {q.id: i for i, q in enumerate(ds.questions)}
    gold = [ds.questions[qpos[i]].gold for i in ids]
    scores: dict[str, dict[str, np.ndarray]] = {}
    records: dict[str, list[dict]] = {}
    for m in methods:
        recs = records[m] = [batches[b]["methods"][m] for b in order]
        s = passage_scores([r for rec in recs for r in rec["ranked"]], gold, ks=ks, all_gold_k=ALL_GOLD_K)
        answers = [a for rec in recs for a in rec.get("answers") or []]
        em, f1, _ = _answer_arrays(answers)
        if answers and em.size == len(answers):
            s = {**s, "exact_match": em, "f1": f1}
        scores[m] = s
    return Scored(ids, gold, scores, records)


def _ci(values: np.ndarray, boot: Mapping[str, Any]) -> dict:
    """Mean and bootstrap interval of per-question values, rounded to 4 places."""
    m, lo, hi = bootstrap_interval(values, **boot)
    return {"mean": round(m, 4), "low": round(lo, 4), "high": round(hi, 4)}


def _percentile_ms(values: list[float], q: float) -> float | None:
    """The q-th percentile of seconds, in milliseconds (None without timings)."""
    return round(float(np.percentile(values, q)) * 1e3, 3) if values else None


def _answers_row(answers: list[dict], boot: Mapping[str, Any]) -> dict:
    """Answer figures of one method: counts, EM/F1/judge with intervals, mean prompt and completion tokens."""
    em, f1, judged = _answer_arrays(answers)
    return {"answered": len(answers), "failed": sum(a["error"] is not None for a in answers),
            "exact_match": _ci(em, boot) if em.size else None, "f1": _ci(f1, boot) if f1.size else None,
            "judge_accuracy": _ci(judged, boot) if judged.size else None, "judged": int(judged.size),
            "mean_prompt_tokens": round(float(np.mean([a["prompt_tokens"] for a in answers])), 1),
            "mean_completion_tokens": round(float(np.mean([a["completion_tokens"] for a in answers])), 1)}


def method_row(method: str, records: list[dict], scores: Mapping[str, np.ndarray], embed_s: float,
               boot: Mapping[str, Any]) -> dict:
    """One method's row: passage metrics with intervals (from ``scores``), context tokens, latency and
    throughput (from ``records``), and answers when it answered."""
    n = len(next(iter(scores.values())))
    lat = [x for rec in records for x in rec["lat"]]
    cpu = [x for rec in records for x in rec.get("cpu") or []]
    batch_s = sum(rec["batch_s"] for rec in records)
    ctx = [x for rec in records for x in rec["ctx"]]
    row = {"metrics": {k: _ci(v, boot) for k, v in scores.items() if k not in ANSWER_KEYS},
           "avg_context_tokens": round(float(np.mean(ctx)), 1) if ctx else None,
           "p50_ms": _percentile_ms(lat, 50), "p95_ms": _percentile_ms(lat, 95),
           "batch_qps": round(n / batch_s, 1) if batch_s > 0 else None}
    if cpu:
        row["p50_cpu_ms"] = _percentile_ms(cpu, 50)
    if not method.startswith("bm25"):  # the methods that embed the question
        row["batch_qps_with_embedding"] = round(n / (batch_s + embed_s), 1) if batch_s + embed_s else None
    answers = [a for rec in records for a in rec.get("answers") or []]
    if answers:
        row["answers"] = _answers_row(answers, boot)
    return row


def paired_rows(scores: Mapping[str, Mapping[str, np.ndarray]], compare: Sequence[tuple[str, str]],
                boot: Mapping[str, Any]) -> dict:
    """``"a - b"``: the paired bootstrap of a minus b on every metric both have, for each pair."""
    out: dict[str, dict] = {}
    for a, b in compare:
        common = [k for k in scores[a] if k in scores[b]]
        out[f"{a} - {b}"] = {k: {kk: (round(v, 4) if isinstance(v, float) else v)
                                 for kk, v in paired_bootstrap(scores[a][k], scores[b][k], **boot).items()}
                             for k in common}
    return out


def breakdown_rows(labels: list[dict], gold: list[list[str]], scores: Mapping[str, Mapping[str, np.ndarray]],
                   by: Sequence[str] | None) -> dict:
    """Per label field, per method, per group: the mean of every metric, ``n`` and ``avg_gold`` (gold passages
    per question). Fields: ``by``, else every field some question carries."""
    fields = list(by) if by else sorted({k for lab in labels for k in lab})
    n_gold = np.array([len(set(g)) for g in gold], dtype=np.float64)
    out: dict[str, dict] = {}
    for f in fields:
        have = [i for i, lab in enumerate(labels) if f in lab]
        if not have:
            continue
        groups = [labels[i][f] for i in have]
        sel = np.asarray(have)
        avg_gold = breakdown({"avg_gold": n_gold[sel]}, groups)
        out[f] = {m: {g: {**{k: (round(v, 4) if k != "n" else v) for k, v in d.items()},
                          "avg_gold": round(avg_gold[g]["avg_gold"], 4)}
                      for g, d in breakdown({k: v[sel] for k, v in s.items()}, groups).items()}
                  for m, s in scores.items()}
    return out


def _index_figures(ds: Any, scored: Scored, scores: dict, embed_s: float, methods: Sequence[str],
                   compare: Sequence[tuple[str, str]], boot: Mapping[str, Any], by: Sequence[str] | None,
                   rows_of: Sequence[str]) -> dict:
    """Rows (of ``rows_of``), paired comparisons and breakdowns from one set of per-question scores."""
    qpos = {q.id: i for i, q in enumerate(ds.questions)}
    labels = [ds.questions[qpos[i]].labels for i in scored.ids]
    return {"methods": {m: method_row(m, scored.records[m], scores[m], embed_s, boot) for m in rows_of},
            "paired": paired_rows(scores, compare, boot),
            "breakdown": breakdown_rows(labels, scored.gold, {m: scores[m] for m in methods}, by)}


def figures(ds: Any, scored: Sequence[Scored], embed_s: Sequence[float], methods: Sequence[str],
            compare: Sequence[tuple[str, str]], boot: Mapping[str, Any], by: Sequence[str] | None) -> dict:
    """The figures of a run over one or more indexes: ``methods``, ``paired``, ``breakdown`` and ``scores``
    (per method, the per-question arrays they came from), plus ``per_index`` when there are several.

    ``scored[0]`` holds every method; later indexes only the methods that rank with the index, whose
    per-question scores are averaged over the indexes (the baselines come from the first). Timings and
    context tokens of the combined rows are the first index's. ``embed_s``: query embedding seconds per index.
    """
    first = scored[0]
    if any(s.ids != first.ids for s in scored[1:]):
        raise ValueError("the indexes' runs scored different questions")
    per_build = [m for m in methods if m not in BASELINES]
    shared = {m: first.scores[m] for m in methods if m in BASELINES}
    each = [{**shared, **{m: s.scores[m] for m in per_build}} for s in scored]
    combined = dict(each[0])
    if len(scored) > 1:
        for m in per_build:
            keys = [k for k in each[0][m] if all(k in e[m] for e in each)]
            combined[m] = {k: np.mean([e[m][k] for e in each], axis=0) for k in keys}
    out = _index_figures(ds, first, combined, embed_s[0], methods, compare, boot, by, methods)
    out["scores"] = combined
    if len(scored) > 1:
        out["per_index"] = [_index_figures(ds, s, e, es, methods, compare, boot, by, per_build)
                            for s, e, es in zip(scored, each, embed_s)]
    return out
