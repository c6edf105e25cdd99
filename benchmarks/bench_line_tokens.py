"""The query index's context-line token counts: per-word counts cached across lines vs encoding every line.

Usage::

    python benchmarks/bench_line_tokens.py --index DIR [--index DIR ...] [--repeats 3] [--out DIR] [--name NAME]

For each index, reads the node texts of its live generation and counts the tokens of every node's context
line (``[id] text``) both ways, alternating, ``--repeats`` times: ``line_token_counts`` (the build's path:
``"[id]"`` from its digits, the text from per-word counts, :class:`noderag.tokenize.LineCounter`) and the
reference that encodes every line with ``count_tokens_batch`` (the build's path before). Reports the median
CPU seconds (process time: a shared machine's load moves it little) of each, their ratio, and that both gave
the same counts for every node (the benchmark fails otherwise).
"""

from __future__ import annotations

import argparse
import json
import platform
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


def measure(index: Path, repeats: int) -> dict:
    """Both counts of one index's node texts, alternating; CPU seconds of each run."""
    gen = index / "generations" / (index / "CURRENT").read_text().strip()
    pages = node_texts(gen / NODES)
    off, text = np.asarray(pages.offsets), pages.pages.to_array()
    every_line(off[:1001], text)  # the tokenizer loaded before any timing
    runs: dict[str, list[float]] = {"cached words": [], "every line": []}
    counts = {}
    for _ in range(repeats):
        for name, fn in (("cached words", line_token_counts), ("every line", every_line)):
            t = time.process_time()
            counts[name] = fn(off, text)
            runs[name].append(time.process_time() - t)
    same = bool(np.array_equal(counts["cached words"], counts["every line"]))
    if not same:
        raise SystemExit(f"{index}: the two counts differ at {np.flatnonzero(counts['cached words'] != counts['every line'])[:10]}")
    med = {k: statistics.median(v) for k, v in runs.items()}
    return {"index": index.name, "nodes": int(off.shape[0] - 1), "tokens": int(counts["every line"].sum()),
            "cpu_s": runs, "median_cpu_s": med, "ratio": med["every line"] / med["cached words"], "same": same}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", type=Path, action="append", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--name", default="line_tokens")
    args = ap.parse_args(argv)
    rows = [measure(ix, args.repeats) for ix in args.index]
    res = {"machine": {"cpus": __import__("os").cpu_count(), "platform": platform.platform(),
                       "python": platform.python_version()}, "git": _git_revision(), "repeats": args.repeats,
           "command": "python benchmarks/bench_line_tokens.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "indexes": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(res, indent=1) + "\n")
    lines = ["# Context-line token counts at build time: cached word counts vs every line encoded", "",
             f"Command: `{res['command']}`; git {res['git']}. Median CPU seconds of {args.repeats} alternating "
             "runs each (process time); both give the same count for every node (checked).", ""]
    lines += _table("", [r["index"] for r in rows], [
        ("nodes", [f"{r['nodes']:,}" for r in rows]), ("line tokens", [f"{r['tokens']:,}" for r in rows]),
        ("every line encoded (CPU s)", [f"{r['median_cpu_s']['every line']:.2f}" for r in rows]),
        ("cached word counts (CPU s)", [f"{r['median_cpu_s']['cached words']:.2f}" for r in rows]),
        ("ratio", [f"{r['ratio']:.2f}x" for r in rows]), ("same counts", [str(r["same"]) for r in rows])])
    (args.out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
