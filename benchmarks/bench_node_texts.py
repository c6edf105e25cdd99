"""Reading the texts of the nodes one result returns: ``take`` on the node table's text column vs the query index blob.

    python benchmarks/bench_node_texts.py INDEX [INDEX ...] [--ids 110] [--reps 50] [--out DIR]

Per index (built with ``query/``): ``--reps`` draws of ``--ids`` random node ids (seeded; ~110 is a
typical result's node count), timed through ``take`` (:func:`take_texts`:
on the pyarrow text column, as every query did before the query index) and through
:class:`noderag.search.query_index.QueryIndex` (offsets + bytes). Medians and ratio; the texts are
checked equal. Writes ``OUT/node_texts.json`` and ``.md`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def take_texts(nodes, ids: list[int]) -> list[str]:
    """Display texts (text, else name, else "") by ``take`` on the node table's columns."""
    idx = np.asarray(ids, dtype=np.int64)
    texts = nodes.column("text").take(idx).to_pylist()
    names = nodes.column("name").take(idx).to_pylist()
    return [t if t is not None else (n or "") for t, n in zip(texts, names)]


def main(argv: list[str] | None = None) -> int:
    import noderag

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("indexes", nargs="+", type=Path)
    ap.add_argument("--ids", type=int, default=110)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args(argv)
    rows = []
    for path in args.indexes:
        index = noderag.Index.open(path)
        mapped = index.query_index
        if mapped is None:
            raise SystemExit(f"{path}: no query/ folder (build it with this version)")
        nodes = index.nodes
        rng = np.random.default_rng(0)
        times: dict[str, list[float]] = {"take": [], "blob": []}
        for _ in range(args.reps):
            ids = rng.integers(0, mapped.n, args.ids).tolist()
            t0 = time.perf_counter()
            a = take_texts(nodes, ids)
            t1 = time.perf_counter()
            b = mapped.texts(ids)
            t2 = time.perf_counter()
            if a != b:
                raise SystemExit(f"{path}: texts differ")
            times["take"].append(t1 - t0)
            times["blob"].append(t2 - t1)
        med = {k: statistics.median(v) * 1000 for k, v in times.items()}
        rows.append({"index": str(path), "nodes": mapped.n, "text_chunks": index.nodes.column("text").num_chunks,
                     "take_ms": round(med["take"], 3), "blob_ms": round(med["blob"], 3),
                     "ratio": round(med["take"] / med["blob"], 1)})
        print(json.dumps(rows[-1]), file=sys.stderr)
    cmd = "python " + " ".join([str(Path(sys.argv[0]))] + sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "node_texts.json").write_text(json.dumps({"command": cmd, "ids": args.ids, "reps": args.reps,
                                                          "rows": rows}, indent=1) + "\n")
    lines = ["# Texts of one result's nodes: `take` on the text column vs the query index blob", "", f"`{cmd}`", "",
             f"Median ms to read {args.ids} random nodes' texts ({args.reps} draws); ratio = take / blob.", "",
             "| nodes | text column chunks | take (ms) | blob (ms) | ratio |", "|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['nodes']:,} | {r['text_chunks']} | {r['take_ms']} | {r['blob_ms']} | {r['ratio']}x |" for r in rows]
    (args.out / "node_texts.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
