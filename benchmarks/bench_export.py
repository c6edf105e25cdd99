"""Export time and memory of ``noderag export`` per format on a large index (issue 30's 10^5-passage target).

The corpus is ``benchmarks/scale_corpus.py``'s deterministic N-passage corpus (default 10^5: about
2.1M nodes), built once with ``--embed hash:384`` (nlp mode) into ``WORK/index-N`` and reused while
its manifest says it holds N documents. Each format is exported by a fresh child process that opens
the index, records its memory (the open index: manifest, graph arrays mapped), resets the kernel's
peak-RSS mark (``/proc/self/clear_refs``), runs :func:`noderag.export.export_index` and reports:

- ``seconds``: wall time of the export call;
- ``peak_rss_above_open_mb``: peak resident set (VmHWM, exact) minus the RSS of the open index; it
  counts the index's memory-mapped pages the export reads (page cache the kernel may drop) as well as
  its own memory;
- ``peak_anon_above_open_mb``: peak anonymous (private) memory above the open index, polled every
  20 ms: what the export itself allocates;
- the rows written and the output size (files; for PostgreSQL the tables and indexes on disk).

The PostgreSQL export goes to a throwaway local server (``noderag.export.local_pg``, fsync off)
started by the parent; its CPU is not in the child's figures, its wall time is. Results:
``OUT/export.json`` and ``OUT/export.md``.

    nice -n 10 python benchmarks/bench_export.py [--passages 100000] [--work .benchcache/export]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from scale_corpus import DEFAULT_DATA, generate  # noqa: E402

FORMATS = ("graphml", "neo4j", "postgres", "parquet")
MB = 1024 * 1024


def _status() -> dict[str, int]:
    """VmRSS, RssAnon, RssFile and VmHWM of this process in bytes."""
    out = {}
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            key = line.split(":", 1)[0]
            if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                out[key] = int(line.split()[1]) * 1024
    return out


def child(args) -> int:
    """Open the index, export it once in ``args.child`` format, print the figures as one JSON line."""
    from noderag.export import export_index
    from noderag.store.tables import IndexStore

    store = IndexStore.open(args.index)
    _ = store.graph, store.types, store.keys  # what an open index maps before its first query
    base = _status()
    with open("/proc/self/clear_refs", "w") as fh:  # reset VmHWM to the current RSS
        fh.write("5")
    peak_anon = [base["RssAnon"]]
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(0.02):
            peak_anon[0] = max(peak_anon[0], _status()["RssAnon"])

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    t0 = time.perf_counter()
    rep = export_index(store, args.child, out=None if args.child == "postgres" else args.out, dsn=args.dsn,
                       with_vectors=args.with_vectors)
    seconds = time.perf_counter() - t0
    stop.set()
    t.join()
    end = _status()
    print(json.dumps({"format": args.child, "seconds": round(seconds, 2), "counts": rep.counts,
                      "with_vectors": args.with_vectors,
                      "open_rss_mb": round(base["VmRSS"] / MB, 1), "open_anon_mb": round(base["RssAnon"] / MB, 1),
                      "peak_rss_above_open_mb": round((end["VmHWM"] - base["VmRSS"]) / MB, 1),
                      "peak_anon_above_open_mb": round((peak_anon[0] - base["RssAnon"]) / MB, 1)}))
    return 0


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _pg_size(dsn: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return int(conn.execute("SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n "
                                "ON n.oid = c.relnamespace WHERE n.nspname = 'noderag' AND c.relkind = 'r'")
                   .fetchone()[0])


def _ensure_index(args, corpus: Path) -> Path:
    """``WORK/index-N``, built (in a child, timed) unless a complete one of N documents is there."""
    index = args.work / f"index-{args.passages}"
    try:
        from noderag.store.tables import IndexStore

        with IndexStore.open(index) as s:
            if s.manifest.get("counts", {}).get("documents") == args.passages:
                print(f"== reusing {index}", file=sys.stderr)
                return index
    except Exception:  # missing or another size: rebuild
        pass
    shutil.rmtree(index, ignore_errors=True)
    print(f"== building {index} ({args.passages:,} passages, --embed {args.embed})", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "noderag.cli", "build", str(corpus), "--index", str(index),
                    "--embed", args.embed, "--no-progress"], check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    print(f"   built in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return index


def _run_child(args, index: Path, fmt: str, out: Path | None, dsn: str | None, with_vectors: bool) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", fmt, "--index", str(index)]
    if out is not None:
        cmd += ["--out", str(out)]
    if dsn is not None:
        cmd += ["--dsn", dsn]
    if with_vectors:
        cmd.append("--with-vectors")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"{fmt} export failed: {proc.stderr.strip()[-2000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["child_wall_s"] = round(time.perf_counter() - t0, 2)
    return res


def _markdown(result: dict) -> str:
    ix = result["index"]
    lines = [f"# Export time and memory at {result['passages']:,} passages", "",
             f"Command: `{result['command']}` (git {result['git']}, {result['machine']}"
             + (f"; 1-min load average {result['load_average_1min'][0]} at the start, "
                f"{result['load_average_1min'][1]} at the end" if "load_average_1min" in result else "") + ").", "",
             f"Index: {ix['nodes']:,} nodes, {ix['edges']:,} edges, {ix['documents']:,} documents, "
             f"{ix['bytes'] / 1e9:.2f} GB on disk (nlp mode, `--embed {result['embed']}`).", "",
             "Each export ran in a fresh process after `IndexStore.open`; memory is measured above that open "
             "index (peak RSS from the kernel's VmHWM after a reset; anonymous memory polled every 20 ms). "
             "RSS includes the index pages the export reads through its memory maps (reclaimable page cache); "
             "anonymous memory is what the export allocates.", "",
             "| format | vectors | seconds | peak RSS above open index (MB) | peak anonymous above open (MB) "
             "| rows (nodes / edges / documents) | output |",
             "|---|---|---:|---:|---:|---|---:|"]
    for r in result["runs"]:
        c = r["counts"]
        lines.append(f"| {r['format']} | {'yes' if r['with_vectors'] else 'no'} | {r['seconds']:.1f} | "
                     f"{r['peak_rss_above_open_mb']:,.0f} | {r['peak_anon_above_open_mb']:,.0f} | "
                     f"{c['nodes']:,} / {c['edges']:,} / {c.get('documents', 0):,} | "
                     f"{r['output_bytes'] / 1e9:.2f} GB |")
    lines += ["", "GraphML carries no document rows (documents are not graph nodes there). The PostgreSQL "
              "output size is the tables with their keys and indexes; its server ran on the same machine "
              "(fsync off), so its CPU competed with the export's.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passages", type=int, default=100000)
    ap.add_argument("--embed", default="hash:384", help="build embedder of the index (default hash:384)")
    ap.add_argument("--work", type=Path, default=REPO / ".benchcache" / "export")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--vectors-for", default="parquet,postgres",
                    help="formats also exported --with-vectors (comma-separated; '' for none)")
    ap.add_argument("--out", type=Path, default=HERE / "results", help="folder of export.json / export.md")
    # child mode
    ap.add_argument("--child", choices=FORMATS, help=argparse.SUPPRESS)
    ap.add_argument("--index", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--dsn", help=argparse.SUPPRESS)
    ap.add_argument("--with-vectors", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)

    from noderag.export.local_pg import temporary_cluster
    from noderag.store.tables import IndexStore

    formats = [f for f in args.formats.split(",") if f]
    vec_formats = [f for f in args.vectors_for.split(",") if f]
    args.work.mkdir(parents=True, exist_ok=True)
    sc = generate(args.passages, args.work, data=args.data)
    index = _ensure_index(args, sc.corpus)
    with IndexStore.open(index) as s:
        m = s.manifest
        info = {"nodes": int(sum(m["counts"]["nodes"].values())),
                "edges": int(m["counts"]["edges"]["structural"] + m["counts"]["edges"]["semantic"]),
                "documents": int(m["counts"]["documents"]), "bytes": int(m.get("bytes_total", 0))}
    runs = []
    load_start = os.getloadavg()[0]
    plan = [(f, False) for f in formats] + [(f, True) for f in formats if f in vec_formats]
    for fmt, vec in plan:
        out = None if fmt == "postgres" else args.work / (f"out.{fmt}" + (".vec" if vec else ""))
        if out is not None:
            shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink(missing_ok=True)
        print(f"== {fmt}{' --with-vectors' if vec else ''}", file=sys.stderr, flush=True)
        if fmt == "postgres":
            with temporary_cluster(timeout_s=300) as dsn:
                r = _run_child(args, index, fmt, None, dsn, vec)
                r["output_bytes"] = _pg_size(dsn)
        else:
            r = _run_child(args, index, fmt, out, None, vec)
            r["output_bytes"] = _size(out)
            shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink(missing_ok=True)
        print(f"   {json.dumps(r)}", file=sys.stderr, flush=True)
        runs.append(r)
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    result = {"passages": args.passages, "embed": args.embed, "index": info, "runs": runs, "git": git,
              "command": "nice -n 10 python benchmarks/bench_export.py" +
                         (f" --passages {args.passages}" if args.passages != 100000 else ""),
              "machine": f"{os.cpu_count()} cores shared with other sessions, {platform.machine()}, "
                         f"Python {platform.python_version()}",
              "load_average_1min": [round(load_start, 1), round(os.getloadavg()[0], 1)]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "export.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (args.out / "export.md").write_text(_markdown(result), encoding="utf-8")
    print(_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
