"""Update benchmark: inserts and deletes as delta segments against recomputing the whole index, side by side.

For each corpus size N (``scale_corpus``: the dev passages repeated with per-copy entity names) the
base index of the first N passages is built once; then, on a fresh copy of it each time, the next C
passages (C in ``--changes``) are inserted two ways, each in its own child process:

- ``segments``: the default, a delta segment beside the shared base (``noderag.indexing.update.delta``);
- ``rebuild``: ``update.segments = false``, every global stage recomputed over the whole index (what
  every insert did before segments).

Per run: wall and CPU seconds, peak RSS of the process tree, bytes the process wrote (``wchar`` of
``/proc/PID/io``) and bytes of files new to the index (the new generation's files that are not hard
links of the previous one's), and query p50 before and after (``scale_query --paired``: both indexes
timed interleaved in one process). Then the same C documents are deleted again from each copy.
Also: ``--deltas K`` inserts of 10 documents each, then query p50 with K deltas against the same
index compacted, and open + first query of both; with ``--retrieval``, recall on the dev samples of
build(half) + insert(other half) as a delta against build(all) and after ``compact --full``.

    python benchmarks/bench_update.py [--sizes 10000,100000] [--changes 10,100,1000] [--embed hash:384]
                                      [--deltas 10] [--retrieval musique,hotpotqa] [--out DIR] [--work DIR]

Writes ``OUT/NAME.json`` and ``OUT/NAME.md`` (default ``benchmarks/results/update.*``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_scale import REPO, run_child, run_query_child  # noqa: E402
from scale_corpus import DEFAULT_DATA, generate  # noqa: E402

_WRITE = """
import json, sys, time
from noderag.config import NodeRAGConfig
from noderag.indexing.driver import build_index
from noderag.indexing.update.delete import delete_documents
op, mode, idx, arg = sys.argv[1:5]
cfg = None if mode == "segments" else NodeRAGConfig().with_overrides({"update.segments": False})
t0 = time.perf_counter()
if op == "insert":
    rep = build_index([arg], idx, cfg, progress=False)
else:
    rep = delete_documents(idx, json.loads(open(arg).read()), config=cfg)
wall = time.perf_counter() - t0
io = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
print(json.dumps({"inner_wall_s": round(wall, 3), "wchar": int(io["wchar"]), "write_bytes": int(io["write_bytes"]),
                  "deltas": len(rep.manifest.get("deltas") or []),
                  "stages": {k: v.get("time_s") for k, v in rep.manifest.get("stages", {}).items()}}))
