"""The static embedder's pooling side by side: a sparse bag-of-tokens product (what ``StaticEmbedder`` does)
against gathering every token's row and summing per text (``np.add.reduceat``, the first version).

    python benchmarks/bench_static_pool.py --corpus DEV/musique/corpus.jsonl --passages 5000

Both pool the same token ids of the first ``--passages`` passages, in batches of the embedder's
default size; CPU-seconds of the pooling alone and of the whole ``embed`` call (tokenizer included),
median of ``--repeats``, with the load average. The two give the same vectors (max abs difference
reported). Writes ``OUT/static_pool.json`` and ``.md``.
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

from noderag.embed import make_embedder
from noderag.embed.base import l2_normalize

REPO = Path(__file__).resolve().parents[1]


def gather_pool(table: np.ndarray, ids: list[np.ndarray]) -> np.ndarray:
    """The first version: the rows of every token gathered, then summed per text."""
    counts = np.fromiter((a.size for a in ids), dtype=np.int64, count=len(ids))
    out = np.zeros((len(ids), table.shape[1]), np.float32)
    nz = np.flatnonzero(counts)
    if nz.size:
        offsets = np.concatenate(([0], np.cumsum(counts[nz])[:-1]))
        out[nz] = np.add.reduceat(table[np.concatenate(ids)], offsets, axis=0) / counts[nz, None].astype(np.float32)
    return l2_normalize(out)


def timed(fn, repeats: int) -> tuple[float, object]:
    cpus, out = [], None
    for _ in range(repeats):
        c = time.process_time()
        out = fn()
        cpus.append(time.process_time() - c)
    return statistics.median(cpus), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, required=True, help="corpus.jsonl of {id, title, text}")
    ap.add_argument("--passages", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    with open(args.corpus, encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for _, line in zip(range(args.passages), fh)]
    emb = make_embedder("static:wordllama")
    bs = emb.batch_size
    batches = [emb.token_ids(texts[i : i + bs]) for i in range(0, len(texts), bs)]
    load0 = os.getloadavg()[0]
    sparse_s, sparse = timed(lambda: np.vstack([emb.embed(texts[i : i + bs]) for i in range(0, len(texts), bs)]),
                             args.repeats)
    tok_s, _ = timed(lambda: [emb.token_ids(texts[i : i + bs]) for i in range(0, len(texts), bs)], args.repeats)
    gather_s, gathered = timed(lambda: np.vstack([gather_pool(emb.table, ids) for ids in batches]), args.repeats)
    res = {"passages": len(texts), "tokens": int(sum(a.size for b in batches for a in b)), "batch_size": bs,
           "repeats": args.repeats, "corpus": args.corpus.parent.name,
           "whole_embed_sparse_cpu_s": round(sparse_s, 3), "tokenize_cpu_s": round(tok_s, 3),
           "pool_sparse_cpu_s": round(max(sparse_s - tok_s, 0.0), 3), "pool_gather_cpu_s": round(gather_s, 3),
           "whole_embed_gather_cpu_s": round(tok_s + gather_s, 3),
           "max_abs_diff": float(np.abs(sparse - gathered).max()),
           "load_before_after": [round(load0, 2), round(os.getloadavg()[0], 2)],
           "machine": f"{os.cpu_count()} CPUs, {platform.platform()}",
           "command": "python benchmarks/bench_static_pool.py " + " ".join(
               f"--{k} {v}" for k, v in (("corpus", f"DEV/{args.corpus.parent.name}/corpus.jsonl"),
                                         ("passages", args.passages), ("repeats", args.repeats)))}
    res["whole_embed_ratio"] = round(res["whole_embed_gather_cpu_s"] / max(res["whole_embed_sparse_cpu_s"], 1e-9), 2)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "static_pool.json").write_text(json.dumps(res, indent=1) + "\n")
    md = ["# Static embedder pooling: sparse product vs gather + reduceat", "", f"`{res['command']}`", "",
          f"{res['passages']:,} passages ({res['tokens']:,} tokens) in batches of {bs}; CPU-seconds, median of "
          f"{args.repeats}; {res['machine']}, load {res['load_before_after'][0]} -> {res['load_before_after'][1]} "
          "(shared machine).", "",
          "| | sparse product (now) | gather + reduceat (before) |", "|---|---:|---:|",
          f"| pooling CPU-s (whole minus tokenizer) | {res['pool_sparse_cpu_s']} | {res['pool_gather_cpu_s']} |",
          f"| whole embed CPU-s | {res['whole_embed_sparse_cpu_s']} | {res['whole_embed_gather_cpu_s']} |",
          f"| texts per CPU-s | {len(texts) / res['whole_embed_sparse_cpu_s']:,.0f} "
          f"| {len(texts) / res['whole_embed_gather_cpu_s']:,.0f} |", "",
          f"Whole embed: the gather version takes {res['whole_embed_ratio']}x the CPU-seconds. Same vectors: max abs "
          f"difference {res['max_abs_diff']:.1e} (float32 summation order).", ""]
    (args.out / "static_pool.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
