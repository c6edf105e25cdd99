"""Query side of ``bench_scale.py``, run as its own fresh process: open an index and query it.

Prints one JSON object on stdout: ``import_s`` (noderag and its search module),
``open_s`` (``Index.open``), ``first_retrieve_s`` (the first ``index.retrieve(q)``
after opening, through the public API: searcher setup, query embedding with the
index's embedder, retrieval), then the rows of ``bench_retrieval.time_noderag`` /
``noderag_row`` over the question set (p50/p95 ms per query without the query
embedding, best of 3; batch q/s of ``retrieve_many``; recall as a sanity check),
and ``peak_rss_bytes`` of this process (``getrusage(RUSAGE_SELF).ru_maxrss``).

    python benchmarks/scale_query.py INDEX QUESTIONS.jsonl [--repeats R]
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()  # before the heavy imports: import_s is measured from here

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import noderag  # noqa: E402
import noderag.search  # noqa: E402,F401  (attaches retrieve/retrieve_many to Index)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_retrieval import load_jsonl, noderag_row, time_noderag  # noqa: E402

_IMPORT_S = time.perf_counter() - _T0


def measure(index_dir: Path, questions_path: Path, repeats: int = 3) -> dict:
    """Open ``index_dir`` and time retrieval over the questions of ``questions_path``."""
    questions = load_jsonl(questions_path)
    if not questions:
        raise SystemExit(f"{questions_path}: no questions")
    queries = [q["question"] for q in questions]
    gold = [q["supporting_ids"] for q in questions]
    t0 = time.perf_counter()
    index = noderag.Index.open(index_dir)
    open_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    index.retrieve(queries[0])
    first_s = time.perf_counter() - t0
    searcher = index.searcher()
    t0 = time.perf_counter()
    qvecs = searcher.embed(queries)
    embed_s = time.perf_counter() - t0
    results, lat, batch_s = time_noderag(searcher, queries, qvecs, repeats=repeats)
    row = noderag_row(results, lat, batch_s, gold, len(queries), embed_s)
    return {"import_s": round(_IMPORT_S, 4), "open_s": round(open_s, 4), "first_retrieve_s": round(first_s, 4),
            "open_plus_first_retrieve_s": round(open_s + first_s, 4), "n_questions": len(queries),
            "query_embed_s": round(embed_s, 4), "repeats": repeats, **row,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("index", type=Path)
    ap.add_argument("questions", type=Path)
    ap.add_argument("--repeats", type=int, default=3, help="single-query timing runs (best of)")
    args = ap.parse_args(argv)
    print(json.dumps(measure(args.index, args.questions, args.repeats)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