"""


def _lines(path: Path, start: int, stop: int, out: Path) -> Path:
    with open(path, "rb") as src, open(out, "wb") as dst:
        for i, line in enumerate(src):
            if i >= stop:
                break
            if i >= start:
                dst.write(line)
    return out


def _generation_files(idx: Path) -> dict[str, tuple[int, int]]:
    from noderag.store.generations import current_path

    gen = current_path(idx)
    return {p.relative_to(gen).as_posix(): (p.stat().st_ino, p.stat().st_size) for p in gen.rglob("*") if p.is_file()}


def _write_child(op: str, mode: str, idx: Path, arg: Path, log: Path, args) -> dict:
    """Run one insert or delete in a child process; its figures and the index bytes it added."""
    from noderag.store.tables import IndexStore

    with IndexStore.open(idx):  # pinned: the previous generation stays, so new files are told from shared ones
        before = {ino for ino, _ in _generation_files(idx).values()}
        r = run_child([sys.executable, "-c", _WRITE, op, mode, str(idx), str(arg)], log, args.max_seconds, None)
        after = _generation_files(idx)
    if r["ok"]:
        r.update(json.loads(r.pop("stdout").strip().splitlines()[-1]))
    r["new_index_bytes"] = sum(size for ino, size in after.values() if ino not in before)
    r["index_bytes"] = sum(size for _, size in after.values())
    return r


def _paired_p50(a: Path, b: Path, questions: Path, log: Path, args) -> dict:
    q = run_query_child([str(a), str(questions), "--paired", str(b), str(questions)], log, args)
    return {k: q.get(k) for k in ("p50_ms", "p50_cpu_ms", "p50_ratio", "p50_cpu_ratio", "ok", "reason")}


def _open_first(idx: Path, questions: Path, log: Path, args) -> dict:
    q = run_query_child([str(idx), str(questions)], log, args)
    return {k: q.get(k) for k in ("open_s", "first_retrieve_s", "open_plus_first_retrieve_s", "p50_ms", "ok")}


def _reused_base(base: Path, n: int, args) -> dict | None:
    """The build record of a kept base index of ``n`` documents without deltas (``--reuse-base``), else None."""
    from noderag.store.generations import current_path

    try:
        m = json.loads((current_path(base) / "manifest.json").read_text("utf-8"))
    except Exception:  # noqa: BLE001 - no usable base: build one
        return None
    if m.get("deltas") or (m.get("counts") or {}).get("documents") != n:
        return None
    print(f"== {n:,} passages: reusing the base in {base}", file=sys.stderr, flush=True)
    old = args.out / f"{args.name}.json"
    if old.is_file():
        for size in json.loads(old.read_text("utf-8")).get("sizes", []):
            if size.get("passages") == n and (size.get("build") or {}).get("ok"):
                return {**size["build"], "reused": True}
    return {"ok": True, "reused": True, "wall_s": None}


def _copy_index(src: Path, dst: Path, args) -> None:
    """A copy of an index to write into: hard links with ``--link-copies`` (a writer never changes a file of a
    committed generation in place: it writes new files and renames CURRENT), else a byte copy."""
    shutil.copytree(src, dst, copy_function=os.link if args.link_copies else shutil.copy2)


def bench_size(n: int, args, work: Path) -> dict:
    """Base build of ``n`` passages, then every change size both ways, then the many-deltas check."""
    extra = max(args.changes + [10 * args.deltas])
    sc = generate(n + extra, work, data=args.data)
    corpus_a = _lines(sc.corpus, 0, n, work / f"base-{n}.jsonl")
    questions = work / f"questions-{n}.jsonl"
    qs = sc.questions.read_text("utf-8").splitlines()[:args.questions]
    questions.write_text("\n".join(qs) + "\n", encoding="utf-8")
    base = work / f"index-{n}"
    b = _reused_base(base, n, args) if args.reuse_base else None
    if b is None:
        print(f"== {n:,} passages: base build", file=sys.stderr, flush=True)
        shutil.rmtree(base, ignore_errors=True)
        b = run_child([sys.executable, "-m", "noderag.cli", "build", str(corpus_a), "--index", str(base), "--embed",
                       args.embed, "--no-progress"], work / f"build-{n}.log", args.max_seconds, None)
        b.pop("stdout", None)
    res: dict = {"passages": n, "build": b, "changes": []}
    if not b["ok"]:
        return res
    for c in args.changes:
        new = _lines(sc.corpus, n, n + c, work / f"new-{n}-{c}.jsonl")
        ids = work / f"ids-{n}-{c}.json"
        ids.write_text(json.dumps([json.loads(line)["id"] for line in new.read_text("utf-8").splitlines()]))
        row = {"documents": c}
        for mode in ("segments", "rebuild"):
            if mode == "rebuild" and c not in args.rebuild_changes:
                continue
            print(f"== {n:,} passages: insert {c} ({mode})", file=sys.stderr, flush=True)
            copy = work / f"copy-{mode}"
            shutil.rmtree(copy, ignore_errors=True)
            _copy_index(base, copy, args)
            ins = _write_child("insert", mode, copy, new, work / f"insert-{n}-{c}-{mode}.log", args)
            if mode == "segments" and args.insert_repeats > 1:  # the median of several inserts, each into a fresh copy
                runs = [ins]
                for _ in range(args.insert_repeats - 1):
                    again = work / "copy-again"
                    shutil.rmtree(again, ignore_errors=True)
                    _copy_index(base, again, args)
                    runs.append(_write_child("insert", mode, again, new, work / f"insert-{n}-{c}-{mode}.log", args))
                    shutil.rmtree(again, ignore_errors=True)
                walls = [r["wall_s"] for r in runs]
                ins["wall_s"] = statistics.median(walls)
                ins["inner_wall_s"] = statistics.median([r.get("inner_wall_s") or r["wall_s"] for r in runs])
                ins["cpu_s"] = statistics.median([r["cpu_s"] for r in runs])
                ins["walls_s"] = walls
            ins["query"] = _paired_p50(base, copy, questions, work / f"q-{n}-{c}-{mode}.log", args)
            row[mode] = {"insert": ins}
            if c in args.delete_changes:
                row[mode]["delete"] = _write_child("delete", mode, copy, ids, work / f"delete-{n}-{c}-{mode}.log", args)
            shutil.rmtree(copy, ignore_errors=True)
        res["changes"].append(row)
    for c in args.base_delete_changes:
        res.setdefault("base_deletes", []).append(_base_delete(n, c, base, questions, args, work))
    for c in args.replace_changes:
        res.setdefault("base_replaces", []).append(_base_replace(n, c, base, args, work))
    if args.deltas:  # (0: skip it, and the full recomputation of its compaction)
        res["many_deltas"] = _many_deltas(n, sc.corpus, base, questions, args, work)
    if not args.keep_base:
        shutil.rmtree(base, ignore_errors=True)
    return res


def _text_left(idx: Path, texts: list[str]) -> int:
    """How many of ``texts`` (the first 48 characters of each) occur in a file of the index's live generation:
    in the raw bytes of its arrays, or in any string column of its Parquet tables."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from noderag.store.generations import current_path

    needles = [t[:48] for t in texts]
    found = set()
    for p in sorted(current_path(idx).rglob("*")):
        if not p.is_file():
            continue
        if p.suffix == ".parquet":
            tab = pq.read_table(p)
            for col in tab.columns:
                if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
                    found.update(i for i, w in enumerate(needles) if i not in found and
                                 pc.any(pc.match_substring(col, w)).as_py())
        else:
            raw = p.read_bytes()
            found.update(i for i, w in enumerate(needles) if w.encode("utf-8") in raw)
    return len(found)


