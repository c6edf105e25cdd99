"""The ``noderag`` command: ``build``, ``insert``, ``delete``, ``compact``, ``gc``, ``repair``, ``stats``, ``verify``, ``query``,
``demo`` and ``serve``."""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
from pathlib import Path
from typing import Sequence

__all__ = ["main", "format_summary"]

from .store.summary import format_brief, format_bytes, format_summary  # noqa: E402  (format_summary is re-exported)


def _user_errors() -> tuple[type[BaseException], ...]:
    """What the command reports as one line (exit 1) instead of a traceback: every error noderag raises on
    purpose (:class:`~noderag.errors.NodeRAGError`) and the operating system's (a file, a permission)."""
    from .errors import NodeRAGError

    return (NodeRAGError, OSError)


def _cmd_insert(args: argparse.Namespace) -> int:
    """``noderag insert DIR INPUT...``: :func:`_cmd_build` onto an index that must exist (the same code path)."""
    from .store.generations import current_generation
    from .store.tables import IndexNotFoundError, check_layout

    root = Path(args.index)
    if root.is_dir():
        check_layout(root)
    if not root.is_dir() or current_generation(root) is None:  # a damaged pointer raises, naming the fix
        raise IndexNotFoundError(f"{root}: no finished index to insert into; build one first with "
                                 f"`noderag build INPUT... --index {root}`")
    return _cmd_build(args)


def _cmd_repair(args: argparse.Namespace) -> int:
    from .store.repair import repair_pointer

    report = repair_pointer(args.index, wait=args.wait)
    for line in report.skipped:
        print(f"noderag: skipped {line}", file=sys.stderr)
    if report.removed:
        print(f"noderag: removed {len(report.removed)} temporary file(s): {', '.join(report.removed[:10])}",
              file=sys.stderr)
    if report.discarded is not None:
        print(f"noderag: discarded the unfinished run in {Path(args.index) / 'stages'} (never committed)",
              file=sys.stderr)
    if report.changed:
        was = "missing" if report.before is None else repr(report.before[:40])
        print(f"index {args.index}: CURRENT now names generation {report.generation} (was {was}); "
              "it passed the full check")
    else:
        print(f"index {args.index}: CURRENT names generation {report.generation}, which passes the full check; "
              "nothing to repair")
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    from .config import ConfigError, NodeRAGConfig, load_config
    from .indexing.driver import build_index

    config = load_config(args.config) if getattr(args, "config", None) else None
    overrides = {}
    if getattr(args, "embed", None):
        overrides["embed.spec"] = args.embed
    if getattr(args, "seed", None) is not None:
        overrides["seed"] = args.seed
    if args.llm:
        overrides["llm.spec"] = args.llm
        overrides["decompose.method"] = "llm"
    if getattr(args, "chunk_tokens", None) is not None:
        overrides["chunk.max_tokens"] = args.chunk_tokens
    if args.llm_option:
        from .llm.options import OptionError, llm_option_overrides

        try:
            overrides.update(llm_option_overrides(args.llm_option, (config or NodeRAGConfig()).llm.options))
        except OptionError as exc:
            raise ConfigError(str(exc)) from None
    if overrides:
        config = (config or NodeRAGConfig()).with_overrides(overrides)
    progress = not args.no_progress
    log = (lambda msg: print(f"noderag: {msg}", file=sys.stderr)) if progress else None
    if getattr(args, "estimate", False):  # the cost of an LLM build; no model is called, nothing is built
        from .indexing.estimate import run_estimate

        return run_estimate(args, config, log)
    given = [f"--estimate-{k}" for k in ("tps", "sample", "tokenizer", "calibrate") if getattr(args, f"estimate_{k}", None) is not None]
    if given:  # they would be silently ignored by a real build
        raise ConfigError(f"{', '.join(given)} only applies with --estimate")
    executor = None
    if args.executor or args.ray_address:  # where decompose/embed run: no part of the index's configuration
        from dataclasses import replace

        ex = (config or NodeRAGConfig()).executor
        executor = replace(ex, kind=args.executor or ("ray" if args.ray_address else ex.kind),
                           address=args.ray_address or ex.address)
        executor.validate()
    if getattr(args, "segments", None) is not None:
        return _build_segmented(args, config, executor, log)
    report = build_index(args.inputs, args.index, config, progress=progress,
                         allow_failures=args.allow_failures, log=log, wait=args.wait, executor=executor)
    replaced = f", {report.deleted_documents} replaced" if report.deleted_documents else ""
    print(f"index {args.index}: {report.added_documents} new document(s), {report.duplicates} duplicate(s) skipped"
          f"{replaced}")
    print(format_summary(report.manifest))
    _say_background(args.index, report)
    return 0


