"""What a query's ``prepare`` (query entities, name matches, BM25 entry points, seeds) and ``bridges`` phases cost,
this package beside an earlier one, and whether they rank alike.

Usage::

    python benchmarks/bench_prepare.py --index DIR --questions Q.jsonl --before-package DIR [--limit 200]
        [--repeats 3] [--out FILE]

Per question (best of ``--repeats``, the two packages interleaved per question, thread CPU time as
``bench_search_cost.py`` measures phases): the ``prepare`` and ``bridges`` phases and the whole query, and, inside
``prepare``, the name matching and the BM25 entry points alone. Then, per question, whether the two packages
return the same passages with the same scores, the same nodes and the same context, and each package's
recall@2/@5 and all-gold@8 over the questions' ``supporting_ids``.

``--corpus FILE`` (JSONL: id, title, text) adds the BM25 entry points at that corpus's scale without an index:
the postings of the question terms only, with the impacts the whole corpus gives them (passage lengths over
every term, document frequencies over every passage), node ids spaced ``--node-spacing`` apart as a built index
spaces its passages; then, per question, the BM25 sums of :meth:`LexicalIndex.term_scores` and the ``k`` best
by this package's :func:`~noderag.search.lexical.top_scored` and the before package's.

Writes ``--out`` (JSON) and the same name with ``.md``.
"""

from __future__ import annotations

import argparse
from array import array
import importlib
import json
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_retrieval import _git_revision, load_jsonl  # noqa: E402
from bench_search_cost import per_stage  # noqa: E402

import noderag  # noqa: E402
from noderag.search import Searcher  # noqa: E402
from noderag.search.entities import hash64  # noqa: E402
from noderag.search.lexical import LexicalIndex, passage_terms, titled, top_scored  # noqa: E402
from noderag.search.metrics import percentile_ms  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _before(folder: Path, index_dir: Path):
    sys.path.insert(0, str(folder))
    old = importlib.import_module("noderag_before")
    importlib.import_module("noderag_before.search")
    return old.search.Searcher(old.Index.open(index_dir), old.search.SearchConfig())


def _inner(searchers: dict, questions: list[str], repeats: int) -> dict[str, dict[str, np.ndarray]]:
    """Per searcher, the thread CPU time of its name matching and of its BM25 entry points, per question (best of
    ``repeats``, interleaved)."""
    out = {name: {"names": np.full(len(questions), np.inf), "bm25": np.full(len(questions), np.inf)}
           for name in searchers}
    for i, q in enumerate(questions):
        for _ in range(repeats):
            for name, s in searchers.items():
                ents = s.query_entities(q)
                t0 = time.thread_time()
                s.matcher.match(ents, q, limit=s.config.max_name_matches)
                t1 = time.thread_time()
                s._lexical_hits(sorted(set(passage_terms(q))))
                t2 = time.thread_time()
                out[name]["names"][i] = min(out[name]["names"][i], t1 - t0)
                out[name]["bm25"][i] = min(out[name]["bm25"][i], t2 - t1)
    return out


def question_postings(corpus: Path, terms: set[str], spacing: int, k1: float = 1.2, b: float = 0.75
                      ) -> tuple[LexicalIndex, int]:
    """A BM25 index over ``corpus`` holding the postings of ``terms`` only, with the impacts of the whole corpus
    (as :func:`noderag.search.lexical.lexical_arrays` computes them), bound to its passages."""
    vocab = {t: i for i, t in enumerate(sorted(terms))}
    rows, cols, tfs, dls = array("q"), array("q"), array("q"), array("q")  # flat: tens of millions of pairs
    with open(corpus, encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            row = json.loads(line)
            toks = passage_terms(titled(row.get("text"), row.get("title")) or "")
            dls.append(len(toks))
            for t, c in Counter(x for x in toks if x in vocab).items():
                rows.append(n)
                cols.append(vocab[t])
                tfs.append(c)
    r, c = np.frombuffer(rows, np.int64), np.frombuffer(cols, np.int64)
    tf, dl = np.frombuffer(tfs, np.int64).astype(np.float64), np.frombuffer(dls, np.int64).astype(np.float64)
    df = np.bincount(c, minlength=len(vocab)).astype(np.float64)
    idf = np.log1p((dl.size - df + 0.5) / (df + 0.5))
    impact = (idf[c] * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl[r] / max(float(dl.mean()), 1e-9))))
    impact = impact.astype(np.float32)
    term_hash = np.asarray([hash64(t) for t in vocab], dtype=np.uint64)
    by_hash = np.argsort(term_hash, kind="stable")
    rank = np.empty(len(vocab), np.int64)
    rank[by_hash] = np.arange(len(vocab))
    node = (r * spacing).astype(np.int32)
    order = np.lexsort((node, -impact, rank[c]))
    ptr = np.zeros(len(vocab) + 1, np.int64)
    np.cumsum(np.bincount(rank[c], minlength=len(vocab)), out=ptr[1:])
    lex = LexicalIndex({"lex_term_hash": term_hash[by_hash], "lex_post_ptr": ptr, "lex_post_node": node[order],
                        "lex_post_weight": impact[order]})
    lex.bind_passages(np.arange(dl.size, dtype=np.int64) * spacing)
    return lex, dl.size


