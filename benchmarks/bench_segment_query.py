"""What querying a segmented index costs beside one index of the same corpus, this package against an earlier one.

Usage::

    python benchmarks/bench_segment_query.py --one DIR --segmented DIR --questions Q.jsonl
        [--limit 200] [--repeats 3] [--before-package DIR] [--out FILE]

``--one`` and ``--segmented`` are builds of one corpus (``noderag build``, and the same with ``--segments N``).
The questions are embedded once; then for every question each searcher (this package over either index, and
with ``--before-package`` the earlier package over either) retrieves it in turn (interleaved, so all see the
same load) ``--repeats`` times and keeps its best thread CPU time. Reported: p50/p95 per searcher, the ratio of
the segmented index to the one index for each package, and ours against the earlier package. Before timing,
every question's result (passage ids, their float scores bit for bit, passage texts, the nodes and their
scores, the context, matched names, documents) is compared between the two packages on each index: any
difference is counted and reported. A further pass per index (this package) times the parts of a query
(:data:`PARTS`: the vector index's ``search`` and ``get``, BM25, names, texts, labels) by thread CPU.

``--before-package DIR``: ``DIR/noderag_before`` is an earlier ``src/noderag`` copied under another name (its
compiled ``_core`` included), as for ``bench_search_cost.py``. Writes ``--out`` (JSON) and the same name with
``.md``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_retrieval import _git_revision, load_jsonl  # noqa: E402

import noderag  # noqa: E402


def fingerprint(r) -> tuple:
    """Everything a retrieval returns that a caller reads, floats as their exact hex form."""
    return (list(r.passage_node_ids), [float(s).hex() for s in r.passage_scores], [str(p) for p in r.passages],
            r.context, list(r.context_node_ids), [(n.id, float(n.score).hex(), n.origin) for n in r.nodes],
            list(r.matched_names), list(r.documents))


def open_searchers(args) -> dict:
    """name -> searcher: ``ours-one``, ``ours-seg`` and, with a before package, ``before-one``, ``before-seg``."""
    out = {"ours-one": noderag.Index.open(args.one).searcher(),
           "ours-seg": noderag.Index.open(args.segmented).searcher()}
    if args.before_package:
        sys.path.insert(0, str(args.before_package))
        old = importlib.import_module("noderag_before")
        out["before-one"] = old.Index.open(args.one).searcher()
        out["before-seg"] = old.Index.open(args.segmented).searcher()
    return out


def same_results(searchers: dict, questions: list[str], qvecs: np.ndarray) -> dict:
    """Per index: the questions whose results differ between the two packages (also the warm-up pass)."""
    out = {}
    for which in ("one", "seg"):
        ours, before = searchers[f"ours-{which}"], searchers.get(f"before-{which}")
        differ = []
        for i, (q, v) in enumerate(zip(questions, qvecs)):
            got = fingerprint(ours.retrieve(q, query_vector=v))
            if before is not None and got != fingerprint(before.retrieve(q, query_vector=v)):
                differ.append(i)
        out[which] = {"compared": before is not None, "questions_differing": len(differ), "first": differ[:10]}
    return out


def interleaved(searchers: dict, questions: list[str], qvecs: np.ndarray, repeats: int
                ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Best-of-``repeats`` thread CPU and wall seconds per question and searcher, the searchers taking turns per
    question (wall: a shard search on another thread is CPU the querying thread does not see)."""
    times = {name: np.zeros(len(questions)) for name in searchers}
    walls = {name: np.zeros(len(questions)) for name in searchers}
    for i, (q, v) in enumerate(zip(questions, qvecs)):
        for name, s in searchers.items():
            best, best_wall = float("inf"), float("inf")
            for _ in range(repeats):
                t0, w0 = time.thread_time(), time.perf_counter()
                s.retrieve(q, query_vector=v)
                best, best_wall = min(best, time.thread_time() - t0), min(best_wall, time.perf_counter() - w0)
            times[name][i], walls[name][i] = best, best_wall
    return times, walls


#: The calls a breakdown times: (component, the searcher's attribute holding the object, its method).
PARTS = (("vector search", "vectors", "search"), ("vector get", "vectors", "get"),
         ("bm25 read", "lexical", "query_postings"), ("names", "matcher", "match"), ("texts", "tables", "texts"),
         ("labels", "tables", "labels"), ("document labels", "tables", "doc_label"))
#: The query's BM25 postings (what ``query_postings`` returns): their sums and the candidates' impacts.
POSTINGS_PARTS = (("bm25 scores", "scores"), ("bm25 impacts", "impacts"))


