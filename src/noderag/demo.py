"""End-to-end demo on the embedded defaults: build an index from the shipped demo corpus, then retrieve.

``noderag demo`` (or ``python -m noderag.demo``): no server, no GPU, no API key, no
download. The index is built in ``nlp`` mode with the default offline embedder
(progress bars per stage), then every demo question is answered retrieval-only:
the top source documents, whether the documents that support the answer are
among them, and the size of the assembled context.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

__all__ = ["add_demo_arguments", "run_demo", "main"]


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``noderag demo`` arguments to ``parser``."""
    parser.add_argument("--index", metavar="DIR", default=None,
                        help="where to build the demo index (default: a temporary directory, removed after)")
    parser.add_argument("--embed", metavar="SPEC", default=None, help="embedding backend (default: the offline default)")
    parser.add_argument("--passages", type=int, default=3, metavar="N", help="documents to show per question")
    parser.add_argument("--json", action="store_true", help="print one JSON retrieval result per question")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def _run(args: argparse.Namespace, index_dir: Path, out) -> int:
    from .api import build
    from .store.summary import format_summary
    from .data import demo_dir, demo_questions
    from .search.cli import format_result

    questions = demo_questions()
    t0 = time.perf_counter()
    index = build([str(demo_dir())], str(index_dir), embed=args.embed, progress=not args.no_progress)
    build_s = time.perf_counter() - t0
    if not args.json:
        out.write(f"built {index_dir} from {demo_dir()} in {build_s:.1f} s (nlp mode, 0 LLM tokens)\n")
        out.write(format_summary(index.manifest) + "\n\n")
    t0 = time.perf_counter()
    results = index.retrieve_many([q["question"] for q in questions])
    query_s = time.perf_counter() - t0
    found_all = 0
    texts_col = index.nodes.column("text")
    for q, res in zip(questions, results):
        top = [Path(p).name for p in res.passages[: args.passages]]
        need = list(q.get("supporting_sources", []))
        hit = [s for s in need if s in top]
        found_all += len(hit) == len(need)
        if args.json:
            row = res.to_dict()
            row["supporting_sources"] = need
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            continue
        ids = res.passage_node_ids[: args.passages]
        texts = dict(zip(ids, texts_col.take(ids).to_pylist())) if ids else {}
        short = dataclasses.replace(res, passages=[Path(p).name for p in res.passages])
        out.write(format_result(short, passages=args.passages, texts=texts) + "\n")
        out.write(f"expected answer: {q.get('answer', '?')}; supporting documents in the top {args.passages}: "
                  f"{len(hit)}/{len(need)}\n\n")
    if not args.json:
        out.write(f"{len(questions)} questions retrieved in {query_s * 1e3:.0f} ms (one batch, including the query "
                  f"embedding); all supporting documents in the top {args.passages} for {found_all}/{len(questions)}.\n"
                  "Answers need an LLM: noderag query DIR \"question\" --answer --llm SPEC\n")
    return 0


def run_demo(args: argparse.Namespace, *, out=None) -> int:
    """Build the demo index and retrieve for the demo questions; returns the exit code."""
    out = out or sys.stdout
    if args.index is not None:
        return _run(args, Path(args.index), out)
    with tempfile.TemporaryDirectory(prefix="noderag-demo-") as tmp:
        return _run(args, Path(tmp) / "index", out)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m noderag.demo``."""
    parser = argparse.ArgumentParser(prog="noderag demo", description=__doc__.split("\n")[0])
    add_demo_arguments(parser)
    return run_demo(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
