"""One batch of an evaluation: every method ranks the batch's questions (timed), and optionally an LLM
answers over each method's context; the result is the batch's record, one JSON line of the run's state.

Methods: ``noderag`` and its named search variants rank through ``Searcher.retrieve_many`` with the
batch's query vectors (embedded once); ``dense`` (exact cosine over the passage vectors the index stores), ``bm25``, and
``bm25_segmenter`` (BM25 over segmenter words for Chinese, bigrams being ``bm25``'s) rank the corpus
passages in :class:`Baselines`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .answers import exact_match, judge_request, parse_judgement, token_f1
from .report import BASELINE_CONTEXT_PASSAGES
from .summary import BASELINES

__all__ = ["Baselines", "score_batch"]

_SCORE_CELLS = 1 << 24  # query x passage scores held at once by a baseline (128 MB of float64)


@dataclass
class Baselines:
    """The baseline retrievers over the corpus (those a run asks for) and lazily counted passage tokens."""

    ids: list[str]
    texts: list[str]
    retrievers: dict[str, Any] = field(default_factory=dict)
    _tokens: dict = field(default_factory=dict)

    def tokens(self, j: int) -> int:
        from ..tokenize import count_tokens

        n = self._tokens.get(j)
        if n is None:
            n = self._tokens[j] = count_tokens(self.texts[j])
        return n

    def build(self, methods: Sequence[str], searcher: Any, progress: bool,
              log: Callable[[str], None] | None) -> "Baselines":
        """Make the retrievers of the baselines among ``methods``; ``dense`` reads the vectors the index of
        ``searcher`` stores (:func:`stored_passage_vectors`) instead of embedding the corpus again."""
        from ..search.baselines import BM25Retriever, DenseRetriever

        if "dense" in methods:
            vectors, missing = stored_passage_vectors(searcher, self.ids)
            if missing:  # passages the index holds under another id (merged duplicates): embedded here
                if log:
                    log(f"dense: embedding {len(missing):,} passages the index stores no vector for")
                fresh = dense_vectors(searcher.embedder, [self.texts[j] for j in missing], progress)
                if len(missing) == len(self.ids):
                    vectors = fresh
                else:
                    vectors[missing] = fresh
            self.retrievers["dense"] = DenseRetriever(self.ids, vectors)
        for m, cjk in (("bm25", "bigram"), ("bm25_segmenter", "segment")):
            if m in methods:
                if log:
                    log(f"{m}: indexing {len(self.ids):,} passages")
                self.retrievers[m] = BM25Retriever(self.ids, self.texts, cjk=cjk)
        return self


def stored_passage_vectors(searcher: Any, ids: Sequence[str]) -> tuple[np.ndarray, list[int]]:
    """The vector of each passage ``ids[j]`` as the index stores it: its chunk's (T node's) vector, or the mean of
    its chunks' unit vectors when it has several; and the rows ``j`` of passages it holds no chunk of."""
    from ..graph.types import NodeType

    chunks = np.flatnonzero(np.asarray(searcher.types) == int(NodeType.T))
    chunks = chunks[np.asarray(searcher.tables.active, dtype=bool)[chunks]]
    row_of = {pid: j for j, pid in enumerate(ids)}
    rows = np.array([row_of.get(label, -1) if label is not None else -1
                     for label in searcher.tables.labels(chunks.tolist())], dtype=np.int64)
    keep = rows >= 0
    chunks, rows = chunks[keep], rows[keep]
    stored = np.asarray(searcher.store.vectors.get(chunks), dtype=np.float32) if chunks.size else None
    dim = stored.shape[1] if stored is not None else 1
    out = np.zeros((len(ids), dim), dtype=np.float32)
    if stored is not None:
        norms = np.linalg.norm(stored, axis=1, keepdims=True)
        np.add.at(out, rows, stored / np.where(norms > 0, norms, 1.0))
    counts = np.bincount(rows, minlength=len(ids))
    return out, np.flatnonzero(counts == 0).tolist()


def dense_vectors(embedder: Any, texts: list[str], progress: bool) -> np.ndarray:
    """Vectors of some passage texts from the index's embedder (passages the index stores no vector for)."""
    from tqdm.auto import tqdm

    parts = []
    step = 1024
    for s in tqdm(range(0, len(texts), step), desc="dense: passages", unit="batch", disable=not progress,
                  leave=False):
        parts.append(np.asarray(embedder.embed(texts[s:s + step]), dtype=np.float32))
    return np.concatenate(parts) if parts else np.zeros((0, 1), np.float32)


