"""Query-time retrieval over an opened index.

Pipeline per query: vector entry points (T, S, A, H) + name matches (N, O) + lexical entry points ->
personalisation weights (:mod:`~noderag.search.seeds`) -> native shallow PPR over the combined structural and
semantic layers -> typed selection with quotas and N->A / O->H expansion -> ranked source passages (a list of
stages, :mod:`noderag.search.ranking`) -> context within a token budget.

Node-table columns, passage labels, the name indexes and the BM25 postings are written at build time
(``query/``, :mod:`noderag.search.query_index`) and memory-mapped, so ``Searcher.__init__`` does no O(n)
Python work. A query touches only its seeds' t-hop neighbourhood, a few hundred candidate nodes and the texts
of the nodes it returns.
"""

from __future__ import annotations

import threading
import time
import weakref
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..embed.base import embed_queries
from ..errors import NodeRAGError
from ..graph.types import N_TYPES, NodeType
from ..graph.vectors import THREADED_SHARDS
from ..graph.walk import TypedNeighbours
from ..store.layout import SCRUBBED
from . import forked
from .config import SearchConfig
from .context import assemble_context, header_tokens
from .entities import extract_query_entities
from .lexical import passage_terms, titled, top_scored
from .ranking import IndexView, QueryContext, Ranking, default_stages, stages_named
from .ranking.fill import labels
from .rerank import CrossEncoderReranker
from .result import AnswerResult, RetrievalResult, RetrievedNode, passage_records
from .seeds import seed_weights
from .titles import TitleLinks

__all__ = ["Searcher", "LLMNotConfiguredError"]

_T, _S, _N, _R, _A, _H, _O = (int(t) for t in NodeType)
#: Context-line token counts kept per searcher before the cache starts over (indexes without the build's table).
TOKEN_CACHE_NODES = 1_000_000
_OTHER_TYPES = frozenset((_T, _S, _A, _H))
#: Name matches that merely contain the query entity as whole words weigh this much against exact ones.
CONTAINS_WEIGHT = 0.1
#: PPR's push threshold (:mod:`noderag.graph.ppr`): a node whose propagated mass per row entry is below it spreads
#: nothing, so a step reads at most alpha / PUSH_EPSILON = 50,000 entries whatever the seeds' degrees (a hub seed's
#: thousands of neighbours, each holding ~1e-5 of the mass, no longer fan out again). Chosen by
#: benchmarks/bench_search_cost.py (the PPR tail at 10^5 and 10^6 passages) with bench_retrieval.py (dev recall
#: held; 1e-6 bounds a step to 500,000 entries only).
PUSH_EPSILON = 1e-5


class LLMNotConfiguredError(NodeRAGError, RuntimeError):
    """Raised by ``answer`` when no LLM backend is configured: only retrieval is available."""


