"""A query's BM25 sums: the block-sweep kernel over term runs sorted by passage (:func:`noderag._core.sum_runs`)
beside the scratch kernel it replaced (:func:`noderag._core.sum_postings`: one float64 entry a passage).

Usage::

    python benchmarks/bench_bm25.py --index DIR --questions Q.jsonl [--index DIR2 --questions Q2.jsonl ...]
        [--limit 300] [--repeats 5] [--out FILE]

Per index (its BM25 postings memory-mapped read-only, bound to its passages as a searcher binds them) and per
question (its :func:`~noderag.search.lexical.passage_terms`), thread CPU time, best of ``--repeats``, the two
paths interleaved per question, after one warm-up pass (kept posting lists filled as in a serving process); both
read the same kept runs (a term's postings sorted by passage), so the sums alone differ:

- ``term_scores``: :meth:`LexicalIndex.term_scores` (runs swept a block of 8,192 passages at a time) beside the
  scratch kernel over the same runs concatenated (a scatter into one float64 entry a passage, its touched bits
  read back);
- ``term_scores, caches cold``: the same with a 64 MB buffer swept before each call, as the rest of a query does
  between its BM25 look-ups on a large index (the scratch is megabytes: its entries are then cache misses);
- ``term_scores, lists not kept``: the kept lists dropped before each call (a query whose terms no earlier
  query read: every posting's ordinal gathered from the node-id map and sorted).

Reports p50/p95 over the questions and the ratio (runs / scratch), and whether both give the same ids and
bit-identical scores. Writes ``--out`` (JSON) and the same name with ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_retrieval import _git_revision, load_jsonl  # noqa: E402

from noderag.graph.types import NodeType  # noqa: E402
from noderag.search.lexical import LEX_ARRAYS, LexicalIndex, sum_postings  # noqa: E402
from noderag.search.lexical import passage_terms  # noqa: E402
from noderag.search.metrics import percentile_ms  # noqa: E402


class ScratchSums(LexicalIndex):
    """The BM25 sums of the kernel before: the query's runs concatenated and scattered into the thread's float64
    scratch (one entry a passage) by :func:`sum_postings`."""

    def term_scores(self, terms):
        postings = self.query_postings(terms)
        n_pass = self._passages.shape[0]
        if getattr(self, "_acc", None) is None or self._acc.shape[0] != n_pass:
            self._acc, self._marks = np.zeros(n_pass), np.zeros((n_pass + 63) // 64, np.uint64)
        return sum_postings(postings.ords, postings.weights, self._acc, self._marks, self._passages)


def open_postings(index: Path) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The current generation's BM25 arrays (memory-mapped read-only) and its passages' node ids."""
    gen = index / "generations" / (index / "CURRENT").read_text().strip()
    arrays = {key: np.load(gen / "query" / f"{key}.npy", mmap_mode="r") for key in LEX_ARRAYS}
    types = np.load(gen / "node_types.npy", mmap_mode="r")
    return arrays, np.flatnonzero(types == int(NodeType.T))


def _best(fn, repeats: int, reset=None) -> float:
    best = np.inf
    for _ in range(repeats):
        if reset is not None:
            reset()
        t0 = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t0)
    return best


def _drop_kept(lex: LexicalIndex):
    def reset() -> None:
        lex._term_cache, lex._term_cached = {}, 0
    return reset


def _cold(sweep: np.ndarray):
    """Before a call: the caches swept."""
    def reset() -> None:
        np.add(sweep, 1.0, out=sweep)
    return reset


