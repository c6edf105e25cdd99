"""Listing and sharing a generation folder: ``os.scandir`` (``graph.storage.tree_files``) against ``Path.rglob``.

Usage::

    python benchmarks/bench_tree.py [--index .benchcache/update/index-100000] [--repeats 7]

Every insert into an index lists the files of the previous generation (its cheap check), hard-links them into
the new one (``store.segments.share_generation``, which lists them again), and lists the new one three times
(what was written, the checksums and the sizes of the manifest). With node texts in pages and decompositions in parts, a generation at 10^5 passages
holds about 3,100 files. This benchmark times, on the current generation of ``--index`` (default: the 10^5-passage
index ``bench_update.py --keep-base`` leaves), side by side in one run:

- **listing**: the package's ``tree_files`` against the ``sorted(rglob("*"))`` + ``is_file`` + ``relative_to``
  loop it replaced (kept below as the reference); both lists are checked equal;
- **sharing**: ``share_generation`` into a fresh folder against the replaced loop (an ``mkdir`` per file);
  both folders are checked to hold the same files, linked to the same inodes.

Median of ``--repeats`` runs each (alternating), and their ratio. Writes ``benchmarks/results/tree.json``
and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def rglob_files(root: Path) -> list[str]:
    """The listing ``tree_files`` replaced (store.verify._content_files before it, without its filters)."""
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out.append(p.relative_to(root).as_posix())
    return out


def rglob_share(src: Path, dst: Path) -> list[str]:
    """The hard-link loop ``share_generation`` replaced (without its skip rules: every file is shared)."""
    shared = []
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src).as_posix()
        if not p.is_file() or p.is_symlink():
            continue
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(p, target)
        shared.append(rel)
    return shared


def _timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", type=Path, default=REPO / ".benchcache" / "update" / "index-100000")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "tree.json")
    args = ap.parse_args(argv)

    from noderag.graph.storage import tree_files
    from noderag.store.layout import CURRENT, MANIFEST, READERS
    from noderag.store.segments import share_generation

    if not (args.index / CURRENT).is_file():
        raise SystemExit(f"--index {args.index}: no index there (build it: python benchmarks/bench_update.py "
                         "--sizes 100000 --keep-base ...)")
    gen = args.index / "generations" / (args.index / CURRENT).read_text().strip()
    files = tree_files(gen)
    if files != rglob_files(gen):
        raise SystemExit("tree_files and the rglob listing differ")
    times = {"list_tree_files": [], "list_rglob": [], "share_scandir": [], "share_rglob": []}
    with tempfile.TemporaryDirectory(prefix="bench-tree-", dir=args.index.parent) as tmp:
        for k in range(args.repeats):
            t, _ = _timed(lambda: tree_files(gen))
            times["list_tree_files"].append(t)
            t, _ = _timed(lambda: rglob_files(gen))
            times["list_rglob"].append(t)
            a, b = Path(tmp) / f"a{k}", Path(tmp) / f"b{k}"
            t, (shared_a, _) = _timed(lambda: share_generation(gen, a))
            times["share_scandir"].append(t)
            t, shared_b = _timed(lambda: rglob_share(gen, b))
            times["share_rglob"].append(t)
            if k == 0:  # the same files (share_generation leaves the manifest and readers' lock out), same inodes
                same = set(shared_a) == set(shared_b) - {MANIFEST, READERS} and all(
                    os.stat(a / f).st_ino == os.stat(b / f).st_ino == os.stat(gen / f).st_ino for f in shared_a)
                if not same:
                    raise SystemExit("share_generation and the rglob loop shared different files")
            shutil.rmtree(a)
            shutil.rmtree(b)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "what": "listing and hard-linking a generation folder: os.scandir (tree_files, share_generation) against "
                "the Path.rglob loops they replaced",
        "index": str(args.index), "files": len(files), "repeats": args.repeats,
        "median_s": {k: round(v, 4) for k, v in med.items()},
        "ratio": {"list": round(med["list_rglob"] / med["list_tree_files"], 2),
                  "share": round(med["share_rglob"] / med["share_scandir"], 2)},
        "all_s": {k: [round(x, 4) for x in v] for k, v in times.items()},
        "machine": {"python": platform.python_version(), "cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "load_average": [round(x, 2) for x in os.getloadavg()]},
        "date": time.strftime("%Y-%m-%d"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    md = [
        "# Listing and sharing a generation folder",
        "",
        f"`python benchmarks/bench_tree.py --repeats {args.repeats}` on the current generation of the 10^5-passage "
        f"index ({len(files):,} files). Median of {args.repeats} runs each, alternating; 2 CPUs, load "
        f"{result['machine']['load_average']}.",
        "",
        "| operation | os.scandir (the package) | Path.rglob loop (before) | ratio |",
        "|---|---:|---:|---:|",
        f"| list the files (`tree_files`) | {med['list_tree_files'] * 1e3:.1f} ms | {med['list_rglob'] * 1e3:.1f} ms | "
        f"{result['ratio']['list']}x |",
        f"| hard-link them into a new folder (`share_generation`) | {med['share_scandir'] * 1e3:.1f} ms | "
        f"{med['share_rglob'] * 1e3:.1f} ms | {result['ratio']['share']}x |",
        "",
        "An insert lists generation folders four times (the previous one once, the new one three times) and "
        "shares the previous one once: "
        f"{(4 * (med['list_rglob'] - med['list_tree_files']) + med['share_rglob'] - med['share_scandir']) * 1e3:.0f} "
        "ms less per insert at this size, by these medians.",
    ]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
