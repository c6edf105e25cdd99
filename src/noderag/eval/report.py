"""The files of an evaluation beside ``results.json``: ``results.md`` (tables), ``recall.svg`` (bars with
intervals, drawn without a plotting library) and ``per_question.jsonl`` (each question's ranked ids, gold and scores, for error analysis)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .figure import recall_svg

__all__ = ["write_markdown", "write_plot", "write_per_question", "BASELINE_CONTEXT_PASSAGES"]

BASELINE_CONTEXT_PASSAGES = 5  # a passage retriever's context: its top 5 passages (as the benchmark)


def _maybe_cell(d: Mapping[str, float] | None) -> str:
    """:func:`_cell`, or an empty cell where the figure is missing."""
    return _cell(d) if d else ""


def _cell(d: Mapping[str, float]) -> str:
    """``mean [low, high]``."""
    return f"{d['mean']:.4f} [{d['low']:.3f}, {d['high']:.3f}]"


def _header(res: dict) -> list[str]:
    """Title, dataset counts, index(es), version, machine and the bootstrap's settings."""
    ds = res["dataset"]
    lv = int(round(100 * res["config"]["level"]))
    idx = res["index"]
    where = (f"index `{idx['path']}` (generation {idx['generation']}, embedder `{idx['embedder']}`)"
             if "per_index" not in res else
             f"{len(res['per_index'])} indexes (builds of the same corpus; per-question scores averaged over "
             f"them, baselines and timings from the first), first `{idx['path']}` (embedder `{idx['embedder']}`)")
    return [f"# noderag eval: {ds['name']} ({ds['format']})", "",
            f"{ds['n_questions']:,} questions scored ({ds['stats']['questions_skipped']:,} skipped without mapped "
            f"gold; {ds['stats']['gold_unmapped']:,} of {ds['stats']['gold_total']:,} gold passages unmapped), "
            f"{ds['n_passages']:,} passages; {where}; noderag {res['noderag_version']} "
            f"({res['git_revision'] or 'no git revision'}); {res['machine']['cpus']} CPUs, "
            f"load {res['load_average']['start']} -> {res['load_average']['end']}.", "",
            f"Mean [{lv}% bootstrap interval, {res['config']['n_resamples']} resamples over questions].", ""]


def _metric_table(rows: Mapping[str, dict], metrics: Sequence[str], first_col: str = "method") -> list[str]:
    """One line per method: each metric's mean and interval."""
    lines = [f"| {first_col} | " + " | ".join(metrics) + " |", "|---" * (len(metrics) + 1) + "|"]
    for m, row in rows.items():
        lines.append(f"| {m} | " + " | ".join(_cell(row["metrics"][k]) for k in metrics) + " |")
    return lines


def _timing_table(rows: Mapping[str, dict]) -> list[str]:
    """Context tokens, latency and throughput per method."""
    tcols = ["avg_context_tokens", "p50_ms", "p95_ms", "batch_qps", "batch_qps_with_embedding"]
    lines = ["", "Latency: one question alone, without its embedding; batch q/s: `retrieve_many` (baselines: one "
             "scoring call) per batch of questions, with the embedding where the method uses one. Context tokens "
             f"of dense/BM25: their top {BASELINE_CONTEXT_PASSAGES} passages.", "",
             "| method | " + " | ".join(tcols) + " |", "|---" * (len(tcols) + 1) + "|"]
    for m, row in rows.items():
        lines.append(f"| {m} | " + " | ".join("" if row.get(c) is None else str(row.get(c)) for c in tcols) + " |")
    return lines