def measure_index(index: Path, questions: Path, limit: int, repeats: int) -> dict:
    arrays, t_ids = open_postings(index)
    paths = {"runs": LexicalIndex(arrays), "scratch": ScratchSums(arrays)}
    for lex in paths.values():
        lex.bind_passages(t_ids)
    sweep = np.zeros(8 << 20)  # 64 MB
    terms = [sorted(set(passage_terms(r["question"]))) for r in load_jsonl(questions)[:limit]]
    terms = [t for t in terms if paths["runs"].query_postings(t) is not None and t]
    differ, postings, touched = [], [], []
    for i, t in enumerate(terms):  # warm-up and the same-answer check
        (a_ids, a_s), (b_ids, b_s) = (lex.term_scores(set(t)) for lex in paths.values())
        if a_ids.tolist() != b_ids.tolist() or a_s.tobytes() != b_s.tobytes():
            differ.append(i)
        touched.append(a_ids.size)
        postings.append(_postings_read(paths["runs"], t))
    times = {case: {name: np.zeros(len(terms)) for name in paths}
             for case in ("term_scores", "term_scores, caches cold", "term_scores, lists not kept")}
    for i, t in enumerate(terms):
        ts = set(t)
        for name, lex in paths.items():
            times["term_scores"][name][i] = _best(lambda: lex.term_scores(ts), repeats)
            times["term_scores, caches cold"][name][i] = _best(lambda: lex.term_scores(ts), repeats, _cold(sweep))
        for name, lex in paths.items():
            times["term_scores, lists not kept"][name][i] = _best(lambda: lex.term_scores(ts), repeats, _drop_kept(lex))
    rows = {}
    for case, per in times.items():
        row = {name: {"p50_ms": round(percentile_ms(v, 50), 4), "p95_ms": round(percentile_ms(v, 95), 4)}
               for name, v in per.items()}
        row["p50_ratio"] = round(row["runs"]["p50_ms"] / max(row["scratch"]["p50_ms"], 1e-9), 3)
        row["p95_ratio"] = round(row["runs"]["p95_ms"] / max(row["scratch"]["p95_ms"], 1e-9), 3)
        rows[case] = row
    return {"index": str(index), "questions": str(questions), "n_questions": len(terms), "passages": int(t_ids.size),
            "postings_read_p50": float(np.percentile(postings, 50)),
            "postings_read_p95": float(np.percentile(postings, 95)),
            "passages_scored_p50": float(np.percentile(touched, 50)),
            "scores_differ": len(differ), "differing_questions": differ[:20], "cases": rows}


def _postings_read(lex: LexicalIndex, terms: list[str]) -> int:
    hashes = lex._term_hashes(terms)
    pos = np.minimum(np.searchsorted(lex._hash, hashes), lex._hash.shape[0] - 1)
    pos = pos[lex._hash[pos] == hashes]
    return int(np.minimum(lex._ptr[pos + 1] - lex._ptr[pos], lex.max_postings).sum())


def markdown(out: dict) -> list[str]:
    lines = ["# BM25 sums per query: runs swept by block vs the scratch kernel", "",
             f"`{out['command']}`; {out['machine']}; load average {out['load_average']}; git {out['git_revision']}.",
             "Thread CPU time per question, best of the repeats, the two paths interleaved; p50/p95 over questions.",
             ""]
    for run in out["runs"]:
        lines += [f"## {run['passages']:,} passages ({run['n_questions']} questions)", "",
                  f"Postings read per query p50 {run['postings_read_p50']:.0f} (p95 {run['postings_read_p95']:.0f}); "
                  f"passages scored p50 {run['passages_scored_p50']:.0f}; questions whose ids or float64 scores "
                  f"differ between the paths: {run['scores_differ']}.", "",
                  "| case | runs p50 ms | scratch p50 ms | ratio | runs p95 ms | scratch p95 ms | ratio |",
                  "|---|---|---|---|---|---|---|"]
        for case, r in run["cases"].items():
            lines.append(f"| {case} | {r['runs']['p50_ms']:.3f} | {r['scratch']['p50_ms']:.3f} | {r['p50_ratio']:.2f} "
                         f"| {r['runs']['p95_ms']:.3f} | {r['scratch']['p95_ms']:.3f} | {r['p95_ratio']:.2f} |")
        lines.append("")
    return lines


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", type=Path, action="append", required=True)
    ap.add_argument("--questions", type=Path, action="append", required=True)
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "bm25_runs.json")
    args = ap.parse_args(argv)
    if len(args.index) != len(args.questions):
        ap.error(f"{len(args.index)} --index for {len(args.questions)} --questions: give one questions file per index")
    runs = [measure_index(i, q, args.limit, args.repeats) for i, q in zip(args.index, args.questions)]
    out = {"command": "python benchmarks/bench_bm25.py " + " ".join(argv),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}",
           "load_average": [round(x, 2) for x in os.getloadavg()], "git_revision": _git_revision(), "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    args.out.with_suffix(".md").write_text("\n".join(markdown(out)))
    print("\n".join(markdown(out)))


if __name__ == "__main__":
    main()
