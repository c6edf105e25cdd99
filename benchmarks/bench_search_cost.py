"""What a query costs: p50/p95 per query, per ranking stage and per query type, and batch throughput.

Usage::

    python benchmarks/bench_search_cost.py --index DIR --questions Q.jsonl [--limit 200] [--repeats 3]
        [--before-package DIR] [--out FILE]

The questions are embedded once with the index's embedder; then for every question each configuration
retrieves it in turn (interleaved, so all see the same machine load) ``--repeats`` times and keeps its best
time: the latency of one query *without* the query embedding. ``default`` is the search defaults;
``COMPONENTS`` are the defaults without one ranking stage (a stage list, ``noderag.search.ranking``), timed
beside them: what each stage costs. A further pass over the default searcher collects each phase's CPU time
(entry points and BM25, PPR, typed selection, every ranking stage, context assembly), and what each phase adds to
the slowest tenth of the questions over the middle fifth (the tail). ``retrieve_many`` is
timed on the whole question set (best of ``--repeats``).

``--before-package DIR`` times an earlier version of the package beside this one, in the same process and
interleaved with it: ``DIR/noderag_before`` is that version's ``src/noderag`` copied under another name (its
compiled ``_core`` included; every import inside the package is relative), e.g. ``git archive REV src/noderag``.
Its rows are ``before`` (default configuration, per query type, ``retrieve_many``, per phase).

Writes ``--out`` (JSON) and the same name with ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_retrieval import _git_revision, load_jsonl  # noqa: E402

import noderag  # noqa: E402
from noderag.search import Searcher, SearchConfig  # noqa: E402
from noderag.search.metrics import percentile_ms  # noqa: E402

try:  # the stage lists; absent in a package before the ranking pipeline
    from noderag.search.ranking import DEFAULT_NAMES, StagedConfig
except ImportError:  # pragma: no cover - timing an older package for --before
    DEFAULT_NAMES, StagedConfig = None, None

REPO = Path(__file__).resolve().parents[1]


def without(*names: str) -> dict:
    """The default stage list without ``names``."""
    return {"stages": [n for n in DEFAULT_NAMES if n not in names and n != "rerank"]}


def components() -> dict[str, dict]:
    """The defaults with one stage off, timed beside them."""
    if StagedConfig is None:
        return {}
    return {"no_bridging": {"bridging": False}, "no_redundancy": without("redundancy"),
            "no_fill": without("fill"), "no_propagated_mass": without("mass")}


def query_type(row: dict) -> str:
    """A question's type: its ``type`` field, else the hop count its id starts with ("2hop__..."), else "all"."""
    if row.get("type"):
        return str(row["type"])
    m = re.match(r"(\d)hop", str(row.get("id", "")))
    return f"{m.group(1)}hop" if m else "all"


def _pcts(values) -> dict:
    return {"p50_ms": round(percentile_ms(values, 50), 3), "p95_ms": round(percentile_ms(values, 95), 3)}


def interleaved(searchers: dict, questions: list[str], qvecs: np.ndarray, repeats: int):
    """Best-of-``repeats`` latency, process CPU time and querying-thread CPU time of every question under every
    searcher, interleaved. The process time also counts the BLAS library's helper threads, which spin for a while
    after a matrix product; the thread time is the query's own work."""
    lat = {name: np.full(len(questions), np.inf) for name in searchers}
    cpu = {name: np.full(len(questions), np.inf) for name in searchers}
    thr = {name: np.full(len(questions), np.inf) for name in searchers}
    for i, (q, v) in enumerate(zip(questions, qvecs)):
        for _ in range(repeats):
            for name, s in searchers.items():
                c0, t0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
                s.retrieve(q, query_vector=v)
                lat[name][i] = min(lat[name][i], time.perf_counter() - w0)
                thr[name][i] = min(thr[name][i], time.thread_time() - t0)
                cpu[name][i] = min(cpu[name][i], time.process_time() - c0)
    return lat, cpu, thr


