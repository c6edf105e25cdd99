"""A static model's T and S vectors side by side: every chunk and unit text tokenized on its own (the build's
path before) against each chunk tokenized once, cut into pieces at its units' ends, and the units pooled from
their chunk's pieces (``embed_pieces_resumable``, the build's path now).

    python benchmarks/bench_static_units.py --corpus DEV/musique/corpus.jsonl --passages 2000

The passages are decomposed as an ``nlp`` build does (one chunk per passage, units with their "Title: "
prefix where the build adds it; not timed). CPU-seconds (all threads) and wall of each path, median of
``--repeats``, alternating, with the load average; the ratio; how many units were pooled from their chunk;
the largest difference between the two paths' vectors (0: bit for bit) and, for every pooled unit, whether
its token ids equal those of tokenizing its text alone. Writes ``OUT/static_units.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from noderag.config import DecomposeConfig
from noderag.embed import make_embedder
from noderag.indexing.decompose.base import ChunkInput
from noderag.indexing.decompose.nlp import NLPDecomposer, unit_prefix
from noderag.indexing.embedding import _exact_spans, embed_pieces_resumable

REPO = Path(__file__).resolve().parents[1]


def load(corpus: Path, n: int) -> tuple[list[str], list[str], np.ndarray, list[str | None]]:
    """Chunks (passages), their units, each unit's chunk, and each chunk's unit prefix."""
    with open(corpus, encoding="utf-8") as fh:
        rows = [json.loads(line) for _, line in zip(range(n), fh)]
    dec = NLPDecomposer(DecomposeConfig())
    out = dec.decompose([ChunkInput(k, r["text"], r.get("title")) for k, r in enumerate(rows)])
    chunks = [r["text"] for r in rows]
    units = [u.text for d in out for u in d.units]
    unit_chunk = np.array([k for k, d in enumerate(out) for _ in d.units], dtype=np.int64)
    prefixes = [unit_prefix(r["title"]) if r.get("title") else None for r in rows]
    return chunks, units, unit_chunk, prefixes


def timed(fn) -> tuple[float, float, object]:
    c, w = time.process_time(), time.perf_counter()
    out = fn()
    return time.process_time() - c, time.perf_counter() - w, out


def ids_agree(emb, chunks, units, unit_chunk, prefixes) -> tuple[int, int]:
    """(pooled units, of them those whose ids from the pieces equal the ids of their text alone)."""
    pooled = agree = 0
    for c in range(len(chunks)):
        mine = np.flatnonzero(unit_chunk == c)
        spans, heads, where = _exact_spans(chunks[c], [units[u] for u in mine.tolist()], prefixes[c])
        pieces, _, span_pieces = emb._pieces([chunks[c]], [spans], [heads])
        ids = emb.token_ids(pieces)
        for (h, a, b), k in zip(span_pieces, where):
            if a >= 0:
                got = np.concatenate(emb.token_ids([h[:-1]]) + ids[a:b]) if h else np.concatenate(ids[a:b])
                pooled += 1
                agree += bool(np.array_equal(got, emb.token_ids([units[mine[k]]])[0]))
    return pooled, agree


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, required=True, help="corpus.jsonl of {id, title, text}")
    ap.add_argument("--passages", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    chunks, units, unit_chunk, prefixes = load(args.corpus, args.passages)
    emb = make_embedder("static:wordllama")
    bs = 1024  # embed.batch_size: chunks per batch in the build
    load0 = os.getloadavg()[0]
    alone_runs, piece_runs = [], []
    for _ in range(args.repeats):
        alone_runs.append(timed(lambda: emb.embed(chunks + units)))
        piece_runs.append(timed(lambda: embed_pieces_resumable(emb, chunks, units, unit_chunk, prefixes, None,
                                                               batch_size=bs)))
    alone, (cv, uv, pooled) = alone_runs[-1][2], piece_runs[-1][2]
    n_pooled, n_agree = ids_agree(emb, chunks, units, unit_chunk, prefixes)
    med = lambda runs, k: statistics.median(r[k] for r in runs)  # noqa: E731
    res = {"passages": len(chunks), "units": len(units), "repeats": args.repeats, "corpus": args.corpus.parent.name,
           "alone_cpu_s": round(med(alone_runs, 0), 3), "alone_wall_s": round(med(alone_runs, 1), 3),
           "pieces_cpu_s": round(med(piece_runs, 0), 3), "pieces_wall_s": round(med(piece_runs, 1), 3),
           "units_pooled_from_chunk": pooled, "pooled_ids_equal_alone": n_agree, "pooled_checked": n_pooled,
           "max_abs_diff": float(np.abs(np.vstack([cv, uv]) - alone).max()),
           "load_before_after": [round(load0, 2), round(os.getloadavg()[0], 2)],
           "machine": f"{os.cpu_count()} CPUs, {platform.platform()}",
           "command": f"python benchmarks/bench_static_units.py --corpus DEV/{args.corpus.parent.name}/corpus.jsonl "
                      f"--passages {args.passages} --repeats {args.repeats}"}
    res["cpu_ratio"] = round(res["alone_cpu_s"] / max(res["pieces_cpu_s"], 1e-9), 2)
    res["wall_ratio"] = round(res["alone_wall_s"] / max(res["pieces_wall_s"], 1e-9), 2)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "static_units.json").write_text(json.dumps(res, indent=1) + "\n")
    n = len(chunks) + len(units)
    md = ["# Static model: units pooled from their chunk's tokens vs every text tokenized alone", "",
          f"`{res['command']}`", "",
          f"{res['passages']:,} passages decomposed as an nlp build does: {res['units']:,} units, {n:,} vectors. "
          f"Median of {args.repeats} (alternating); {res['machine']}, load {res['load_before_after'][0]} -> "
          f"{res['load_before_after'][1]} (shared machine).", "",
          "| | pieces (now) | each text alone (before) |", "|---|---:|---:|",
          f"| CPU-s (all threads) | {res['pieces_cpu_s']} | {res['alone_cpu_s']} |",
          f"| wall s | {res['pieces_wall_s']} | {res['alone_wall_s']} |",
          f"| vectors per CPU-s | {n / res['pieces_cpu_s']:,.0f} | {n / res['alone_cpu_s']:,.0f} |", "",
          f"Each text alone takes {res['cpu_ratio']}x the CPU-seconds ({res['wall_ratio']}x the wall). "
          f"{pooled:,} of {res['units']:,} units were pooled from their chunk's pieces (the rest differ from "
          f"their span, e.g. in whitespace, and were embedded alone); the token ids of {n_agree:,} of "
          f"{n_pooled:,} pooled units equal those of their text alone, and the largest difference between the "
          f"two paths' vectors is {res['max_abs_diff']:.1e}.", ""]
    (args.out / "static_units.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
