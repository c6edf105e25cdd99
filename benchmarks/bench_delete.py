"""Delete benchmark: ``delete(B)`` on an index of A ∪ B against rebuilding A from scratch, side by side.

The alternative to deleting documents is rebuilding the index of the survivors. Both give
the same T/S/N/R graph (the invariant, checked here by key); the delete measured here is the
recomputing one (``update.segments = false``: a delete of base documents is otherwise done in
place, ``noderag.indexing.update.scrub``, measured by ``bench_update.py --base-delete-changes``), which
re-assembles the survivors from ``decompositions.parquet`` and reuses their T/S vectors, the rebuild
decomposes and embeds everything again. Also reports what keeping the decompositions
costs: the bytes of ``decompositions.parquet`` against the whole generation.

    python benchmarks/bench_delete.py [--corpus FILE] [--limit N] [--fraction 0.1] [--embed SPEC]
                                      [--repeats 3] [--out DIR]

Writes ``OUT/delete.json`` and ``OUT/delete.md`` (default ``benchmarks/results``); medians of
``--repeats`` runs, ratio = rebuild / delete wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def key_view(path: Path):
    """T/S/N/R nodes (type, key, text, name) and their structural edges, by key."""
    from noderag.store.tables import IndexStore

    with IndexStore.open(path) as st:
        types, keys = st.types, st.keys
        keep = np.isin(types, (0, 1, 2, 3))
        nodes = {(int(types[i]), int(keys[i]), st.texts[i], st.names[i]) for i in np.flatnonzero(keep)}
        g = st.graph.structural
        rows = np.repeat(np.arange(g.n), np.diff(g.indptr))
        m = keep[rows] & keep[g.indices]
        edges = sorted(zip(keys[rows[m]].tolist(), keys[g.indices[m]].tolist(), g.weights[m].tolist()))
        return nodes, edges


def run(corpus: Path, limit: int | None, fraction: float, embed: str, repeats: int, work: Path) -> dict:
    from noderag.config import NodeRAGConfig
    from noderag.indexing.update.delete import delete_documents
    from noderag.indexing.driver import build_index

    rows = [json.loads(x) for x in corpus.read_text("utf-8").splitlines() if x.strip()]
    if limit:
        rows = rows[:limit]
    rng = random.Random(0)
    drop = set(rng.sample(range(len(rows)), max(1, int(round(fraction * len(rows))))))
    all_path = work / "all.jsonl"
    a_path = work / "a.jsonl"
    all_path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    a_path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for i, r in enumerate(rows) if i not in drop),
                      encoding="utf-8")
    b_ids = [rows[i]["id"] for i in sorted(drop)]
    config = NodeRAGConfig().with_overrides({"embed.spec": embed})
    delete_s, rebuild_s, same = [], [], []
    manifest = None
    for _ in range(repeats):
        full, ref = work / "full", work / "ref"
        for p in (full, ref):
            if p.exists():
                shutil.rmtree(p)
        build_index([all_path], full, config, progress=False)
        t0 = time.perf_counter()
        rep = delete_documents(full, b_ids, config=config.with_overrides({"update.segments": False}))
        delete_s.append(time.perf_counter() - t0)
        manifest = rep.manifest
        t0 = time.perf_counter()
        build_index([a_path], ref, config, progress=False)
        rebuild_s.append(time.perf_counter() - t0)
        same.append(key_view(full) == key_view(ref))
    sizes = manifest["bytes"]
    dec = int(sizes.get("decompositions.parquet", 0))
    total = int(manifest["bytes_total"]) - int(sizes.get("llm_cache.sqlite", 0))
    d, r = statistics.median(delete_s), statistics.median(rebuild_s)
    return {
        "corpus": str(corpus), "passages": len(rows), "deleted": len(b_ids), "embedder": embed,
        "repeats": repeats, "delete_s": [round(x, 3) for x in delete_s], "rebuild_s": [round(x, 3) for x in rebuild_s],
        "delete_median_s": round(d, 3), "rebuild_median_s": round(r, 3), "ratio_rebuild_over_delete": round(r / d, 2),
        "invariant_holds": all(same), "decompositions_bytes": dec, "generation_bytes": total,
        "decompositions_share": round(dec / total, 4),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}",
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def to_markdown(res: dict) -> str:
    return "\n".join([
        "# Delete benchmark",
        "",
        f"{res['passages']} passages of `{res['corpus']}`, {res['deleted']} deleted (seeded sample); embedder "
        f"`{res['embedder']}`; {res['machine']}; load average {res['load_average']}.",
        "",
        "| operation | median wall s | runs |",
        "|---|---|---|",
        f"| delete(B) on the index of A ∪ B | {res['delete_median_s']} | {res['delete_s']} |",
        f"| rebuild A from scratch | {res['rebuild_median_s']} | {res['rebuild_s']} |",
        "",
        f"Ratio rebuild / delete: **{res['ratio_rebuild_over_delete']}×**. Same T/S/N/R nodes and edges by key: "
        f"{res['invariant_holds']}.",
        "",
        f"`decompositions.parquet` (kept so deletes can re-assemble the survivors): {res['decompositions_bytes']:,} "
        f"bytes, {100 * res['decompositions_share']:.1f}% of the generation ({res['generation_bytes']:,} bytes).",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=Path("/work/shared/data/musique/corpus.jsonl"))
    ap.add_argument("--limit", type=int, default=None, help="first N passages only")
    ap.add_argument("--fraction", type=float, default=0.1, help="share of the passages deleted")
    ap.add_argument("--embed", default="default", help="embedder spec")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = ap.parse_args(argv)
    if not args.corpus.is_file():
        ap.error(f"--corpus {args.corpus}: not found")
    with tempfile.TemporaryDirectory(prefix="bench_delete_") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        res = run(args.corpus, args.limit, args.fraction, args.embed, args.repeats, work)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "delete.json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    (args.out / "delete.md").write_text(to_markdown(res), encoding="utf-8")
    print(to_markdown(res), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
