"""Calibration of ``search.min_similarity``: best query-passage cosine of real questions vs junk queries.

    python benchmarks/query_similarity.py [--embed hash:384 default ...] [--passages 600] [--questions 100]

For each embedder, the first ``--questions`` MuSiQue questions and a fixed list of junk queries
(punctuation, symbols, random letters, off-topic phrases) are embedded, and each query's best
cosine similarity over the first ``--passages`` corpus passages (title + text) is taken: the
``best_similarity`` a ``RetrievalResult`` reports, restricted to T nodes. With ``--index DIR --index-questions FILE`` the
real questions of FILE and the junk queries are also retrieved on a built index, and the share the
result marks ``matched`` (a name match or best entry-point similarity >= ``search.min_similarity``)
is reported. Writes ``OUT/query_similarity.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data" / "musique"
JUNK = ["???", "!!! ... ,,,", "#$%^&*", "qwzx vbnm plok", "§¶•ªº", "zzzz", "— – …", "42", "asdf jkl;",
        "lorem ipsum dolor sit amet", "What?", "the of and", "how do I bake bread", "purple monkey dishwasher",
        "xkcd 927"]


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def main(argv: list[str] | None = None) -> int:
    from noderag.embed import make_embedder

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--embed", nargs="*", default=["hash:384", "hash:64", "default"])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--passages", type=int, default=600)
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--index", type=Path, default=None, help="a built index to measure `matched` on")
    ap.add_argument("--index-questions", type=Path, default=None, help="questions JSONL for --index")
    args = ap.parse_args(argv)
    with open(args.data / "corpus.jsonl", encoding="utf-8") as fh:
        corpus = [json.loads(line) for line in fh][: args.passages]
    with open(args.data / "questions.jsonl", encoding="utf-8") as fh:
        questions = [json.loads(line)["question"] for line in fh][: args.questions]
    texts = [(c.get("title") or "") + "\n" + c["text"] for c in corpus]
    rows = []
    for spec in args.embed:
        emb = make_embedder(spec)
        passages = _unit(emb.embed(texts))
        real = (_unit(emb.embed(questions)) @ passages.T).max(axis=1)
        junk = (_unit(emb.embed(JUNK)) @ passages.T).max(axis=1)
        pct = {f"p{p}": round(float(np.percentile(real, p)), 3) for p in (0, 5, 10, 25, 50)}
        rows.append({"embed": spec, "real": pct, "real_below_0.3": round(float(np.mean(real < 0.3)), 3),
                     "junk": {q: round(float(v), 3) for q, v in zip(JUNK, junk)},
                     "junk_median": round(float(np.median(junk)), 3), "junk_max": round(float(junk.max()), 3)})
        print(json.dumps(rows[-1]), file=sys.stderr)
    on_index = None
    if args.index is not None:
        import noderag

        index = noderag.Index.open(args.index)
        with open(args.index_questions, encoding="utf-8") as fh:
            iq = [json.loads(line)["question"] for line in fh]
        on_index = {"index": str(args.index), "embed": index.config.embed.spec,
                    "min_similarity": index.searcher().config.min_similarity}
        for name, group in (("real", iq), ("junk", JUNK)):
            res = index.retrieve_many(group)
            best = np.asarray([r.best_similarity or 0.0 for r in res])
            on_index[name] = {"queries": len(res), "matched": round(float(np.mean([r.matched for r in res])), 3),
                              "name_match": round(float(np.mean([bool(r.matched_names) for r in res])), 3),
                              "best_similarity_p50": round(float(np.median(best)), 3),
                              "unmatched": [r.query for r in res if not r.matched][:20]}
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"data": str(args.data), "passages": len(texts), "questions": len(questions), "rows": rows,
            "on_index": on_index}
    (args.out / "query_similarity.json").write_text(json.dumps(meta, indent=1) + "\n")
    lines = ["# Best query-passage cosine similarity: real questions vs junk queries", "",
             f"MuSiQue, first {len(questions)} questions against the first {len(texts)} passages; "
             "`python benchmarks/query_similarity.py`.", "",
             "| embedder | real p0 | real p5 | real p10 | real p25 | real p50 | real < 0.3 | junk median | junk max |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r["real"]
        lines.append(f"| {r['embed']} | {p['p0']} | {p['p5']} | {p['p10']} | {p['p25']} | {p['p50']} | "
                     f"{r['real_below_0.3']:.1%} | {r['junk_median']} | {r['junk_max']} |")
    lines += ["", "Junk values per query:", ""]
    for r in rows:
        lines.append(f"- {r['embed']}: " + ", ".join(f"`{q}` {v}" for q, v in r["junk"].items()))
    if on_index is not None:
        lines += ["", f"Retrieval on a built index (`{on_index['index']}`, embedder `{on_index['embed']}`, "
                      f"min_similarity {on_index['min_similarity']}): share of results marked `matched`.", "",
                  "| queries | n | matched | by a name match | best similarity p50 | unmatched examples |",
                  "|---|---:|---:|---:|---:|---|"]
        for name in ("real", "junk"):
            r = on_index[name]
            lines.append(f"| {name} | {r['queries']} | {r['matched']:.1%} | {r['name_match']:.1%} | "
                         f"{r['best_similarity_p50']} | " + ", ".join(f"`{q}`" for q in r["unmatched"][:8]) + " |")
    (args.out / "query_similarity.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