def _build_segmented(args: argparse.Namespace, config, executor, log) -> int:
    """``build --segments N``: a new index built as N parts (on the Ray cluster with ``--executor ray``)."""
    from .config import NodeRAGConfig
    from .indexing.segmented import build_segmented

    config = config or NodeRAGConfig()
    report = build_segmented(args.inputs, args.index, config, segments=args.segments,
                             executor=executor or config.executor, log=log)
    seg = report.manifest["segments"]
    print(f"index {args.index}: {report.manifest['counts'].get('documents', 0)} document(s) in {seg['parts']} "
          f"segments, {seg['aliases']} node(s) shared across segments (generation {report.generation})")
    print(format_summary(report.manifest))
    return 0


def _say_background(index, report) -> None:
    if report.background_compaction:
        from .indexing.update.background import LOG

        print(f"index {index}: compacting the delta segments in the background (pid {report.background_compaction}, "
              f"log {Path(index) / LOG}); readers and writers need not wait for it")


def _cmd_delete(args: argparse.Namespace) -> int:
    from .indexing.update.delete import delete_documents

    progress = not args.no_progress
    log = (lambda msg: print(f"noderag: {msg}", file=sys.stderr)) if progress else None
    report = delete_documents(args.index, args.doc_ids, all_from=args.all_from or (), llm=args.llm,
                              progress=progress, log=log, wait=args.wait)
    print(f"index {args.index}: {report.deleted_documents} document(s) deleted, generation {report.generation}; "
          + format_brief(report.manifest))
    _say_background(args.index, report)
    return 0


def _cmd_compact(args: argparse.Namespace) -> int:
    from .indexing.update.compact import compact_index

    progress = not args.no_progress
    log = (lambda msg: print(f"noderag: {msg}", file=sys.stderr)) if progress else None
    report = compact_index(args.index, full=args.full, llm=args.llm, progress=progress, log=log, wait=args.wait)
    if report.nothing_done:
        print(f"index {args.index}: nothing to compact ({report.nothing_done}); generation {report.generation} "
              "is unchanged")
        return 0
    print(f"index {args.index}: compacted ({'full' if args.full else 'merge'}) into generation {report.generation}")
    print(format_summary(report.manifest))
    return 0


def _cmd_gc(args: argparse.Namespace) -> int:
    from .store.generations import remove_old_generations
    from .store.tables import check_layout

    check_layout(Path(args.index))
    removed, left = remove_old_generations(args.index, wait=args.wait)
    print(f"index {args.index}: removed {len(removed)} old generation(s)"
          + (f"; {len(left)} still open by a reader: {', '.join(map(str, left))}" if left else ""))
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    import time

    from .indexing.update.background import LOG
    from .store.lock import BACKGROUND, current_writer
    from .store.tables import IndexStore

    store = IndexStore.open(args.index)
    if args.json:
        m = dict(store.manifest)
        print(json.dumps({"generation": store.generation,
                          **{k: m[k] for k in ("counts", "stages", "tokens", "bytes_total", "bytes", "failures")
                             if k in m}}, indent=2, sort_keys=True))
    else:
        print(f"index {Path(args.index)} (generation {store.generation})")
        print(format_summary(store.manifest))
        writer = current_writer(args.index)
        if writer:
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(writer.get("since", 0))))
            role = writer.get("role") or "a writer"
            log = f"; log {Path(args.index) / LOG}" if writer.get("role") == BACKGROUND else ""
            print(f"being written: {role} (pid {writer.get('pid')} on {writer.get('host')} since {since}{log})")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from .store.tables import IndexStore
    from .store.verify import verify_index

    store = IndexStore.open(args.index, verify="none")  # not an index, unfinished, other format: named errors
    level = "cheap" if args.cheap else "full"
    report = verify_index(store.path, level, manifest=store.manifest)
    for w in report.warnings:
        print(f"noderag: warning: {w}", file=sys.stderr)
    what = "sizes and headers" if args.cheap else "checksums and structure"
    print(f"index {args.index}: ok ({level} check of {report.files} files, {format_bytes(report.bytes)}: {what}; "
          f"{report.seconds:.2f} s)")
    return 0


def _add_wait(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wait", type=float, metavar="SECONDS", default=None,
                        help="wait up to SECONDS for another writer of the index to finish (default: fail at once)")


