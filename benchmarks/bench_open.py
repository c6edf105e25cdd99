"""Opening a saved vector index as a view: shards without usearch's key tables (slot table) against with them.

Usage::

    python benchmarks/bench_open.py --index DIR [--index DIR ...] [--repeats 5] [--ids 300] [--seed 0]
                                    [--out FILE] [--note TEXT]

``DIR`` is an index directory (its current generation's ``vectors.usearch`` and shards) or a folder with a
``vectors.usearch``. Each measurement runs in a fresh Python process (what a CLI query or a new server
worker pays; page cache warm after one untimed open of each): ``direct`` is the default open (the keys
file fits: shards mapped without usearch's key hash tables, each shard file parsed, the slot table and its
directory built), ``lookups`` the open with ``direct=False`` (usearch builds each shard's key table; every
``get`` and ``contains`` asks it). The two alternate, ``repeats`` times each. Timed: ``VectorIndex.load``,
then the first ``get`` of ``--ids`` random embedded ids (the same ids for both; the answers compared).
Reported: medians and the ratio lookups / direct.

Writes ``--out`` (JSON) and the same name with ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_retrieval import _git_revision  # noqa: E402
from bench_vector_get import generation  # noqa: E402

_CHILD = """
import hashlib, json, sys, time
t0 = time.perf_counter()
from noderag.graph.vectors import VectorIndex
import numpy as np
t1 = time.perf_counter()
index = VectorIndex.load(sys.argv[1], view=True, direct=sys.argv[2] == "direct")
t2 = time.perf_counter()
rows = index.get(np.load(sys.argv[3]))
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "get_s": t3 - t2, "status": index.direct_status(),
                  "rows": hashlib.blake2b(rows.tobytes(), digest_size=8).hexdigest()}))
"""


def child(path: Path, mode: str, ids_file: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path), mode, str(ids_file)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(index_dir: Path, repeats: int, n_ids: int, seed: int, scratch: Path) -> dict:
    from noderag.graph.vectors import VectorIndex

    path = generation(index_dir) / "vectors.usearch"
    keys = VectorIndex.load(path, direct=False).keys()
    ids = np.random.default_rng(seed).choice(keys, min(n_ids, keys.size), replace=False).astype(np.int64)
    ids_file = scratch / f"ids-{os.getpid()}.npy"
    np.save(ids_file, ids)
    runs: dict[str, list[dict]] = {"direct": [], "lookups": []}
    try:
        for mode in runs:  # untimed: the page cache
            child(path, mode, ids_file)
        for r in range(repeats):
            for mode in (("direct", "lookups") if r % 2 == 0 else ("lookups", "direct")):
                runs[mode].append(child(path, mode, ids_file))
    finally:
        ids_file.unlink()
    med = {m: {k: round(float(np.median([x[k] for x in v])) * 1e3, 1) for k in ("open_s", "get_s")}
           for m, v in runs.items()}
    for m in med:
        med[m]["open_plus_get_ms"] = round(float(np.median([(x["open_s"] + x["get_s"]) for x in runs[m]])) * 1e3, 1)
        med[m]["open_ms"], med[m]["first_get_ms"] = med[m].pop("open_s"), med[m].pop("get_s")
    shards = 1
    while (path.parent / f"vectors.{shards}.usearch").is_file():
        shards += 1
    return {"index": str(index_dir), "vectors": int(keys.size), "shards": shards, "ids": int(ids.size),
            "repeats": repeats, "status": runs["direct"][0]["status"][str(path)], "median": med,
            "ratio_open": round(med["lookups"]["open_ms"] / med["direct"]["open_ms"], 2),
            "ratio_open_plus_get": round(med["lookups"]["open_plus_get_ms"] / med["direct"]["open_plus_get_ms"], 2),
            "identical": len({x["rows"] for v in runs.values() for x in v}) == 1}


def markdown(r: dict) -> str:
    lines = ["# Opening a vector index view: without usearch's key tables (slot table) vs with them", "",
             f"git {r['git']}; {r['machine']['cpus']} CPUs, load average {r['machine']['loadavg_1m']}; fresh "
             f"process per open, alternating, median of {r['results'][0]['repeats'] if r['results'] else 0}.", ""]
    if r["note"]:
        lines += [r["note"], ""]
    lines += ["| index | vectors | shards | direct open / +first get ms | lookups open / +first get ms "
              "| ratio open | ratio open+get | identical |", "|---|---:|---:|---:|---:|---:|---:|:---:|"]
    for x in r["results"]:
        d, u = x["median"]["direct"], x["median"]["lookups"]
        lines.append(f"| `{x['index']}` | {x['vectors']:,} | {x['shards']} | {d['open_ms']} / {d['open_plus_get_ms']} "
                     f"| {u['open_ms']} / {u['open_plus_get_ms']} | {x['ratio_open']} | {x['ratio_open_plus_get']} "
                     f"| {'yes' if x['identical'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, action="append", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ids", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "open.json")
    ap.add_argument("--note", default="")
    args = ap.parse_args(argv)
    scratch = Path(os.environ.get("TMPDIR", "/tmp"))
    results = [measure(d, args.repeats, args.ids, args.seed, scratch) for d in args.index]
    report = {"results": results, "note": args.note, "git": _git_revision(),
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "loadavg_1m": round(os.getloadavg()[0], 2)}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