def per_stage(searchers: dict, questions: list[str], qvecs: np.ndarray, repeats: int
              ) -> tuple[dict[str, dict], dict[str, dict[str, np.ndarray]]]:
    """Per searcher, p50/p95 CPU time of each phase over the questions (each question's best of ``repeats``, the
    searchers interleaved per question), and those per-question times; {} for a searcher without timings. The
    phase clock of each searcher's modules reads the thread's CPU time for the pass (the machine is shared: wall
    time per phase is mostly time spent waiting for a core)."""
    timed = {name: s for name, s in searchers.items() if hasattr(s, "timings")}
    mods = {sys.modules[type(s).__module__] for s in timed.values()}
    mods |= {sys.modules[type(s.ranking).__module__] for s in timed.values()}
    cpu_clock = types.SimpleNamespace(perf_counter=time.thread_time)
    saved = {m: m.time for m in mods}
    best: dict[str, dict[str, np.ndarray]] = {name: {} for name in timed}
    try:
        for m in mods:
            m.time = cpu_clock
        for i, (q, v) in enumerate(zip(questions, qvecs)):
            for _ in range(repeats):
                for name, searcher in timed.items():
                    searcher.timings = {}
                    searcher.retrieve(q, query_vector=v)
                    for phase, ts in searcher.timings.items():
                        arr = best[name].setdefault(phase, np.full(len(questions), np.inf))
                        arr[i] = min(arr[i], sum(ts))
    finally:
        for m, t in saved.items():
            m.time = t
        for searcher in timed.values():
            searcher.timings = None
    raw = {name: {phase: np.where(np.isfinite(arr), arr, 0.0) for phase, arr in b.items()} for name, b in best.items()}
    return {name: {phase: _pcts(arr) for phase, arr in b.items()} for name, b in raw.items()}, raw


def tail_phases(phases: dict[str, np.ndarray], total: np.ndarray) -> dict[str, dict]:
    """Which phases make the slow questions slow: per phase, the mean CPU time over the questions whose whole query
    (``total``, CPU) is at or above its 90th percentile, over those between its 40th and 60th, and the difference."""
    lo, mid, hi = np.percentile(total, [40, 60, 90])
    middle, tail = (total >= lo) & (total <= mid), total >= hi
    out = {}
    for phase, arr in {**phases, "whole query": total}.items():
        a, b = float(arr[middle].mean()) * 1e3, float(arr[tail].mean()) * 1e3
        out[phase] = {"middle_ms": round(a, 3), "tail_ms": round(b, 3), "added_ms": round(b - a, 3)}
    return out


def batch_qps(searchers: dict, questions: list[str], qvecs: np.ndarray, repeats: int) -> dict[str, float]:
    """Questions per second of one ``retrieve_many`` over the whole set, per searcher (best of ``repeats``,
    the searchers interleaved per repeat, in alternating order, so that all see the same machine load; in a
    fixed order the first searcher of every repeat ran ~12% slower than it does second), and of the default
    configuration in one process (``n_threads=1``: no forked workers, one thread). ``default_processes``: the
    processes the default's batch is split over (:mod:`noderag.search.forked`); ``default, first batch``: its
    first repeat, which forks the workers the later ones reuse."""
    from noderag.search import forked

    searchers = dict(searchers)
    if "default" in searchers:
        one = searchers["default"]
        searchers["default, one process"] = Searcher(one.store, one.config.replace(n_threads=1))
    for s in searchers.values():  # the before package's single-query searches left idle shard-search threads: a
        _stop_search_threads(s.store.vectors)  # batch forks only where no other thread lives
    best = {name: np.inf for name in searchers}
    names = list(searchers)
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:  # alternating order: neither always runs first
            searcher = searchers[name]
            t0 = time.perf_counter()
            searcher.retrieve_many(questions, query_vectors=qvecs)
            best[name] = min(best[name], time.perf_counter() - t0)
            if r == 0 and name == "default":
                first = time.perf_counter() - t0
    out = {name: round(len(questions) / b, 1) for name, b in best.items()}
    if "default" in searchers:
        out["default, first batch"] = round(len(questions) / first, 1)
        out["default_processes"] = forked.batch_workers(len(questions), searchers["default"].config.n_threads)
    return out


def _stop_search_threads(vectors) -> None:
    """Join the idle shard-search threads of an index of the before package (a fresh pool starts them at its next
    one-query search); this package's searches on the calling thread."""
    pool = getattr(vectors, "_search_pool", None)
    if pool is not None:
        pool.shutdown(wait=True)
        vectors._search_pool = type(pool)(max_workers=pool._max_workers, thread_name_prefix="shard-search")


