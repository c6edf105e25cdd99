"""A query's BM25 sums: the native kernel (:func:`noderag._core.sum_postings`) beside the numpy path it replaced.

Usage::

    python benchmarks/bench_bm25.py --index DIR --questions Q.jsonl [--index DIR2 --questions Q2.jsonl ...]
        [--limit 300] [--repeats 5] [--candidates 60] [--out FILE]

Per index (its BM25 postings memory-mapped read-only, bound to its passages as a searcher binds them) and per
question (its :func:`~noderag.search.lexical.passage_terms`), thread CPU time, best of ``--repeats``, the two
paths interleaved per question, after one warm-up pass (kept posting lists filled as in a serving process):

- ``term_scores``: :meth:`LexicalIndex.term_scores` (the kernel) beside the numpy path (kept impacts as float64
  copies, ``np.add.at`` into the float64 scratch, a bool mark array, ``np.flatnonzero``, gather and reset), each
  keeping long posting lists within the same memory (the kernel path keeps twice the postings: no impact copies);
- ``term_scores, lists not kept``: the same with the kept posting lists dropped before each call (a query whose
  terms no earlier query read: every posting's ordinal gathered from the node-id map);
- ``term_impacts``: :meth:`LexicalIndex.term_impacts` of the query's terms on its ``--candidates`` best passages
  (unchanged but for the impacts' dtype: float32 views now, float64 copies before).

Reports p50/p95 over the questions and the ratio (kernel / numpy), and whether both paths give the same ids and
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
from noderag.search.lexical import LEX_ARRAYS, TERM_CACHE_FROM, LexicalIndex  # noqa: E402
from noderag.search.lexical import passage_terms, top_scored  # noqa: E402
from noderag.search.metrics import percentile_ms  # noqa: E402


#: The numpy path kept this many postings (12 bytes each, and as much again in by-ordinal copies: 48 MB at most, as
#: the kernel path's twice as many at 4 bytes, by-ordinal copies 8).
ADD_AT_CACHE_POSTINGS = 1 << 21


class AddAtSums(LexicalIndex):
    """The BM25 sums before the native kernel: kept impacts as float64 copies, ``np.add.at``, a bool mark array."""

    def _term_ordinals(self, start: int, end: int):
        got = self._term_cache.get((start, end))
        if got is not None:
            return got
        nodes = self._node[start:end]
        ordinal = self._ordinal
        if nodes.size and int(nodes.max()) >= ordinal.shape[0]:
            return None
        ords = ordinal[nodes]
        if ords.size and int(ords.min()) < 0:
            return None
        out = ords, self._weight[start:end].astype(np.float64)
        if ords.size >= TERM_CACHE_FROM:
            for a in out:
                a.flags.writeable = False
            if self._term_cached + ords.size > ADD_AT_CACHE_POSTINGS:
                self._term_cache, self._term_cached, self._term_sorted = {}, 0, {}
            self._term_cache[(start, end)] = out
            self._term_cached += ords.size
        return out

    def _accumulator(self) -> np.ndarray:
        sc = self._scratch
        n_pass = self._passages.shape[0]
        if getattr(sc, "acc", None) is None or sc.acc.shape[0] != n_pass:
            sc.acc = np.zeros(n_pass)
            sc.touched = np.zeros(n_pass, bool)
        return sc.acc

    def _accumulate(self, ords: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        acc = self._accumulator()
        mark = self._scratch.touched
        np.add.at(acc, ords, weights)
        mark[ords] = True
        touched = np.flatnonzero(mark)
        scores = acc[touched]
        acc[touched] = 0.0
        mark[touched] = False
        return self._passages[touched], scores


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
        lex._term_cache, lex._term_cached, lex._term_sorted = {}, 0, {}
    return reset


def measure_index(index: Path, questions: Path, limit: int, repeats: int, candidates: int) -> dict:
    arrays, t_ids = open_postings(index)
    paths = {"kernel": LexicalIndex(arrays), "numpy": AddAtSums(arrays)}
    for lex in paths.values():
        lex.bind_passages(t_ids)
    terms = [sorted(set(passage_terms(r["question"]))) for r in load_jsonl(questions)[:limit]]
    cands, differ, postings, touched = [], [], [], []
    for i, t in enumerate(terms):  # warm-up, the same answer check, the candidates
        (a_ids, a_s), (b_ids, b_s) = (lex.term_scores(set(t)) for lex in paths.values())
        if a_ids.tolist() != b_ids.tolist() or a_s.tobytes() != b_s.tobytes():
            differ.append(i)
        cands.append(top_scored(a_ids, a_s, candidates)[0])
        touched.append(a_ids.size)
        postings.append(_postings_read(paths["kernel"], t))
        for lex in paths.values():
            lex.term_impacts(t, cands[-1])
    times = {case: {name: np.zeros(len(terms)) for name in paths}
             for case in ("term_scores", "term_scores, lists not kept", "term_impacts")}
    for i, t in enumerate(terms):
        ts = set(t)
        for name, lex in paths.items():
            times["term_scores"][name][i] = _best(lambda: lex.term_scores(ts), repeats)
            times["term_impacts"][name][i] = _best(lambda: lex.term_impacts(t, cands[i]), repeats)
        for name, lex in paths.items():
            times["term_scores, lists not kept"][name][i] = _best(lambda: lex.term_scores(ts), repeats, _drop_kept(lex))
    rows = {}
    for case, per in times.items():
        row = {name: {"p50_ms": round(percentile_ms(v, 50), 4), "p95_ms": round(percentile_ms(v, 95), 4)}
               for name, v in per.items()}
        row["p50_ratio"] = round(row["kernel"]["p50_ms"] / max(row["numpy"]["p50_ms"], 1e-9), 3)
        row["p95_ratio"] = round(row["kernel"]["p95_ms"] / max(row["numpy"]["p95_ms"], 1e-9), 3)
        rows[case] = row
    return {"index": str(index), "questions": str(questions), "n_questions": len(terms), "passages": int(t_ids.size),
            "postings_read_p50": float(np.percentile(postings, 50)),
            "postings_read_p95": float(np.percentile(postings, 95)),
            "passages_scored_p50": float(np.percentile(touched, 50)), "candidates": candidates,
            "scores_differ": len(differ), "differing_questions": differ[:20], "cases": rows}


def _postings_read(lex: LexicalIndex, terms: list[str]) -> int:
    hashes = lex._term_hashes(terms)
    pos = np.minimum(np.searchsorted(lex._hash, hashes), lex._hash.shape[0] - 1)
    pos = pos[lex._hash[pos] == hashes]
    return int(np.minimum(lex._ptr[pos + 1] - lex._ptr[pos], lex.max_postings).sum())


def markdown(out: dict) -> list[str]:
    lines = ["# BM25 sums per query: native kernel vs numpy add.at", "",
             f"`{out['command']}`; {out['machine']}; load average {out['load_average']}; git {out['git_revision']}.",
             "Thread CPU time per question, best of the repeats, the two paths interleaved; p50/p95 over questions.",
             ""]
    for run in out["runs"]:
        lines += [f"## {run['passages']:,} passages ({run['n_questions']} questions)", "",
                  f"Postings read per query p50 {run['postings_read_p50']:.0f} (p95 {run['postings_read_p95']:.0f}); "
                  f"passages scored p50 {run['passages_scored_p50']:.0f}; questions whose ids or float64 scores "
                  f"differ between the paths: {run['scores_differ']}.", "",
                  "| case | kernel p50 ms | numpy p50 ms | ratio | kernel p95 ms | numpy p95 ms | ratio |",
                  "|---|---|---|---|---|---|---|"]
        for case, r in run["cases"].items():
            name = case if case != "term_impacts" else f"term_impacts ({run['candidates']} passages)"
            lines.append(f"| {name} | {r['kernel']['p50_ms']:.3f} | {r['numpy']['p50_ms']:.3f} | {r['p50_ratio']:.2f} "
                         f"| {r['kernel']['p95_ms']:.3f} | {r['numpy']['p95_ms']:.3f} | {r['p95_ratio']:.2f} |")
        lines.append("")
    return lines


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", type=Path, action="append", required=True)
    ap.add_argument("--questions", type=Path, action="append", required=True)
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--candidates", type=int, default=60)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "bm25_kernel.json")
    args = ap.parse_args(argv)
    if len(args.index) != len(args.questions):
        ap.error(f"{len(args.index)} --index for {len(args.questions)} --questions: give one questions file per index")
    runs = [measure_index(i, q, args.limit, args.repeats, args.candidates) for i, q in zip(args.index, args.questions)]
    out = {"command": "python benchmarks/bench_bm25.py " + " ".join(argv),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}",
           "load_average": [round(x, 2) for x in os.getloadavg()], "git_revision": _git_revision(), "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    args.out.with_suffix(".md").write_text("\n".join(markdown(out)))
    print("\n".join(markdown(out)))


if __name__ == "__main__":
    main()
