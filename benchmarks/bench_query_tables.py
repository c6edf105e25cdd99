"""The query tables (``query/``) of a finished index: what each part costs, and what the build's finalize stage
waits for when a forked child makes the BM25 postings and line token counts beside the name index (issue 47).

Old and new side by side, medians over repeats:

* ``--index GEN``: on hard-linked copies of one generation folder, interleaved:
  - old: :func:`write_query_index` as main's build calls it (every table in this process; the context-line
    counts half in a forked child): wall and CPU (its own and its children's);
  - new: the same with :class:`~noderag.indexing.query_early.EarlyTables` (the child makes the postings and
    every line count from the written texts meanwhile): wall and CPU;
  - parts: each part of the old path alone, one after another (CPU seconds; the line counts also as main makes
    them, split and looked up in Python), so that per-part slopes between sizes say how each grows;
  every new ``query/`` folder is compared byte for byte with the old one.
* ``--corpus JSONL``: whole builds (``noderag build``, each in a fresh process, from source snapshots: ``--src``
  this work, ``--main-src`` main), interleaved; the manifests' stage figures.

    python benchmarks/bench_query_tables.py --index IDX/generations/1 --work /tmp/qt --repeats 3
    python benchmarks/bench_query_tables.py --corpus c10k.jsonl --embed static:wordllama --work /tmp/qt \\
        --src SNAPSHOT/src --main-src MAIN/src --repeats 3
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _cpu() -> tuple[float, float]:
    """(this process's CPU seconds, its reaped children's)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def _copy(gen: Path, dst: Path) -> Path:
    """A hard-linked copy of the generation folder without its ``query/``."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(gen, dst, copy_function=os.link, ignore=lambda d, names: ["query"] if Path(d) == gen else [])
    return dst


def _same(a: Path, b: Path) -> list[str]:
    """Files of ``a/query`` and ``b/query`` that differ (or are in one only)."""
    fa = {p.name: p for p in (a / "query").iterdir()}
    fb = {p.name: p for p in (b / "query").iterdir()}
    return sorted(set(fa) ^ set(fb)) + sorted(k for k in set(fa) & set(fb) if fa[k].read_bytes() != fb[k].read_bytes())


def _timed(fn) -> dict:
    w0, (c0, k0) = time.perf_counter(), _cpu()
    fn()
    (c1, k1) = _cpu()
    return {"wall_s": time.perf_counter() - w0, "cpu_s": c1 - c0, "child_cpu_s": k1 - k0}


def _line_counts_python(off: np.ndarray, text: np.ndarray, batch: int = 32768) -> np.ndarray:
    """The context-line counts as main makes them (one process): :func:`split_spans` and
    :meth:`LineCounter.count_flat` per batch, the words split and looked up in Python."""
    from noderag.tokenize import LineCounter, split_spans

    counter, n = LineCounter(), off.shape[0] - 1
    out = np.zeros(n, dtype=np.int32)
    for a in range(0, n, batch):
        b = min(n, a + batch)
        words, lengths = split_spans(text, off[a:b + 1])
        tags = counter.tok.bracket_number_tokens(np.arange(a, b, dtype=np.int64))
        out[a:b] = counter.count_flat(words, lengths) + np.where(lengths > 0, tags, 0)
    return out


def _parts(folder: Path) -> dict[str, float]:
    """CPU seconds of each part of the old path, one after another (the line counts in this process)."""
    import pyarrow.parquet as pq

    from noderag.search import query_index as qi
    from noderag.store.node_texts import node_texts
    from noderag.store.tables import read_nodes_file

    out = folder / "query"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    t: dict[str, float] = {}
    clock = time.process_time  # the Arrow reads run on its threads

    def save(key, arr):
        from noderag.graph.storage import atomic_save_npy
        atomic_save_npy(out / f"{key}.npy", arr)

    c = clock()
    nodes = read_nodes_file(folder / "nodes.parquet", columns=("type", "doc_id", "chunk_id", "active", "source_id"))
    documents = pq.read_table(folder / "documents.parquet")
    types = np.asarray(nodes.column("type").to_numpy(zero_copy_only=False), dtype=np.uint8)
    doc = np.asarray(nodes.column("doc_id").to_numpy(zero_copy_only=False), dtype=np.int64)
    active = np.asarray(nodes.column("active").to_numpy(zero_copy_only=False), dtype=bool)
    save("chunk", np.asarray(nodes.column("chunk_id").to_numpy(zero_copy_only=False), dtype=np.int64))
    save("doc", doc)
    save("active", active)
    t["read + per-node columns"], c = clock() - c, clock()
    pages = node_texts(folder / "nodes.parquet", nodes.num_rows)
    off, text = np.asarray(pages.offsets), pages.pages.to_array()
    t["texts blob"], c = clock() - c, clock()
    qi._save_lexical(save, types, active, doc, off, text, documents)
    t["lexical postings"], c = clock() - c, clock()
    new = qi.line_token_counts(off, text, 0, workers=1)
    t["line token counts"], c = clock() - c, clock()
    old = _line_counts_python(off, text)
    t["line token counts (main: split_spans + count_flat)"], c = clock() - c, clock()
    if not np.array_equal(new, old):
        raise SystemExit(f"{folder}: the compiled line counts differ from the Python path's")
    del off, text
    qi._save_labels(save, nodes, types, doc, documents, 0)
    t["labels"], c = clock() - c, clock()
    qi._save_titles(save, documents, types, doc, active)
    t["title table"], c = clock() - c, clock()
    qi._save_names(save, folder / "nodes.parquet", types, active, 0)
    t["name index"] = clock() - c
    return {k: round(v, 3) for k, v in t.items()}


def bench_index(gen: Path, work: Path, repeats: int) -> dict:
    from noderag.indexing.query_early import EarlyTables
    from noderag.search.query_index import write_query_index

    old_dir, new_dir = _copy(gen, work / "old"), _copy(gen, work / "new")
    rows: dict[str, list[dict]] = {"old": [], "new": [], "parts": []}
    differ: list[str] = []
    for r in range(repeats):
        rows["old"].append(_timed(lambda: write_query_index(old_dir)))
        rows["new"].append(_timed(lambda: write_query_index(new_dir, early=EarlyTables.start(new_dir,
                                                                                            work / "early"))))
        differ += _same(old_dir, new_dir)
        rows["parts"].append(_parts(_copy(gen, work / "parts")))
        gc.collect()  # the repeat's mapped pages (each holds a descriptor)
        print(f"repeat {r}: old {rows['old'][-1]}, new {rows['new'][-1]}", flush=True)
    med = {k: {f: round(statistics.median(x[f] for x in v), 3) for f in v[0]} for k, v in rows.items()}
    n = int(np.load(gen / "node_types.npy", mmap_mode="r").shape[0])
    return {"generation": str(gen), "nodes": n, "repeats": repeats, "identical": not differ,
            "differ": sorted(set(differ)), "median": med, "runs": rows}


#: Runs the CLI (argv: source tree or "", "early" or "main", then the CLI's arguments); "main" switches the fork
#: of the early child off (every query table at finalize, as on main); a source tree runs its code, not the
#: installed one (a snapshot: the build imports some modules late).
_RUNNER = """import sys
src, mode = sys.argv[1], sys.argv[2]
del sys.argv[1:3]
if src:
    sys.meta_path[:] = [f for f in sys.meta_path if 'ScikitBuild' not in type(f).__name__]
    sys.path.insert(0, src)