def before_searcher(folder: Path, index_dir: Path, question: str, vector: np.ndarray):
    """The default searcher of the package copy ``folder/noderag_before`` over ``index_dir``, and its open +
    first-query time (without the embedding; after this package's, so the index files are in the page cache)."""
    import importlib

    sys.path.insert(0, str(folder))
    old = importlib.import_module("noderag_before")
    t0 = time.perf_counter()
    index = old.Index.open(index_dir)
    open_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    searcher = old.search.Searcher(index, old.search.SearchConfig())
    searcher.retrieve(question, query_vector=vector)
    return searcher, open_s, time.perf_counter() - t0


def open_and_first(index_dir: Path, question: str, vector: np.ndarray, make) -> tuple[object, float, float, float]:
    """A searcher made by ``make(index)`` on a freshly opened index; the open time, the first query's (making the
    searcher included) and the part of it that made the searcher."""
    t0 = time.perf_counter()
    index = noderag.Index.open(index_dir)
    open_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    searcher = make(index)
    made_s = time.perf_counter() - t0
    searcher.retrieve(question, query_vector=vector)
    return searcher, open_s, time.perf_counter() - t0, made_s


def measure(args) -> dict:
    rows_q = load_jsonl(args.questions)[: args.limit]
    questions = [q["question"] for q in rows_q]
    base = StagedConfig() if StagedConfig is not None else SearchConfig()
    configs = {"default": base, **{name: base.replace(**change) for name, change in components().items()}}
    probe = noderag.Index.open(args.index).searcher()
    qvecs = probe.embed(questions)
    probe.retrieve(questions[0], query_vector=qvecs[0])  # the files a query reads in the page cache for both packages
    del probe  # (the before package opens second: without this, only it found them cached)
    first, open_s, first_s, made_s = open_and_first(args.index, questions[0], qvecs[0], lambda ix: Searcher(ix, base))
    index = first.store
    searchers = {"default": first, **{name: Searcher(index, cfg) for name, cfg in configs.items() if name != "default"}}
    before_first = {}
    if args.before_package:
        searchers["before"], b_open, b_first = before_searcher(args.before_package, args.index, questions[0], qvecs[0])
        before_first = {"open_s": round(b_open, 3), "first_query_s": round(b_first, 3)}
    for s in searchers.values():  # warm-up: kernels, mapped pages
        for q, v in zip(questions[:5], qvecs[:5]):
            s.retrieve(q, query_vector=v)
    lat, cpu, thr = interleaved(searchers, questions, qvecs, args.repeats)
    rows = {name: {**_pcts(lat[name]), "p50_cpu_ms": round(percentile_ms(cpu[name], 50), 3),
                   "p95_cpu_ms": round(percentile_ms(cpu[name], 95), 3),
                   "p50_thread_ms": round(percentile_ms(thr[name], 50), 3),
                   "p95_thread_ms": round(percentile_ms(thr[name], 95), 3)} for name in searchers}
    types = [query_type(r) for r in rows_q]
    by_type = {t: {"n": types.count(t), **{name: _pcts(lat[name][[i for i, x in enumerate(types) if x == t]])
                                           for name in ("default", "before") if name in lat}}
               for t in sorted(set(types))}
    manifest = getattr(index, "manifest", {}) or {}
    phases, per_question = per_stage({name: searchers[name] for name in ("default", "before") if name in searchers},
                                     questions, qvecs, args.repeats)
    tail = tail_phases(per_question["default"], thr["default"]) if per_question.get("default") else {}
    qps = batch_qps({name: searchers[name] for name in ("default", "before") if name in searchers}, questions, qvecs,
                    args.repeats)
    return {"index": str(args.index), "counts": manifest.get("counts"), "n_questions": len(questions),
            "repeats": args.repeats, "before_package": str(args.before_package or ""), "open_s": round(open_s, 3),
            "first_query_s": round(first_s, 3), "searcher_s": round(made_s, 3),
            "open_plus_first_s": round(open_s + first_s, 3),
            "before_open_first": before_first,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}",
            "load_average": [round(x, 2) for x in os.getloadavg()], "git_revision": _git_revision(),
            "command": "python benchmarks/bench_search_cost.py " + " ".join(args.argv),
            "rows": rows, "by_type": by_type, "stages": phases.get("default", {}),
            "stages_before": phases.get("before", {}), "tail": tail,
            "batch_qps": qps}


