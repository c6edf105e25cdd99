"""The query index's context-line token counts: per-word counts cached across lines vs encoding every line.

Usage::

    python benchmarks/bench_line_tokens.py --index DIR [--index DIR ...] [--repeats 3] [--out DIR] [--name NAME]

For each index, reads the node texts of its live generation and counts the tokens of every node's context
line (``[id] text``) three ways, alternating, ``--repeats`` times: ``line_token_counts`` (the build's path:
``"[id]"`` from its digits, the text from per-word counts, :class:`noderag.tokenize.LineCounter`; the second
half in a forked child where there are 2 CPUs), the same in one process (``workers=1``), and the reference
that encodes every line with ``count_tokens_batch`` (the build's path before). Reports the median CPU
seconds (this process's and its waited-for children's: a shared machine's load moves it little) and wall
seconds of each, the ratios to the reference, and that all gave the same counts for every node (the
benchmark fails otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_build import _table  # noqa: E402
from bench_retrieval import _git_revision  # noqa: E402

from noderag.search.query_index import line_token_counts  # noqa: E402
from noderag.store.layout import NODES  # noqa: E402
from noderag.store.node_texts import node_texts  # noqa: E402
from noderag.store.paged_blob import unzeroed  # noqa: E402
from noderag.tokenize import count_tokens_batch  # noqa: E402

HERE = Path(__file__).resolve().parent


def every_line(text_off: np.ndarray, text: np.ndarray, first_node: int = 0, batch: int = 8192) -> np.ndarray:
    """The reference: each node's line built and encoded on its own (the build's counting before issue 47)."""
    n = int(text_off.shape[0]) - 1
    view = memoryview(np.ascontiguousarray(text)).cast("B")
    out = np.zeros(n, dtype=np.int32)
    for lo in range(0, n, batch):
        lines, at = [], []
        for i in range(lo, min(n, lo + batch)):
            words = unzeroed(str(view[int(text_off[i]):int(text_off[i + 1])], "utf-8", "surrogatepass")).split()
            if words:
                lines.append(f"[{first_node + i}] " + " ".join(words) + "\n")
                at.append(i)
        if lines:
            out[at] = count_tokens_batch(lines)
    return out


def _cpu() -> float:
    """CPU seconds of this process and of its children that have been waited for."""
    child = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + child.ru_utime + child.ru_stime


WAYS = {"cached words": line_token_counts, "cached words, 1 process": lambda o, t: line_token_counts(o, t, workers=1),
        "every line": every_line}


def measure(index: Path, repeats: int) -> dict:
    """The counts of one index's node texts, each way in turn; CPU and wall seconds of each run."""
    gen = index / "generations" / (index / "CURRENT").read_text().strip()
    pages = node_texts(gen / NODES)
    off, text = np.asarray(pages.offsets), pages.pages.to_array()
    every_line(off[:1001], text)  # the tokenizer loaded before any timing
    cpu: dict[str, list[float]] = {k: [] for k in WAYS}
    wall: dict[str, list[float]] = {k: [] for k in WAYS}
    counts = {}
    for _ in range(repeats):
        for name, fn in WAYS.items():
            c, t = _cpu(), time.perf_counter()
            counts[name] = fn(off, text)
            wall[name].append(time.perf_counter() - t)
            cpu[name].append(_cpu() - c)
    for name in WAYS:
        if not np.array_equal(counts[name], counts["every line"]):
            bad = np.flatnonzero(counts[name] != counts["every line"])[:10]
            raise SystemExit(f"{index}: {name} differs from every line at {bad}")
    med = {k: statistics.median(v) for k, v in cpu.items()}
    medw = {k: statistics.median(v) for k, v in wall.items()}
    return {"index": index.name, "nodes": int(off.shape[0] - 1), "tokens": int(counts["every line"].sum()),
            "cpu_s": cpu, "wall_s": wall, "median_cpu_s": med, "median_wall_s": medw, "same": True,
            "cpu_ratio": {k: med["every line"] / med[k] for k in WAYS},
            "wall_ratio": {k: medw["every line"] / medw[k] for k in WAYS}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", type=Path, action="append", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--name", default="line_tokens")
    args = ap.parse_args(argv)
    rows = [measure(ix, args.repeats) for ix in args.index]
    res = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                       "python": platform.python_version()}, "git": _git_revision(), "repeats": args.repeats,
           "command": "python benchmarks/bench_line_tokens.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "indexes": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(res, indent=1) + "\n")
    lines = ["# Context-line token counts at build time: cached word counts vs every line encoded", "",
             f"Command: `{res['command']}`; git {res['git']}; {res['machine']['cpus']} CPUs, shared (load average "
             f"{os.getloadavg()[0]:.1f} at the end). Median of {args.repeats} runs of each way in turn; CPU "
             "seconds include the forked child's; every way gives the same count for every node (checked).", ""]
    table = []
    for way in WAYS:
        table += [(f"{way}: CPU s", [f"{r['median_cpu_s'][way]:.2f}" for r in rows]),
                  (f"{way}: wall s", [f"{r['median_wall_s'][way]:.2f}" for r in rows])]
    for way in list(WAYS)[:2]:
        table += [(f"{way}: CPU / wall ratio to every line", [
            f"{r['cpu_ratio'][way]:.2f}x / {r['wall_ratio'][way]:.2f}x" for r in rows])]
    lines += _table("", [r["index"] for r in rows], [
        ("nodes", [f"{r['nodes']:,}" for r in rows]), ("line tokens", [f"{r['tokens']:,}" for r in rows]),
        *table, ("same counts", [str(r["same"]) for r in rows])])
    (args.out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