def _rank_baseline(score_fn: Callable[[Any], np.ndarray], inputs: Any, n_passages: int, depth: int) -> np.ndarray:
    """Top-``depth`` passage rows per query, scored in slices of at most _SCORE_CELLS cells."""
    from ..search.baselines import top_k_rows

    rows = max(1, _SCORE_CELLS // max(n_passages, 1))
    out = [top_k_rows(score_fn(inputs[s:s + rows]), depth)[0] for s in range(0, len(inputs), rows)]
    return np.concatenate(out) if out else np.zeros((0, depth), np.int64)


def _timed(call: Callable[[int], Any], n: int, latency: bool) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of ``call(i)`` for each of ``n`` questions alone (empty lists without ``latency``)."""
    lat: list[float] = []
    cpu: list[float] = []
    if latency:
        for i in range(n):
            c0 = time.process_time()
            t0 = time.perf_counter()
            call(i)
            lat.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    return lat, cpu


def _baseline_batch(score_fn, inputs, base: Baselines, depth: int, latency: bool) -> dict:
    """Rank one batch with a baseline: top-``depth`` ids, top-5 context tokens, single-query latencies."""
    from ..search.baselines import top_k_rows

    t0 = time.perf_counter()
    idx = _rank_baseline(score_fn, inputs, len(base.ids), depth)
    batch_s = time.perf_counter() - t0
    lat, _ = _timed(lambda i: top_k_rows(score_fn(inputs[i:i + 1]), depth), len(inputs), latency)
    rows = idx.tolist()
    return {"ranked": [[base.ids[j] for j in r] for r in rows],
            "ctx": [sum(base.tokens(j) for j in r[:BASELINE_CONTEXT_PASSAGES]) for r in rows],
            "lat": lat, "batch_s": batch_s, "_rows": rows}


def _searcher_batch(searcher: Any, texts: list[str], qvecs: np.ndarray, depth: int, latency: bool) -> dict:
    """Rank one batch with a searcher (one ``retrieve_many`` call), then each question alone when timing."""
    t0 = time.perf_counter()
    res = searcher.retrieve_many(texts, query_vectors=qvecs)
    batch_s = time.perf_counter() - t0
    lat, cpu = _timed(lambda i: searcher.retrieve(texts[i], query_vector=qvecs[i]), len(texts), latency)
    rec = {"ranked": [list(r.passages[:depth]) for r in res], "ctx": [int(r.context_tokens) for r in res],
           "lat": lat, "batch_s": batch_s, "_results": res}
    if cpu:
        rec["cpu"] = cpu
    return rec


def _baseline_context(rows: list[int], base: Baselines, budget: int) -> list[tuple[str, str]]:
    """Answer context of a passage retriever: its ranked passages up to ``budget`` tokens (at least one)."""
    pairs: list[tuple[str, str]] = []
    used = 0
    for rank, j in enumerate(rows, 1):
        n = base.tokens(j) + 4
        if pairs and used + n > budget:
            break
        pairs.append((str(rank), " ".join(base.texts[j].split())))
        used += n
    return pairs


def _answers(llm: Any, judge: Any, qs: list, contexts: list, label: str) -> list[dict]:
    """Answer each question over its context; EM/F1 against its gold answers, and the judge's verdict."""
    from ..llm.answer import answer_many

    got = answer_many(llm, [(q.question, ctx) for q, ctx in zip(qs, contexts)], stage=f"answer:{label}")
    out = []
    for q, a in zip(qs, got):
        rec = {"answer": a.answer, "error": a.error, "prompt_tokens": a.usage.prompt,
               "completion_tokens": a.usage.completion}
        if q.answers:
            rec["em"] = exact_match(a.answer or "", q.answers)
            rec["f1"] = token_f1(a.answer or "", q.answers)
        out.append(rec)
    if judge is not None:
        idx = [i for i, q in enumerate(qs) if q.answers]
        res = judge.run([judge_request(qs[i].question, qs[i].answers, out[i]["answer"] or "", id=qs[i].id)
                         for i in idx], stage=f"judge:{label}") if idx else []
        for i, r in zip(idx, res):
            out[i]["judge"] = parse_judgement(r)
    return out


def score_batch(b: int, batch: list, methods: Sequence[str], embed: Callable[[list[str]], np.ndarray],
                searchers: Mapping[str, Any], base: Baselines, depth: int, latency: bool, llm: Any = None,
                judge: Any = None, budget: int = 0) -> dict[str, Any]:
    """The record of one batch of questions: each method's ranked passages, context tokens and timings (and
    answers with an LLM). ``searchers``: the searcher of every method that ranks with the index; the
    questions are embedded once by ``embed`` (the index's embedder), for every searcher and ``dense``."""
    texts = [q.question for q in batch]
    rec: dict[str, Any] = {"batch": b, "ids": [q.id for q in batch], "methods": {}}
    qvecs = None
    if any(m not in BASELINES or m == "dense" for m in methods):
        t0 = time.perf_counter()
        qvecs = embed(texts)
        rec["embed_s"] = time.perf_counter() - t0
    for m in methods:
        if m in BASELINES:
            inputs = qvecs if m == "dense" else texts
            rec["methods"][m] = _baseline_batch(base.retrievers[m].scores, inputs, base, depth, latency)
        else:
            rec["methods"][m] = _searcher_batch(searchers[m], texts, qvecs, depth, latency)
    if llm is not None:
        from ..llm.answer import retrieval_context

        for m in methods:
            mr = rec["methods"][m]
            ctxs = ([retrieval_context(r) for r in mr["_results"]] if "_results" in mr else
                    [_baseline_context(rows, base, budget) for rows in mr["_rows"]])
            mr["answers"] = _answers(llm, judge, batch, ctxs, m)
    for m in methods:
        rec["methods"][m].pop("_rows", None)
        rec["methods"][m].pop("_results", None)
    return rec