def _answers_table(res: dict) -> list[str]:
    """EM, F1 and judge figures per method that answered (nothing without answers)."""
    if not any("answers" in row for row in res["methods"].values()):
        return []
    judge = f", judged by `{res['config']['judge']}`" if res["config"]["judge"] else ""
    lines = ["", f"Answers by `{res['config']['llm']}`{judge}.", "",
             "| method | answered | failed | EM | F1 | judge | prompt tokens | completion tokens |",
             "|---|---|---|---|---|---|---|---|"]
    for m, row in res["methods"].items():
        a = row.get("answers")
        if not a:
            continue
        lines.append(f"| {m} | {a['answered']} | {a['failed']} | {_maybe_cell(a['exact_match'])} | "
                     f"{_maybe_cell(a['f1'])} | {_maybe_cell(a['judge_accuracy'])} | {a['mean_prompt_tokens']} | {a['mean_completion_tokens']} |")
    return lines


def _paired_table(res: dict) -> list[str]:
    """Every paired comparison on every metric."""
    if not res["paired"]:
        return []
    lv = int(round(100 * res["config"]["level"]))
    lines = ["", f"## Paired differences (same questions resampled together; {lv}% interval; "
             "p(<=0): share of resamples where the first method is not ahead)", "",
             "| comparison | metric | diff | low | high | p(<=0) |", "|---|---|---|---|---|---|"]
    for name, d in res["paired"].items():
        for k, v in d.items():
            lines.append(f"| {name} | {k} | {v['diff']:+.4f} | {v['low']:+.4f} | {v['high']:+.4f} | "
                         f"{v['p_le_0']:.3f} |")
    return lines


def _per_index_tables(res: dict, metrics: Sequence[str]) -> list[str]:
    """One table per index of the methods that rank with it: what evaluating that index alone gives."""
    if "per_index" not in res:
        return []
    lines = ["", "## Per index", "",
             "Each index's own figures (baselines shared): `noderag eval DATA --index <that index>` gives them."]
    for i, one in enumerate(res["per_index"]):
        lines += ["", f"### Index {i}: `{one['index']['path']}` (generation {one['index']['generation']})", ""]
        lines += _metric_table(one["methods"], metrics)
    return lines


def write_markdown(path: Path, res: dict) -> None:
    """Tables of ``results.json``: metrics with intervals, timing, answers, paired differences, breakdowns,
    and with several indexes each one's rows."""
    metrics = list(next(iter(res["methods"].values()))["metrics"])
    lines = _header(res) + _metric_table(res["methods"], metrics) + _timing_table(res["methods"])
    lines += _answers_table(res) + _paired_table(res)
    for f, per in res["breakdown"].items():
        lines += ["", f"## By {f}", "", "| method | " + f + " | n | gold/question | " + " | ".join(metrics) + " |",
                  "|---" * (len(metrics) + 4) + "|"]
        for m, groups in per.items():
            for g, d in groups.items():
                lines.append(f"| {m} | {g} | {d['n']} | {d.get('avg_gold', '')} | "
                             + " | ".join(f"{d[k]:.4f}" for k in metrics) + " |")
    lines += _per_index_tables(res, metrics)
    lines += ["", "## Configuration", "", "```json", json.dumps(res["config"], indent=1, sort_keys=True), "```", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def write_plot(path: Path, res: dict) -> str | None:
    """recall@k per method with interval whiskers, as SVG (:mod:`noderag.eval.figure`: no plotting library);
    returns None (the figure is always written)."""
    path.write_text(recall_svg(res), encoding="utf-8")
    return None


def write_per_question(path: Path, ds: Any, batches: Mapping[int, dict], methods: Sequence[str],
                       scores: Mapping[str, Mapping[str, np.ndarray]]) -> None:
    """One JSON line per question: its gold, labels and, per method, ranked ids, scores, context and answer."""
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
                    d = {"ranked": mr["ranked"][j], "scores": {k: round(float(v[n]), 4) for k, v in scores[m].items()},
                         "context_tokens": mr["ctx"][j]}
                    if mr["lat"]:
                        d["latency_ms"] = round(mr["lat"][j] * 1e3, 3)
                    if mr.get("answers"):
                        d["answer"] = mr["answers"][j]
                    row["methods"][m] = d
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                n += 1
    os.replace(tmp, path)
