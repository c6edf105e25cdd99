"""Leiden warm start at compaction: communities started from the base's stored partition against a cold start.

Two indexes of the first ``(1 - --insert-share)`` of the ``scale_corpus`` passages are built, one with
``communities.warm_start`` on and one with it off; the rest of the passages is inserted into each (a delta
segment) and each is compacted (``noderag compact``, merging). Reports per mode: the share of the base's
communities whose members among the base's nodes are exactly the same after the compaction, the share of
the base's H nodes (community summaries, by key) still there, Leiden's own seconds and the compaction's
wall. Both modes see the same documents, seeds and configuration otherwise.

    python benchmarks/bench_leiden_warm.py [--passages 10000] [--insert-share 0.1] [--embed hash:384]

Writes ``OUT/leiden_warm.json`` and ``OUT/leiden_warm.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_retrieval import _git_revision  # noqa: E402
from scale_corpus import DEFAULT_DATA, generate  # noqa: E402

from noderag.indexing.update.compact import compact_index  # noqa: E402
from noderag.indexing.driver import build_index  # noqa: E402
from noderag.config import NodeRAGConfig  # noqa: E402
from noderag.graph.types import NodeType  # noqa: E402
from noderag.store.generations import current_path  # noqa: E402

REPO = HERE.parent
H = int(NodeType.H)


def _groups(labels: np.ndarray, n: int) -> set[tuple[int, ...]]:
    """The member sets (node ids below ``n``) of each labelled community."""
    ids = np.flatnonzero(labels[:n] >= 0)
    order = np.lexsort((ids, labels[ids]))
    ids, lab = ids[order], labels[ids][order]
    return {tuple(g.tolist()) for g in np.split(ids, np.flatnonzero(np.diff(lab)) + 1)} if ids.size else set()


def _h_keys(gen: Path) -> set[int]:
    types, keys = np.load(gen / "node_types.npy"), np.load(gen / "node_keys.npy")
    import pyarrow.parquet as pq

    active = pq.read_table(gen / "nodes.parquet", columns=["active"]).column("active").to_numpy(zero_copy_only=False)
    return set(keys[(types == H) & active.astype(bool)].tolist())


def run_mode(warm: bool, base: Path, rest: Path, work: Path, embed: str) -> dict:
    idx = work / ("warm" if warm else "cold")
    if idx.exists():
        shutil.rmtree(idx)
    cfg = NodeRAGConfig().with_overrides({"embed.spec": embed, "communities.warm_start": warm})
    build_index([base], idx, cfg, progress=False)
    gen0 = current_path(idx)
    before, h_before = np.load(gen0 / "communities.npy"), _h_keys(gen0)
    build_index([rest], idx, progress=False)
    t0 = time.perf_counter()
    report = compact_index(idx, progress=False)
    wall = time.perf_counter() - t0
    gen = current_path(idx)
    after = np.load(gen / "communities.npy")
    old = _groups(before, before.shape[0])
    kept = old & _groups(after, before.shape[0])
    h_kept = h_before & _h_keys(gen)
    stage = report.manifest["stages"]["communities"]
    return {"warm_start": bool(stage.get("warm_start", False)), "communities_before": len(old),
            "communities_kept": len(kept), "kept_share": round(len(kept) / max(len(old), 1), 4),
            "h_before": len(h_before), "h_kept": len(h_kept), "h_kept_share": round(len(h_kept) / max(len(h_before), 1), 4),
            "leiden_s": stage.get("leiden_s"), "compaction_s": round(wall, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passages", type=int, default=10_000)
    ap.add_argument("--insert-share", type=float, default=0.1)
    ap.add_argument("--embed", default="hash:384")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--work", type=Path, default=REPO / ".benchcache" / "leiden_warm")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args(argv)

    corpus = generate(args.passages, args.work, data=args.data)
    lines = Path(corpus.corpus).read_text("utf-8").splitlines(keepends=True)
    cut = int(round(len(lines) * (1 - args.insert_share)))
    base, rest = args.work / "base.jsonl", args.work / "rest.jsonl"
    base.write_text("".join(lines[:cut]), "utf-8")
    rest.write_text("".join(lines[cut:]), "utf-8")
    load_before = os.getloadavg()[0]
    modes = {name: run_mode(name == "warm", base, rest, args.work, args.embed) for name in ("warm", "cold")}
    res = {"passages": len(lines), "base_passages": cut, "inserted_passages": len(lines) - cut, "embed": args.embed,
           "modes": modes, "git": _git_revision(),
           "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                       "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "leiden_warm.json").write_text(json.dumps(res, indent=2) + "\n", "utf-8")
    w, c = modes["warm"], modes["cold"]
    md = [f"# Leiden warm start at compaction: {res['base_passages']} passages built, "
          f"{res['inserted_passages']} inserted, then compacted",
          "",
          f"`python benchmarks/bench_leiden_warm.py --passages {args.passages} --insert-share {args.insert_share} "
          f"--embed {args.embed}`; {res['machine']['cpus']} CPUs, load {res['machine']['load_before']} -> "
          f"{res['machine']['load_after']}; git {res['git']}. One run per mode.",
          "",
          "| start | base communities kept exactly | base H nodes kept | Leiden s | compaction s |",
          "|---|---|---|---|---|"]
    for name, m in modes.items():
        md.append(f"| {name} | {m['communities_kept']} / {m['communities_before']} ({m['kept_share']:.1%}) | "
                  f"{m['h_kept']} / {m['h_before']} ({m['h_kept_share']:.1%}) | {m['leiden_s']} | {m['compaction_s']} |")
    ratio = (w["leiden_s"] / c["leiden_s"]) if c["leiden_s"] else float("nan")
    md += ["", f"Warm / cold: Leiden time {ratio:.2f}x; communities kept {w['kept_share'] - c['kept_share']:+.1%}, "
               f"H nodes kept {w['h_kept_share'] - c['h_kept_share']:+.1%}.", ""]
    (args.out / "leiden_warm.md").write_text("\n".join(md), "utf-8")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
