"""``noderag.eval.evaluate``: retrieval (and answer) evaluation of an index on a dataset, with baselines.

What it does, in order: load the dataset (:mod:`noderag.eval.loaders`); open the index, building it
from the dataset's corpus when it is missing, else check that its documents are that corpus; then
stream the questions in batches (:mod:`noderag.eval.batches`). Each batch is embedded once (the index's
embedder, also the dense baseline's), ranked by every method (noderag and its named search variants
through ``retrieve_many``, exact dense cosine, BM25), timed (one batch call, then each question alone
for latency), optionally answered by an LLM, and appended as one JSON line to ``OUT/state/records.jsonl``
(flushed and fsynced). A killed run resumes from the batches on disk: finished questions are never
ranked or answered again. At the end the per-question scores are summarised (:mod:`noderag.eval.summary`:
bootstrap intervals, paired comparisons, breakdowns by question labels) and written
(:mod:`noderag.eval.report`) as ``results.json``, ``results.md``, ``recall.svg`` and (``per_question=True``)
``per_question.jsonl``.

Several indexes (builds of the same corpus, e.g. one per build seed): each is evaluated in turn, with
its state in ``OUT/index-<i>/``; the baselines rank once, on the first. The methods that rank with the
index are averaged per question over the indexes before the bootstrap, and ``per_index`` holds each
index's own rows, which are exactly what evaluating that index alone gives.

Why batches through ``retrieve_many``: one embedding call and one threaded PPR call per batch is the
fast path, and holding only one batch of results keeps 10^4 questions on a large index in memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..store.layout import CURRENT, LLM_CACHE
from .batches import Baselines, score_batch
from .loaders import Dataset, DatasetError, load_dataset, write_corpus_jsonl
from .report import write_markdown, write_per_question, write_plot
from .summary import ALL_GOLD_K, BASELINES, figures, score_batches

__all__ = ["evaluate", "METHODS", "KNOWN_METHODS", "EvalMismatchError"]

#: the methods a run ranks by default; the first is the reference of the paired comparisons
METHODS = ("noderag", "dense", "bm25")
#: every built-in method (besides the named search variants a caller defines)
KNOWN_METHODS = ("noderag", *BASELINES)


class EvalMismatchError(DatasetError):
    """The index is not the dataset's corpus, or ``OUT`` holds a run with other settings."""


# ----------------------------------------------------------------------------- small helpers

def _passage_text(row: dict) -> str:
    """A passage as the baselines see it: title and text (the benchmark's convention)."""
    return f"{row.get('title') or ''}\n{row['text']}".strip()


def git_revision() -> str | None:
    """The short git revision of the package's source tree when it runs from a checkout (``+dirty`` if changed)."""
    here = Path(__file__).resolve().parent
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=here, capture_output=True, text=True,
                             timeout=10)
        if top.returncode != 0 or not (Path(top.stdout.strip()) / "src" / "noderag" / "eval").is_dir():
            return None  # not noderag's own checkout (e.g. a venv inside some other repository)
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                             timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "src"],
                               cwd=top.stdout.strip(), capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    rev = out.stdout.strip() if out.returncode == 0 else ""
    # "+dirty": the package source differs from that commit (the figures may not reproduce from it)
    return (rev + ("+dirty" if dirty.stdout.strip() else "")) or None


def _machine() -> dict:
    return {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform()}


def _dataset_digest(ds: Dataset) -> str:
    """Digest of the corpus and the scored questions (ids, texts, gold): what a resumed run must share."""
    h = hashlib.blake2b(digest_size=16)
    for row in ds.corpus:
        h.update(json.dumps([row["id"], row["title"], row["text"]], ensure_ascii=False).encode())
    for q in ds.questions:
        h.update(json.dumps([q.id, q.question, q.gold, q.answers], ensure_ascii=False).encode())
    return h.hexdigest()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- index: build or check

