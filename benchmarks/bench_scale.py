"""Scale benchmark (issue 9): build and query corpora of 10^4..10^6 passages, fit how time and memory grow.

    python benchmarks/bench_scale.py --passages 10000,100000,1000000 [--embed SPEC] [--out DIR] [--work DIR]
                                     [--max-seconds S] [--max-rss-gb G] [--embed-sample N] [--paired A,B]

First an untimed build of a ``--warmup``-passage corpus (default 1,000) fills the Numba
cache, so that a run from a fresh checkout does not charge the kernels' one-time compile
(~7 s) to the first size. Then for each size N (ascending), ``scale_corpus.generate``
writes (or reuses) the N-passage corpus under ``--work`` (default ``.benchcache/scale``); then

- a fresh child process builds it: ``python -m noderag.cli build CORPUS --index DIR
  --embed SPEC --no-progress`` (nlp mode; default ``hash:384`` so that only the
  pipeline is measured). Wall time is timed around the child; CPU seconds and peak
  RSS come from ``os.wait4`` on the child (its ``ru_utime + ru_stime`` and
  ``ru_maxrss``, which cover the waited-for processes it started too, as a maximum
  over them); the memory of the child's whole process tree is also polled from
  ``/proc`` (RSS of a lone process; the sum of PSS while forked workers, which share
  pages with their parent, run; for the ``--max-rss-gb`` guard too) every 0.2 s, or
  less often when a poll is dear, so that polling takes at most 2% of one core
  (``memory_polls``, ``memory_poll_cpu_s``).
  The build peak is the larger of the two. Per-stage wall seconds are the manifest's
  ``stages.*.time_s`` and per-stage CPU its ``stages.*.cpu_s`` where the pipeline
  records it (else null);
- a second fresh process (``scale_query.py``) opens the index and queries it with
  the size's question set: ``Index.open`` and first-``retrieve`` times, p50/p95 per
  query without the query embedding and batch q/s (``bench_retrieval``'s timing),
  and that process's peak RSS.

After the sizes, the indexes of the two ``--paired`` sizes (default 10^4 and 10^5, the
p50-ratio target's pair) are opened together in one more process (``scale_query.py
--paired``) and their queries timed interleaved, so that both p50s see the same machine load:
on a shared machine the two query runs above lie minutes apart, and their ratio moved between
1.04 and 1.71 over three runs of the same code. The target uses this paired ratio.

A size that fails (non-zero exit, a signal such as the OOM killer's SIGKILL, or
one of the guards) is recorded with its reason, exit code/signal and elapsed time,
and the larger sizes are not tried (``--keep-going`` tries them). The fits are the
least-squares slopes of log(build wall), log(build peak RSS) and log(query p50)
against log(passages) over the sizes that ran. The embedder figures time the
default embedder (``--model-embed``) on the first ``--embed-sample`` passages of
the largest corpus: texts/s, model tokens/s (its own tokenizer, truncated input)
and corpus (cl100k) tokens/s, from which the embedding cost of a default-embedder
build is *projected* per million corpus tokens and per size.

Writes ``OUT/NAME.json``, ``OUT/NAME.md`` and ``OUT/NAME.png`` (default ``benchmarks/results/scale.*``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from bench_build import _table  # noqa: E402
from bench_retrieval import _git_revision  # noqa: E402
from scale_corpus import DEFAULT_DATA, DEFAULT_SOURCES, generate  # noqa: E402

from noderag.store.manifest import read_manifest  # noqa: E402

POLL_S = 0.2  # shortest interval between two polls of the child's process-tree memory
#: Most of one core the polling may take: the next poll waits ``cost / POLL_SHARE`` after one that cost ``cost``
#: seconds of this process's CPU. Reading ``smaps_rollup`` walks the page tables of a process (and holds its
#: memory-map lock), so polling every 0.2 s took 0.5-0.9 of a core from a 10^6-passage build (13 GB mapped)
#: and hardly any from a 10^4 one: a cost that grew with the corpus, measured as build time.
POLL_SHARE = 0.02


# ----------------------------------------------------------------------------- child processes
def _tree_memory(pids: list[int]) -> int:
    """Resident bytes of a process tree: RSS of a lone process, else the sum of PSS.

    PSS, not RSS, for several processes: forked workers share their parent's pages
    copy-on-write, and summing their RSS would count those pages once per process.
    (PSS only then: reading ``smaps_rollup`` of a multi-GB process costs milliseconds.)
    """
    if len(pids) == 1:
        return _proc_rss(pids[0])
    return sum(_proc_rss(p, pss=True) for p in pids)


def _proc_rss(pid: int, pss: bool = False) -> int:
    """Resident bytes (``pss``: proportional, from ``smaps_rollup``) of ``pid``; 0 when it is gone."""
    sources = ((f"/proc/{pid}/smaps_rollup", "Pss:"),) if pss else ()
    for path, field in sources + ((f"/proc/{pid}/status", "VmRSS:"),):
        try:
            with open(path, encoding="ascii") as fh:
                for line in fh:
                    if line.startswith(field):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError):
            continue
    return 0


def _tree_pids(pid: int) -> list[int]:
    """``pid`` and its live descendants (from ``/proc/PID/task/TID/children``)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children", encoding="ascii") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except OSError:
            pass
    return out


