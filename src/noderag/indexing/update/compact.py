"""Compaction: the delta segments of inserts merged into one base, every global stage recomputed.

``merge`` (the default) keeps every node's id and recomputes what deltas leave for later (name links
of older units to newer names, mention counts, importance and A nodes, communities and H/O nodes,
BM25 statistics, the vector index) over the whole index, as an insert without segments does.
``full`` also re-assembles every document from its stored decompositions in its original order with
a fresh node table and embeds every passage and unit again (stored vectors are quantised; a fresh
build's are not), so the index is byte for byte what a fresh build of the same documents writes, node
ids renumbered as that build numbers them. Decompositions are reused, never asked of the LLM again.
"""

from __future__ import annotations

import os
import sys

from ..driver import BuildReport, build_index

__all__ = ["compact_index"]


def compact_index(index_dir: str | os.PathLike, *, full: bool = False, llm=None, embedder=None,
                  progress: bool = False, log=None, wait: float | None = None,
                  background: float | None = None) -> BuildReport:
    """Merge the delta segments of the index in ``index_dir`` into one and commit it as a new generation.

    An index built with an LLM needs it again (``llm`` or the configured spec): its summaries are recomputed.
    ``background``: the ``update.max_delta_share`` of a background compaction (:mod:`noderag.indexing.update.background`),
    which yields to any other writer and does nothing unless the deltas hold more than that share of the base.
    """
    return build_index([], index_dir, None, llm=llm, embedder=embedder, progress=progress, log=log,
                       wait=wait, compact="full" if full else "merge", background=background)


def main(argv: list[str] | None = None) -> int:
    """``python -m noderag.indexing.update.compact INDEX --background SHARE``: the detached process of a background
    compaction (:mod:`noderag.indexing.update.background`), which logs to its stdout (``INDEX/compaction.log``)."""
    import argparse
    import time

    from ...store.lock import IndexLockedError
    from .background import LOCK_WAIT_S, NICENESS

    ap = argparse.ArgumentParser(prog="python -m noderag.indexing.update.compact",
                                 description="compact an index's delta segments in the background, yielding to "
                                             "any other writer")
    ap.add_argument("index")
    ap.add_argument("--background", type=float, required=True, metavar="SHARE",
                    help="compact only if the deltas hold more than this share of the base's documents")
    ap.add_argument("--llm", default=None)
    args = ap.parse_args(argv)
    os.nice(NICENESS)

    def say(msg: str) -> None:
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}: {msg}", flush=True)

    say(f"background compaction of {args.index}")
    t0 = time.perf_counter()
    try:
        report = compact_index(args.index, llm=args.llm, log=say, wait=LOCK_WAIT_S, background=args.background)
    except IndexLockedError as exc:  # that writer starts a compaction of its own if one is still due
        say(f"left to the writer that holds the index: {exc}")
        return 0
    except Exception as exc:  # noqa: BLE001 - the log is the only one who hears it
        say(f"failed: {type(exc).__name__}: {exc}")
        return 1
    say(f"done in {time.perf_counter() - t0:.1f} s: generation {report.generation}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