def _index_documents(index: Any) -> set[tuple[str, str]]:
    docs = index.documents  # a deleted document's tombstone row (noderag.indexing.update.scrub) has neither
    return {(s, h) for s, h in zip(docs.column("source").to_pylist(), docs.column("content_hash").to_pylist())
            if s is not None or h is not None}


def _corpus_documents(corpus_path: Path) -> set[tuple[str, str]]:
    """(source id, content hash) of every document a build of ``corpus_path`` keeps (the build's own reader)."""
    from ..indexing.ingest import ingest

    docs, _ = ingest([str(corpus_path)])
    return {(d.source, d.content_hash) for d in docs}


def open_or_build(ds: Dataset, index_dir: Path, *, build_config: Any = None, progress: bool = True,
                  log: Callable[[str], None] | None = None) -> tuple[Any, dict]:
    """Open ``index_dir``, building it from the dataset's corpus when it has no finished build.

    An existing index must hold exactly the dataset's corpus (same source ids and content hashes
    as a build of it would keep); otherwise :class:`EvalMismatchError` says how they differ.
    Returns the opened index and ``{"built", "build_s"}``.
    """
    from ..api import Index, build

    index_dir = Path(index_dir)
    with tempfile.TemporaryDirectory(prefix="noderag-eval-") as tmp:
        corpus_path = ds.corpus_file or write_corpus_jsonl(ds, Path(tmp) / f"{ds.name}.corpus.jsonl")
        if not (index_dir / CURRENT).is_file():
            if log:
                log(f"index {index_dir} has no finished build: building it from the {len(ds.corpus):,} passages "
                    "of the dataset")
            t0 = time.perf_counter()
            build([str(corpus_path)], str(index_dir), config=build_config, progress=progress)
            return Index.open(index_dir), {"built": True, "build_s": round(time.perf_counter() - t0, 1)}
        index = Index.open(index_dir)
        want, have = _corpus_documents(corpus_path), _index_documents(index)
    if want != have:
        extra, missing = have - want, want - have
        eg = sorted(extra or missing)[0][0]
        index.close()
        raise EvalMismatchError(
            f"index {index_dir} does not hold the dataset's corpus: {len(extra):,} of its documents are not in "
            f"the dataset and {len(missing):,} of the dataset's passages are not in it (e.g. id {eg!r}); "
            "use another --index (it is built when missing)")
    return index, {"built": False, "build_s": None}


# ----------------------------------------------------------------------------- resumable state