def run_child(cmd: list[str], log: Path, max_seconds: float | None, max_rss_bytes: int | None) -> dict:
    """Run ``cmd`` in its own session; time it, track its memory, enforce the guards; stdout in the result."""
    out_path = log.with_suffix(".stdout")
    with open(log, "wb") as err, open(out_path, "wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, start_new_session=True, cwd=REPO)
        peak_tree, reason, status, ru = 0, None, None, None
        polls, poll_cpu = 0, 0.0
        while True:
            pid, st, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                status, ru = st, usage
                break
            c0 = time.process_time()
            peak_tree = max(peak_tree, _tree_memory(_tree_pids(proc.pid)))
            cost = time.process_time() - c0
            polls, poll_cpu = polls + 1, poll_cpu + cost
            elapsed = time.perf_counter() - t0
            if max_seconds is not None and elapsed > max_seconds:
                reason = f"exceeded --max-seconds {max_seconds:g} (killed after {elapsed:.1f} s)"
            elif max_rss_bytes is not None and peak_tree > max_rss_bytes:
                reason = f"exceeded --max-rss-gb {max_rss_bytes / 1e9:g} (tree PSS {peak_tree / 1e9:.2f} GB)"
            if reason:
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(max(POLL_S, cost / POLL_SHARE))
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    res = {"wall_s": round(wall, 3), "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
           "cpu_user_s": round(ru.ru_utime, 3), "cpu_sys_s": round(ru.ru_stime, 3),
           "maxrss_bytes": ru.ru_maxrss * 1024, "peak_tree_rss_polled_bytes": peak_tree,
           "peak_rss_bytes": max(ru.ru_maxrss * 1024, peak_tree), "exit_code": proc.returncode,
           "memory_polls": polls, "memory_poll_cpu_s": round(poll_cpu, 3)}
    if proc.returncode < 0:
        res["signal"] = signal.Signals(-proc.returncode).name
    if reason is None and proc.returncode != 0:
        reason = (f"killed by {res['signal']}" + (" (the OOM killer?)" if res["signal"] == "SIGKILL" else "")
                  if proc.returncode < 0 else f"exit code {proc.returncode}")
        tail = log.read_text("utf-8", errors="replace").strip().splitlines()[-5:]
        res["stderr_tail"] = tail
    res["ok"] = reason is None
    res["reason"] = reason
    res["stdout"] = out_path.read_text("utf-8", errors="replace")
    return res


def run_query_child(query_args: list[str], log: Path, args) -> dict:
    """Run ``scale_query.py QUERY_ARGS --repeats R`` as a child (:func:`run_child`) and merge the JSON line it
    prints last into its record (not ok, with a reason, when there is none)."""
    cmd = [sys.executable, str(HERE / "scale_query.py"), *query_args, "--repeats", str(args.repeats)]
    q = run_child(cmd, log, args.max_seconds, args.max_rss_bytes)
    stdout = q.pop("stdout").strip().splitlines()
    if q["ok"]:
        try:
            q.update(json.loads(stdout[-1]))
        except (IndexError, json.JSONDecodeError):
            q.update(ok=False, reason=f"the query process printed no JSON result (see {log})")
    return q


# ----------------------------------------------------------------------------- one size
#: Times the pipeline reports inside a stage (``stages.<name>.<part>`` of the manifest), shown in scale.md.
_INNER_TIMES = ("assemble_s", "leiden_s", "query_index_s", "graph_files_s", "vector_wait_s", "vector_cpu_s")


def _stage_details(entry: dict) -> dict:
    """A manifest stage entry's own figures (counts, inner times, peak RSS), without its state and times."""
    return {k: v for k, v in entry.items() if k not in ("state", "time_s", "cpu_s") and isinstance(v, (int, float))}


def build_command(corpus: Path, index: Path, args) -> list[str]:
    """The build child's command line: an nlp-mode build of ``corpus`` into ``index`` with ``--embed``."""
    return [sys.executable, "-m", "noderag.cli", "build", str(corpus), "--index", str(index),
            "--embed", args.embed, "--no-progress"]


def build_and_discard(corpus: Path, index: Path, log: Path, args) -> dict:
    """Build ``corpus`` into ``index`` in a child process for its figures only; the index is removed."""
    shutil.rmtree(index, ignore_errors=True)
    b = run_child(build_command(corpus, index, args), log, args.max_seconds, args.max_rss_bytes)
    shutil.rmtree(index, ignore_errors=True)
    return b


def warm_up(args, work: Path) -> dict:
    """Build a small corpus once, untimed, before the sizes: the first build from a fresh checkout compiles
    the Numba kernels into their cache (~7 s, all of it in the first size's figures otherwise)."""
    sc = generate(args.warmup, work, data=args.data, sources=args.sources, seed=args.seed)
    print(f"== warm-up build ({args.warmup:,} passages, not timed as a size)", file=sys.stderr, flush=True)
    b = build_and_discard(sc.corpus, work / "index-warmup", work / "build-warmup.log", args)
    return {"passages": args.warmup, "wall_s": b["wall_s"], "ok": b["ok"]}


def bench_size(n: int, args, work: Path) -> dict:
    """Generate, build and query the ``n``-passage corpus; the size's record."""
    sc = generate(n, work, data=args.data, sources=args.sources, seed=args.seed)
    rec: dict = {"passages": n, "corpus": str(sc.corpus), "questions": str(sc.questions),
                 "corpus_bytes": sc.corpus.stat().st_size,
                 "corpus_reused": sc.reused, "question_copy": sc.question_copy, "n_questions": sc.n_questions,
                 "loadavg_1m_start": round(os.getloadavg()[0], 2)}
    index = work / f"index-{n}"
    if index.exists():
        shutil.rmtree(index)
    print(f"== {n:,} passages: building ({sc.corpus})", file=sys.stderr, flush=True)
    b = run_child(build_command(sc.corpus, index, args), work / f"build-{n}.log", args.max_seconds,
                  args.max_rss_bytes)
    b.pop("stdout")
    rec["build"] = b
    if not b["ok"]:
        rec.update(ok=False, failed_in="build", reason=b["reason"])
        return rec
    m = read_manifest(index)
    nodes = int(sum(m["counts"]["nodes"].values()))
    edges = m["counts"]["edges"]
    rec.update(
        nodes=nodes, nodes_by_type=m["counts"]["nodes"],
        edges=int(edges.get("structural", 0)) + int(edges.get("semantic", 0)),
        edges_structural=int(edges.get("structural", 0)), edges_semantic=int(edges.get("semantic", 0)),
        embedded=int(m["stages"].get("embed", {}).get("embedded", 0)),
        stages={k: {"wall_s": v.get("time_s"), "cpu_s": v.get("cpu_s"), **_stage_details(v)}
                for k, v in m["stages"].items()},
        index_bytes=int(m["bytes_total"]),
        build_passages_per_s=round(n / b["wall_s"], 1),
        build_bytes_per_node=round(b["peak_rss_bytes"] / nodes, 1),
    )
    print(f"   built in {b['wall_s']:.1f} s, {nodes:,} nodes, peak RSS {b['peak_rss_bytes'] / 1e9:.2f} GB; querying",
          file=sys.stderr, flush=True)
    q = run_query_child([str(index), str(sc.questions)], work / f"query-{n}.log", args)
    rec["query"] = q
    rec["loadavg_1m_end"] = round(os.getloadavg()[0], 2)
    if not q["ok"]:
        rec.update(ok=False, failed_in="query", reason=q["reason"])
        return rec
    rec["ok"] = True
    if not args.keep_index and n not in args.paired:  # the paired sizes' indexes go after the paired run
        shutil.rmtree(index)
    return rec


def repeat_builds(sizes: list[dict], args, work: Path) -> None:
    """Build every size that ran ``--build-repeats - 1`` more times, round by round (each size once,
    then again), so that a slow hour of a shared machine falls on every size; the median of a size's
    builds goes into its record (``build_wall_median_s``, ``build_cpu_median_s``) and the fits."""
    ok = [s for s in sizes if s.get("ok") and (args.repeat_up_to is None or s["passages"] <= args.repeat_up_to)]
    for r in range(2, args.build_repeats + 1):
        for rec in ok:
            n = rec["passages"]
            print(f"== {n:,} passages: build {r} of {args.build_repeats}", file=sys.stderr, flush=True)
            b = build_and_discard(Path(rec["corpus"]), work / f"index-{n}-repeat", work / f"build-{n}-repeat{r}.log",
                                  args)
            rec.setdefault("build_repeats", []).append(
                {"wall_s": b["wall_s"], "cpu_s": b["cpu_s"], "ok": b["ok"], "reason": b["reason"]})
    for rec in ok:
        runs = [rec["build"]] + [b for b in rec.get("build_repeats", []) if b["ok"]]
        if len(runs) > 1:
            for kind in ("wall", "cpu"):
                rec[f"build_{kind}_median_s"] = round(float(np.median([b[f"{kind}_s"] for b in runs])), 3)


def _up_to(res: dict) -> str:
    """`` up to N passages`` when ``--repeat-up-to`` limited the repeated sizes, else empty."""
    return f" up to {res['repeat_up_to']:,} passages" if res.get("repeat_up_to") else ""


def build_seconds(s: dict, kind: str) -> float:
    """A size's build ``kind`` ("wall" or "cpu") seconds: the median of its builds when it was built
    more than once, else its one build's."""
    return s.get(f"build_{kind}_median_s", s["build"][f"{kind}_s"])


def every_build(s: dict, kind: str) -> str:
    """The markdown cell of a size's builds: each one's ``kind`` seconds, then their median."""
    if not s.get("build_repeats"):
        return ""
    each = ", ".join(f"{b[f'{kind}_s']:.1f}" if b["ok"] else "failed" for b in [s["build"]] + s["build_repeats"])
    return f"{each} ({s[f'build_{kind}_median_s']:.1f})"


#: The sizes whose query p50s are also timed side by side in one process (the p50-ratio target's pair).
PAIRED = (10_000, 100_000)


def bench_paired(sizes: list[dict], args, work: Path) -> dict | None:
    """Query the indexes of the ``--paired`` sizes interleaved in one process (``scale_query.py --paired``):
    their p50s under the same machine load, and the ratio; None when either size did not build."""
    by = {s["passages"]: s for s in sizes if s.get("ok")}
    if not all(n in by for n in args.paired):
        return None
    (a, qa), (b, qb) = ((work / f"index-{n}", by[n]["questions"]) for n in args.paired)
    print(f"== paired query timing: {args.paired[0]:,} and {args.paired[1]:,} passages in one process",
          file=sys.stderr, flush=True)
    q = run_query_child([str(a), qa, "--paired", str(b), qb], work / "query-paired.log", args)
    q["passages"] = list(args.paired)
    return q


# ----------------------------------------------------------------------------- embedder figures
def _first_passages(path: Path, k: int) -> list[str]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if len(out) >= k:
                break
            if line.strip():
                out.append(json.loads(line)["text"])
    return out


def embedder_figures(spec: str, corpus: Path, sample: int) -> dict:
    """Texts/s and tokens/s of embedder ``spec`` on the first ``sample`` passages of ``corpus`` (one timed pass)."""
    from noderag.embed import make_embedder
    from noderag.tokenize import count_tokens_batch

    texts = _first_passages(corpus, sample)
    t0 = time.perf_counter()
    emb = make_embedder(spec)
    load_s = time.perf_counter() - t0
    emb.embed(texts[:8])  # warm-up
    c0, t0 = time.process_time(), time.perf_counter()
    emb.embed(texts)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    corpus_tokens = int(sum(count_tokens_batch(texts)))
    model_tokens = int(np.sum(emb.token_lengths(texts))) if hasattr(emb, "token_lengths") else None
    res = {"spec": spec, "name": getattr(emb, "name", spec), "sample_passages": len(texts), "sample_from": str(corpus),
           "load_s": round(load_s, 3), "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
           "texts_per_s": round(len(texts) / wall, 1), "corpus_tokens": corpus_tokens,
           "corpus_tokens_per_passage": round(corpus_tokens / len(texts), 1),
           "corpus_tokens_per_s": round(corpus_tokens / wall, 1),
           "projected_s_per_m_corpus_tokens": round(1e6 * wall / corpus_tokens, 1)}
    if model_tokens is not None:
        res.update(model_tokens=model_tokens, model_tokens_per_s=round(model_tokens / wall, 1))
    return res


# ----------------------------------------------------------------------------- fits and targets
def loglog_slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log(y) on log(x); None with fewer than two distinct x."""
    pts = [(x, y) for x, y in zip(xs, ys) if x and y and x > 0 and y > 0]
    if len({x for x, _ in pts}) < 2:
        return None
    lx, ly = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return round(float(np.polyfit(lx, ly, 1)[0]), 4)


def projected_peak_rss(sizes: list[dict], n: int) -> float | None:
    """Build peak RSS of ``n`` passages from a least-squares line (bytes = a + b * passages) through the
    sizes that built; None with fewer than two. Linear, not log-log: per-node memory does not shrink."""
    pts = [(s["passages"], s["build"]["peak_rss_bytes"]) for s in sizes if s.get("ok")]
    if len({x for x, _ in pts}) < 2:
        return None
    b, a = np.polyfit([p[0] for p in pts], [p[1] for p in pts], 1)
    return float(a + b * n)


def fits(sizes: list[dict]) -> dict:
    ok = [s for s in sizes if s.get("ok")]
    xs = [s["passages"] for s in ok]
    big = [s for s in ok if s["passages"] >= 10_000]
    return {
        "sizes": xs,
        "build_wall_slope": loglog_slope(xs, [build_seconds(s, "wall") for s in ok]),
        "build_cpu_slope": loglog_slope(xs, [build_seconds(s, "cpu") for s in ok]),
        "build_peak_rss_slope": loglog_slope(xs, [s["build"]["peak_rss_bytes"] for s in ok]),
        "query_p50_slope": loglog_slope(xs, [s["query"]["p50_ms"] for s in ok]),
        "build_wall_slope_from_1e4": loglog_slope([s["passages"] for s in big], [build_seconds(s, "wall") for s in big]),
    }


def targets(sizes: list[dict], fit: dict, paired: dict | None = None) -> list[dict]:
    """Issue 9's targets: pass, fail or not measured (the size did not run). The p50 ratio is the paired
    run's (both indexes timed interleaved in one process) when there is one, else the two query runs'."""
    by = {s["passages"]: s for s in sizes}
    s4, s5, s6 = by.get(10_000), by.get(100_000), by.get(1_000_000)
    ok5 = s5 is not None and s5.get("ok")

    def row(name, measured, value, passed):
        return {"target": name, "value": value if measured else None,
                "status": ("pass" if passed else "fail") if measured else "not measured"}

    slope = fit["build_wall_slope_from_1e4"]
    rows = [row("build time log-log slope from 10^4 to the largest size <= 1.05", slope is not None and s4 is not None
                and len([s for s in sizes if s.get("ok") and s["passages"] >= 10_000]) >= 2, slope,
                slope is not None and slope <= 1.05)]
    rows.append(row(">= 500 passages/s at 10^5", ok5, s5 and s5.get("build_passages_per_s"),
                    ok5 and s5["build_passages_per_s"] >= 500))
    rows.append(row("peak build RSS <= 1 KB per node at 10^5", ok5, s5 and s5.get("build_bytes_per_node"),
                    ok5 and s5["build_bytes_per_node"] <= 1024))
    rows.append(row("the 10^6-passage corpus builds", s6 is not None, s6 and (s6.get("reason") or "built"),
                    s6 is not None and s6.get("ok")))
    rows.append(row("Index.open + first retrieve <= 1 s at 10^5", ok5,
                    s5 and s5.get("query", {}).get("open_plus_first_retrieve_s"),
                    ok5 and s5["query"]["open_plus_first_retrieve_s"] <= 1.0))
    rows.append(row("query p50 without embedding <= 5 ms at 10^5", ok5, s5 and s5.get("query", {}).get("p50_ms"),
                    ok5 and s5["query"]["p50_ms"] <= 5.0))
    both = ok5 and s4 is not None and s4.get("ok")
    if paired is not None and paired.get("ok") and tuple(paired["passages"]) == PAIRED:
        ratio = paired["p50_ratio"][1]
        name = "p50 at 10^5 <= 1.3 x p50 at 10^4 (timed side by side in one process)"
    else:
        ratio = round(s5["query"]["p50_ms"] / s4["query"]["p50_ms"], 3) if both else None
        name = "p50 at 10^5 <= 1.3 x p50 at 10^4"
    rows.append(row(name, both, ratio, both and ratio <= 1.3))
    return rows


# ----------------------------------------------------------------------------- outputs
def _gb(b) -> str:
    return f"{b / 1e9:.2f}" if b else ""


def to_markdown(res: dict) -> str:
    meta = res["machine"]
    lines = ["# Scale benchmark (issue 9): nlp-mode build and query vs corpus size", ""]
    if res.get("note"):
        lines += [f"**{res['note']}**", ""]
    lines += [f"Machine: {meta['cpus']} CPUs, {meta['memory_gb']} GB RAM, {meta['platform']}, Python {meta['python']}; "
              f"git {res.get('git_revision')}. Build embedder `{res['embed']}`. Corpus: the "
              f"{', '.join(res['sources'])} dev passages repeated with per-copy suffixes on capitalised words "
              "(`benchmarks/scale_corpus.py`).", "",
              f"Command: `{res['command']}`", "",
              "Build and query each run in a fresh child process. Build CPU and `maxrss` from `os.wait4` on the "
              "child; the build peak RSS is the larger of that and the child's process-tree memory (sum of PSS, "
              f"so pages forked workers share with the build are counted once) polled from /proc every {POLL_S} s or less often, at most {POLL_SHARE:.0%} of one core (reading a large process's `smaps_rollup` is dear). Query latency is per query without the query embedding (best of "
              f"{res['repeats']}); batch q/s is one `retrieve_many` over the question set. GB = 10^9 bytes."
              + (f" An untimed {res['warmup']['passages']:,}-passage build ran first ({res['warmup']['wall_s']:.1f} s), "
                 "so no size pays the Numba kernels' one-time compile." if res.get("warmup") else "")
              + (f" Each size{_up_to(res)} was built {res['build_repeats']} times, in rounds (every such size, "
                 "then every such size again), and the fits use each size's median build."
                 if res.get("build_repeats", 1) > 1 else ""),
              ""]
    sizes = res["sizes"]
    cols = [f"{s['passages']:,}" for s in sizes]

    def cell(s, f):
        try:
            return f(s)
        except (KeyError, TypeError, ZeroDivisionError):
            return ""

    rows = [
        ("status", lambda s: "ok" if s.get("ok") else f"FAILED in {s.get('failed_in')}: {s.get('reason')}"),
        ("nodes", lambda s: f"{s['nodes']:,}"), ("edges (structural + semantic)", lambda s: f"{s['edges']:,}"),
        ("build wall (s)", lambda s: f"{s['build']['wall_s']:.1f}"),
        ("build CPU (s)", lambda s: f"{s['build']['cpu_s']:.1f}"),
        ("build wall, every build (s; median)", lambda s: every_build(s, "wall")),
        ("build CPU, every build (s; median)", lambda s: every_build(s, "cpu")),
        ("build passages/s", lambda s: f"{s['build_passages_per_s']:.0f}"),
        ("build peak RSS (GB)", lambda s: _gb(s["build"]["peak_rss_bytes"])),
        ("build peak RSS bytes per node", lambda s: f"{s['build_bytes_per_node']:,.0f}"),
        ("index bytes (MB)", lambda s: f"{s['index_bytes'] / 1e6:.1f}"),
        ("Index.open (s)", lambda s: f"{s['query']['open_s']:.3f}"),
        ("first retrieve (s)", lambda s: f"{s['query']['first_retrieve_s']:.3f}"),
        ("open + first retrieve (s)", lambda s: f"{s['query']['open_plus_first_retrieve_s']:.3f}"),
        ("query p50 (ms, no embedding)", lambda s: f"{s['query']['p50_ms']:.2f}"),
        ("query p95 (ms, no embedding)", lambda s: f"{s['query']['p95_ms']:.2f}"),
        ("batch q/s", lambda s: f"{s['query']['batch_qps']:.1f}"),
        ("query process peak RSS (GB)", lambda s: _gb(s["query"]["peak_rss_bytes"])),
        ("... at the end: private / index pages (GB)", lambda s: f"{_gb(s['query']['end_rss_anon_bytes'])} / "
         f"{_gb(s['query']['end_rss_file_bytes'])}" if "end_rss_anon_bytes" in s["query"] else ""),
        ("questions (recall@10, sanity)", lambda s: f"{s['query']['n_questions']} ({s['query']['recall@10']:.3f})"),
        ("load average start/end", lambda s: f"{s['loadavg_1m_start']}/{s.get('loadavg_1m_end', '')}"),
    ]
    table = [(label, [cell(s, f) for s in sizes]) for label, f in rows]
    lines += _table("", cols, [(label, vals) for label, vals in table if any(vals)])  # no row of empty cells
    stages = list(dict.fromkeys(k for s in sizes for k in (s.get("stages") or {})))
    if stages:
        has_cpu = any(v.get("cpu_s") is not None for s in sizes for v in (s.get("stages") or {}).values())
        lines += ["## Build time per stage (s" + (", wall / CPU)" if has_cpu else ", wall; the pipeline records "
                  "no per-stage CPU)"), ""]

        def st(s, k):
            v = (s.get("stages") or {}).get(k)
            if not v:
                return ""
            w = f"{v['wall_s']:.2f}" if v.get("wall_s") is not None else ""
            return f"{w} / {v['cpu_s']:.2f}" if v.get("cpu_s") is not None else w

        lines += _table("stage", cols, [(k, [st(s, k) for s in sizes]) for k in stages])
        def figure(s, k, name):
            return ((s.get("stages") or {}).get(k) or {}).get(name, "")

        inner = [(k, d) for k in stages for d in _INNER_TIMES if any(figure(s, k, d) != "" for s in sizes)]
        if inner:
            lines += ["Inside the stages (wall s): the main process's assembly while the workers decompose, "
                      "the Leiden call, and finalize's parts (the query index, the graph and other files, "
                      "then the wait for the vector shards still building); `vector_cpu_s` is the HNSW worker "
                      "process's CPU seconds over the whole build (it runs beside the stages from embed on).", ""]
            lines += _table("stage: part", cols, [(f"{k}: {d}", [str(figure(s, k, d)) for s in sizes])
                                                  for k, d in inner])
            lines += ["Main process peak RSS when each stage finished (MB; monotone, the build's own record):", ""]
            lines += _table("stage", cols, [(k, [str(figure(s, k, "peak_rss_mb")) for s in sizes]) for k in stages])
    pq = res.get("paired_query")
    if pq:
        lines += ["## Query p50 side by side (" + " and ".join(f"{n:,}" for n in pq["passages"]) + " passages)", ""]
        if pq.get("ok"):
            lines += ["Both indexes opened in one process and their queries timed interleaved (query i of one, "
                      "then of the other; best of the repeats per query), so that machine load affects both alike.",
                      ""]
            lines += _table("", [f"{n:,}" for n in pq["passages"]], [
                ("query p50 (ms, no embedding)", [f"{x:.2f}" for x in pq["p50_ms"]]),
                ("query p95 (ms, no embedding)", [f"{x:.2f}" for x in pq["p95_ms"]]),
                ("query p50 CPU (ms)", [f"{x:.2f}" for x in pq["p50_cpu_ms"]]),
                ("p50 ratio to the first", [f"{x:.3f}" for x in pq["p50_ratio"]]),
                ("p50 CPU ratio to the first", [f"{x:.3f}" for x in pq["p50_cpu_ratio"]])])
        else:
            lines += [f"FAILED: {pq.get('reason')}", ""]
    f = res["fits"]
    lines += ["## Log-log fits (least squares over the sizes that ran: " + ", ".join(f"{x:,}" for x in f["sizes"])
              + ")", ""]
    lines += _table("quantity", ["slope"], [("build wall time", [f["build_wall_slope"]]),
                                             ("build CPU time", [f["build_cpu_slope"]]),
                                             ("build peak RSS", [f["build_peak_rss_slope"]]),
                                             ("query p50", [f["query_p50_slope"]]),
                                             ("build wall time, sizes >= 10^4", [f["build_wall_slope_from_1e4"]])])
    e = res.get("embedder")
    if e:
        lines += [f"## Embedder `{e['spec']}` ({e['name']}): throughput and a projection", "",
                  f"One pass over the first {e['sample_passages']:,} passages of `{Path(e['sample_from']).name}`: "
                  f"{e['texts_per_s']:.1f} texts/s, {e.get('model_tokens_per_s', 0):,.0f} model tokens/s "
                  f"(its own tokenizer; the ONNX models truncate their input), {e['corpus_tokens_per_s']:,.0f} corpus (cl100k) tokens/s "
                  f"({e['corpus_tokens_per_passage']:.1f} per passage). **Projection**, not a measured build: "
                  f"embedding corpus text with it costs ≈ {e['projected_s_per_m_corpus_tokens']:,.0f} s per million "
                  "corpus tokens; the per-size row below divides the build's embedded texts (T, S, A, H) by the "
                  "passage texts/s (an upper bound: S, A and H texts are shorter than passages).", ""]
        ok = [s for s in sizes if s.get("ok")]
        if ok:
            lines += _table("", [f"{s['passages']:,}" for s in ok], [
                ("estimated corpus tokens (M)", [f"{s['passages'] * e['corpus_tokens_per_passage'] / 1e6:.2f}" for s in ok]),
                ("embedded texts", [f"{s['embedded']:,}" for s in ok]),
                (f"projected `{e['spec']}` embed stage (s)", [f"{s['embedded'] / e['texts_per_s']:,.0f}" for s in ok]),
                (f"build wall with `{res['embed']}` (s)", [f"{s['build']['wall_s']:.1f}" for s in ok]),
            ])
    lines += ["## Targets of issue 9", ""]
    lines += _table("target", ["value", "status"], [(t["target"], [t["value"] if t["value"] is not None else "",
                                                                    t["status"]]) for t in res["targets"]])
    return "\n".join(lines) + "\n"


def write_plot(path: Path, res: dict) -> bool:
    """Log-log plot of build wall, build peak RSS and query p50 against passages; False without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed (pip install 'noderag[bench]'): scale.png not written", file=sys.stderr)
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [s for s in res["sizes"] if s.get("ok")]
    xs = [s["passages"] for s in ok]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    # (title, values, fitted slope, slope of the reference line: linear growth for the build, flat for queries)
    series = [("build wall (s)", [s["build"]["wall_s"] for s in ok], res["fits"]["build_wall_slope"], 1),
              ("build peak RSS (GB)", [s["build"]["peak_rss_bytes"] / 1e9 for s in ok],
               res["fits"]["build_peak_rss_slope"], 1),
              ("query p50 (ms, no embedding)", [s["query"]["p50_ms"] for s in ok], res["fits"]["query_p50_slope"], 0)]
    for ax, (label, ys, slope, ref) in zip(axes, series):
        if xs:
            ax.loglog(xs, ys, "o-", label=f"measured (slope {slope})" if slope is not None else "measured")
            ax.loglog(xs, [ys[0] * (x / xs[0]) ** ref for x in xs], "--", color="grey",
                      label=("linear" if ref else "flat") + " from the smallest size")
        for s in res["sizes"]:
            if not s.get("ok"):
                ax.axvline(s["passages"], color="red", alpha=0.4)
        ax.set_xlabel("passages")
        ax.set_title(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"noderag scale benchmark ({res['embed']}; red lines: sizes that did not fit)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ----------------------------------------------------------------------------- main
def _sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(x.replace("_", "")) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--passages {text!r}: expected comma-separated integers") from None
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError(f"--passages {text!r}: sizes must be >= 1")
    return sizes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passages", type=_sizes, default=_sizes("10000,100000,1000000"),
                    help="comma-separated corpus sizes (default 10000,100000,1000000)")
    ap.add_argument("--embed", default="hash:384", help="build embedder spec (default hash:384)")
    ap.add_argument("--out", type=Path, default=HERE / "results", help="folder of NAME.json/.md/.png")
    ap.add_argument("--name", default="scale", help="basename of the outputs (default scale)")
    ap.add_argument("--work", type=Path, default=REPO / ".benchcache" / "scale", help="corpora, indexes, logs")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with <source>/corpus.jsonl")
    ap.add_argument("--sources", nargs="+", default=list(DEFAULT_SOURCES))
    ap.add_argument("--seed", type=int, default=0, help="question-copy seed of the corpus generator")
    ap.add_argument("--max-seconds", type=float, default=None, help="kill a child process after this long")
    ap.add_argument("--max-rss-gb", type=float, default=None, help="kill a child whose process tree exceeds this")
    ap.add_argument("--keep-going", action="store_true", help="try larger sizes after a size failed")
    ap.add_argument("--no-project", dest="project", action="store_false",
                    help="try a size even when the memory fit of the smaller ones projects it past --max-rss-gb")
    ap.add_argument("--keep-index", action="store_true", help="keep each index in --work (default: remove)")
    ap.add_argument("--repeats", type=int, default=3, help="single-query timing runs (best of)")
    ap.add_argument("--build-repeats", type=int, default=1,
                    help="builds of each size, in rounds after the first; the fits use each size's median")
    ap.add_argument("--repeat-up-to", type=int, default=None,
                    help="repeat only the sizes of at most this many passages (the others are built once)")
    ap.add_argument("--paired", type=_sizes, default=list(PAIRED),
                    help="two sizes whose queries are also timed interleaved in one process (default 10000,100000)")
    ap.add_argument("--model-embed", default="default", help="embedder of the throughput figures")
    ap.add_argument("--embed-sample", type=int, default=2000, help="passages for the embedder figures (0: skip)")
    ap.add_argument("--note", default=None, help="a line printed at the top of scale.md")
    ap.add_argument("--warmup", type=int, default=1000,
                    help="passages of an untimed build first, which fills the Numba cache (0: none)")
    # exit status: 0 when every size ran, 2 when one failed or was skipped (its reason is in the outputs)
    args = ap.parse_args(argv)
    args.max_rss_bytes = int(args.max_rss_gb * 1e9) if args.max_rss_gb else None
    if len(args.paired) != 2:
        ap.error(f"--paired takes two sizes, got {args.paired}")
    if args.build_repeats < 1:
        ap.error(f"--build-repeats must be >= 1, got {args.build_repeats}")
    args.paired = tuple(args.paired)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    res: dict = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1)},
        "git_revision": _git_revision(), "command": "python benchmarks/bench_scale.py " + " ".join(
            sys.argv[1:] if argv is None else argv),
        "embed": args.embed, "sources": args.sources, "repeats": args.repeats, "build_repeats": args.build_repeats,
        "repeat_up_to": args.repeat_up_to,
        "note": args.note,
        "rss_method": "build: max(os.wait4 ru_maxrss, /proc process-tree memory polled every 0.2 s or less often, "
                      "at most 2% of one core: RSS of a lone process, the sum of PSS while forked workers run); "
                      "query: getrusage(RUSAGE_SELF).ru_maxrss in the query process",
        "sizes": [],
    }
    if args.warmup > 0:
        res["warmup"] = warm_up(args, work)
    stop = False
    for n in args.passages:
        if stop:
            res["sizes"].append({"passages": n, "ok": False, "failed_in": "skipped",
                                 "reason": "not tried: a smaller size failed (use --keep-going)"})
            continue
        projected = projected_peak_rss(res["sizes"], n)
        if args.max_rss_bytes is not None and args.project and projected is not None and projected > args.max_rss_bytes:
            res["sizes"].append({"passages": n, "ok": False, "failed_in": "skipped", "projected_peak_rss_bytes":
                                 int(projected), "reason": (
                                     f"not tried: projected build peak RSS {projected / 1e9:.1f} GB (linear fit of "
                                     f"the measured sizes) exceeds --max-rss-gb {args.max_rss_bytes / 1e9:g} "
                                     "(--no-project tries it anyway)")})
            print(f"== {n:,} passages: {res['sizes'][-1]['reason']}", file=sys.stderr, flush=True)
            stop = not args.keep_going
            continue
        rec = bench_size(n, args, work)
        res["sizes"].append(rec)
        print(json.dumps(rec, indent=1), file=sys.stderr, flush=True)
        if not rec["ok"] and not args.keep_going:
            stop = True
    paired = bench_paired(res["sizes"], args, work)
    if paired is not None:
        res["paired_query"] = paired
    if not args.keep_index:
        for n in args.paired:
            shutil.rmtree(work / f"index-{n}", ignore_errors=True)
    repeat_builds(res["sizes"], args, work)
    res["fits"] = fits(res["sizes"])
    built = [s for s in res["sizes"] if "corpus" in s]
    if args.embed_sample > 0 and built:
        print(f"== embedder figures ({args.model_embed}, {args.embed_sample} passages)", file=sys.stderr, flush=True)
        res["embedder"] = embedder_figures(args.model_embed, Path(built[-1]["corpus"]), args.embed_sample)
    res["targets"] = targets(res["sizes"], res["fits"], res.get("paired_query"))
    res["driver_peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    (out / f"{args.name}.md").write_text(to_markdown(res), encoding="utf-8")
    plotted = write_plot(out / f"{args.name}.png", res)
    print(to_markdown(res))
    print(f"wrote {out / args.name}.json, .md" + (", .png" if plotted else ""), file=sys.stderr)
    return 0 if all(s.get("ok") for s in res["sizes"]) else 2


if __name__ == "__main__":
    sys.exit(main())