def bm25_at_scale(args, questions: list[str]) -> dict:
    """Thread CPU time of the BM25 sums and of the ``k`` best per question (best of ``--repeats``), this package's
    top-k beside the before package's, over :func:`question_postings` of ``--corpus``."""
    sys.path.insert(0, str(args.before_package))
    old_top = importlib.import_module("noderag_before.search.lexical").top_scored
    terms = [set(passage_terms(q)) for q in questions]
    lex, n = question_postings(args.corpus, set().union(*terms), args.node_spacing)
    k = 10
    best = {key: np.full(len(terms), np.inf) for key in ("sums", "top_ours", "top_before")}
    touched = []
    for rep in range(args.repeats):
        for i, t in enumerate(terms):
            t0 = time.thread_time()
            ids, scores = lex.term_scores(t)
            t1 = time.thread_time()
            top_scored(ids, scores, k)
            t2 = time.thread_time()
            old_top(ids, scores, k)
            t3 = time.thread_time()
            for key, v in (("sums", t1 - t0), ("top_ours", t2 - t1), ("top_before", t3 - t2)):
                best[key][i] = min(best[key][i], v)
            if rep == 0:
                touched.append(ids.size)
    out = {key: {"p50_ms": round(percentile_ms(v, 50), 3), "p95_ms": round(percentile_ms(v, 95), 3)}
           for key, v in best.items()}
    return {"corpus": str(args.corpus), "passages": n, "terms": len(set().union(*terms)), "k": k,
            "passages_scored_p50": float(np.percentile(touched, 50)),
            "passages_scored_p95": float(np.percentile(touched, 95)), **out}


def _same(a, b) -> bool:
    return (a.passages == b.passages and a.passage_scores == b.passage_scores and a.context == b.context
            and [(n.id, n.score) for n in a.nodes] == [(n.id, n.score) for n in b.nodes])


def measure(args) -> dict:
    questions = [r["question"] for r in load_jsonl(args.questions)[: args.limit]]
    ours = Searcher(noderag.Index.open(args.index))
    searchers = {"ours": ours, "before": _before(args.before_package, args.index)}
    qvecs = ours.embed(questions)
    for s in searchers.values():  # warm-up: mapped pages, title links
        for q, v in zip(questions[:5], qvecs[:5]):
            s.retrieve(q, query_vector=v)
    phases, raw = per_stage(searchers, questions, qvecs, args.repeats)
    inner = _inner(searchers, questions, args.repeats)
    golds = [set(r.get("supporting_ids") or ()) for r in load_jsonl(args.questions)[: args.limit]]
    differ, hits = [], {name: [] for name in searchers}
    for i, (q, v) in enumerate(zip(questions, qvecs)):
        got = {name: s.retrieve(q, query_vector=v) for name, s in searchers.items()}
        if not _same(got["ours"], got["before"]):
            differ.append(i)
        for name, res in got.items():
            labels, gold = [str(p) for p in res.passages], golds[i]
            if gold:
                hits[name].append([len(gold & set(labels[:2])) / len(gold), len(gold & set(labels[:5])) / len(gold),
                                   float(gold <= set(labels[:8]))])
    recall = {name: dict(zip(("recall@2", "recall@5", "all_gold@8"), np.round(np.mean(h, axis=0), 4).tolist()))
              for name, h in hits.items() if h}
    rows = {}
    for phase in ("prepare", "names", "bm25", "bridges"):
        per = {name: (inner[name][phase] if phase in ("names", "bm25") else raw[name].get(phase)) for name in searchers}
        if any(v is None for v in per.values()):
            continue
        rows[phase] = {name: {"p50_ms": round(percentile_ms(v, 50), 3), "p95_ms": round(percentile_ms(v, 95), 3)}
                       for name, v in per.items()}
        rows[phase]["p50_ratio"] = round(rows[phase]["ours"]["p50_ms"] / max(rows[phase]["before"]["p50_ms"], 1e-9), 3)
        rows[phase]["p95_ratio"] = round(rows[phase]["ours"]["p95_ms"] / max(rows[phase]["before"]["p95_ms"], 1e-9), 3)
    whole = {name: sum(raw[name].values()) for name in searchers}
    rows["all phases"] = {name: {"p50_ms": round(percentile_ms(v, 50), 3), "p95_ms": round(percentile_ms(v, 95), 3)}
                          for name, v in whole.items()}
    manifest = getattr(ours.store, "manifest", {}) or {}
    return {"index": str(args.index), "counts": manifest.get("counts"), "n_questions": len(questions),
            "repeats": args.repeats,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}",
            "load_average": [round(x, 2) for x in os.getloadavg()], "git_revision": _git_revision(),
            "command": "python benchmarks/bench_prepare.py " + " ".join(args.argv), "phases": rows,
            "rankings_differ": len(differ), "differing_questions": differ[:50], "recall": recall,
            "all_phases_p50": phases}