def _add_run_options(parser: argparse.ArgumentParser, llm_help: str) -> None:
    """The options build and insert share: LLM, failures, executor, progress, waiting for the writer lock."""
    parser.add_argument("--llm", metavar="SPEC", help=llm_help)
    parser.add_argument("--llm-option", action="append", metavar="KEY=VALUE", default=None,
                        help="LLM backend setting, repeatable (dialect, max_concurrency, timeout_s, max_retries, "
                             "temperature, api_key_env, ...; see docs/llm.md)")
    parser.add_argument("--allow-failures", action="store_true",
                        help="finish even when some chunks fail to decompose (recorded in the manifest)")
    parser.add_argument("--executor", choices=("local", "ray"), default=None,
                        help="where decomposition and embedding run (default: config [executor] or local)")
    parser.add_argument("--ray-address", metavar="ADDR", default=None,
                        help="Ray cluster for --executor ray: auto, HOST:PORT or ray://HOST:PORT (needs noderag[ray])")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_wait(parser)


def _add_build(sub) -> None:
    b = sub.add_parser("build", help="build an index (or add new documents to an existing one)")
    b.add_argument("inputs", nargs="+", metavar="INPUT", help=".txt/.md/.jsonl files or directories")
    b.add_argument("--index", required=True, metavar="DIR", help="index directory")
    _add_run_options(b, "LLM backend for decomposition (default: nlp, no LLM)")
    b.add_argument("--embed", metavar="SPEC", help="embedding backend (default: config or 'auto': chosen by the corpus language)")
    b.add_argument("--config", metavar="FILE", help="TOML or YAML configuration file")
    b.add_argument("--seed", type=int, metavar="N",
                   help="seed of every random algorithm of the build (Leiden, betweenness pivots, sampling)")
    b.add_argument("--chunk-tokens", type=int, metavar="N", help="maximum tokens per chunk")
    b.add_argument("--segments", type=int, metavar="N", default=None,
                   help="a new index built as N segments of contiguous documents, each a complete index built on "
                        "its own (as Ray tasks with --executor ray), queried as one (docs/ray.md)")
    b.add_argument("--estimate", action="store_true",
                   help="print what an LLM build of INPUT would cost (requests and tokens per stage, embedding, "
                        "time) without calling any model; builds nothing")
    b.add_argument("--estimate-tps", type=float, metavar="N", default=None,
                   help="with --estimate: LLM throughput in tokens/s, for a time range")
    b.add_argument("--estimate-sample", type=int, metavar="N", default=None,
                   help="with --estimate: render only N chunks spread over the input and extrapolate")
    b.add_argument("--estimate-tokenizer", metavar="NAME|PATH", default=None,
                   help="with --estimate: count prompt tokens with 'cl100k' (+4 per message) or the vocabulary and "
                        "chat template of a GGUF model file (default: the GGUF --llm names, else cl100k)")
    b.add_argument("--estimate-calibrate", metavar="PILOT", default=None,
                   help="with --estimate: count the model's retries and the size of its graph as measured by a pilot "
                        "index (one LLM build of a few chunks of the same corpus with the same model)")
    b.set_defaults(func=_cmd_build)