def _base_delete(n: int, c: int, base: Path, questions: Path, args, work: Path) -> dict:
    """Delete ``c`` random documents of the base (random.Random(c)) both ways, each on a fresh copy: in place (a
    scrub, the default) and by recomputing the index (``update.segments = false``); the deleted text left in the
    live generation, and query p50 after the scrub against the base."""
    import random

    lines = (work / f"base-{n}.jsonl").read_text("utf-8").splitlines()
    picked = sorted(random.Random(c).sample(range(len(lines)), c))
    rows = [json.loads(lines[i]) for i in picked]
    gone = set(picked)
    kept = "\n".join(json.loads(x)["text"] for i, x in enumerate(lines) if i not in gone)
    # a passage whose first 48 characters a surviving passage repeats (the corpus repeats the dev passages with
    # other names) cannot be told apart in the files: only the others are checked
    checkable = [r["text"] for r in rows if r["text"][:48] not in kept]
    del kept
    ids = work / f"base-ids-{n}-{c}.json"
    ids.write_text(json.dumps([r["id"] for r in rows]))
    out: dict = {"documents": c, "checkable_texts": len(checkable)}
    for mode in ("segments", "rebuild"):
        print(f"== {n:,} passages: delete {c} base documents ({mode})", file=sys.stderr, flush=True)
        copy = work / f"copy-delete-{mode}"
        shutil.rmtree(copy, ignore_errors=True)
        _copy_index(base, copy, args)
        r = _write_child("delete", mode, copy, ids, work / f"base-delete-{n}-{c}-{mode}.log", args)
        if r.get("ok"):
            r["texts_left"] = _text_left(copy, checkable)
            if mode == "segments":
                r["query"] = _paired_p50(base, copy, questions, work / f"q-base-delete-{n}-{c}.log", args)
        out[mode] = r
        shutil.rmtree(copy, ignore_errors=True)
    return out


