"""Question answering benchmark: noderag vs dense RAG, answered by the same LLM, scored like the papers.

Usage::

    python benchmarks/bench_qa.py --data ../shared/data/musique --llm openai:MODEL@http://127.0.0.1:8000/v1 \\
        [--judge SPEC] [--limit N] [--methods noderag,dense] [--out FILE]

Every question is retrieved by each method, then answered with one call of the same LLM, the same
answer prompt (``noderag.llm.answer``) and the same context budget (``--context-tokens``, default the
search default): noderag's context is its budgeted node context; dense's is the top passages (title +
text, exact cosine over the index's embedder, ``noderag.search.baselines.DenseRetriever``) added in rank
order until the same token count. Scores: SQuAD-style exact match and token F1 against ``answer`` and
``answer_aliases`` (``noderag.eval``) and, with ``--judge``, LLM-judged accuracy (correct / incorrect).

Per question the JSON records context tokens, prompt and completion tokens, latency, attempts and
whether the call was a cache hit; per method the totals. Every LLM call goes through a SQLite cache
(``--cache``, default next to the index), so an interrupted run continues where it stopped and a
finished one reruns without calls.

The noderag index is built in ``nlp`` mode with the default embedder (``--build-llm SPEC``: LLM mode,
the paper's setting) or reused when it holds a finished build of the same corpus. ``--subset`` keeps
only the supporting passages of the selected questions plus ``--distractors`` seeded random passages
(a quick development sample). Writes ``FILE`` (JSON) and ``FILE`` with ``.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_retrieval import _git_revision, load_jsonl  # noqa: E402

from noderag.eval import exact_match, judge_request, parse_judgement, token_f1  # noqa: E402
from noderag.llm import make_llm  # noqa: E402
from noderag.llm.answer import answer_many, retrieval_context  # noqa: E402
from noderag.llm.options import parse_llm_options  # noqa: E402
from noderag.search import SearchConfig, Searcher  # noqa: E402
from noderag.search.baselines import DenseRetriever, top_k_rows  # noqa: E402
from noderag.tokenize import count_tokens  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
METHODS = ("noderag", "dense")
BATCH = 16  # questions per LLM batch: an interruption loses at most one batch's uncached calls


def load_questions(data: Path, limit: int | None) -> list[dict]:
    """Questions with a gold answer; a row without ``question`` or ``answer`` is an error naming the line."""
    rows = load_jsonl(data / "questions.jsonl")
    for i, q in enumerate(rows):
        for key in ("question", "answer"):
            if not isinstance(q.get(key), str) or not q[key].strip():
                raise SystemExit(f"{data / 'questions.jsonl'}:{i + 1}: missing {key!r}")
    return rows[:limit] if limit else rows


def select_corpus(corpus: list[dict], questions: list[dict], distractors: int, seed: int) -> list[dict]:
    """Supporting passages of ``questions`` plus ``distractors`` seeded random others, in corpus order."""
    keep = {s for q in questions for s in q.get("supporting_ids", [])}
    others = [c["id"] for c in corpus if c["id"] not in keep]
    keep |= set(random.Random(seed).sample(others, min(distractors, len(others))))
    return [c for c in corpus if c["id"] in keep]


def passage_text(c: dict) -> str:
    return f"{c.get('title') or ''}\n{c['text']}".strip()


def open_index(corpus: list[dict], index_dir: Path, build_llm: str | None, build_options: dict):
    """Open the index in ``index_dir``, (re)building it when its corpus differs from ``corpus``."""
    import noderag
    from noderag.config import NodeRAGConfig
    from noderag.graph.storage import FormatVersionError
    from noderag.store.tables import IndexNotFoundError

    index_dir.mkdir(parents=True, exist_ok=True)
    corpus_path = index_dir.parent / f"{index_dir.name}.corpus.jsonl"
    body = "".join(json.dumps(c, ensure_ascii=False, sort_keys=True) + "\n" for c in corpus)
    digest = hashlib.sha256((body + f"|{build_llm}|{sorted(build_options.items())}").encode()).hexdigest()
    stamp = index_dir / "bench_corpus.sha256"
    if stamp.is_file() and stamp.read_text().strip() == digest:
        try:
            return noderag.Index.open(index_dir), None
        except (IndexNotFoundError, FormatVersionError):  # unfinished, or an older format: rebuild
            pass
    if any(index_dir.iterdir()):
        import shutil

        shutil.rmtree(index_dir)
    corpus_path.write_text(body, encoding="utf-8")
    config = None
    if build_llm:
        ov = {"llm.spec": build_llm, "decompose.method": "llm"}
        ov.update({f"llm.{k}": v for k, v in build_options.items()})
        config = NodeRAGConfig().with_overrides(ov)
    t0 = time.perf_counter()
    noderag.build([str(corpus_path)], str(index_dir), config=config, progress=True)
    build_s = time.perf_counter() - t0
    stamp.write_text(digest + "\n")
    return noderag.Index.open(index_dir), build_s


def dense_contexts(corpus: list[dict], embedder, qvecs: np.ndarray, budget: int) -> list[tuple[list, list]]:
    """Per question: ([(id, text)] of the top passages up to ``budget`` tokens, ranked passage ids)."""
    ids = [c["id"] for c in corpus]
    texts = [" ".join(passage_text(c).split()) for c in corpus]
    dense = DenseRetriever(ids, np.asarray(embedder.embed([passage_text(c) for c in corpus]), np.float32))
    idx, _ = top_k_rows(dense.scores(qvecs), min(len(ids), 64))
    out = []
    for row in idx.tolist():
        pairs: list[tuple[str, str]] = []
        used = 0
        for rank, j in enumerate(row, 1):
            line = f"[{rank}] {texts[j]}"
            n = count_tokens(line) + 1
            if used + n > budget:
                if not pairs:  # the best passage alone exceeds the budget: keep its prefix
                    from noderag.tokenize import default_tokenizer

                    pairs.append((str(rank), default_tokenizer().truncate(texts[j], max(budget - 8, 1))))
                break
            pairs.append((str(rank), texts[j]))
            used += n
        out.append((pairs, [ids[j] for j in row]))
    return out


def context_tokens(pairs: list[tuple[str, str]]) -> int:
    """Tokens of the context exactly as the answer prompt shows it."""
    return count_tokens("\n".join(f"[{cid}] {text}" for cid, text in pairs)) if pairs else 0


def answer_all(llm, items: list[tuple[str, list]], label: str) -> list:
    """Answer in batches of BATCH (each batch's successes are cached as they land)."""
    out = []
    for start in range(0, len(items), BATCH):
        out += answer_many(llm, items[start:start + BATCH], stage=f"answer:{label}")
        print(f"  {label}: answered {len(out)}/{len(items)}", file=sys.stderr)
    return out


def judge_all(judge, questions: list[dict], answers: list[str], label: str) -> list[float | None]:
    """LLM verdicts (1/0, None when the judge call failed) in batches."""
    verdicts: list[float | None] = []
    for start in range(0, len(questions), BATCH):
        reqs = [judge_request(q["question"], gold_answers(q), a, id=q.get("id"))
                for q, a in zip(questions[start:start + BATCH], answers[start:start + BATCH])]
        verdicts += [parse_judgement(r) for r in judge.run(reqs, stage=f"judge:{label}")]
    return verdicts


def gold_answers(q: dict) -> list[str]:
    return [q["answer"], *[a for a in q.get("answer_aliases") or [] if isinstance(a, str) and a.strip()]]


def summarise(records: list[dict], ledger_stage) -> dict:
    """Per-method totals: scores, mean tokens, failures, cache hits, tokens/s of the calls made."""
    n = len(records)
    judged = [r["judge"] for r in records if r.get("judge") is not None]
    row = {
        "questions": n,
        "exact_match": round(float(np.mean([r["em"] for r in records])), 4) if n else 0.0,
        "f1": round(float(np.mean([r["f1"] for r in records])), 4) if n else 0.0,
        "judge_accuracy": round(float(np.mean(judged)), 4) if judged else None,
        "judged": len(judged),
        "failed_answers": sum(r["error"] is not None for r in records),
        "mean_context_tokens": round(float(np.mean([r["context_tokens"] for r in records])), 1) if n else 0.0,
        "mean_prompt_tokens": round(float(np.mean([r["prompt_tokens"] for r in records])), 1) if n else 0.0,
        "mean_completion_tokens": round(float(np.mean([r["completion_tokens"] for r in records])), 1) if n else 0.0,
        "median_latency_s": round(float(np.median([r["latency_s"] for r in records])), 3) if n else 0.0,
        "cache_hits": sum(r["cached"] for r in records),
        "mean_retrieval_ms": round(float(np.mean([r["retrieval_ms"] for r in records])), 2) if n else 0.0,
    }
    st = ledger_stage
    if st is not None and st.wall_s > 0 and st.completion_tokens:
        row["completion_tokens_per_s"] = round(st.completion_tokens / st.wall_s, 1)
        row["total_tokens_per_s"] = round(st.total_tokens / st.wall_s, 1)
    else:
        row["completion_tokens_per_s"] = row["total_tokens_per_s"] = None  # every call was a cache hit
    return row


def write_markdown(path: Path, out: dict) -> None:
    cols = ["questions", "exact_match", "f1", "judge_accuracy", "failed_answers", "mean_context_tokens",
            "mean_prompt_tokens", "mean_completion_tokens", "median_latency_s", "completion_tokens_per_s",
            "cache_hits"]
    lines = [f"# QA benchmark: {out['dataset']}", "",
             f"{out['n_questions']} questions, {out['n_passages']} passages; answer LLM `{out['llm']}`"
             + (f", judge `{out['judge']}`" if out["judge"] else ", no judge")
             + f"; context budget {out['context_budget']} tokens; index built in {out['index_mode']} mode; "
             f"{out['machine']}.", "",
             "Same answer prompt and budget for every method; EM/F1 are SQuAD-style against the answer and its "
             "aliases (`noderag.eval`). Tokens/s are over the LLM calls this run made (none when all were cache "
             "hits).", "",
             "| method | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, row in out["methods"].items():
        lines.append(f"| {name} | " + " | ".join("" if row.get(c) is None else str(row.get(c)) for c in cols) + " |")
    lines += ["", "## Per question", "", "| id | method | gold | answer | EM | F1 | judge | ctx tok | prompt | "
              "completion | latency s | cached | error |", "|---" * 13 + "|"]
    for r in out["records"]:
        def cell(s) -> str:
            return str(s).replace("|", "/").replace("\n", " ")[:60]
        lines.append(f"| {cell(r['id'])} | {r['method']} | {cell(r['gold'][0])} | {cell(r['answer'])} | {r['em']:.0f} "
                     f"| {r['f1']:.2f} | {'' if r.get('judge') is None else int(r['judge'])} | {r['context_tokens']} "
                     f"| {r['prompt_tokens']} | {r['completion_tokens']} | {r['latency_s']:.2f} | {r['cached']} "
                     f"| {cell(r['error'] or '')} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, type=Path, help="folder with corpus.jsonl and questions.jsonl")
    ap.add_argument("--llm", required=True, metavar="SPEC", help="answer LLM (e.g. openai:MODEL@URL, vllm:PATH)")
    ap.add_argument("--llm-option", action="append", metavar="KEY=VALUE", help="answer LLM setting (repeatable)")
    ap.add_argument("--judge", metavar="SPEC", default=None, help="judge LLM (default: no judge)")
    ap.add_argument("--judge-option", action="append", metavar="KEY=VALUE", help="judge LLM setting (repeatable)")
    ap.add_argument("--limit", type=int, default=None, metavar="N", help="first N questions")
    ap.add_argument("--methods", default="noderag,dense", help="comma-separated subset of noderag,dense")
    ap.add_argument("--out", type=Path, default=None, help="JSON output (default benchmarks/results/qa_<name>.json)")
    ap.add_argument("--context-tokens", type=int, default=None, metavar="N",
                    help=f"context budget of every method (default {SearchConfig().context_tokens})")
    ap.add_argument("--index", type=Path, default=None, help="index directory (default .benchcache/qa/<name>)")
    ap.add_argument("--build-llm", metavar="SPEC", default=None, help="build the noderag index in LLM mode")
    ap.add_argument("--build-llm-option", action="append", metavar="KEY=VALUE", help="index LLM setting")
    ap.add_argument("--subset", action="store_true",
                    help="corpus = supporting passages of the selected questions + --distractors others")
    ap.add_argument("--distractors", type=int, default=50, metavar="K")
    ap.add_argument("--cache", type=Path, default=None, help="LLM cache file (default <index>.llm_cache.sqlite)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        ap.error(f"--methods: unknown {bad}; choose from {METHODS}")
    if args.limit is not None and args.limit < 1:
        ap.error("--limit must be >= 1")
    data = args.data.resolve()
    for f in ("corpus.jsonl", "questions.jsonl"):
        if not (data / f).is_file():
            ap.error(f"--data {data}: missing {f}")
    try:
        llm_opts = parse_llm_options(args.llm_option)
        judge_opts = parse_llm_options(args.judge_option)
        build_opts = parse_llm_options(args.build_llm_option)
    except ValueError as exc:
        ap.error(str(exc))
    name = data.name
    questions = load_questions(data, args.limit)
    corpus = load_jsonl(data / "corpus.jsonl")
    if args.subset:
        corpus = select_corpus(corpus, questions, args.distractors, args.seed)
    tag = name + ("-subset" if args.subset else "") + (
        "-llm-" + hashlib.sha256(args.build_llm.encode()).hexdigest()[:8] if args.build_llm else "")
    index_dir = (args.index or REPO / ".benchcache" / "qa" / tag).resolve()
    out_path = args.out or REPO / "benchmarks" / "results" / f"qa_{name}.json"
    cache = (args.cache or index_dir.parent / f"{index_dir.name}.llm_cache.sqlite").resolve()

    index, build_s = open_index(corpus, index_dir, args.build_llm, build_opts)
    store = index.store if hasattr(index, "store") else index
    budget = args.context_tokens or SearchConfig().context_tokens
    searcher = Searcher(store, SearchConfig().replace(context_tokens=budget))
    queries = [q["question"] for q in questions]
    t0 = time.perf_counter()
    qvecs = searcher.embed(queries)
    embed_ms = 1e3 * (time.perf_counter() - t0) / len(queries)

    llm = make_llm(args.llm, cache_path=cache, **llm_opts)
    judge = make_llm(args.judge, cache_path=cache.with_suffix(".judge.sqlite"), **judge_opts) if args.judge else None
    records: list[dict] = []
    totals: dict[str, dict] = {}
    for method in methods:
        t0 = time.perf_counter()
        if method == "noderag":
            res = [searcher.retrieve(q, query_vector=v) for q, v in zip(queries, qvecs)]
            contexts = [retrieval_context(r) for r in res]
            ranked = [r.passages for r in res]
        else:
            dc = dense_contexts(corpus, searcher.embedder, qvecs, budget)
            contexts, ranked = [c for c, _ in dc], [r for _, r in dc]
        retrieval_ms = embed_ms + 1e3 * (time.perf_counter() - t0) / len(queries)
        answers = answer_all(llm, list(zip(queries, contexts)), method)
        verdicts = judge_all(judge, questions, [a.answer for a in answers], method) if judge else [None] * len(answers)
        rows = []
        for q, ctx, rk, a, v in zip(questions, contexts, ranked, answers, verdicts):
            gold = gold_answers(q)
            rows.append({
                "id": q.get("id"), "method": method, "question": q["question"], "gold": gold,
                "answer": a.answer, "error": a.error, "em": exact_match(a.answer, gold), "f1": round(token_f1(a.answer, gold), 4),
                "judge": v, "cited": a.cited, "invalid_citations": a.invalid_citations,
                "context_items": len(ctx), "context_tokens": context_tokens(ctx),
                "prompt_tokens": a.usage.prompt, "completion_tokens": a.usage.completion,
                "latency_s": round(a.latency_s, 3), "cached": a.cached, "attempts": a.attempts,
                "retrieval_ms": round(retrieval_ms, 2),
                "supporting_in_top5": (sum(s in rk[:5] for s in q.get("supporting_ids", []))
                                       / max(1, len(q.get("supporting_ids", [])))) if q.get("supporting_ids") else None,
            })
        records += rows
        totals[method] = summarise(rows, llm.ledger.stages.get(f"answer:{method}"))
        print(f"{method:8s} {totals[method]}", file=sys.stderr)

    manifest = getattr(store, "manifest", {})
    out = {
        "dataset": name, "n_questions": len(questions), "n_passages": len(corpus), "subset": args.subset,
        "llm": args.llm, "llm_options": llm_opts, "judge": args.judge, "context_budget": budget,
        "index_mode": "llm" if args.build_llm else "nlp", "index_build_s": None if build_s is None else round(build_s, 1),
        "index_tokens": manifest.get("tokens"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}",
        "git_revision": _git_revision(),
        "methods": totals,
        "ledger": {k: {"requests": v.requests, "failures": v.failures, "cache_hits": v.cache_hits,
                       "prompt_tokens": v.prompt_tokens, "completion_tokens": v.completion_tokens,
                       "wall_s": round(v.wall_s, 3)}
                   for led in ([llm.ledger] + ([judge.ledger] if judge else [])) for k, v in led.stages.items()},
        "records": records,
    }
    llm.close()
    if judge is not None:
        judge.close()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    write_markdown(out_path.with_suffix(".md"), out)
    print(f"wrote {out_path} and {out_path.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
