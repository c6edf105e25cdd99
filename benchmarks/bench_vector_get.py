"""``VectorIndex.get`` read straight from the files (slot table, ``vectors.keys.npy``) against usearch's lookups.

Usage::

    python benchmarks/bench_vector_get.py --index DIR [--rounds 300] [--seed 0] [--out FILE] [--note TEXT]

``DIR`` is an index directory (its current generation's ``vectors.usearch`` and shards) or a folder with a
``vectors.usearch``. The same files are opened twice: ``direct`` (the default open: rows gathered from the
file mapping by ``searchsorted`` on the keys in add order) and ``usearch`` (``direct=False``: each shard's
``contains`` then ``get_many``, the reading before). Each round draws id sets the way a query's dense fit
asks for them (a candidate passage and its semantic units: 25, 50 and 100 passages with their units) and
random embedded ids (100, 300, 500: spread over every shard); each set is read by both, in alternating order,
and the two answers are compared (``np.array_equal``, every round). Reported: median and p95 microseconds per
call and the median ratio usearch / direct, twice: ``fresh`` just after the open (the rows a call reads are
mostly not yet mapped in this process: each reading takes a page fault per new page of its own mapping), then
``warm``, after every row was read once through each (a long-running reader); and the open
(``VectorIndex.load``) of each, median of 5 after a first untimed one (page cache warm: the table check, not
the disk).

Writes ``--out`` (JSON) and the same name with ``.md``.
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
from bench_retrieval import _git_revision  # noqa: E402

from noderag.graph.storage import load_npy  # noqa: E402
from noderag.graph.vectors import VectorIndex  # noqa: E402

T, S = 0, 1  # node type codes of passages (text) and semantic units


def generation(path: Path) -> Path:
    """The folder holding ``vectors.usearch``: the current generation of an index directory, or ``path``."""
    if (path / "CURRENT").is_file():
        return path / "generations" / (path / "CURRENT").read_text().strip()
    return path


def passage_sets(gen: Path, keys: np.ndarray, sizes: list[int], rounds: int, rng) -> dict[str, list[np.ndarray]]:
    """Per size, ``rounds`` id sets of that many random passages with their semantic units (graph T-S edges)."""
    if not (gen / "node_types.npy").is_file():
        return {}
    types = np.asarray(load_npy(gen / "node_types.npy", True))
    indptr = np.asarray(load_npy(gen / "graph" / "indptr.npy", True)).astype(np.int64)
    indices = load_npy(gen / "graph" / "indices.npy", True)
    passages = np.intersect1d(np.flatnonzero(types == T), keys)
    out = {}
    for k in sizes:
        sets = []
        for _ in range(rounds):
            chosen = rng.choice(passages, k, replace=False)
            units = [np.asarray(indices[indptr[p]:indptr[p + 1]]) for p in chosen.tolist()]
            units = np.concatenate(units).astype(np.int64) if units else np.zeros(0, np.int64)
            units = units[types[units] == S]
            sets.append(np.concatenate([chosen, units]))
        out[f"{k} passages + units"] = sets
    return out


def time_pair(direct: VectorIndex, old: VectorIndex, sets: list[np.ndarray]) -> dict:
    """Per-call microseconds of both on every set (alternating which goes first), and their answers compared."""
    t_new, t_old, same = [], [], True
    for r, ids in enumerate(sets):
        for first in ((direct, old) if r % 2 == 0 else (old, direct)):
            t0 = time.perf_counter_ns()
            got = first.get(ids)
            dt = (time.perf_counter_ns() - t0) / 1e3
            (t_new if first is direct else t_old).append(dt)
            if first is direct:
                mine = got
            else:
                theirs = got
        same = same and bool(np.array_equal(mine, theirs))
    t_new, t_old = np.array(t_new), np.array(t_old)
    return {"ids_median": int(np.median([s.size for s in sets])), "calls": len(sets),
            "direct_us": {"p50": round(float(np.median(t_new)), 1), "p95": round(float(np.percentile(t_new, 95)), 1)},
            "usearch_us": {"p50": round(float(np.median(t_old)), 1), "p95": round(float(np.percentile(t_old, 95)), 1)},
            "ratio_p50": round(float(np.median(t_old) / np.median(t_new)), 2), "identical": same}


def warm(index: VectorIndex, keys: np.ndarray, block: int = 65536) -> float:
    """Read every row once (so each page of the reader's mappings is mapped); returns the seconds it took."""
    t0 = time.perf_counter()
    for b in range(0, keys.size, block):
        index.get(keys[b:b + block])
    return round(time.perf_counter() - t0, 2)


def open_times(path: Path, repeats: int = 5) -> dict:
    out = {}
    for name, direct in (("direct", True), ("usearch", False)):
        VectorIndex.load(path, direct=direct)  # untimed: page cache
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            VectorIndex.load(path, direct=direct)
            ts.append((time.perf_counter() - t0) * 1e3)
        out[name] = round(float(np.median(ts)), 1)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "vector_get.json")
    ap.add_argument("--note", default="", help="how the index was made, written into the results")
    args = ap.parse_args(argv)
    gen = generation(args.index)
    path = gen / "vectors.usearch"
    direct, old = VectorIndex.load(path), VectorIndex.load(path, direct=False)
    status = direct.direct_status()[str(path)]
    if status != "direct":
        print(f"warning: {path} is not read directly ({status}); both rows time usearch", file=sys.stderr)
    keys = np.sort(old.keys())
    rng = np.random.default_rng(args.seed)
    sets = passage_sets(gen, keys, [25, 50, 100], args.rounds, rng)
    for k in (100, 300, 500):
        sets[f"{k} random ids"] = [rng.choice(keys, k, replace=False) for _ in range(args.rounds)]
    rows = {name: time_pair(direct, old, s) for name, s in sets.items()}
    warm_s = {"direct": warm(direct, keys), "usearch": warm(old, keys)}
    warm_rows = {name: time_pair(direct, old, s) for name, s in sets.items()}
    result = {"index": str(args.index), "note": args.note, "vectors": len(old), "shards": old.shards, "dtype": old.dtype,
              "ndim": old.ndim, "direct_status": status, "rounds": args.rounds, "seed": args.seed,
              "open_ms": open_times(path), "get_fresh": rows, "warm_s": warm_s, "get_warm": warm_rows,
              "git": _git_revision(),
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "loadavg_1m": round(os.getloadavg()[0], 2)}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