import noderag
if src:
    assert noderag.__file__.startswith(src), noderag.__file__
if mode == 'main':
    try:
        import noderag.indexing.query_early as q
        q.fork_is_safe = lambda: False
    except ImportError:  # a tree from before the early child
        pass
from noderag.cli import main
sys.exit(main())
"""


def _build(corpus: Path, index: Path, embed: str, early: bool, src: Path | None) -> dict:
    if index.exists():
        shutil.rmtree(index)
    cmd = ["build", "--index", str(index), str(corpus), "--embed", embed, "--no-progress", "--seed", "0"]
    prog = [sys.executable, "-c", _RUNNER, str(src or ""), "early" if early else "main"]
    w0 = time.perf_counter()
    proc = subprocess.Popen(prog + cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - w0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"build failed ({'early' if early else 'main'}): status {status}")
    gen = index / "generations" / (index / "CURRENT").read_text().strip()
    st = json.loads((gen / "manifest.json").read_text())["stages"]
    fin, comm = st["finalize"], st["communities"]
    return {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "communities_s": comm["time_s"], "leiden_s": comm.get("leiden_s"), "finalize_s": fin["time_s"],
            "query_index_s": fin["query_index_s"], "query_early_cpu_s": fin.get("query_early_cpu_s"),
            "query_early_wait_s": fin.get("query_early_wait_s"),
            "query_early_maxrss_mb": fin.get("query_early_maxrss_mb"),
            "peak_rss_mb": max(s["peak_rss_mb"] for s in st.values())}


def bench_builds(corpus: Path, work: Path, embed: str, repeats: int, src: Path | None = None,
                 main_src: Path | None = None) -> dict:
    rows: dict[str, list[dict]] = {"main": [], "early": []}
    warm = work / "warm.jsonl"  # an untimed build of 200 passages first: no timed build pays one-time compiles
    with open(corpus, encoding="utf-8") as fh:
        warm.write_text("".join(line for _, line in zip(range(200), fh)), encoding="utf-8")
    _build(warm, work / "build_warm", embed, True, src)
    if main_src is not None:
        _build(warm, work / "build_warm", embed, False, main_src)
    for r in range(repeats):
        for name in (("early", "main") if r % 2 else ("main", "early")):
            rows[name].append(_build(corpus, work / f"build_{name}", embed, name == "early",
                                     src if name == "early" or main_src is None else main_src))
            print(f"repeat {r} {name}: {rows[name][-1]}", flush=True)
    med = {k: {f: (round(statistics.median(x[f] for x in v), 2) if v[0][f] is not None else None) for f in v[0]}
           for k, v in rows.items()}
    return {"corpus": str(corpus), "embed": embed, "repeats": repeats, "source": str(src or "installed"),
            "main_source": str(main_src or src or "installed"),
            "median": med, "runs": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", type=Path, help="a generation folder (INDEX/generations/N)")
    ap.add_argument("--corpus", type=Path, help="a JSONL corpus: whole builds with and without the early child")
    ap.add_argument("--embed", default="hash:64")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, help="append the result (JSON) to this file's list")
    ap.add_argument("--src", type=Path, help="with --corpus: run the builds from this source tree (a snapshot)")
    ap.add_argument("--main-src", type=Path, help="with --corpus: run the main side's builds from this tree")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # every mapped text page holds a descriptor
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    res = (bench_index(a.index, a.work, a.repeats) if a.index
           else bench_builds(a.corpus, a.work, a.embed, a.repeats, a.src, a.main_src))
    res.update(machine={"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg": os.getloadavg()},
               command=" ".join(sys.argv))
    print(json.dumps({k: v for k, v in res.items() if k != "runs"}, indent=1))
    if a.out:
        old = json.loads(a.out.read_text()) if a.out.exists() else []
        a.out.write_text(json.dumps(old + [res], indent=1) + "\n")


if __name__ == "__main__":
    main()
