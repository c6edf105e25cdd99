"""The ``noderag`` command: ``build``, ``stats`` (and ``query`` when the search package registers it)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

__all__ = ["main", "format_summary"]


def _user_errors() -> tuple[type[BaseException], ...]:
    from noderag.config import ConfigError
    from noderag.graph.storage import FormatVersionError
    from noderag.index.augment import AugmentFailure
    from noderag.index.decompose.base import DecomposeFailure
    from noderag.index.ingest import IngestError
    from noderag.index.lock import IndexLockedError
    from noderag.index.pipeline import BuildError
    from noderag.index.store import IndexNotFoundError

    return (ConfigError, FormatVersionError, AugmentFailure, DecomposeFailure, IngestError, BuildError,
            IndexNotFoundError, IndexLockedError, OSError)


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def format_summary(manifest: dict) -> str:
    """Plain-text summary table of a manifest: nodes per type, edges, tokens, time, bytes."""
    from noderag.index.manifest import bytes_by_component

    counts = manifest.get("counts", {})
    lines = []
    nodes = counts.get("nodes", {})
    active = counts.get("active_nodes", nodes)
    lines.append(f"documents {counts.get('documents', 0)}   chunks {counts.get('chunks', 0)}   "
                 f"communities {counts.get('communities', 0)}")
    lines.append("")
    lines.append(f"{'node type':<16}{'nodes':>10}{'active':>10}")
    for name, v in nodes.items():
        lines.append(f"{name:<16}{v:>10,}{active.get(name, v):>10,}")
    lines.append(f"{'total':<16}{sum(nodes.values()):>10,}{sum(active.values()):>10,}")
    lines.append("")
    edges = counts.get("edges", {})
    lines.append(f"{'edges':<16}{'count':>10}")
    for name, v in edges.items():
        lines.append(f"{name:<24}{v:>10,}" if "." in name else f"{name:<16}{v:>10,}")
    lines.append("")
    stages = manifest.get("stages", {})
    tokens = manifest.get("tokens", {})
    lines.append(f"{'stage':<16}{'time s':>10}{'LLM tokens':>12}")
    total_t = 0.0
    for name, st in stages.items():
        t = float(st.get("time_s", 0.0))
        total_t += t
        tk = {"decompose": "decompose", "attributes": "attributes", "communities": "communities"}.get(name)
        tok = tokens.get(tk, {}) if tk else {}
        ntok = int(tok.get("prompt_tokens", 0)) + int(tok.get("completion_tokens", 0))
        lines.append(f"{name:<16}{t:>10.2f}{ntok:>12,}")
    all_tok = sum(int(v.get("prompt_tokens", 0)) + int(v.get("completion_tokens", 0))
                  for v in tokens.values() if isinstance(v, dict))
    lines.append(f"{'total':<16}{total_t:>10.2f}{all_tok:>12,}")
    lines.append("")
    lines.append(f"{'component':<20}{'bytes':>12}")
    for name, b in bytes_by_component(manifest.get("bytes", {})).items():
        lines.append(f"{name:<20}{_fmt_bytes(b):>12}")
    lines.append(f"{'total':<20}{_fmt_bytes(manifest.get('bytes_total', 0)):>12}")
    fails = manifest.get("failures", {})
    nf = sum(len(v) for v in fails.values() if isinstance(v, dict))
    if nf:
        lines.append("")
        lines.append(f"WARNING: {nf} item(s) failed and are recorded in manifest.json 'failures':")
        for stage, items in fails.items():
            for k, v in list(items.items())[:5]:
                lines.append(f"  {stage} {k}: {v}")
    return "\n".join(lines)


def _cmd_build(args: argparse.Namespace) -> int:
    from noderag.config import ConfigError, NodeRAGConfig, load_config
    from noderag.index.pipeline import build_index

    config = load_config(args.config) if args.config else None
    overrides = {}
    if args.embed:
        overrides["embed.spec"] = args.embed
    if args.seed is not None:
        overrides["seed"] = args.seed
    if args.llm:
        overrides["llm.spec"] = args.llm
        overrides["decompose.method"] = "llm"
    if args.chunk_tokens is not None:
        overrides["chunk.max_tokens"] = args.chunk_tokens
    if args.llm_option:
        from noderag.llm.options import OptionError, llm_option_overrides

        try:
            overrides.update(llm_option_overrides(args.llm_option, (config or NodeRAGConfig()).llm.options))
        except OptionError as exc:
            raise ConfigError(str(exc)) from None
    if overrides:
        config = (config or NodeRAGConfig()).with_overrides(overrides)
    progress = not args.no_progress
    log = (lambda msg: print(f"noderag: {msg}", file=sys.stderr)) if progress else None
    executor = None
    if args.executor or args.ray_address:  # where decompose/embed run: no part of the index's configuration
        from dataclasses import replace

        ex = (config or NodeRAGConfig()).executor
        executor = replace(ex, kind=args.executor or ("ray" if args.ray_address else ex.kind),
                           address=args.ray_address or ex.address)
        executor.validate()
    report = build_index(args.inputs, args.index, config, progress=progress,
                         allow_failures=args.allow_failures, log=log, wait=args.wait, executor=executor)
    print(f"index {args.index}: {report.added_documents} new document(s), {report.duplicates} duplicate(s) skipped")
    print(format_summary(report.manifest))
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    from noderag.index.store import IndexStore

    store = IndexStore.open(args.index)
    if args.json:
        m = dict(store.manifest)
        print(json.dumps({k: m[k] for k in ("counts", "stages", "tokens", "bytes_total", "bytes", "failures")
                          if k in m}, indent=2, sort_keys=True))
    else:
        print(f"index {Path(args.index)}")
        print(format_summary(store.manifest))
    return 0


def _parser() -> argparse.ArgumentParser:
    from noderag import __version__

    p = argparse.ArgumentParser(prog="noderag", description="NodeRAG heterograph indexing and retrieval.")
    p.add_argument("--version", action="version", version=f"noderag {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build an index (or add new documents to an existing one)")
    b.add_argument("inputs", nargs="+", metavar="INPUT", help=".txt/.md/.jsonl files or directories")
    b.add_argument("--index", required=True, metavar="DIR", help="index directory")
    b.add_argument("--llm", metavar="SPEC", help="LLM backend for decomposition (default: nlp, no LLM)")
    b.add_argument("--llm-option", action="append", metavar="KEY=VALUE", default=None,
                   help="LLM backend setting, repeatable (dialect, max_concurrency, timeout_s, max_retries, "
                        "temperature, api_key_env, ...; see [llm] in the README)")
    b.add_argument("--embed", metavar="SPEC", help="embedding backend (default: config or 'default')")
    b.add_argument("--config", metavar="FILE", help="TOML or YAML configuration file")
    b.add_argument("--seed", type=int, metavar="N", help="seed of every random algorithm")
    b.add_argument("--chunk-tokens", type=int, metavar="N", help="maximum tokens per chunk")
    b.add_argument("--allow-failures", action="store_true",
                   help="finish even when some chunks fail to decompose (recorded in the manifest)")
    b.add_argument("--executor", choices=("local", "ray"), default=None,
                   help="where decomposition and embedding run (default: config [executor] or local)")
    b.add_argument("--ray-address", metavar="ADDR", default=None,
                   help="Ray cluster for --executor ray: auto, HOST:PORT or ray://HOST:PORT (needs noderag[ray])")
    b.add_argument("--no-progress", action="store_true", help="no progress bars")
    b.add_argument("--wait", type=float, metavar="SECONDS", default=None,
                   help="wait up to SECONDS for another writer of the index to finish (default: fail at once)")
    b.set_defaults(func=_cmd_build)
    s = sub.add_parser("stats", help="print the summary of an index")
    s.add_argument("index", metavar="DIR")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=_cmd_stats)
    q = sub.add_parser("query", help="retrieve (and optionally answer) for questions over an index")
    from noderag.search.cli import add_query_arguments, run_query  # the search package owns `query`

    add_query_arguments(q)
    q.set_defaults(func=run_query)
    d = sub.add_parser("demo", help="build an index from the shipped demo corpus, then retrieve for demo questions")
    from noderag.demo import add_demo_arguments, run_demo  # the search helper owns the demo

    add_demo_arguments(d)
    d.set_defaults(func=run_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (user errors: message on stderr, status 1, no traceback)."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("noderag: interrupted (rerun the same command to resume)", file=sys.stderr)
        return 130
    except _user_errors() as exc:
        msg = str(exc)
        if isinstance(exc, OSError) and exc.filename and str(exc.filename) not in msg:
            msg = f"{exc.filename}: {msg}"
        print(f"noderag: error: {msg}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
