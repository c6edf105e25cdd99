"""Query side of ``bench_scale.py``, run as its own fresh process: open an index and query it.

Prints one JSON object on stdout: ``import_s`` (noderag and its search module),
``open_s`` (``Index.open``), ``first_retrieve_s`` (the first ``index.retrieve(q)``
after opening, through the public API: searcher setup, query embedding with the
index's embedder, retrieval), then the rows of ``bench_retrieval.time_noderag`` /
``noderag_row`` over the question set (p50/p95 ms per query without the query
embedding, best of 3; batch q/s of ``retrieve_many``; recall as a sanity check),
and ``peak_rss_bytes`` of this process (``getrusage(RUSAGE_SELF).ru_maxrss``), with its resident memory at
the end split into private (``end_rss_anon_bytes``) and file-backed (``end_rss_file_bytes``: pages of the
memory-mapped index, which the peak counts too).

With ``--paired INDEX2 QUESTIONS2`` it instead opens both indexes in this one process and times
their queries interleaved (query i of the first, query i of the second, ...; best of the
repeats per query), so that both p50s are taken under the same machine load and their ratio is
not the drift of a shared machine between two runs minutes apart (``paired``).

    python benchmarks/scale_query.py INDEX QUESTIONS.jsonl [--repeats R] [--paired INDEX2 QUESTIONS2]
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
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, **rss_parts()}


def rss_parts() -> dict:
    """This process's resident memory now, split: private (anonymous) and file-backed (mostly the index's
    memory-mapped files, page cache the kernel can reclaim). Empty where /proc/self/status is missing."""
    names = {"RssAnon": "end_rss_anon_bytes", "RssFile": "end_rss_file_bytes"}
    out = {}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in names:
                    out[names[key]] = int(value.split()[0]) * 1024  # the file gives kB
    except OSError:
        pass
    return out


def measure_paired(pairs: list[tuple[Path, Path]], repeats: int = 3) -> dict:
    """p50/p95 ms (wall and CPU) per query without the embedding of each (index, questions) pair, timed
    interleaved in this process, and the ratio of each p50 to the first one's."""
    import numpy as np

    from noderag.search.metrics import percentile_ms

    sides = []
    for index_dir, questions_path in pairs:
        queries = [q["question"] for q in load_jsonl(questions_path)]
        if not queries:
            raise SystemExit(f"{questions_path}: no questions")
        searcher = noderag.Index.open(index_dir).searcher()
        qvecs = searcher.embed(queries)
        for q, v in zip(queries, qvecs):  # warm-up: every query once
            searcher.retrieve(q, query_vector=v)
        sides.append((searcher, queries, qvecs, np.full(len(queries), np.inf), np.full(len(queries), np.inf)))
    for _ in range(repeats):
        for i in range(max(len(side[1]) for side in sides)):
            for searcher, queries, qvecs, lat, cpu in sides:
                if i < len(queries):
                    c0, t0 = time.process_time(), time.perf_counter()
                    searcher.retrieve(queries[i], query_vector=qvecs[i])
                    lat[i] = min(lat[i], time.perf_counter() - t0)
                    cpu[i] = min(cpu[i], time.process_time() - c0)
    p50 = [round(percentile_ms(side[3], 50), 3) for side in sides]
    p50_cpu = [round(percentile_ms(side[4], 50), 3) for side in sides]
    return {"indexes": [str(i) for i, _ in pairs], "repeats": repeats,
            "n_questions": [len(side[1]) for side in sides], "p50_ms": p50,
            "p95_ms": [round(percentile_ms(side[3], 95), 3) for side in sides], "p50_cpu_ms": p50_cpu,
            "p50_ratio": [round(x / p50[0], 3) for x in p50], "p50_cpu_ratio": [round(x / p50_cpu[0], 3) for x in p50_cpu]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("index", type=Path)
    ap.add_argument("questions", type=Path)
    ap.add_argument("--repeats", type=int, default=3, help="single-query timing runs (best of)")
    ap.add_argument("--paired", nargs=2, type=Path, metavar=("INDEX2", "QUESTIONS2"),
                    help="time this second index interleaved with the first in one process")
    args = ap.parse_args(argv)
    if args.paired:
        print(json.dumps(measure_paired([(args.index, args.questions), tuple(args.paired)], args.repeats)))
    else:
        print(json.dumps(measure(args.index, args.questions, args.repeats)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