def markdown(out: dict) -> list[str]:
    lines = [f"# prepare and bridges per query: {out.get('index', out.get('bm25_at_scale', {}).get('corpus'))}", "",
             f"`{out['command']}`; {out['machine']}; load average {out['load_average']}; git {out['git_revision']}.", ""]
    if "phases" in out:
        lines += _phase_lines(out)
    sc = out.get("bm25_at_scale")
    if sc:
        lines += [f"BM25 entry points over {sc['passages']} passages ({sc['corpus']}, the postings of the questions' "
                  f"{sc['terms']} terms; a query sums {sc['passages_scored_p50']:.0f} passages at p50, "
                  f"{sc['passages_scored_p95']:.0f} at p95), thread CPU, best of the repeats:", "",
                  "| step | p50 ms | p95 ms |", "|---|---|---|"]
        for key in ("sums", "top_ours", "top_before"):
            lines.append(f"| {key} | {sc[key]['p50_ms']} | {sc[key]['p95_ms']} |")
        lines.append("")
    return lines


def _phase_lines(out: dict) -> list[str]:
    lines = [f"{out['n_questions']} questions, best of {out['repeats']} per question, thread CPU time, the two "
             "packages interleaved per question.", "",
             "| phase | ours p50 ms | ours p95 ms | before p50 ms | before p95 ms | p50 ratio | p95 ratio |",
             "|---|---|---|---|---|---|---|"]
    for phase, r in out["phases"].items():
        o, b = r["ours"], r["before"]
        lines.append(f"| {phase} | {o['p50_ms']} | {o['p95_ms']} | {b['p50_ms']} | {b['p95_ms']} | "
                     f"{r.get('p50_ratio', '')} | {r.get('p95_ratio', '')} |")
    lines += ["", f"Rankings (passages, scores, nodes, context) that differ from the before package's: "
              f"{out['rankings_differ']} of {out['n_questions']}.", ""]
    for name, r in out.get("recall", {}).items():
        lines.append(f"- {name}: " + ", ".join(f"{k} {v}" for k, v in r.items()))
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", type=Path, help="the index whose phases are timed (else only --corpus)")
    ap.add_argument("--questions", required=True, type=Path)
    ap.add_argument("--before-package", required=True, type=Path, metavar="DIR")
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--corpus", type=Path, default=None, metavar="FILE",
                    help="also time the BM25 entry points over this corpus (JSONL) without an index")
    ap.add_argument("--node-spacing", type=int, default=21, help="node ids between passages (--corpus)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "search_prepare_issue45.json")
    args = ap.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    if not (args.index or args.corpus):
        ap.error("give --index, --corpus or both")
    out = measure(args) if args.index else {"command": "python benchmarks/bench_prepare.py " + " ".join(args.argv),
                                            "machine": f"{platform.machine()}, {os.cpu_count()} cores, python "
                                                       f"{platform.python_version()}", "git_revision": _git_revision()}
    if args.corpus:
        out["bm25_at_scale"] = bm25_at_scale(args, [r["question"] for r in load_jsonl(args.questions)[: args.limit]])
        out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    args.out.with_suffix(".md").write_text("\n".join(markdown(out)))
    print("\n".join(markdown(out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