class _State:
    """``OUT/state/``: the run's fingerprint and one JSON line per finished batch (append-only)."""

    def __init__(self, out: Path, fingerprint: dict, restart: bool) -> None:
        self.dir = out / "state"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.records = self.dir / "records.jsonl"
        fp_path = self.dir / "run.json"
        if restart:
            for p in (fp_path, self.records, self.dir / "dense_vectors.npy"):
                p.unlink(missing_ok=True)
        if fp_path.is_file():
            old = json.loads(fp_path.read_text(encoding="utf-8"))
            diff = sorted(k for k in set(old) | set(fingerprint) if old.get(k) != fingerprint.get(k))
            if diff:
                raise EvalMismatchError(
                    f"{fp_path}: field {diff[0]!r} differs from this run's ({', '.join(diff)} changed): "
                    "use another --out, or --restart to discard the finished batches")
        else:
            self.records.unlink(missing_ok=True)
            _write_atomic(fp_path, json.dumps(fingerprint, indent=1, sort_keys=True) + "\n")
        self.batches: dict[int, dict] = {}
        self._load()

    def _load(self) -> None:
        """Read finished batches; a torn last line (killed mid-write) is cut off."""
        if not self.records.is_file():
            return
        good = 0
        with open(self.records, "rb") as fh:
            for line in fh:
                if not line.endswith(b"\n"):
                    break
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    break
                self.batches[int(rec["batch"])] = rec
                good += len(line)
        if good != self.records.stat().st_size:
            with open(self.records, "r+b") as fh:
                fh.truncate(good)

    def append(self, rec: dict) -> None:
        line = json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n"
        with open(self.records, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        self.batches[int(rec["batch"])] = rec


# ----------------------------------------------------------------------------- settings

@dataclass
class _Settings:
    """What a run ranks and how it summarises, checked once by :func:`_settings`."""

    methods: list[str]
    variants: dict[str, dict]
    configs: dict[str, Any]  # the search configuration of every method that ranks with the index
    compare: list[tuple[str, str]]
    ks: list[int]
    depth: int
    batch_size: int
    latency: bool
    boot: dict
    by: list[str] | None
    config: dict = field(default_factory=dict)  # what results.json records as the run's configuration


def _spec_name(backend: Any) -> str | None:
    """A backend as the results name it: its spec string, else its model id or class name."""
    if backend is None or isinstance(backend, str):
        return backend
    return getattr(backend, "model_id", type(backend).__name__)


def _variant_configs(search: Any, variants: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The search configuration of each named variant: ``search`` with the variant's changes (validated)."""
    from ..errors import ConfigError

    out = {}
    for name, change in variants.items():
        if name in KNOWN_METHODS:
            raise DatasetError(f"variant {name!r}: the name of a built-in method; name it otherwise")
        try:
            out[name] = search.replace(**dict(change)).validate()
        except (ConfigError, TypeError) as exc:
            raise ConfigError(f"variant {name!r}: {exc}") from None
    return out


def _checked_methods(methods: Sequence[str], variants: Mapping[str, Any],
                     compare: Sequence[Sequence[str]] | None) -> tuple[list[str], list[tuple[str, str]]]:
    """The methods (known ones or variants, in order, once each) and the pairs to compare (default: the
    first method against every other)."""
    methods = list(dict.fromkeys(methods))
    bad = [m for m in methods if m not in KNOWN_METHODS and m not in variants]
    if bad or not methods:
        names = ", ".join([*KNOWN_METHODS, *variants])
        raise DatasetError(f"unknown method(s) {bad}: choose from {names}")
    pairs = [(methods[0], m) for m in methods[1:]] if compare is None else [tuple(p) for p in compare]
    for p in pairs:
        if len(p) != 2 or p[0] == p[1] or any(m not in methods for m in p):
            raise DatasetError(f"comparison {p!r}: expected two different methods of this run ({', '.join(methods)})")
    return methods, pairs


def _settings(methods, variants, compare, ks, batch_size, search_config, latency, n_resamples, level, seed, by,
              llm, judge) -> _Settings:
    """Check the run's arguments (one DatasetError or ConfigError line naming the bad one) and gather them."""
    from ..search import SearchConfig

    variants = {str(k): dict(v) for k, v in (variants or {}).items()}
    methods, pairs = _checked_methods(methods, variants, compare)
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise DatasetError(f"recall cut-offs must be >= 1, got {ks}")
    if int(batch_size) < 1:
        raise DatasetError(f"batch size must be >= 1, got {batch_size}")
    search = (search_config or SearchConfig()).validate()
    configs = {"noderag": search, **_variant_configs(search, {v: variants[v] for v in variants if v in methods})}
    depth = max(ks[-1], 10, ALL_GOLD_K)
    config = {"methods": methods, "ks": ks, "all_gold_k": ALL_GOLD_K, "depth": depth, "batch_size": int(batch_size),
              "latency": bool(latency), "n_resamples": n_resamples, "level": level, "seed": seed,
              "search_config": search.to_dict(), "llm": _spec_name(llm), "judge": _spec_name(judge),
              "compare": [list(p) for p in pairs]}
    if any(v in methods for v in variants):
        config["variants"] = {v: variants[v] for v in variants if v in methods}
    return _Settings(methods, variants, configs, pairs, ks, depth, int(batch_size), bool(latency),
                     {"n_resamples": n_resamples, "level": level, "seed": seed}, list(by) if by else None, config)


# ----------------------------------------------------------------------------- one index

def _resolve_llm(spec: Any, out: Path) -> Any:
    if spec is None or not isinstance(spec, str):
        return spec
    from ..llm import make_llm

    return make_llm(spec, cache_path=out / LLM_CACHE)


def _fingerprint(ds: Dataset, ix: Any, emb_name: str, st: _Settings, methods: list[str]) -> dict:
    """What a resumed run must share with the batches on disk (a change of any of these changes the figures)."""
    fp = {"dataset": _dataset_digest(ds), "index_generation": ix.generation, "index_path": str(ix.root),
          "embedder": emb_name, "methods": methods,
          **{k: st.config[k] for k in ("ks", "depth", "batch_size", "latency", "search_config", "llm", "judge")}}
    variants = {m: st.variants[m] for m in methods if m in st.variants}
    if variants:  # only then: a run without variants resumes from the state of a version without them
        fp["variants"] = variants
    return fp


def _run_index(ds: Dataset, ix: Any, out: Path, st: _Settings, methods: list[str], llm: Any, judge: Any,
               restart: bool, progress: bool, log: Callable[[str], None] | None, label: str) -> dict:
    """Rank (and answer) every question of ``ds`` not yet in ``out/state`` with ``methods`` on one open index.

    Returns ``{"batches", "resumed", "embedder"}``: every finished batch record, how many questions an
    earlier run had scored, and the embedder's name.
    """
    from tqdm.auto import tqdm

    searcher = ix.searcher(st.configs["noderag"])
    emb_name = getattr(searcher.embedder, "name", type(searcher.embedder).__name__)
    state = _State(out, _fingerprint(ds, ix, emb_name, st, methods), restart)
    searchers = {m: (searcher if m == "noderag" else ix.searcher(st.configs[m])) for m in methods
                 if m not in BASELINES}
    base = Baselines([r["id"] for r in ds.corpus], [_passage_text(r) for r in ds.corpus])
    base.build([m for m in methods if m in BASELINES], searcher, progress, log)
    qs, size = ds.questions, st.batch_size
    n_batches = (len(qs) + size - 1) // size
    done = [b for b in range(n_batches) if b in state.batches]
    for b in done:  # a finished batch must hold the questions this run would put there
        if state.batches[b]["ids"] != [q.id for q in qs[b * size:(b + 1) * size]]:
            raise EvalMismatchError(f"{state.records}: batch {b} holds other questions: use --restart")
    resumed = sum(len(state.batches[b]["ids"]) for b in done)
    if resumed and log:
        log(f"resuming: {resumed:,} of {len(qs):,} questions were scored by an earlier run ({out / 'state'})")
    bar = tqdm(total=len(qs), initial=resumed, desc=label, unit="q", disable=not progress)
    try:
        for b in (b for b in range(n_batches) if b not in state.batches):
            batch = qs[b * size:(b + 1) * size]
            state.append(score_batch(b, batch, methods, searcher.embed, searchers, base, st.depth, st.latency,
                                     llm, judge, st.configs["noderag"].context_tokens))
            bar.update(len(batch))
    finally:
        bar.close()
    return {"batches": state.batches, "resumed": resumed, "embedder": emb_name}


def _index_info(ix: Any, emb_name: str, build_info: dict) -> dict:
    """What results.json records of an index: path, generation, embedder, node counts, whether it was built."""
    return {"path": str(ix.root), "generation": ix.generation, "embedder": emb_name,
            "embed_config": ix.manifest.get("config", {}).get("embed"), "counts": ix.manifest.get("counts"),
            **build_info}


# ----------------------------------------------------------------------------- the run

def _index_list(index: Any) -> list[Path]:
    """One index directory, or several (builds of the same corpus whose figures are averaged)."""
    paths = [index] if isinstance(index, (str, os.PathLike)) else list(index)
    if not paths:
        raise DatasetError("no index given: name at least one index directory")
    return [Path(p) for p in paths]


def _results(ds: Dataset, st: _Settings, runs: list[dict], figs: dict, meta: dict) -> dict:
    """The results dict (results.json) from the runs of every index and their figures."""
    from .._version import __version__

    n_q = len(ds.questions)
    resumed = sum(r["resumed"] for r in runs)
    res = {
        "noderag_version": __version__, "git_revision": meta["revision"],
        "dataset": {"name": ds.name, "format": ds.format, "files": ds.files, "stats": ds.stats,
                    "n_questions": n_q, "n_passages": len(ds.corpus)},
        "index": runs[0]["index"], "config": st.config, "machine": _machine(),
        "load_average": {"start": meta["load_start"], "end": [round(x, 2) for x in os.getloadavg()]},
        "run": {"questions_resumed": resumed, "questions_scored": n_q * len(runs) - resumed,
                "query_embedding_s": round(runs[0]["embed_s"], 4),
                "wall_s": round(time.perf_counter() - meta["t_start"], 1)},
        "methods": figs["methods"], "paired": figs["paired"], "breakdown": figs["breakdown"],
    }
    if "per_index" in figs:
        res["per_index"] = [{"index": r["index"], "run": {"questions_resumed": r["resumed"],
                                                          "questions_scored": n_q - r["resumed"]}, **f}
                            for r, f in zip(runs, figs["per_index"])]
    return res


def _evaluate(ds: Dataset, indexes: list[Path], out: Path, st: _Settings, llm: Any, judge: Any, build_config: Any,
              per_question: bool, restart: bool, progress: bool, log: Callable[[str], None] | None, meta: dict,
              write: bool) -> dict:
    """Run every index in turn (baselines on the first only), then summarise and write the results."""
    multi = len(indexes) > 1
    llm_b, judge_b = _resolve_llm(llm, out), _resolve_llm(judge, out)
    runs, scored = [], []
    for i, path in enumerate(indexes):
        sub = out / f"index-{i}" if multi else out
        methods = st.methods if i == 0 else [m for m in st.methods if m not in BASELINES]
        ix, build_info = open_or_build(ds, path, build_config=build_config, progress=progress, log=log)
        try:
            run = _run_index(ds, ix, sub, st, methods, llm_b, judge_b, restart, progress, log,
                             f"questions (index {i + 1} of {len(indexes)})" if multi else "questions")
            run["index"] = _index_info(ix, run["embedder"], build_info)
        finally:
            ix.close()
        runs.append(run)
        scored.append(score_batches(ds, run["batches"], methods, st.ks))
    embed_s = [sum(b.get("embed_s", 0.0) for b in r["batches"].values()) for r in runs]
    for r, e in zip(runs, embed_s):
        r["embed_s"] = e
    figs = figures(ds, scored, embed_s, st.methods, st.compare, st.boot, st.by)
    res = _results(ds, st, runs, figs, meta)
    if write:
        _write_atomic(out / "results.json", json.dumps(res, indent=1, ensure_ascii=False) + "\n")
        write_markdown(out / "results.md", res)
        write_plot(out / "recall.svg", res)
        for i, (run, sc) in enumerate(zip(runs, scored)):
            if per_question:
                sub = out / f"index-{i}" if multi else out
                write_per_question(sub / "per_question.jsonl", ds, run["batches"], list(sc.scores), sc.scores)
    return res


def evaluate(data: str | os.PathLike | Dataset, index: str | os.PathLike | Sequence[str | os.PathLike], *,
             out: str | os.PathLike | None = None, methods: Sequence[str] = METHODS, ks: Sequence[int] = (2, 5, 10),
             format: str | None = None, split: str | None = None, llm: Any = None, judge: Any = None,
             search_config: Any = None, variants: Mapping[str, Mapping[str, Any]] | None = None,
             compare: Sequence[tuple[str, str]] | None = None, build_config: Any = None, batch_size: int = 256,
             latency: bool = True, per_question: bool = False, n_resamples: int = 2000, level: float = 0.95,
             seed: int = 0, by: Sequence[str] | None = None, limit: int | None = None, restart: bool = False,
             progress: bool = True, log: Callable[[str], None] | None = None) -> dict:
    """Evaluate an index (or several builds of one corpus) on a dataset; returns the results dict (also written
    to ``out`` when given).

    Parameters
    ----------
    data : dataset folder or file (any format of :mod:`noderag.eval.loaders`), or a loaded Dataset
    index : index directory, built from the dataset's corpus when it has no finished build; or several
        (e.g. one per build seed): per-question scores of noderag and its variants are averaged over them
        before the bootstrap, the baselines rank on the first, and ``per_index`` holds each one's figures
    out : folder for results.json/.md, recall.svg, per_question.jsonl and the resumable ``state/``
        (None: a temporary folder, so nothing is kept and nothing resumes)
    methods : "noderag", "dense", "bm25", "bm25_segmenter" (BM25 over Chinese segmenter words) or the name of
        a variant; the first is the reference of the default paired comparisons
    ks : recall@k cut-offs (all-gold is at 8, nDCG at 10, MRR within the kept depth max(ks, 10))
    llm, judge : LLM backends or spec strings: answer each question over each method's context (EM, F1),
        and judge those answers (one index only)
    search_config : noderag.search.SearchConfig of "noderag" (default: the search defaults)
    variants : named changes of ``search_config`` (``{"no_ppr": {"use_ppr": False}}``), each ranked like
        noderag when its name is in ``methods``
    compare : the pairs ``(a, b)`` whose paired difference a - b is reported (default: the first method
        against every other)
    build_config : NodeRAGConfig of the build when the index is missing
    batch_size : questions per retrieve_many call and per resumable record
    latency : also time each question alone (p50/p95)
    n_resamples, level, seed : bootstrap settings (deterministic by seed)
    by : question label fields to break the scores down by (default: every categorical field found)
    limit : evaluate only the first ``limit`` scorable questions
    restart : discard the finished batches in ``out``
    """
    indexes = _index_list(index)
    st = _settings(methods, variants, compare, ks, batch_size, search_config, latency, n_resamples, level, seed, by,
                   llm, judge)
    if (llm is not None or judge is not None) and len(indexes) > 1:
        raise DatasetError(f"answers are evaluated on one index, {len(indexes)} were given: leave out --llm/--judge "
                           "or give one --index")
    meta = {"t_start": time.perf_counter(), "load_start": [round(x, 2) for x in os.getloadavg()],
            "revision": git_revision()}  # at the start: the code that runs, even if the checkout moves meanwhile
    ds = data if isinstance(data, Dataset) else load_dataset(data, format=format, split=split)
    if limit is not None:
        ds = replace(ds, questions=ds.questions[:int(limit)])
    if not ds.questions:
        raise DatasetError(f"{ds.files[-1]}: no question has any gold passage in the corpus: nothing to score")
    if log:
        s = ds.stats
        log(f"{ds.name} ({ds.format}): {len(ds.questions):,} questions to score, {s['questions_skipped']:,} "
            f"skipped without mapped gold, {s['gold_unmapped']:,} of {s['gold_total']:,} gold passages unmapped, "
            f"{len(ds.corpus):,} passages ({s['duplicate_passages']:,} duplicates merged)")
    tmp_out = tempfile.TemporaryDirectory(prefix="noderag-eval-out-") if out is None else None
    out = Path(tmp_out.name if tmp_out is not None else out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        return _evaluate(ds, indexes, out, st, llm, judge, build_config, per_question and tmp_out is None, restart,
                         progress, log, meta, write=tmp_out is None)
    finally:
        if tmp_out is not None:
            tmp_out.cleanup()