def _base_replace(n: int, c: int, base: Path, args, work: Path) -> dict:
    """Replace ``c`` random documents of the base (random.Random(c + 1)) by new versions (the same id, a sentence
    added), both ways on fresh copies: the old versions scrubbed then the new ones inserted as a delta (the
    default), and recomputing the index (``update.segments = false``)."""
    import random

    lines = (work / f"base-{n}.jsonl").read_text("utf-8").splitlines()
    rows = [json.loads(lines[i]) for i in sorted(random.Random(c + 1).sample(range(len(lines)), c))]
    new = work / f"replace-{n}-{c}.jsonl"
    new.write_text("".join(json.dumps(dict(r, text=r["text"] + " This passage was revised in 2026."),
                                      ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out: dict = {"documents": c}
    for mode in ("segments", "rebuild"):
        print(f"== {n:,} passages: replace {c} base documents ({mode})", file=sys.stderr, flush=True)
        copy = work / f"copy-replace-{mode}"
        shutil.rmtree(copy, ignore_errors=True)
        _copy_index(base, copy, args)
        out[mode] = _write_child("insert", mode, copy, new, work / f"base-replace-{n}-{c}-{mode}.log", args)
        shutil.rmtree(copy, ignore_errors=True)
    return out


def _many_deltas(n: int, corpus: Path, base: Path, questions: Path, args, work: Path) -> dict:
    """``args.deltas`` inserts of 10 documents, then query p50 against the same documents compacted."""
    segs, compacted = work / "many-deltas", work / "many-compacted"
    for p in (segs, compacted):
        shutil.rmtree(p, ignore_errors=True)
    shutil.copytree(base, segs)
    walls = []
    for k in range(args.deltas):
        part = _lines(corpus, n + 10 * k, n + 10 * (k + 1), work / f"delta-{k}.jsonl")
        r = _write_child("insert", "segments", segs, part, work / f"delta-{k}.log", args)
        walls.append(r.get("inner_wall_s"))
    shutil.copytree(segs, compacted)
    from noderag.indexing.update.compact import compact_index

    t0 = time.perf_counter()
    compact_index(compacted)
    compact_s = time.perf_counter() - t0
    out = {"deltas": args.deltas, "insert_wall_s": walls, "compact_s": round(compact_s, 3),
           "paired": _paired_p50(compacted, segs, questions, work / "q-many.log", args),
           "open_deltas": _open_first(segs, questions, work / "open-deltas.log", args),
           "open_compacted": _open_first(compacted, questions, work / "open-compacted.log", args)}
    for p in (segs, compacted):
        shutil.rmtree(p, ignore_errors=True)
    return out


def bench_retrieval(sample: str, args, work: Path) -> dict:
    """Recall on a dev sample: build(all) vs build(first half) + insert(second half) as a delta vs compact --full."""
    from noderag.indexing.update.compact import compact_index
    from noderag.indexing.driver import build_index
    from noderag.config import NodeRAGConfig
    from noderag.eval import evaluate

    data = Path(args.data) / sample
    lines = (data / "corpus.jsonl").read_text("utf-8").splitlines(keepends=True)
    half = len(lines) // 2
    a, b = work / f"{sample}-a.jsonl", work / f"{sample}-b.jsonl"
    a.write_text("".join(lines[:half]), encoding="utf-8")
    b.write_text("".join(lines[half:]), encoding="utf-8")
    cfg = NodeRAGConfig().with_overrides({"embed.spec": args.retrieval_embed, "update.max_delta_share": 1.0,
                                          "update.compaction": "off"})  # measured as a delta
    full, inc = work / f"{sample}-full", work / f"{sample}-inc"
    for p in (full, inc):
        shutil.rmtree(p, ignore_errors=True)
    build_index([a, b], full, cfg, progress=False)
    build_index([a], inc, cfg, progress=False)
    t0 = time.perf_counter()
    rep = build_index([b], inc, cfg, progress=False)
    insert_s = time.perf_counter() - t0
    out = {"sample": sample, "passages": len(lines), "insert_s": round(insert_s, 2),
           "delta": bool(rep.manifest.get("deltas"))}
    for name, idx in (("full build", full), ("half + delta insert", inc)):
        out[name] = _recall(evaluate(data, idx, methods=["noderag"], latency=False, progress=False))
    compact_index(inc, full=True)
    out["after compact --full"] = _recall(evaluate(data, inc, methods=["noderag"], latency=False, progress=False))
    return out


def bench_delete_retrieval(sample: str, args, work: Path) -> dict:
    """Recall on a dev sample after deleting a tenth of its passages (random.Random(0)): a fresh build of the
    survivors against build(all) + delete in place, and that after ``compact --full``; on the questions whose
    gold passages all survive (the corpus of the evaluation is the survivors)."""
    import random

    from noderag.indexing.update.compact import compact_index
    from noderag.indexing.update.delete import delete_documents
    from noderag.indexing.driver import build_index
    from noderag.config import NodeRAGConfig
    from noderag.eval import evaluate

    data = Path(args.data) / sample
    lines = (data / "corpus.jsonl").read_text("utf-8").splitlines(keepends=True)
    ids = [json.loads(x)["id"] for x in lines]
    gone = set(random.Random(0).sample(ids, len(ids) // 10))
    kept = work / f"{sample}-survivors"
    shutil.rmtree(kept, ignore_errors=True)
    kept.mkdir(parents=True)
    (kept / "corpus.jsonl").write_text("".join(x for x, i in zip(lines, ids) if i not in gone), encoding="utf-8")
    qs = [q for q in (data / "questions.jsonl").read_text("utf-8").splitlines(keepends=True)
          if q.strip() and not set(json.loads(q)["supporting_ids"]) & gone]
    (kept / "questions.jsonl").write_text("".join(qs), encoding="utf-8")
    cfg = NodeRAGConfig().with_overrides({"embed.spec": args.retrieval_embed})
    fresh, inplace = work / f"{sample}-fresh-survivors", work / f"{sample}-delete-in-place"
    for p in (fresh, inplace):
        shutil.rmtree(p, ignore_errors=True)
    build_index([kept / "corpus.jsonl"], fresh, cfg, progress=False)
    build_index([data / "corpus.jsonl"], inplace, cfg, progress=False)
    t0 = time.perf_counter()
    rep = delete_documents(inplace, sorted(gone))
    out = {"sample": sample, "passages": len(lines), "deleted": len(gone), "questions": len(qs),
           "delete_s": round(time.perf_counter() - t0, 2), "in_place": bool(rep.manifest["runs"][-1].get("scrubbed"))}
    for name, idx in (("fresh build of the survivors", fresh), ("build(all) + delete in place", inplace)):
        out[name] = _recall(evaluate(kept, idx, methods=["noderag"], latency=False, progress=False))
    compact_index(inplace, full=True)
    out["after compact --full"] = _recall(evaluate(kept, inplace, methods=["noderag"], latency=False, progress=False))
    return out


def _recall(res: dict) -> dict:
    """noderag's passage metrics with their 95% intervals ({"mean", "low", "high"} each)."""
    return dict(res["methods"]["noderag"]["metrics"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--changes", default="10,100,1000")
    ap.add_argument("--rebuild-changes", default="10,100,1000",
                    help="the change sizes that also run the rebuild alternative (the costly side)")
    ap.add_argument("--delete-changes", default="10,100,1000",
                    help="the change sizes whose documents are deleted again afterwards (a delete recomputes the index)")
    ap.add_argument("--base-delete-changes", default="",
                    help="delete this many random documents of the base, in place and by recomputing (e.g. 100)")
    ap.add_argument("--replace-changes", default="",
                    help="replace this many random documents of the base by new versions, in place and by recomputing")
    ap.add_argument("--deltas", type=int, default=10)
    ap.add_argument("--insert-repeats", type=int, default=1,
                    help="segment inserts per change, each into a fresh copy of the base; the median is reported")
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--embed", default="hash:384")
    ap.add_argument("--retrieval", default="", help="dev samples for the recall check, e.g. musique,hotpotqa")
    ap.add_argument("--retrieval-embed", default="auto")
    ap.add_argument("--delete-retrieval", default="",
                    help="dev samples for the recall check of a delete in place, e.g. musique,hotpotqa")
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--max-seconds", type=float, default=3600)
    ap.add_argument("--work", type=Path, default=REPO / ".benchcache" / "update")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--name", default="update", help="results file stem (NAME.json, NAME.md)")
    ap.add_argument("--reuse-base", action="store_true",
                    help="use a kept WORK/index-N of N documents without deltas (--keep-base) instead of building it")
    ap.add_argument("--link-copies", action="store_true",
                    help="copy the base for each change with hard links instead of bytes (fast at 10^6)")
    ap.add_argument("--keep-base", action="store_true",
                    help="keep each size's base index (WORK/index-N) for profiling, instead of removing it")
    ap.add_argument("--merge", action="store_true", help="replace only the sizes run now in an existing NAME.json")
    args = ap.parse_args(argv)
    args.changes = [int(x) for x in args.changes.split(",") if x]
    args.rebuild_changes = [int(x) for x in args.rebuild_changes.split(",") if x]
    args.delete_changes = [int(x) for x in args.delete_changes.split(",") if x]
    args.base_delete_changes = [int(x) for x in args.base_delete_changes.split(",") if x]
    args.replace_changes = [int(x) for x in args.replace_changes.split(",") if x]
    args.max_rss_bytes = None
    args.work.mkdir(parents=True, exist_ok=True)
    res = {"command": "python benchmarks/bench_update.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                       "load_before": os.getloadavg()[0]}, "embed": args.embed, "sizes": [], "retrieval": []}
    if args.merge and (args.out / f"{args.name}.json").is_file():  # keep what this run does not measure again
        earlier = json.loads((args.out / f"{args.name}.json").read_text("utf-8"))
        res["sizes"] = earlier.get("sizes", [])
        if earlier.get("command"):  # what made the rows kept
            res["command"] = f"{earlier['command']}; then {res['command']}"
        if not args.retrieval:
            res["retrieval"] = earlier.get("retrieval", [])
        if not args.delete_retrieval and earlier.get("delete_retrieval"):
            res["delete_retrieval"] = earlier["delete_retrieval"]
    for n in (int(x) for x in args.sizes.split(",") if x):
        res["sizes"] = sorted([s for s in res["sizes"] if s["passages"] != n] + [bench_size(n, args, args.work)],
                              key=lambda s: s["passages"])
        _save(res, args.out, args.name)
    for sample in (s for s in args.retrieval.split(",") if s):
        res["retrieval"].append(bench_retrieval(sample, args, args.work))
        _save(res, args.out, args.name)
    for sample in (s for s in args.delete_retrieval.split(",") if s):
        res.setdefault("delete_retrieval", []).append(bench_delete_retrieval(sample, args, args.work))
        _save(res, args.out, args.name)
    res["machine"]["load_after"] = os.getloadavg()[0]
    _save(res, args.out, args.name)
    print(to_markdown(res))
    return 0


def _save(res: dict, out: Path, name: str = "update") -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    (out / f"{name}.md").write_text(to_markdown(res), encoding="utf-8")


def _mb(b) -> str:
    return f"{b / 1e6:.1f} MB" if isinstance(b, (int, float)) else "–"


def to_markdown(res: dict) -> str:
    lines = ["# Updates: delta segments against recomputing the whole index", "",
             f"Embedder `{res['embed']}`; machine {res['machine']['cpus']} CPUs, load "
             f"{res['machine']['load_before']:.1f} before" +
             (f", {res['machine']['load_after']:.1f} after" if "load_after" in res["machine"] else "") + ".", ""]
    if res.get("command"):
        lines += [f"Command: `{res['command']}`", ""]
    for s in res["sizes"]:
        b = s["build"]
        built = f"base build {b['wall_s']:.1f} s" if b.get("wall_s") is not None else "base reused, its build time not recorded"
        lines += [f"## {s['passages']:,} passages ({built})", ""]
        if s["changes"]:
            lines += ["| change | mode | insert wall s | CPU s | new index bytes | share of index | wrote (wchar) | "
                      "peak RSS | query p50 after / before | delete wall s | delete new bytes |",
                      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for row in s["changes"]:
            for mode in ("segments", "rebuild"):
                if mode not in row:
                    continue
                ins, dele = row[mode]["insert"], row[mode].get("delete")
                ratio = (ins.get("query") or {}).get("p50_ratio") or [None, None]
                share = ins["new_index_bytes"] / max(ins["index_bytes"], 1)
                deleted = f"{dele['wall_s']:.2f} | {_mb(dele['new_index_bytes'])}" if dele else "– | –"
                lines.append(f"| insert {row['documents']} | {mode} | {ins['wall_s']:.2f} | {ins['cpu_s']:.2f} | "
                             f"{_mb(ins['new_index_bytes'])} | {share:.1%} | {_mb(ins.get('wchar'))} | "
                             f"{_mb(ins['peak_rss_bytes'])} | {ratio[1] if ratio[1] is not None else '–'} | {deleted} |")
            if "rebuild" in row:
                seg, reb = row["segments"]["insert"], row["rebuild"]["insert"]
                lines.append(f"| | **ratio** rebuild / segments | **{reb['wall_s'] / max(seg['wall_s'], 1e-9):.1f}x** | "
                             f"| **{reb['new_index_bytes'] / max(seg['new_index_bytes'], 1):.0f}x** | | | | | | |")
        reps = [(row["documents"], row["segments"]["insert"]["walls_s"]) for row in s["changes"]
                 if "walls_s" in (row.get("segments") or {}).get("insert", {})]
        if reps:
            lines += ["", "Segment inserts: the median of " + "; ".join(
                f"insert {c}: {', '.join(f'{w:.2f}' for w in ws)} s" for c, ws in reps) +
                " (each into a fresh copy of the base).", ""]
        if s.get("base_deletes"):
            lines += ["", "Delete of random documents of the base, each on a fresh copy: in place (the default: the "
                      "documents' nodes scrubbed, `noderag.indexing.update.scrub`) and by recomputing the index "
                      "(`update.segments = false`, what every base delete did before).", "",
                      "| delete | mode | wall s | CPU s | new index bytes | share of index | wrote (wchar) | peak RSS | "
                      "deleted texts left in the live generation (1) | query p50 after / before |",
                      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for row in s["base_deletes"]:
                for mode in ("segments", "rebuild"):
                    d = row.get(mode) or {}
                    if not d.get("ok"):
                        lines.append(f"| {row['documents']} base documents | {mode} | failed | | | | | | | |")
                        continue
                    ratio = (d.get("query") or {}).get("p50_ratio") or [None, None]
                    lines.append(f"| {row['documents']} base documents | {'in place' if mode == 'segments' else 'recompute'}"
                                 f" | {d['wall_s']:.2f} | {d['cpu_s']:.2f} | {_mb(d['new_index_bytes'])} | "
                                 f"{d['new_index_bytes'] / max(d['index_bytes'], 1):.1%} | {_mb(d.get('wchar'))} | "
                                 f"{_mb(d['peak_rss_bytes'])} | {d.get('texts_left', '–')} of {row.get('checkable_texts')} | "
                                 f"{ratio[1] if ratio[1] is not None else '–'} |")
                if (row.get("segments") or {}).get("ok") and (row.get("rebuild") or {}).get("ok"):
                    seg, reb = row["segments"], row["rebuild"]
                    lines.append(f"| | **ratio** recompute / in place | **{reb['wall_s'] / max(seg['wall_s'], 1e-9):.1f}x**"
                                 f" | | **{reb['new_index_bytes'] / max(seg['new_index_bytes'], 1):.1f}x** | | | | | |")
            lines += ["", "(1) Of the deleted passages whose first 48 characters no surviving passage repeats, those "
                      "whose first 48 characters a file of the live generation still holds (raw bytes of its arrays, "
                      "any string column of its Parquet tables).", ""]
        if s.get("base_replaces"):
            lines += ["", "Replacement of random documents of the base by new versions (the same id, a sentence added), "
                      "each on a fresh copy: the old versions scrubbed then the new ones inserted as a delta (the "
                      "default) and by recomputing the index (`update.segments = false`).", "",
                      "| replace | mode | wall s | CPU s | new index bytes | share of index | peak RSS |",
                      "|---|---|---:|---:|---:|---:|---:|"]
            for row in s["base_replaces"]:
                for mode in ("segments", "rebuild"):
                    d = row.get(mode) or {}
                    name = "scrub + delta" if mode == "segments" else "recompute"
                    lines.append(f"| {row['documents']} base documents | {name} | " + (
                        f"{d['wall_s']:.2f} | {d['cpu_s']:.2f} | {_mb(d['new_index_bytes'])} | "
                        f"{d['new_index_bytes'] / max(d['index_bytes'], 1):.1%} | {_mb(d['peak_rss_bytes'])} |"
                        if d.get("ok") else "failed | | | | |"))
                if (row.get("segments") or {}).get("ok") and (row.get("rebuild") or {}).get("ok"):
                    lines.append(f"| | **ratio** recompute / in place | "
                                 f"**{row['rebuild']['wall_s'] / max(row['segments']['wall_s'], 1e-9):.1f}x** | | | | |")
            lines.append("")
        md = s.get("many_deltas")
        if md:
            p = md["paired"]
            lines += ["", f"{md['deltas']} delta segments of 10 documents each (inserts "
                      f"{', '.join(f'{w:.2f}' for w in md['insert_wall_s'] if w is not None)} s), against the same "
                      f"index compacted ({md['compact_s']:.1f} s): query p50 {p['p50_ms'][1]} ms vs {p['p50_ms'][0]} ms, "
                      f"**ratio {p['p50_ratio'][1]}** (CPU {p['p50_cpu_ratio'][1]}); open + first query "
                      f"{md['open_deltas']['open_plus_first_retrieve_s']} s vs "
                      f"{md['open_compacted']['open_plus_first_retrieve_s']} s.", ""]
    lines += _slopes(res["sizes"])
    if res["retrieval"]:
        lines += ["## Retrieval after build(half) + insert(other half) as a delta", ""]
        lines += _recall_rows(res["retrieval"], ("full build", "half + delta insert", "after compact --full"))
    if res.get("delete_retrieval"):
        lines += ["## Retrieval after a delete in place", "",
                  "A tenth of the sample's passages deleted (random.Random(0)); the questions whose gold passages all "
                  "survive, against the survivors as the corpus.", ""]
        lines += _recall_rows(res["delete_retrieval"], ("fresh build of the survivors", "build(all) + delete in place",
                                                        "after compact --full"), questions=True)
        lines.append("")
    return "\n".join(lines) + "\n"


def _recall_rows(results: list, names: tuple, questions: bool = False) -> list[str]:
    """A markdown table of recall@2/@5 and all-gold@8 for each sample and each index ``names`` (and the
    question count)."""
    q_head, q_rule = ("questions | ", "---:|") if questions else ("", "")
    out = [f"| sample | index | {q_head}recall@2 | recall@5 | all-gold@8 |", f"|---|---|{q_rule}---:|---:|---:|"]
    for r in results:
        for name in names:
            m = r[name]
            q = f"{r['questions']} | " if questions else ""
            out.append(f"| {r['sample']} | {name} | {q}{_fmt(m.get('recall@2'))} | {_fmt(m.get('recall@5'))} | "
                       f"{_fmt(m.get('all_gold@8'))} |")
    return out


def _slopes(sizes: list) -> list[str]:
    """How a segment insert's wall grows with the corpus: the log-log slope between each pair of sizes."""
    import math

    walls: dict[int, dict[int, float]] = {}
    for s in sizes:
        for row in s["changes"]:
            seg = (row.get("segments") or {}).get("insert") or {}
            if seg.get("ok", True) and isinstance(seg.get("wall_s"), (int, float)):
                walls.setdefault(row["documents"], {})[s["passages"]] = seg["wall_s"]
    rows = []
    for c, by_n in sorted(walls.items()):
        ns = sorted(by_n)
        for a, b in zip(ns, ns[1:]) if len(ns) > 1 else ():
            rows.append(f"| insert {c} | {a:,} -> {b:,} | {by_n[a]:.2f} -> {by_n[b]:.2f} | "
                        f"{math.log(by_n[b] / by_n[a]) / math.log(b / a):.3f} |")
        if len(ns) > 2:
            a, b = ns[0], ns[-1]
            rows.append(f"| insert {c} | {a:,} -> {b:,} | {by_n[a]:.2f} -> {by_n[b]:.2f} | "
                        f"**{math.log(by_n[b] / by_n[a]) / math.log(b / a):.3f}** |")
    if not rows:
        return []
    return ["## Growth with the corpus (segment inserts)", "",
            "Log-log slope of the insert's wall against the index's passages (0: independent of the corpus, 1: linear).",
            "", "| change | passages | wall s | slope |", "|---|---|---|---:|"] + rows + [""]


def _fmt(v) -> str:
    if isinstance(v, dict):
        return f"{v['mean']:.3f} [{v['low']:.3f}, {v['high']:.3f}]"
    return f"{v:.3f}" if isinstance(v, (int, float)) else "–"


if __name__ == "__main__":
    sys.exit(main())