def breakdown(searcher, questions: list[str], qvecs: np.ndarray, repeats: int) -> dict:
    """Mean thread CPU per question of each of :data:`PARTS` (the outermost call of any of them timed) and of the
    whole query, the pass over all questions with the least total of ``repeats``; ``rest``: what none of them
    took. Also the median per question of the vector calls (search + get)."""
    spent: dict[str, float] = {}
    inside = [False]

    def timed(name, fn):
        def call(*a, **kw):
            if inside[0]:
                return fn(*a, **kw)
            inside[0] = True
            t0 = time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                spent[name] = spent.get(name, 0.0) + time.thread_time() - t0
                inside[0] = False
        return call

    owners = {"vectors": searcher.store.vectors, "lexical": searcher.lexical, "matcher": searcher.matcher,
              "tables": searcher.tables}
    for name, owner, attr in PARTS:
        setattr(owners[owner], attr, timed(name, getattr(owners[owner], attr)))
    read = owners["lexical"].query_postings

    def read_timed(*a, **kw):  # the postings a query reads: their sums and impacts timed too
        got = read(*a, **kw)
        if got is not None:
            for name, attr in POSTINGS_PARTS:
                setattr(got, attr, timed(name, getattr(got, attr)))
        return got

    owners["lexical"].query_postings = read_timed
    best = None
    try:
        for _ in range(repeats):
            spent.clear()
            vec, total = [], 0.0
            for q, v in zip(questions, qvecs):
                before = spent.get("vector search", 0.0) + spent.get("vector get", 0.0)
                t0 = time.thread_time()
                searcher.retrieve(q, query_vector=v)
                total += time.thread_time() - t0
                vec.append(spent.get("vector search", 0.0) + spent.get("vector get", 0.0) - before)
            if best is None or total < best[0]:
                best = total, dict(spent), vec
    finally:
        for _, owner, attr in PARTS:
            if attr in vars(owners[owner]):
                delattr(owners[owner], attr)
    total, parts, vec = best
    n = len(questions)
    names = [p[0] for p in PARTS] + [p[0] for p in POSTINGS_PARTS]
    out = {name: round(parts.get(name, 0.0) / n * 1e3, 3) for name in names}
    out["rest"] = round((total - sum(parts.values())) / n * 1e3, 3)
    out["query"] = round(total / n * 1e3, 3)
    out["vector_p50_ms"] = round(float(np.median(vec)) * 1e3, 3)
    return out


def directories(index_dir: Path) -> dict:
    """What the segmented index's look-up directories cost to make (at its first query; here made anew, wall ms)
    and hold (MB): the name token, phrase and canonical-name directories."""
    from noderag.search.segments import _HashDirectory

    tables = noderag.Index.open(index_dir).query_index
    parts = {}
    for kind in ("tok", "phrase", "exact"):
        parts[kind] = [getattr(p, f"_{kind}_hash") for p in tables.names.parts]
    out = {}
    for kind, arrays in parts.items():
        t0 = time.perf_counter()
        d = _HashDirectory(arrays)
        out[kind] = {"entries": int(d.hash.shape[0]), "ms": round((time.perf_counter() - t0) * 1e3, 1),
                     "mb": round((d.hash.nbytes + d.part.nbytes + d.row.nbytes) / 2**20, 1)}
    return out


def _pct(t: np.ndarray) -> dict:
    return {f"p{q}_ms": round(float(np.percentile(t, q)) * 1e3, 3) for q in (50, 95)}


def _ratios(rows: dict) -> dict:
    """Segmented over one index per package, and ours over before per index."""
    ratios = {}
    for pkg in ("ours", "before"):
        if f"{pkg}-seg" in rows:
            ratios[f"{pkg} seg/one"] = {k: round(rows[f"{pkg}-seg"][k] / rows[f"{pkg}-one"][k], 3)
                                        for k in ("p50_ms", "p95_ms")}
    for which in ("one", "seg"):
        if f"before-{which}" in rows:
            ratios[f"{which} ours/before"] = {k: round(rows[f"ours-{which}"][k] / rows[f"before-{which}"][k], 3)
                                              for k in ("p50_ms", "p95_ms")}
    return ratios


