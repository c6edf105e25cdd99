"""``noderag query``: argument wiring and readable output (called from ``noderag.cli``)."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import Any, TextIO

from .config import SearchConfig
from .result import AnswerResult, RetrievalResult

__all__ = ["add_query_arguments", "run_query", "format_result", "search_overrides", "passage_count"]


def passage_count(text: str) -> int:
    """``--k``: a number of passages, 1 or more (argparse turns the ValueError into a usage error)."""
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of passages (1 or more), got {text!r}") from None
    if k < 1:
        raise argparse.ArgumentTypeError(f"the number of passages must be 1 or more, got {k}")
    return k


def add_query_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``noderag query`` arguments to ``parser``."""
    parser.add_argument("index", metavar="DIR", help="index directory built by `noderag build`")
    parser.add_argument("questions", metavar="QUESTION", nargs="+", help="one or more questions")
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="TOML/YAML file whose [search] table overrides the search defaults")
    parser.add_argument("--json", action="store_true", help="print one JSON object per question")
    parser.add_argument("--answer", action="store_true", help="also answer with the LLM (needs --llm or llm.spec)")
    parser.add_argument("--llm", metavar="SPEC", default=None, help="LLM backend spec for --answer")
    parser.add_argument("--llm-option", action="append", metavar="KEY=VALUE", default=None,
                        help="LLM backend setting for --answer, repeatable (dialect, timeout_s, temperature, ...)")
    parser.add_argument("--top-k", type=int, default=None, metavar="N",
                        help="vector entry points per query (search.vector_top_k)")
    parser.add_argument("--k", type=passage_count, default=5, metavar="N",
                        help="ranked passages to show, also with --json (default 5)")
    parser.add_argument("--context-tokens", type=int, default=None, metavar="N", help="context token budget")
    parser.add_argument("--rule", choices=("restart", "lazy"), default=None, help="PPR update rule")
    parser.add_argument("--iterations", type=int, default=None, metavar="T", help="PPR iterations")
    parser.add_argument("--no-ppr", action="store_true", help="entry points and name matches only")
    parser.add_argument("--show-context", action="store_true", help="print the assembled context text")


def search_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """SearchConfig field overrides from the parsed flags (None = keep)."""
    out: dict[str, Any] = {}
    if getattr(args, "top_k", None) is not None:
        out["vector_top_k"] = args.top_k
    if getattr(args, "context_tokens", None) is not None:
        out["context_tokens"] = args.context_tokens
    if getattr(args, "rule", None) is not None:
        out["rule"] = args.rule
    if getattr(args, "iterations", None) is not None:
        out["iterations"] = args.iterations
    if getattr(args, "no_ppr", False):
        out["use_ppr"] = False
    return out


def _snippet(text: str, width: int = 100) -> str:
    return textwrap.shorten(" ".join(text.split()), width=width, placeholder=" ...")


def format_result(res: RetrievalResult, *, passages: int = 5, texts: dict[int, str] | None = None,
                  show_context: bool = False, answer: AnswerResult | None = None) -> str:
    """Human-readable summary of one retrieval (and answer): the first ``passages`` ranked passages with
    their titles, scores and a line of their text (``texts``: node id -> text, for results without it)."""
    lines = [f"Q: {res.query}"]
    if answer is not None:
        cites = ", ".join(str(i) for i in answer.cited_ids) or "none"
        if answer.error is not None:
            lines += [f"A: (no answer: {answer.error})"]
        else:
            lines += [f"A: {answer.answer}", f"   cites nodes: {cites}"]
    if not res.matched:
        best = "none" if res.best_similarity is None else f"{res.best_similarity:.3f}"
        lines.append(f"no confident match: no name matched and the best similarity {best} is below "
                     f"search.min_similarity {res.min_similarity:g}; the results below are only the nearest nodes")
    if res.query_entities:
        lines.append("entities: " + ", ".join(res.query_entities)
                     + f"  ({len(res.matched_names)} name match{'es' if len(res.matched_names) != 1 else ''})")
    lines.append(f"top passages ({min(passages, len(res.passages))} of {len(res.passages)}):")
    texts = texts or {}
    for rank, (pid, score, nid) in enumerate(zip(res.passages[:passages], res.passage_scores,
                                                 res.passage_node_ids), 1):
        title = getattr(pid, "title", None)
        head = f"{title} [{pid}]" if title and title != str(pid) else str(pid)
        lines.append(f"  {rank:>2}. {head}  score {score:.3f}")
        text = texts.get(nid) or getattr(pid, "text", "")
        if text:
            lines.append(f"      {_snippet(text)}")
    counts: dict[str, int] = {}
    for n in res.nodes:
        counts[n.type.name] = counts.get(n.type.name, 0) + 1
    lines.append("nodes: " + ", ".join(f"{k} {v}" for k, v in counts.items())
                 + f"; context {res.context_tokens} tokens from {len(res.context_node_ids)} nodes")
    if show_context:
        lines += ["", res.context]
    return "\n".join(lines)


def run_query(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Open the index, retrieve for every question, print; returns the exit code."""
    from ..store.tables import IndexStore
    from .searcher import LLMNotConfiguredError, Searcher

    out = out or sys.stdout
    store = IndexStore.open(args.index)
    # Search settings are query-time settings: the current defaults, a --config file's [search]
    # table, then flags (not the search section frozen into the index manifest at build time).
    base = SearchConfig()
    if getattr(args, "config", None):
        from ..config import load_config

        base = load_config(args.config).search
    try:
        config = base.replace(**search_overrides(args))
    except ValueError as exc:
        print(f"noderag query: error: {exc}", file=sys.stderr)
        return 1
    llm = None
    if args.answer:
        spec = args.llm or getattr(getattr(store.config, "llm", None), "spec", None)
        if spec:
            from ..llm.options import OptionError
            from .api import index_llm

            try:  # the index's [llm] settings, then --llm-option on top
                llm = index_llm(store, spec, getattr(args, "llm_option", None))
            except (OptionError, ValueError, TypeError) as exc:
                print(f"noderag query: error: {exc}", file=sys.stderr)
                return 1
    searcher = Searcher(store, config, llm=llm)
    try:
        results = searcher.retrieve_many(args.questions)
    except (TypeError, ValueError) as exc:
        print(f"noderag query: error: {exc}", file=sys.stderr)
        return 1
    status = 0
    for i, res in enumerate(results):
        answer = None
        if args.answer:
            try:
                answer = searcher.answer(res.query, retrieval=res)
            except LLMNotConfiguredError as exc:
                print(f"noderag query: {exc}", file=sys.stderr)
                status = 2
            if answer is not None and answer.error is not None:
                print(f"noderag query: no answer for {res.query!r}: {answer.error}", file=sys.stderr)
                status = max(status, 3)
        if args.json:
            obj = answer.to_dict() if answer is not None else res.to_dict()
            ranked = obj["retrieval"] if answer is not None else obj
            for key in ("passages", "passage_scores", "passage_node_ids"):  # cut to --k, as HTTP's k does
                ranked[key] = ranked[key][: args.k]
            out.write(json.dumps(obj, ensure_ascii=False) + "\n")
            continue
        if i:
            out.write("\n")
        out.write(format_result(res, passages=args.k, show_context=args.show_context, answer=answer) + "\n")
    return status