def _add_recompute_options(p, func) -> None:
    """--llm, --no-progress and --wait of a command that recomputes an index's summaries; runs ``func``."""
    p.add_argument("--llm", metavar="SPEC", help="LLM backend (an LLM-built index recomputes its summaries)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_wait(p)
    p.set_defaults(func=func)


def _add_writers(sub) -> None:
    """insert, delete, compact, gc and repair: the commands that write an existing index."""
    ins = sub.add_parser("insert", help="add documents to an existing index (what `build --index` of one does)")
    ins.add_argument("index", metavar="DIR", help="index directory (must hold a finished index)")
    ins.add_argument("inputs", nargs="+", metavar="INPUT", help=".txt/.md/.jsonl files or directories")
    _add_run_options(ins, "LLM backend (an LLM-built index needs it again)")
    ins.add_argument("--config", metavar="FILE", help="TOML or YAML configuration file: its [update] and [llm] "
                                                      "settings apply (the build sections must be the index's)")
    ins.set_defaults(func=_cmd_insert)
    dl = sub.add_parser("delete", help="delete documents (by source id, or every document of some inputs)")
    dl.add_argument("index", metavar="DIR", help="index directory")
    dl.add_argument("doc_ids", nargs="*", metavar="DOC_ID", help="source ids: the JSONL 'id' or the file path")
    dl.add_argument("--all-from", nargs="+", metavar="PATH",
                    help="delete every document these files, folders or JSONL corpora would add")
    _add_recompute_options(dl, _cmd_delete)
    cp = sub.add_parser("compact", help="merge the delta segments of inserts into one, recomputing every global "
                                        "stage (communities, importance, name links)")
    cp.add_argument("index", metavar="DIR", help="index directory")
    cp.add_argument("--full", action="store_true",
                    help="also re-assemble and re-embed every document: the bytes of a fresh build of them")
    _add_recompute_options(cp, _cmd_compact)
    g = sub.add_parser("gc", help="remove the old generations that no reader holds open any more")
    g.add_argument("index", metavar="DIR", help="index directory")
    _add_wait(g)
    g.set_defaults(func=_cmd_gc)
    rp = sub.add_parser("repair", help="point CURRENT at the newest generation that passes the full check and "
                                       "remove temporary files a killed writer left")
    rp.add_argument("index", metavar="DIR", help="index directory")
    _add_wait(rp)
    rp.set_defaults(func=_cmd_repair)


#: commands whose arguments and run function live in their package: (name, help, module, adder, runner)
_DELEGATED = (
    ("query", "retrieve (and optionally answer) for questions over an index", "search.cli", "add_query_arguments",
     "run_query"),
    ("demo", "build an index from the shipped demo corpus, then retrieve for demo questions", "demo",
     "add_demo_arguments", "run_demo"),
    ("serve", "serve an index over HTTP: JSON API and a web page (extra: noderag[serve])", "serve.cli",
     "add_serve_arguments", "run_serve"),
    ("eval", "evaluate retrieval (and answers) on a dataset, with dense and BM25 baselines", "eval.cli",
     "add_eval_arguments", "run_eval"),
    ("export", "export the graph as GraphML, Neo4j import CSVs, PostgreSQL tables or Parquet", "export.cli",
     "add_export_arguments", "run_export"),
    ("mcp", "serve an index to agents over MCP: stdio, or streamable HTTP (extra: noderag[mcp])",
     "integrations.mcp", "add_mcp_arguments", "run_mcp"),
)


def _parser() -> argparse.ArgumentParser:
    import importlib

    from ._version import __version__

    p = argparse.ArgumentParser(prog="noderag", description="NodeRAG heterograph indexing and retrieval.")
    p.add_argument("--version", action="version", version=f"noderag {__version__}")
    p.add_argument("--debug", action="store_true", help="print the traceback of an error")
    sub = p.add_subparsers(dest="command", required=True)
    _add_build(sub)
    _add_writers(sub)
    s = sub.add_parser("stats", help="print the summary of an index")
    s.add_argument("index", metavar="DIR")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=_cmd_stats)
    v = sub.add_parser("verify", help="check an index's files (checksums and structure); exit 1 naming a damaged file")
    v.add_argument("index", metavar="DIR")
    v.add_argument("--cheap", action="store_true", help="sizes and headers only, as every open does")
    v.set_defaults(func=_cmd_verify)
    for name, help_text, module, adder, runner in _DELEGATED:  # heavy imports (FastAPI, MCP) happen only when run
        mod = importlib.import_module(f".{module}", __package__)
        cmd = sub.add_parser(name, help=help_text)
        getattr(mod, adder)(cmd)
        cmd.set_defaults(func=getattr(mod, runner))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status.

    Every failure is one line on stderr: expected ones (bad input, damaged index, missing file,
    version mismatch, lock held, LLM errors) exit 1, usage errors 2, anything else is reported
    as an internal error (exit 1). ``--debug`` adds the traceback.
    """
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage error (2), --help or --version (0): argparse has printed why
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    prog = f"noderag {args.command}"  # every error line starts as argparse's usage errors do
    wait = getattr(args, "wait", None)
    if wait is not None and not wait >= 0:  # NaN too
        _fail(prog, f"error: --wait must be a number of seconds >= 0, got {wait:g}", False)
        return 2
    try:
        rc = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below, not at interpreter exit
        return rc
    except BrokenPipeError as exc:
        if _stdout_closed():  # `noderag ... | head`: the work is done, only its report has no reader
            _silence_stdout()
            return 0
        _fail(prog, f"error: {exc}", args.debug)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted (rerun the same command to resume)", file=sys.stderr)
        return 130
    except _user_errors() as exc:
        msg = str(exc)
        if isinstance(exc, OSError) and exc.filename and str(exc.filename) not in msg:
            msg = f"{exc.filename}: {msg}"
        _fail(prog, f"error: {msg}", args.debug)
        return 1
    except Exception as exc:  # a bug: still one line unless --debug
        _fail(prog, f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", args.debug)
        return 1


def _stdout_closed() -> bool:
    """True when stdout is a pipe or socket whose reader has gone (poll reports an error on it)."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that Python's flush at exit does not report the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass


def _fail(prog: str, msg: str, debug: bool) -> None:
    """Print ``noderag COMMAND: MSG`` as one line on stderr (the traceback before it with ``--debug``)."""
    if debug:
        import traceback

        traceback.print_exc(file=sys.stderr)
    print(f"{prog}: " + " ".join(part.strip() for part in msg.splitlines() if part.strip()), file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