def measure(args) -> dict:
    questions = [q["question"] for q in load_jsonl(args.questions)][: args.limit]
    searchers = open_searchers(args)
    qvecs = searchers["ours-one"].embed(questions)
    same = same_results(searchers, questions, qvecs)
    times, walls = interleaved(searchers, questions, qvecs, args.repeats)
    rows = {name: _pct(t) for name, t in times.items()}
    wall_rows = {name: _pct(t) for name, t in walls.items()}
    ratios, wall_ratios = _ratios(rows), _ratios(wall_rows)
    share = {"seg": breakdown(searchers["ours-seg"], questions, qvecs, args.repeats),
             "one": breakdown(searchers["ours-one"], questions, qvecs, args.repeats)}
    manifest = getattr(searchers["ours-one"].store, "manifest", {}) or {}
    return {"one": str(args.one), "segmented": str(args.segmented),
            "segments": len(searchers["ours-seg"].store.segment_folders),
            "counts": manifest.get("counts"), "n_questions": len(questions), "repeats": args.repeats,
            "before_package": str(args.before_package or ""), "same_results": same, "rows": rows, "ratios": ratios,
            "wall_rows": wall_rows, "wall_ratios": wall_ratios,
            "breakdown": share, "directories": directories(args.segmented),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}",
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "git_revision": _git_revision(),
            "command": "python benchmarks/bench_segment_query.py " + " ".join(args.argv)}


def markdown(out: dict) -> str:
    counts = out.get("counts") or {}
    lines = [f"# Querying {out['segments']} segments as one index: {counts.get('chunks', '?')} passages", "",
             f"`{out['command']}`; {out['machine']}; load average {out['load_average']}; "
             f"git {out['git_revision']}.", "",
             f"{out['n_questions']} questions, thread CPU, best of {out['repeats']} per question, the four searchers "
             "interleaved per question. `ours`: this package; `before`: the package copy given (the code before "
             "this change).", "", "| searcher | p50 ms | p95 ms |", "|---|---:|---:|"]
    lines += [f"| {name} | {r['p50_ms']} | {r['p95_ms']} |" for name, r in out["rows"].items()]
    lines += ["", "| ratio | p50 | p95 |", "|---|---:|---:|"]
    lines += [f"| {name} | {r['p50_ms']} | {r['p95_ms']} |" for name, r in out["ratios"].items()]
    if out.get("wall_rows"):
        lines += ["", "Wall time, the same runs:", "", "| searcher | p50 ms | p95 ms |", "|---|---:|---:|"]
        lines += [f"| {name} | {r['p50_ms']} | {r['p95_ms']} |" for name, r in out["wall_rows"].items()]
        lines += ["", "| ratio (wall) | p50 | p95 |", "|---|---:|---:|"]
        lines += [f"| {name} | {r['p50_ms']} | {r['p95_ms']} |" for name, r in out["wall_ratios"].items()]
    lines += ["", "Same results (passage ids, float scores bit for bit, texts, nodes, context, names, documents), ours "
              "against before:", ""]
    for which, s in out["same_results"].items():
        lines.append(f"- {which}: " + (f"{s['questions_differing']} of {out['n_questions']} questions differ"
                                        if s["compared"] else "not compared (no before package)"))
    b = out["breakdown"]
    lines += ["", "Where a query's thread CPU goes (ours; mean ms per question, the outermost of these calls timed, "
              "best pass of the repeats; `rest`: PPR, ranking stages and all else):", "",
              "| part | one | segmented | difference |", "|---|---:|---:|---:|"]
    for name in [p[0] for p in PARTS] + [p[0] for p in POSTINGS_PARTS] + ["rest", "query"]:
        lines.append(f"| {name} | {b['one'][name]} | {b['seg'][name]} | {b['seg'][name] - b['one'][name]:+.3f} |")
    lines += ["", f"Vector search + get, median per question: {b['seg']['vector_p50_ms']} ms segmented, "
              f"{b['one']['vector_p50_ms']} ms one index."]
    lines += ["", "Look-up directories of the segmented index (made at its first query; wall ms, MB held):", ""]
    for kind, d in out["directories"].items():
        lines.append(f"- {kind}: {d['entries']} hashes, {d['ms']} ms, {d['mb']} MB")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", type=Path, required=True, help="an index of the corpus built as one segment")
    ap.add_argument("--segmented", type=Path, required=True, help="the same corpus built with --segments N")
    ap.add_argument("--questions", type=Path, required=True)
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before-package", type=Path, default=None, metavar="DIR",
                    help="folder holding an earlier package copy named noderag_before, timed beside this one")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/segment_query.json"))
    args = ap.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    out = measure(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    args.out.with_suffix(".md").write_text(markdown(out), encoding="utf-8")
    print(markdown(out))


if __name__ == "__main__":
    main()