def _row(name: str, r: dict) -> str:
    return f"| {name} | {r['p50_ms']} | {r['p95_ms']} |"


def markdown(out: dict) -> list[str]:
    counts = out["counts"] or {}
    n_nodes = sum((counts.get("nodes") or {}).values())
    rows, qps = out["rows"], out["batch_qps"]
    lines = [f"# Search cost per query: {counts.get('chunks', '?')} passages, {n_nodes} nodes", "",
             f"`{out['command']}`; {out['machine']}; load average {out['load_average']}; git {out['git_revision']}.",
             "", f"{out['n_questions']} questions, best of {out['repeats']} per question, configurations interleaved "
             "per question; latency without the query embedding. Open {open_s} s, first query {first_query_s} s "
             "(making the searcher {searcher_s} s of it; a probe searcher's query read the index's files into the "
             "page cache first).".format(**{"searcher_s": "?", **out}) + (" Before: open {open_s} s, first query {first_query_s} s (opened second)."
                               .format(**out["before_open_first"]) if out.get("before_open_first") else ""), "",
             "Wall time, CPU time of the process (with the BLAS library's helper threads, which spin after a "
             "matrix product) and of the querying thread alone:", "",
             "| configuration | p50 ms | p95 ms | p50 CPU ms | p95 CPU ms | p50 thread ms | p95 thread ms "
             "| p95 ratio vs before |", "|---|---|---|---|---|---|---|---|"]
    ref = rows.get("before")
    for name, r in rows.items():
        ratio = round(r["p95_ms"] / ref["p95_ms"], 3) if ref else ""
        lines.append(f"| {name} | {r['p50_ms']} | {r['p95_ms']} | {r['p50_cpu_ms']} | {r['p95_cpu_ms']} | "
                     f"{r.get('p50_thread_ms', '')} | {r.get('p95_thread_ms', '')} | {ratio} |")
    lines += ["", "`retrieve_many` over the question set (questions/s): " +
              ", ".join(f"{k} {v}" for k, v in qps.items()) + ".", "",
              "By query type (default configuration, and before):", "",
              "| type | questions | p50 ms | p95 ms | before p50 ms | before p95 ms |", "|---|---|---|---|---|---|"]
    for t, r in out["by_type"].items():
        b = r.get("before", {"p50_ms": "", "p95_ms": ""})
        lines.append(f"| {t} | {r['n']} | {r['default']['p50_ms']} | {r['default']['p95_ms']} | {b['p50_ms']} | "
                     f"{b['p95_ms']} |")
    before = out.get("stages_before") or {}
    lines += ["", "Default configuration per phase, CPU time of the querying thread (each question's best of the "
              "repeats; the ranking stages in their order; `prepare` is name matches, BM25 and the seeds), and "
              "the same for the before package, interleaved with it per question:", "",
              "| phase | p50 CPU ms | p95 CPU ms | before p50 CPU ms | before p95 CPU ms |", "|---|---|---|---|---|"]
    for k, r in out["stages"].items():
        b = before.get(k, {"p50_ms": "", "p95_ms": ""})
        lines.append(f"| {k} | {r['p50_ms']} | {r['p95_ms']} | {b['p50_ms']} | {b['p95_ms']} |")
    if out.get("tail"):
        lines += ["", "Where the tail comes from (default configuration): per phase, the mean CPU time of the "
                  "questions whose whole query is at or above its 90th percentile (thread CPU), of those between its "
                  "40th and 60th, and what the slow ones add:", "",
                  "| phase | middle (p40-p60) ms | tail (>= p90) ms | added ms |", "|---|---|---|---|"]
        for k, r in out["tail"].items():
            lines.append(f"| {k} | {r['middle_ms']} | {r['tail_ms']} | {r['added_ms']} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True, type=Path)
    ap.add_argument("--questions", required=True, type=Path, help="JSONL with a 'question' field per line")
    ap.add_argument("--limit", type=int, default=200, help="questions used (default 200)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before-package", type=Path, default=None, metavar="DIR",
                    help="folder holding an earlier package copy named noderag_before, timed beside this one")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "search_cost.json")
    args = ap.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    out = measure(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    lines = markdown(out)
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
