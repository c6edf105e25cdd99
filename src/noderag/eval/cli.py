"""``noderag eval DATA --index DIR``: the command-line face of :func:`noderag.eval.evaluate`."""

from __future__ import annotations

import argparse
import sys

from .loaders import FORMATS, DatasetError
from .run import KNOWN_METHODS, METHODS, evaluate

__all__ = ["add_eval_arguments", "run_eval"]


def _int_list(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return vals


def _methods(text: str) -> list[str]:
    vals = [x.strip() for x in text.split(",") if x.strip()]
    bad = [m for m in vals if m not in KNOWN_METHODS]
    if bad or not vals:
        raise argparse.ArgumentTypeError(f"unknown method(s) {bad or text!r}: choose from {','.join(KNOWN_METHODS)}")
    return vals


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``noderag eval``."""
    p.add_argument("data", metavar="DATA", help="dataset folder or file (noderag, BEIR, HippoRAG, raw MuSiQue, "
                                                "2WikiMultiHopQA or HotpotQA), or 'demo': the shipped demo corpus")
    p.add_argument("--index", required=True, metavar="DIR", action="append",
                   help="index directory (built from the dataset's corpus when it has no finished build); repeat "
                        "it for several builds of the corpus (e.g. one per --seed): noderag's per-question scores "
                        "are averaged over them, and each one's figures are reported too")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="results folder: results.json/.md, recall.svg, state/ for resuming (default eval-<dataset>)")
    p.add_argument("--methods", type=_methods, default=list(METHODS), metavar="M,M",
                   help=f"methods ({','.join(KNOWN_METHODS)}), the first being the reference of paired "
                        f"comparisons (default {','.join(METHODS)})")
    p.add_argument("--k", type=_int_list, default=[2, 5, 10], metavar="K,K", help="recall@k cut-offs (default 2,5,10)")
    p.add_argument("--format", choices=FORMATS, default=None, help="dataset format (default: detected)")
    p.add_argument("--split", default=None, help="BEIR qrels split (default: test, or the only one)")
    p.add_argument("--llm", metavar="SPEC", default=None,
                   help="answer each question with this LLM over each method's context: EM and token F1")
    p.add_argument("--judge", metavar="SPEC", default=None, help="LLM judging the answers (needs --llm)")
    p.add_argument("--embed", metavar="SPEC", default=None, help="embedder of the build when the index is missing")
    p.add_argument("--config", metavar="FILE", default=None, help="build configuration when the index is missing")
    p.add_argument("--batch-size", type=int, default=256, metavar="N",
                   help="questions per retrieve_many call and per resumable record (default 256)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="score only the first N questions")
    p.add_argument("--by", default=None, metavar="FIELD,FIELD",
                   help="question fields to break scores down by (default: every categorical field)")
    p.add_argument("--resamples", type=int, default=2000, metavar="N", help="bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--no-latency", action="store_true", help="skip timing each question alone")
    p.add_argument("--per-question", action="store_true",
                   help="also write per_question.jsonl: ranked ids, gold and scores of every question")
    p.add_argument("--restart", action="store_true", help="discard the finished batches of an earlier run in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def run_eval(args: argparse.Namespace) -> int:
    """Run ``noderag eval``; a dataset problem is one ``noderag eval: error:`` line and exit 1."""
    from pathlib import Path

    from ..config import NodeRAGConfig, load_config

    if args.judge and not args.llm:
        print("noderag eval: error: --judge needs --llm (the answers it judges)", file=sys.stderr)
        return 2
    progress = not args.no_progress

    def log(msg: str) -> None:
        print(f"noderag: {msg}", file=sys.stderr)

    build_config = load_config(args.config) if args.config else None
    if args.embed:
        build_config = (build_config or NodeRAGConfig()).with_overrides({"embed.spec": args.embed})
    out = Path(args.out) if args.out else Path(f"eval-{Path(args.data).resolve().name.split('.')[0]}")
    try:
        index = args.index[0] if len(args.index) == 1 else args.index
        res = evaluate(args.data, index, out=out, methods=args.methods, ks=args.k, format=args.format,
                       split=args.split, llm=args.llm, judge=args.judge, build_config=build_config,
                       batch_size=args.batch_size, latency=not args.no_latency, per_question=args.per_question,
                       n_resamples=args.resamples, seed=args.seed,
                       by=[f.strip() for f in args.by.split(",") if f.strip()] if args.by else None,
                       limit=args.limit, restart=args.restart, progress=progress, log=log)
    except DatasetError as exc:
        print(f"noderag eval: error: {exc}", file=sys.stderr)
        return 1
    keys = list(next(iter(res["methods"].values()))["metrics"])
    print(f"{'method':<10}" + "".join(f"{k:>12}" for k in keys) + f"{'p50 ms':>10}{'q/s':>10}")
    for m, row in res["methods"].items():
        print(f"{m:<10}" + "".join(f"{row['metrics'][k]['mean']:>12.4f}" for k in keys)
              + f"{row['p50_ms'] if row['p50_ms'] is not None else '':>10}{row['batch_qps'] or '':>10}")
    for i, one in enumerate(res.get("per_index", [])):  # several indexes: each one's own noderag figures
        for m, row in one["methods"].items():
            print(f"{f'{m}[{i}]':<10}" + "".join(f"{row['metrics'][k]['mean']:>12.4f}" for k in keys))
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}"
          + f", {out / 'recall.svg'}"
          + (f", {out / 'per_question.jsonl'}" if args.per_question else ""))
    return 0