def markdown(r: dict) -> str:
    lines = ["# VectorIndex.get: direct reads vs usearch lookups", "",
             f"Index `{r['index']}`: {r['vectors']:,} vectors, {r['shards']} shard(s), {r['dtype']} x {r['ndim']}; "
             f"read {r['direct_status']}; {r['rounds']} calls per row, alternating; git {r['git']}; "
             f"load average {r['machine']['loadavg_1m']} on {r['machine']['cpus']} CPUs.", "",
             *([r["note"], ""] if r.get("note") else []),
             "| mappings | id set | ids (median) | direct p50 / p95 us | usearch p50 / p95 us | usearch / direct (p50) "
             "| identical |", "|---|---|---:|---:|---:|---:|:---:|"]
    for phase in ("fresh", "warm"):
        for name, row in r[f"get_{phase}"].items():
            lines.append(f"| {phase} | {name} | {row['ids_median']} | {row['direct_us']['p50']} / "
                         f"{row['direct_us']['p95']} | {row['usearch_us']['p50']} / {row['usearch_us']['p95']} | "
                         f"{row['ratio_p50']} | {'yes' if row['identical'] else 'NO'} |")
    lines += ["", f"Reading every row once between the phases took {r['warm_s']['direct']} s direct, "
                  f"{r['warm_s']['usearch']} s through usearch.", "", f"Open (`VectorIndex.load`, view, warm page cache, median of 5): direct {r['open_ms']['direct']} ms, "
                  f"usearch only {r['open_ms']['usearch']} ms.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