class Searcher:
    """Retrieval (and optional answering) over one opened index.

    Parameters
    ----------
    store : IndexStore-like
        Provides ``graph`` (HeteroGraph: ``types``, ``structural``, ``semantic``,
        ``combined(structural_weight, semantic_weight)``), ``nodes`` (pyarrow table with
        ``type``, ``name``, ``text``, ``doc_id``, ``chunk_id``, ``source_id``),
        ``vectors`` (``search(vectors, k, threads=, expansion=) -> (ids, distances)``, cosine distance), and
        ``embedder()``.
    config : SearchConfig or None, default=None
        ``None`` uses the defaults.
    embedder : Embedder or None, default=None
        Overrides ``store.embedder()`` (must be the embedder the index was built with).
    llm : LLMBackend or None, default=None
        Needed by ``answer`` and by ``entity_source="llm"``.
    entity_extractor : callable or None, default=None
        ``str -> list[str]`` query-entity extractor for ``entity_source="nlp"``;
        ``None`` uses :func:`noderag.search.entities.extract_query_entities`.
    stages : list of Stage or None, default=None
        The passage ranking (:mod:`noderag.search.ranking`); ``None``: :func:`~noderag.search.ranking.default_stages`
        for ``config`` (or the stage names of a :class:`~noderag.search.ranking.StagedConfig`). An ablation is
        another list.
    """

    def __init__(
        self,
        store: Any,
        config: SearchConfig | None = None,
        *,
        embedder: Any = None,
        llm: Any = None,
        entity_extractor: Callable[[str], list[str]] | None = None,
        stages: Sequence[Any] | None = None,
    ) -> None:
        from ..tokenize import count_tokens

        self.config = (config if config is not None else SearchConfig()).validate()
        self.store = store
        self.llm = llm
        self._embedder = embedder
        self._embedder_lock = threading.Lock()
        self._count_tokens = header_tokens(count_tokens)  # the package's cl100k_base counter
        self._extract = entity_extractor or default_entity_extractor()
        self._tok_cache: dict[int, int] = {}  # node id -> tokens of its context line
        try:
            graph = _search_graph(store, compact=self.config.semantic_weight == 0)
            self.types = np.ascontiguousarray(np.asarray(graph.types), dtype=np.uint8)
            self.n = int(self.types.shape[0])
            # plain ndarray views of the (memory-mapped) structural layer: cheap scalar indexing
            self._s_indptr = np.asarray(graph.structural.indptr)
            self._s_indices = np.asarray(graph.structural.indices)
            self._operator = self._make_operator(graph)
        except (ValueError, IndexError) as exc:  # a damaged graph file: IndexDamagedError naming it
            if not hasattr(store, "path"):
                raise
            from ..store.verify import graph_damage

            raise graph_damage(store.path, exc) from None
        self.tables = tables = _query_tables(store, self.n)
        self._chunk = tables.chunk
        self._doc = tables.doc
        self._active = tables.active
        self._walk = TypedNeighbours(self._s_indptr, self._s_indices, self.types, self._active)
        self.matcher = tables.names
        self._line_table = getattr(tables, "line_tokens", None)
        self.lexical = self._bind_lexical(tables)
        self._reranker = None
        self._reranker_lock = threading.Lock()
        self._titles: dict[int, str] | None = None  # doc_id -> title, read at the first rerank or title bridge
        self._pool: forked.WorkerPool | None = None  # the processes retrieve_many keeps (_worker_pool)
        self.view = IndexView(self.n, self.types, self._chunk, self._doc, self._active, self._s_indptr, self._walk,
                              store.vectors, self.lexical, tables, self._document_titles,
                              title_columns=self._title_columns)
        table = getattr(tables, "title_table", None)
        if table is not None:  # the build's title links: no O(documents) hashing at the first bridging query
            self.view.cache["title_links"] = TitleLinks.from_table(table, self._active)
        if stages is None:
            names = getattr(self.config, "stages", None)  # a benchmark's stage list (ranking.StagedConfig)
            make = default_stages if names is None else (lambda *a: stages_named(names, *a))
            stages = make(self.config, lambda: self.reranker, self._passage_texts)
        self.ranking = Ranking(stages)
        #: phase -> seconds per query, collected when a dict (benchmarks/bench_search_cost.py)
        self.timings: dict[str, list[float]] | None = None

    def node_texts(self, ids) -> list[str]:
        """Display texts of some nodes (text, else name), reading only those nodes' bytes."""
        return self.tables.texts([int(i) for i in ids])

    # ------------------------------------------------------------------ setup
    def _make_operator(self, graph: Any) -> Any:
        """The combined layer operator, validated and prepared once for the PPR kernel."""
        from ..graph.ppr import PPROperator

        cfg = self.config
        if cfg.semantic_weight > 0 and graph.semantic.nnz == 0:
            built = ((getattr(self.store, "manifest", None) or {}).get("config") or {}).get("semantic") or {}
            if built.get("enabled") is False:
                from ..errors import ConfigError

                raise ConfigError(f"search.semantic_weight = {cfg.semantic_weight} needs the semantic kNN layer, "
                                  "which this index was built without: rebuild it with semantic.enabled = true "
                                  "(or search with search.semantic_weight = 0)")
        csr = graph.combined(structural_weight=1.0, semantic_weight=cfg.semantic_weight)
        # O(n) at open: each row's ids and weights are checked when a query first reads it (a scan of every edge,
        # O(nnz), was most of opening 10^6 passages)
        return PPROperator(csr, self.types, check_edges=False)

    def _bind_lexical(self, tables: Any) -> Any:
        """The passages' BM25 postings, memory-mapped from ``query/`` and bound to the passages' ids."""
        mapped = getattr(tables, "lexical", None)
        if mapped is None:
            raise ValueError(f"{getattr(self.store, 'path', 'the index')}: its query tables have no BM25 postings "
                             "(query/lex_*); rebuild the index")
        t_ids = np.flatnonzero(self.types == _T)  # O(n) numpy, once per open
        mapped.bind_passages(t_ids)
        # a passage of a deleted document may still have postings; when none is, no hit needs the check
        self._lexical_all_live = bool(np.asarray(self._active, dtype=bool)[t_ids].all())
        return mapped

    @property
    def reranker(self) -> Any:
        """The cross-encoder of ``search.rerank`` (loaded at the first query that needs it), or None."""
        if self.config.rerank is None:
            return None
        if self._reranker is None:
            with self._reranker_lock:
                if self._reranker is None:
                    self._reranker = CrossEncoderReranker.from_spec(self.config.rerank)
        return self._reranker

    @property
    def embedder(self) -> Any:
        """The query embedder (the index's, unless one was passed)."""
        if self._embedder is None:
            with self._embedder_lock:  # threads share one embedder (loading a model is costly)
                if self._embedder is None:
                    self._embedder = self.store.embedder()
        return self._embedder

    # ------------------------------------------------------------ public API
    def retrieve(self, query: str, *, query_vector: np.ndarray | None = None) -> RetrievalResult:
        """Retrieve nodes, ranked source passages and a budgeted context for one query."""
        query = _check_query(query, "the question")
        if query_vector is None:
            query_vector = self.embed([query])[0]
        prep = self._prepare([query], np.atleast_2d(query_vector))[0]
        ppr = self._ppr([prep])[0]
        return self._finish(prep, ppr)

    def retrieve_many(self, queries: Sequence[str], *, query_vectors: np.ndarray | None = None) -> list[RetrievalResult]:
        """Retrieve for many queries: one embedding batch, then the rest on the cores ``config.n_threads`` allows.

        Where forking is safe and the batch is large enough (:func:`~noderag.search.forked.batch_workers`), the
        questions are dealt out in turn, one share per process: forked children run theirs (vector search,
        PPR, ranking) beside this process and send their results back; else one vector search and one threaded
        PPR call for all. The results are the same either way; a child's per-stage ``timings`` are not collected.
        The children are kept for the next batch (:class:`~noderag.search.forked.WorkerPool`; :meth:`close`
        ends them).
        """
        if isinstance(queries, str):
            raise TypeError("queries must be a sequence of strings, not one string (use retrieve)")
        queries = [_check_query(q, f"question {i + 1} of {len(queries)}") for i, q in enumerate(queries)]
        if not queries:
            return []
        if query_vectors is None:
            query_vectors = self.embed(queries)
        query_vectors = np.atleast_2d(np.asarray(query_vectors, dtype=np.float32))
        if query_vectors.shape[0] != len(queries):
            raise ValueError(f"query_vectors has {query_vectors.shape[0]} rows for {len(queries)} queries")

        workers = forked.batch_workers(len(queries), self.config.n_threads, rerank=self.config.rerank is not None,
                                       llm=self.config.entity_source == "llm")
        if workers < 2:
            return self._batch(queries, query_vectors)
        one_thread = partial(self._retrievals, threads=1)  # each process on its own core
        with forked.collection_paused():  # here and while the children's results are rebuilt
            return self._worker_pool(workers, one_thread).run(queries, query_vectors, workers, one_thread,
                                                              partial(forked.decode_results, store=self.store))

    def _batch(self, queries: list[str], vectors: np.ndarray) -> list[RetrievalResult]:
        """The retrievals of ``queries`` in this process, on the threads ``config.n_threads`` allows."""
        with forked.collection_paused():
            return list(self._retrievals(queries, vectors))

    def _retrievals(self, queries: list[str], vectors: np.ndarray, threads: int | None = None
                    ) -> Iterator[RetrievalResult]:
        """The retrievals of ``queries`` one by one, after one vector search and one PPR call for all on ``threads``
        threads (None: ``config.n_threads``)."""
        preps = self._prepare(queries, vectors, threads)
        for p, r in zip(preps, self._ppr(preps, threads)):
            yield self._finish(p, r)

    def _worker_pool(self, workers: int, work: Callable[[list[str], np.ndarray], Iterator[RetrievalResult]]
                     ) -> forked.WorkerPool:
        """The forked processes running ``work`` that a batch of ``workers`` shares the work with, forked at the
        first such batch and kept (:class:`~noderag.search.forked.WorkerPool`); forked anew for more workers or a
        changed configuration (the children hold the one they were forked with)."""
        stamp = repr(self.config)
        pool = self._pool
        if pool is None or pool.stamp != stamp or pool.size < workers - 1:
            self.close()
            pool = self._pool = forked.WorkerPool(work, partial(forked.encode_results, doc_of=self._doc),
                                                  workers - 1, stamp)
            self._pool_end = weakref.finalize(self, pool.close)  # at collection or exit, if not closed before
        return pool

    def close(self) -> None:
        """End the forked processes :meth:`retrieve_many` keeps (also done when the searcher is collected or the
        interpreter exits); the searcher stays usable."""
        if self._pool is not None:
            self._pool_end()  # closes the pool, once
            self._pool = None

    def query_context(self, query: str, *, query_vector: np.ndarray | None = None) -> QueryContext:
        """What ``query`` knows when its passages are ranked (entry points, names, BM25, the PPR result): the
        input of the ranking stages."""
        query = _check_query(query, "query")
        if query_vector is None:
            query_vector = self.embed([query])[0]
        ctx = self._prepare([query], np.atleast_2d(query_vector))[0]
        self._with_ppr(ctx, self._ppr([ctx])[0])
        return ctx

    def embed(self, queries: Sequence[str]) -> np.ndarray:
        """Query vectors, float32 of shape (n_queries, dim)."""
        return np.asarray(embed_queries(self.embedder, list(queries)), dtype=np.float32)

    def answer(self, query: str, *, retrieval: RetrievalResult | None = None) -> AnswerResult:
        """One LLM call over the retrieved context; the answer and the node ids it cites.

        Raises
        ------
        LLMNotConfiguredError
            When no LLM backend was given: only retrieval is available.
        """
        from ..llm.answer import answer_many, retrieval_context

        if self.llm is None:
            raise LLMNotConfiguredError(
                "no LLM is configured, so only retrieval is available; pass an LLM spec "
                "(e.g. --llm openai:MODEL@URL) to get answers"
            )
        res = retrieval if retrieval is not None else self.retrieve(query)
        t0 = time.perf_counter()
        out = answer_many(self.llm, [(query, retrieval_context(res))], stage="answer")[0]
        wall = time.perf_counter() - t0
        usage = {"prompt_tokens": out.usage.prompt, "completion_tokens": out.usage.completion,
                 "wall_s": round(wall, 4), "cached": out.cached, "attempts": out.attempts,
                 "invalid_citations": out.invalid_citations}
        return AnswerResult(out.answer, [int(c) for c in out.cited], res, usage, error=out.error)

    # ------------------------------------------------------------- stages
    def query_entities(self, query: str) -> list[str]:
        """Entities of the query by the configured ``entity_source``."""
        src = self.config.entity_source
        if src == "none":
            return []
        if src == "llm":
            from ..llm.prompts import query_entities_request

            if self.llm is None:
                raise LLMNotConfiguredError("search.entity_source = 'llm' needs an LLM backend")
            out = self.llm.run([query_entities_request(query)], stage="query_entities")[0]
            if out.ok and isinstance(out.value, dict):
                return [str(e) for e in out.value.get("entities", []) if str(e).strip()]
            return extract_query_entities(query)
        return list(self._extract(query))

    def _entry_points(self, queries: list[str], vectors: np.ndarray, threads: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
        """The ``vector_top_k`` nearest embedded nodes of each query: (ids, similarities), one row per query, on
        ``threads`` threads (None: ``config.n_threads``; 0: all cores)."""
        cfg = self.config
        if cfg.vector_top_k > 0 and len(self.store.vectors) > 0:
            threads = (cfg.n_threads or 0) if threads is None else threads
            if len(queries) == 1:  # one query's shards on the idle cores (usearch's threads, outside the GIL)
                threads = self._shard_threads(threads)
            ids, dist = self.store.vectors.search(vectors, cfg.vector_top_k, threads=threads,
                                                  expansion=cfg.expansion_search)
            return (np.asarray(ids, dtype=np.int64).reshape(len(queries), -1),
                    (1.0 - np.asarray(dist, dtype=np.float32)).reshape(len(queries), -1))
        return np.zeros((len(queries), 0), np.int64), np.zeros((len(queries), 0), np.float32)

    def _shard_threads(self, allowed: int) -> int:
        """Threads for one query's shard search: 1 below :data:`~noderag.graph.vectors.THREADED_SHARDS` shards, else
        the idle cores, at most ``allowed`` (0: no bound)."""
        if getattr(self.store.vectors, "shards", 1) < THREADED_SHARDS:
            return 1
        idle = forked.available_cores()
        return min(allowed or idle, idle)

    def _prepare(self, queries: list[str], vectors: np.ndarray, threads: int | None = None) -> list[QueryContext]:
        """Each query's context up to PPR: entry points, name matches, BM25 hits and the PPR seeds."""
        t0 = time.perf_counter()
        ids, sims = self._entry_points(queries, vectors, threads)
        self._timed("vector_search", t0, len(queries))
        t0 = time.perf_counter()
        out = [self._context(q, ids[i], sims[i], vectors[i]) for i, q in enumerate(queries)]
        self._timed("prepare", t0, len(queries))
        return out

    def _context(self, query: str, row: np.ndarray, sim: np.ndarray, vector: np.ndarray) -> QueryContext:
        ok = (row >= 0) & (row < self.n)
        row, sim = row[ok], sim[ok]
        ok = self._active[row]
        row, sim = row[ok], sim[ok]
        _, first = np.unique(row, return_index=True)
        first.sort()
        row, sim = row[first], sim[first]
        ents = self.query_entities(query) if self.config.entity_source != "none" else []
        matches = self.matcher.match(ents, query if self.config.entity_source != "none" else None,
                                     limit=self.config.max_name_matches)
        matches = [m for m in matches if self._active[m.node_id]]  # a scrubbing delete's names stay mapped
        name_ids = np.asarray([m.node_id for m in matches], dtype=np.int64)
        rel = np.asarray([CONTAINS_WEIGHT if m.kind == "contains" else 1.0 for m in matches], np.float64)
        terms = sorted(set(passage_terms(query)))
        postings = self._query_postings(terms)
        lex_keys, lex_scores, lex_top, lex_top_s = self._lexical_hits(terms, postings)
        seeds, weights = seed_weights(row, sim, name_ids, rel, lex_top, lex_top_s)
        qv = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(qv))
        return QueryContext(query, ents, row, sim, name_ids, seeds, weights, qv / norm if norm > 0 else qv,
                            lex_keys, lex_scores, lex_top, lex_terms=terms, lex_postings=postings, view=self.view)

    def _query_postings(self, terms: list[str]) -> Any:
        """The query's BM25 postings, read once for its sums and its candidates' impacts (None where the
        lexical index reads them another way)."""
        read = getattr(self.lexical, "query_postings", None)
        return read(terms) if read is not None and terms else None

    def _lexical_hits(self, terms: list[str], postings: Any = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(passages sharing one of the query's BM25 ``terms``, as keys: their ordinals in ``postings`` when the query
        has them, else node ids; their BM25 scores; the ``lexical_top_k`` best as node ids; their scores). Ordinals
        ascend with ids, so ties break alike either way."""
        if postings is not None:
            keys, scores = postings.scores()
        else:
            keys, scores = self.lexical.term_scores(set(terms))
        if not self._lexical_all_live:  # only the active passages
            live = self._active[keys if postings is None else postings.ids(keys)]
            keys, scores = keys[live], scores[live]
        top, top_s = top_scored(keys, scores, self.config.lexical_top_k)
        return keys, scores, (top if postings is None else postings.ids(top)), top_s

    def _timed(self, phase: str, t0: float, n: int = 1) -> None:
        """Record a phase's time (since ``t0``) per query when timings are collected."""
        if self.timings is not None:
            self.timings.setdefault(phase, []).append((time.perf_counter() - t0) / max(n, 1))

    def _k_per_type(self) -> list[int]:
        cfg = self.config
        q = cfg.quotas
        k = [cfg.ppr_candidates] * N_TYPES
        k[_N] = max(q.entities, 1)
        k[_R] = max(q.relationships, 1)
        k[_O] = max(q.overviews, 1)
        for t in (_A, _H):
            k[t] = max(q.others + cfg.vector_top_k, 1)
        return k

    def _ppr(self, preps: list[QueryContext], threads: int | None = None
             ) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """Per-type top-k ids and scores, shape (7, k) each, for every prepared query (None without PPR), a batch
        on ``threads`` threads (None: ``config.n_threads``)."""
        cfg = self.config
        if not cfg.use_ppr:
            return [None] * len(preps)
        kw = dict(k_per_type=self._k_per_type(), alpha=cfg.alpha, iterations=cfg.iterations, rule=cfg.rule,
                  push_epsilon=PUSH_EPSILON)
        todo = [i for i, p in enumerate(preps) if p.seeds.size]
        out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(preps)
        if not todo:
            return out
        t0 = time.perf_counter()
        try:
            if len(todo) == 1:
                p = preps[todo[0]]
                results = [self._operator.query(p.seeds, p.weights, **kw)]
            else:
                results = self._operator.query_batch([preps[i].seeds for i in todo],
                                                     [preps[i].weights for i in todo],
                                                     n_threads=cfg.n_threads if threads is None else threads, **kw)
        except ValueError as exc:  # a damaged row, checked as the kernel reads it: name the graph file
            if not hasattr(self.store, "path"):
                raise
            from ..store.verify import graph_damage

            raise graph_damage(self.store.path, exc) from None
        for i, r in zip(todo, results):
            out[i] = (np.asarray(r.ids), np.asarray(r.scores))
        self._timed("ppr", t0, len(todo))
        return out

    def _line_tokens(self, node: RetrievedNode, line: str) -> int:
        """Token count of a node's context line: the build's table (``query/line_tok``), else counted once per
        node and cached (the cache starts over past :data:`TOKEN_CACHE_NODES` nodes, so a long-serving
        searcher's memory stays bounded)."""
        table = self._line_table
        if table is not None:
            return int(table[node.id])
        n = self._tok_cache.get(node.id)
        if n is None:
            n = self._count_tokens(line)
            if len(self._tok_cache) >= TOKEN_CACHE_NODES:
                self._tok_cache = {}
            self._tok_cache[node.id] = n
        return n

    # ------------------------------------------------------------ selection
    def _selection_candidates(self, prep: QueryContext, ppr: tuple[np.ndarray, np.ndarray] | None
                              ) -> tuple[list[int], dict[int, float]]:
        """The nodes typed selection draws from, best first, and their scores: every live node of the PPR
        result; without PPR the name matches (the entry points are selected first in any case)."""
        if ppr is None:
            return prep.name_ids.tolist(), {i: float(s) for i, s in zip(prep.entry_ids.tolist(),
                                                                        prep.entry_sims.tolist())}
        ids, scores = ppr
        flat_i, flat_s = ids.ravel(), scores.ravel()
        ok = flat_i >= 0
        flat_i, flat_s = flat_i[ok].astype(np.int64), flat_s[ok].astype(np.float64)
        live = self._active[flat_i]
        flat_i, flat_s = flat_i[live], flat_s[live]
        order = np.lexsort((flat_i, -flat_s))
        cand_i = flat_i[order].tolist()
        return cand_i, dict(zip(cand_i, flat_s[order].tolist()))

    def _select(self, prep: QueryContext, ppr: tuple[np.ndarray, np.ndarray] | None) -> list[tuple[int, float, str]]:
        """Typed selection: (node id, score, origin) in priority order, no duplicates."""
        q = self.config.quotas
        entry = prep.entry_ids.tolist()
        cand_i, score = self._selection_candidates(prep, ppr)
        entry_set = set(entry)
        ents: list[int] = []
        rels: list[int] = []
        overs: list[int] = []
        others: list[int] = []
        kinds = self.types[np.asarray(cand_i, dtype=np.int64)].tolist() if cand_i else []
        for nid, t in zip(cand_i, kinds):  # best first, until every quota is full
            if t == _N:
                if len(ents) < q.entities:
                    ents.append(nid)
            elif t == _R:
                if len(rels) < q.relationships:
                    rels.append(nid)
            elif t == _O:
                if len(overs) < q.overviews:
                    overs.append(nid)
            elif t in _OTHER_TYPES and nid not in entry_set and len(others) < q.others:
                others.append(nid)
            if (len(ents) >= q.entities and len(rels) >= q.relationships
                    and len(overs) >= q.overviews and len(others) >= q.others):
                break
        names = set(prep.name_ids.tolist())
        picked: list[tuple[int, float, str]] = []
        seen: set[int] = set()

        def add(nid: int, origin: str) -> None:
            if nid not in seen:
                seen.add(nid)
                picked.append((nid, score.get(nid, 0.0), origin))

        for nid in entry:
            add(nid, "entry")
        for nid in others:
            add(nid, "ppr")
        for group, below, origin in ((ents, _A, "attribute"), (overs, _H, "high_level")):
            owner, found = self._walk(np.asarray(group, dtype=np.int64), below)  # one walk for the group
            split = np.searchsorted(owner, np.arange(len(group) + 1)).tolist()
            found = found.tolist()
            for i, nid in enumerate(group):
                add(nid, "name" if nid in names else "ppr")
                for a in found[split[i]:split[i + 1]]:
                    add(a, origin)
        for nid in rels:
            add(nid, "ppr")
        return picked

    def _rank_passages(self, ctx: QueryContext, ppr: tuple[np.ndarray, np.ndarray] | None
                       ) -> tuple[list[str], list[float], list[int]]:
        """Source passages best first (labels, scores, chunk ids), by the stage list (:mod:`.ranking`)."""
        self._with_ppr(ctx, ppr)
        self.ranking.timings = self.timings
        chunks, scores = self.ranking(ctx)
        ids = chunks.tolist()
        return labels(ctx, ids), scores.tolist(), ids

    def _with_ppr(self, ctx: QueryContext, ppr: tuple[np.ndarray, np.ndarray] | None) -> None:
        cfg = self.config
        ctx.ppr = ppr
        ctx.seed_keep = 1.0 - cfg.alpha if cfg.rule == "restart" else (1.0 - cfg.alpha) ** cfg.iterations

    def _passage_texts(self, chunks: np.ndarray) -> list[str]:
        """Title + text of some passages, as the cross-encoder reads them."""
        return passage_texts(self.store, self.tables, np.asarray(chunks, dtype=np.int64), self._document_titles())

    def _document_titles(self) -> dict[int, str]:
        """doc_id -> title, read once per searcher (the reranker's passages, bridges by title)."""
        if self._titles is None:
            self._titles = document_titles(self.store)
        return self._titles

    def _title_columns(self) -> Any:
        """(doc ids, pyarrow title column) of the documents table, or {} without titles; an opened index reads only
        those two columns (``IndexStore.document_columns``)."""
        read = getattr(self.store, "document_columns", None)
        docs = read(("doc_id", "title")) if read is not None else getattr(self.store, "documents", None)
        if docs is None or "title" not in docs.column_names:
            return {}
        ids = docs.column("doc_id").combine_chunks()
        if ids.null_count:
            raise ValueError(f"{getattr(self.store, 'path', 'the index')}: documents.parquet has null doc_id values")
        # the buffer, not to_numpy: pyarrow's conversion imports pandas (~0.4 s of a first query)
        raw = np.frombuffer(ids.buffers()[1], dtype=np.dtype(str(ids.type)))[ids.offset:ids.offset + len(ids)]
        return raw.astype(np.int64), docs.column("title")

    def _finish(self, ctx: QueryContext, ppr: tuple[np.ndarray, np.ndarray] | None) -> RetrievalResult:
        t0 = time.perf_counter()
        picked = self._select(ctx, ppr)
        ids = [p[0] for p in picked]
        texts = self.tables.texts(ids)  # only the returned nodes' texts are read
        types = self.types[np.asarray(ids, dtype=np.int64)].tolist() if ids else []
        nodes = [RetrievedNode(nid, _NODE_TYPES[t], float(sc), text, origin)
                 for (nid, sc, origin), text, t in zip(picked, texts, types)]
        self._timed("select", t0)
        passages, pscores, pnodes = self._rank_passages(ctx, ppr)
        t0 = time.perf_counter()
        sources = [nid for nid, t in zip(ids, types) if t == _T or t == _S]
        docs_of = self._doc[np.asarray(sources, dtype=np.int64)].tolist() if sources else []
        docs = [self.tables.doc_label(d) for d in dict.fromkeys(d for d in docs_of if d >= 0)]  # first-seen order
        priority = sorted(range(len(nodes)), key=lambda i: (_PRIORITY[nodes[i].origin], i))
        context, n_tok, ctx_ids = assemble_context([nodes[i] for i in priority], self.config.context_tokens,
                                                   self._count_tokens, self._line_tokens)
        best = float(ctx.entry_sims.max()) if ctx.entry_sims.size else None
        min_sim = float(self.config.min_similarity)
        matched = bool(ctx.name_ids.size) or (best is not None and best >= min_sim)
        passages = passage_records(self.store, self.tables, passages, pscores, pnodes)  # titles and texts
        self._timed("context", t0)
        return RetrievalResult(ctx.query, nodes, passages, pscores, pnodes, docs, context, n_tok, ctx_ids,
                               list(ctx.entities), ctx.name_ids.tolist(),
                               generation=getattr(self.store, "generation", None), best_similarity=best,
                               min_similarity=min_sim, matched=matched)


def _query_tables(store: Any, n: int) -> Any:
    """The build's query tables of ``store`` (memory-mapped ``query/``; one table over every segment with
    deltas), checked against the graph's ``n`` nodes."""
    tables = getattr(store, "query_index", None)
    if tables is None and isinstance(getattr(store, "path", None), Path):
        from .segments import open_segment_tables

        tables = open_segment_tables(store)
    if tables is None:
        raise ValueError(f"{getattr(store, 'path', 'the index')}: no query tables (query/); rebuild the index")
    if tables.n != n:
        raise ValueError(f"the query index has {tables.n} nodes but the graph has {n}")
    return tables


def _search_graph(store: Any, compact: bool = False) -> Any:
    """The store's graph; when not loaded yet, memory-mapped without the numba invariant pass.

    The searcher's kernels check what they read themselves (``PPROperator``: indptr and type codes at open, each
    row as a query reads it; the typed walks each row they read), so the graph's own compiled check would only
    repeat it, and loading numba's kernel cache costs ~0.5 s at the first query after open. ``compact``: keep an
    int32 ``indptr`` as mapped (both kernels take it; the int64 copies were ~0.1 s an open at 10^5 passages).
    """
    if "graph" in getattr(store, "__dict__", {}) or not hasattr(store, "path") or getattr(store, "deltas", None):
        return store.graph
    from ..graph.hetero import HeteroGraph

    meta = Path(store.path) / "graph" / "meta.json"
    if not meta.is_file() or (Path(store.path) / SCRUBBED).is_file():  # scrubbed: the store leaves their edges out
        return store.graph
    return HeteroGraph.load(store.path, mmap=True, validate=False, widen=not compact)


def document_titles(store: Any) -> dict[int, str]:
    """doc_id -> title of every document that has one (O(documents): built once per searcher)."""
    docs = getattr(store, "documents", None)
    if docs is None or "title" not in docs.column_names:
        return {}
    return {int(d): t for d, t in zip(docs.column("doc_id").to_pylist(), docs.column("title").to_pylist()) if t}


def passage_texts(store: Any, tables: Any, t_ids: np.ndarray, titles: dict[int, str] | None = None) -> list[str]:
    """Title + text of some T nodes, as the lexical index and the reranker read them."""
    titles = document_titles(store) if titles is None else titles
    doc = np.asarray(tables.doc)[t_ids].tolist()
    return [titled(text, titles.get(d)) for text, d in zip(tables.texts(t_ids), doc)]


_PRIORITY = {"entry": 0, "ppr": 1, "name": 1, "attribute": 2, "high_level": 3}
_NODE_TYPES = tuple(NodeType(t) for t in range(N_TYPES))  # type code -> NodeType, without an enum call per node


def default_entity_extractor() -> Callable[[str], list[str]]:
    """The build's rule-based mention extractor (same rules as the index's entity names)."""
    return extract_query_entities


def _check_query(query: Any, name: str) -> str:
    if not isinstance(query, str):
        raise TypeError(f"{name} must be a str, got {type(query).__name__}")
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates: not Unicode text, and the tokenizer rejects them
        bad = query[exc.start]
        raise ValueError(f"{name} is not valid Unicode: lone surrogate U+{ord(bad):04X} at character {exc.start} "
                         "(decode the input with errors='replace' or fix its encoding)") from None
    if not query.strip():
        raise ValueError(f"{name} is blank: ask something with words in it")
    return query
