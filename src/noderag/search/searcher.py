"""Query-time retrieval over an opened index.

Pipeline per query: vector entry points (T, S, A, H) + name matches (N, O) ->
personalisation weights -> native shallow PPR over the combined structural and
semantic layers -> typed selection with quotas and N->A / O->H expansion ->
ranked source passages -> context within a token budget.

Node-table columns, passage labels and the name indexes are written at build time
(``query/``, :mod:`noderag.search.query_index`) and memory-mapped, so ``Searcher.__init__``
does no O(n) Python work on a built index (an index without them is prepared in memory,
:class:`~noderag.search.tables.InMemoryTables`). A query touches only its seeds' t-hop
neighbourhood, a few hundred candidate nodes and the texts of the nodes it returns.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..embed.base import embed_queries
from ..errors import NodeRAGError
from ..graph.types import N_TYPES, NodeType
from ..graph.walk import TypedNeighbours
from ..store.layout import SCRUBBED
from .bridging import Bridging, source_strengths
from .config import SearchConfig
from .context import assemble_context
from .entities import extract_query_entities
from .lexical import LexicalIndex, passage_terms, titled, top_scored
from .redundancy import content_terms, redundancy_order
from .rerank import CrossEncoderReranker
from .result import AnswerResult, RetrievalResult, RetrievedNode, passage_records

__all__ = ["Searcher", "LLMNotConfiguredError"]

_T, _S, _N, _R, _A, _H, _O = (int(t) for t in NodeType)
#: Context-line token counts kept per searcher before the cache starts over.
TOKEN_CACHE_NODES = 1_000_000
_OTHER_TYPES = frozenset((_T, _S, _A, _H))


class LLMNotConfiguredError(NodeRAGError, RuntimeError):
    """Raised by ``answer`` when no LLM backend is configured: only retrieval is available."""


@dataclass
class _Prepared:
    """Per-query state between entry-point search and PPR (plain arrays)."""

    query: str
    entities: list[str]
    entry_ids: np.ndarray  # int64, vector order
    entry_sims: np.ndarray  # float32
    name_ids: np.ndarray  # int64
    seeds: np.ndarray  # int32
    weights: np.ndarray  # float32
    vector: np.ndarray  # float32 (dim,), L2-normalised query vector
    lex_ids: np.ndarray  # int64, sorted: every passage sharing a term with the query
    lex_scores: np.ndarray  # float64, their BM25 scores
    lex_top: np.ndarray  # int64: the ``lexical_top_k`` best of them, best first
    cosines: dict[int, float] = field(default_factory=dict)  # chunk -> cos(query, chunk), read once per query
    lex_terms: list[str] = field(default_factory=list)  # the query's BM25 terms, sorted


def ranked_passages(total: dict[int, float], uncapped: dict[int, float]) -> list[tuple[int, float]]:
    """``(chunk, score)`` best first: by score, then passages held at the same ceiling in the order of their
    scores without it (``uncapped``), then by chunk id. A ceiling bounds how far a bridge lifts a passage; it
    should not decide the order among the passages it holds, as chunk ids would."""
    return sorted(total.items(), key=lambda kv: (-kv[1], -uncapped.get(kv[0], kv[1]), kv[0]))


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
    """

    def __init__(
        self,
        store: Any,
        config: SearchConfig | None = None,
        *,
        embedder: Any = None,
        llm: Any = None,
        entity_extractor: Callable[[str], list[str]] | None = None,
    ) -> None:
        from ..tokenize import count_tokens

        self.config = (config if config is not None else SearchConfig()).validate()
        self.store = store
        self.llm = llm
        self._embedder = embedder
        self._embedder_lock = threading.Lock()
        self._count_tokens = count_tokens
        self._extract = entity_extractor or default_entity_extractor()
        self._tok_cache: dict[int, int] = {}  # node id -> tokens of its context line
        try:
            graph = _search_graph(store)
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
        # per-node columns, texts, labels and names: memory-mapped from the build's query/ folder,
        # else built in memory from the node table (O(n))
        tables = getattr(store, "query_index", None)
        if tables is None and isinstance(getattr(store, "path", None), Path):
            from .segments import open_segment_tables

            tables = open_segment_tables(store)
        if tables is None:
            from .tables import InMemoryTables

            tables = InMemoryTables(store, self.types)
        elif tables.n != self.n:
            raise ValueError(f"the query index has {tables.n} nodes but the graph has {self.n}")
        self.tables = tables
        self._chunk = tables.chunk
        self._doc = tables.doc
        self._active = tables.active
        self._walk = TypedNeighbours(self._s_indptr, self._s_indices, self.types, self._active)
        self.matcher = tables.names
        self._lexical_all_live = True
        self.lexical = self._lexical_index(tables)
        self._reranker = None
        self._reranker_lock = threading.Lock()
        self._titles: dict[int, str] | None = None  # doc_id -> title, read at the first rerank or title bridge
        self._bridging = Bridging(self.config, n=self.n, chunk=self._chunk, doc=self._doc, active=self._active,
                                  types=self.types, s_indptr=self._s_indptr, walk=self._walk, texts=tables.texts,
                                  titles=self._document_titles, cosines=self._cosines,
                                  lexical_term=self._lexical_term, residual_terms=self._residual_lexical_terms)

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
        csr = graph.combined(structural_weight=cfg.structural_weight, semantic_weight=cfg.semantic_weight)
        return PPROperator(csr, self.types)

    def _lexical_index(self, tables: Any) -> Any:
        """The passages' BM25 postings: memory-mapped from ``query/``, else built here (an older index).

        None when the configuration uses no lexical signal.
        """
        cfg = self.config
        if cfg.lexical_top_k == 0 and cfg.passage_lexical_weight == 0:
            return None
        mapped = getattr(tables, "lexical", None)
        if mapped is not None:
            t_ids = np.flatnonzero(self.types == _T)  # O(n) numpy, once per open
            mapped.bind_passages(t_ids)
            # a passage of a deleted document may still have postings; when none is, no hit needs the check
            self._lexical_all_live = bool(np.asarray(self._active, dtype=bool)[t_ids].all())
            return mapped
        t_ids = np.flatnonzero((self.types == _T) & np.asarray(self._active, dtype=bool))
        lex = LexicalIndex.from_texts(t_ids, passage_texts(self.store, tables, t_ids))
        lex.bind_passages(t_ids)  # only live passages: _lexical_all_live stays True
        return lex

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
        """Retrieve for many queries: one embedding batch, one multi-threaded PPR call."""
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
        preps = self._prepare(queries, query_vectors)
        pprs = self._ppr(preps)
        return [self._finish(p, r) for p, r in zip(preps, pprs)]

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

    def _prepare(self, queries: list[str], vectors: np.ndarray) -> list[_Prepared]:
        cfg = self.config
        k = cfg.vector_top_k
        if k > 0 and len(self.store.vectors) > 0:
            threads = 1 if len(queries) == 1 else (cfg.n_threads or 0)
            ids, dist = self.store.vectors.search(vectors, k, threads=threads, expansion=cfg.expansion_search)
            ids = np.asarray(ids, dtype=np.int64).reshape(len(queries), -1)
            sims = (1.0 - np.asarray(dist, dtype=np.float32)).reshape(len(queries), -1)
        else:
            ids = np.zeros((len(queries), 0), np.int64)
            sims = np.zeros((len(queries), 0), np.float32)
        out = []
        for qi, query in enumerate(queries):
            row, sim = ids[qi], sims[qi]
            ok = (row >= 0) & (row < self.n)
            row, sim = row[ok], sim[ok]
            ok = self._active[row]
            row, sim = row[ok], sim[ok]
            _, first = np.unique(row, return_index=True)
            first.sort()
            row, sim = row[first], sim[first]
            ents = self.query_entities(query) if cfg.entity_source != "none" or cfg.match_names_in_query else []
            matches = self.matcher.match(ents, query if cfg.match_names_in_query else None,
                                         limit=cfg.max_name_matches)
            matches = [m for m in matches if self._active[m.node_id]]  # a scrubbing delete's names stay mapped
            name_ids = np.asarray([m.node_id for m in matches], dtype=np.int64)
            rel = np.asarray([cfg.contains_weight if m.kind == "contains" else 1.0 for m in matches], np.float64)
            terms = sorted(set(passage_terms(query))) if self.lexical is not None else []
            lex_ids, lex_scores, lex_top, lex_top_s = self._lexical_hits(terms)
            seeds, weights = self._seed_weights(row, sim, name_ids, rel, lex_top, lex_top_s)
            qv = np.asarray(vectors[qi], dtype=np.float32)
            norm = float(np.linalg.norm(qv))
            out.append(_Prepared(query, ents, row, sim, name_ids, seeds, weights, qv / norm if norm > 0 else qv,
                                 lex_ids, lex_scores, lex_top, lex_terms=terms))
        return out

    def _lexical_hits(self, terms: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(passages sharing one of the query's BM25 ``terms``, their BM25 scores, the ``lexical_top_k`` best,
        their scores)."""
        if self.lexical is None:
            empty = np.zeros(0, np.int64)
            return empty, np.zeros(0), empty, np.zeros(0)
        ids, scores = self.lexical.term_scores(set(terms))
        if not self._lexical_all_live:  # only the active passages
            live = self._active[ids]
            ids, scores = ids[live], scores[live]
        top, top_s = top_scored(ids, scores, self.config.lexical_top_k)
        return ids, scores, top, top_s

    def _seed_weights(self, entry: np.ndarray, sims: np.ndarray, names: np.ndarray,
                      rel: np.ndarray | None = None, lex: np.ndarray | None = None,
                      lex_scores: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Personalisation: vector hits share ``vector_weight`` by similarity, name hits share ``name_weight``,
        lexical (BM25) passage hits share ``lexical_weight`` by score.

        A name hit's share is proportional to its match weight (``contains_weight`` for
        whole-word containment, 1 otherwise) times ``(1 + degree) ** -name_degree_power``,
        so hub entities with many mentions weigh less.
        """
        cfg = self.config
        parts_i, parts_w = [], []
        if entry.size and cfg.vector_weight > 0:
            s = np.clip(sims, 0.0, None).astype(np.float64)
            s = s / s.sum() if s.sum() > 0 else np.full(entry.size, 1.0 / entry.size)
            parts_i.append(entry)
            parts_w.append(cfg.vector_weight * s)
        if names.size and cfg.name_weight > 0:
            w = np.ones(names.size) if rel is None else np.asarray(rel, np.float64)
            if cfg.name_degree_power > 0:
                w = w * (1.0 + self._degrees(names)) ** (-cfg.name_degree_power)
            if w.sum() > 0:
                parts_i.append(names)
                parts_w.append(cfg.name_weight * w / w.sum())
        if lex is not None and lex.size and cfg.lexical_weight > 0 and float(lex_scores.sum()) > 0:
            parts_i.append(lex)
            parts_w.append(cfg.lexical_weight * lex_scores / lex_scores.sum())
        if not parts_i:
            return np.zeros(0, np.int32), np.zeros(0, np.float32)
        return (np.concatenate(parts_i).astype(np.int32), np.concatenate(parts_w).astype(np.float32))

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

    def _ppr(self, preps: list[_Prepared]) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """Per-type top-k ids and scores, shape (7, k) each, for every prepared query (None without PPR)."""
        cfg = self.config
        if not cfg.use_ppr:
            return [None] * len(preps)
        kw = dict(k_per_type=self._k_per_type(), alpha=cfg.alpha, iterations=cfg.iterations, rule=cfg.rule)
        todo = [i for i, p in enumerate(preps) if p.seeds.size]
        out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(preps)
        if not todo:
            return out
        if len(todo) == 1:
            p = preps[todo[0]]
            results = [self._operator.query(p.seeds, p.weights, **kw)]
        else:
            results = self._operator.query_batch([preps[i].seeds for i in todo], [preps[i].weights for i in todo],
                                                 n_threads=cfg.n_threads, **kw)
        for i, r in zip(todo, results):
            out[i] = (np.asarray(r.ids), np.asarray(r.scores))
        return out

    def _line_tokens(self, node: RetrievedNode, line: str) -> int:
        """Token count of a node's context line, counted once per node and cached (the cache starts over past
        :data:`TOKEN_CACHE_NODES` nodes, so a long-serving searcher's memory stays bounded)."""
        n = self._tok_cache.get(node.id)
        if n is None:
            n = self._count_tokens(line)
            if len(self._tok_cache) >= TOKEN_CACHE_NODES:
                self._tok_cache = {}
            self._tok_cache[node.id] = n
        return n

    # ------------------------------------------------------------ selection
    def _degrees(self, ids: np.ndarray) -> np.ndarray:
        """Structural degree of some nodes (float64), read from indptr: no O(n) array."""
        ids = np.asarray(ids, dtype=np.int64)
        return (self._s_indptr[ids + 1] - self._s_indptr[ids]).astype(np.float64)

    def _typed_neighbours(self, nodes: np.ndarray, node_type: int) -> tuple[np.ndarray, np.ndarray]:
        """Active structural neighbours of type ``node_type`` of many nodes at once: (position in ``nodes``
        of each neighbour's owner, neighbour ids), grouped by owner in adjacency order (the native gather)."""
        return self._walk(nodes, node_type)

    def _neighbours_of_type(self, node: int, node_type: int) -> np.ndarray:
        return self._walk(np.asarray([node], dtype=np.int64), node_type)[1]

    def _select(self, prep: _Prepared, ppr: tuple[np.ndarray, np.ndarray] | None) -> list[tuple[int, float, str]]:
        """Typed selection: (node id, score, origin) in priority order, no duplicates."""
        q = self.config.quotas
        score: dict[int, float] = {}
        entry = prep.entry_ids.tolist()
        if ppr is not None:
            ids, scores = ppr
            flat_i, flat_s = ids.ravel(), scores.ravel()
            ok = flat_i >= 0
            flat_i, flat_s = flat_i[ok].astype(np.int64), flat_s[ok].astype(np.float64)
            live = self._active[flat_i]
            flat_i, flat_s = flat_i[live], flat_s[live]
            order = np.lexsort((flat_i, -flat_s))
            cand_i, cand_s = flat_i[order].tolist(), flat_s[order].tolist()
            score = dict(zip(cand_i, cand_s))
        else:
            cand_i, cand_s = [], []
            score.update({i: float(s) for i, s in zip(entry, prep.entry_sims.tolist())})
            for nid in prep.name_ids.tolist():
                cand_i.append(nid)
                cand_s.append(0.0)
        entry_set = set(entry)
        ents: list[int] = []
        rels: list[int] = []
        overs: list[int] = []
        others: list[int] = []
        for nid in cand_i:
            t = int(self.types[nid])
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
        for nid in ents:
            add(nid, "name" if nid in names else "ppr")
            for a in self._neighbours_of_type(nid, _A).tolist():
                add(a, "attribute")
        for nid in overs:
            add(nid, "name" if nid in names else "ppr")
            for h in self._neighbours_of_type(nid, _H).tolist():
                add(h, "high_level")
        for nid in rels:
            add(nid, "ppr")
        return picked

    def _rank_passages(self, prep: _Prepared, ppr: tuple[np.ndarray, np.ndarray] | None
                       ) -> tuple[list[str], list[float], list[int]]:
        """Source passages best first (see ``noderag.search`` docs: dense + propagated PPR mass + entity bridges).

        1. Candidates: chunks of the entry points and of the PPR top T and S nodes.
        2. Score = ``passage_dense_weight`` * cos(query, chunk) + ``passage_text_weight`` *
           propagated T mass / max + ``passage_unit_weight`` * propagated S mass (summed per
           chunk) / max, where *propagated* excludes the mass a seed keeps for itself.
        3. Entity bridges (:meth:`~noderag.search.bridging.Bridging.bonus`): from the ``bridge_top`` best chunks, the chunks
           about an entity they name and (``about_shared``) the best chunk sharing one with each get
           ``bridge_weight`` * their bridge strength, up to just below the passages dense and lexical
           both rank top (:meth:`~noderag.search.bridging.Bridging.agreed_floor`). Passages held at the
           same ceiling keep the order of their scores without it (not their ids).
        """
        cfg = self.config
        parts_c = [self._chunk[prep.entry_ids]] if prep.entry_ids.size else []
        if prep.lex_top.size:
            parts_c.append(prep.lex_top)
        masses: list[tuple[np.ndarray, np.ndarray]] = []
        if ppr is not None:
            ids, scores = ppr
            keep = 1.0 - cfg.alpha if cfg.rule == "restart" else (1.0 - cfg.alpha) ** cfg.iterations
            seed_u, inv = np.unique(prep.seeds, return_inverse=True)
            seed_m = np.bincount(inv, weights=prep.weights.astype(np.float64), minlength=seed_u.size)
            seed_m *= keep / max(float(prep.weights.sum()), 1e-30)
            for t in (_T, _S):
                row_i, row_s = ids[t], scores[t].astype(np.float64)
                ok = row_i >= 0
                row_i, row_s = row_i[ok], row_s[ok]
                if seed_u.size and row_i.size:
                    pos = np.minimum(np.searchsorted(seed_u, row_i), seed_u.size - 1)
                    row_s = row_s - np.where(seed_u[pos] == row_i, seed_m[pos], 0.0)
                ch = self._chunk[row_i]
                good = ch >= 0
                parts_c.append(ch[good])
                masses.append((ch[good], np.clip(row_s[good], 0.0, None)))
        cands = np.unique(np.concatenate(parts_c)) if parts_c else np.zeros(0, np.int64)
        cands = cands[cands >= 0]
        if not cands.size:
            return [], [], []
        chunks = cands
        score = cfg.passage_dense_weight * self._cosines(chunks, prep)
        share = self._lexical_share(chunks, prep)  # read once: the mass's evidence and the BM25 term
        evidence = share if cfg.passage_mass_lexical else None
        for (ch, m), w in zip(masses, (cfg.passage_text_weight, cfg.passage_unit_weight)):
            if w <= 0 or not ch.size:
                continue
            acc = np.zeros(chunks.size)
            np.add.at(acc, np.searchsorted(chunks, ch), m)
            top = acc.max()
            if top > 0:
                score = score + w * acc / top * (1.0 if evidence is None else evidence)
        if share is not None and cfg.passage_lexical_weight > 0:
            score = score + cfg.passage_lexical_weight * share  # _lexical_term, without a second look-up
        total = dict(zip(chunks.tolist(), score.tolist()))
        uncapped: dict[int, float] = {}  # a bridged passage held at a ceiling -> its score without the ceiling
        if cfg.bridge_top > 0 and cfg.bridge_weight > 0:
            order = np.lexsort((chunks, -score))[: cfg.bridge_top]
            hop1 = [int(chunks[i]) for i in order]
            strengths = source_strengths([float(score[i]) for i in order]) if cfg.bridge_source_strength else None
            bonus, follows = self._bridging.bonus(hop1, prep, strengths)
            new = np.fromiter((c for c in bonus if c not in total), dtype=np.int64)
            if new.size:
                new.sort()
                base = cfg.passage_dense_weight * self._cosines(new, prep) + self._lexical_term(new, prep)
                total.update(zip(new.tolist(), base.tolist()))
            cap = self._bridging.agreed_floor(chunks, total, prep)
            below_hop1 = min(cap, min(total[h] for h in hop1) - 1e-9)
            for c, b in bonus.items():
                top = below_hop1 if c in follows else cap
                if total[c] < top:
                    lifted = total[c] + cfg.bridge_weight * min(b, 1.0)
                    if lifted > top:
                        uncapped[c] = lifted
                    total[c] = min(lifted, top)
        ranked = ranked_passages(total, uncapped)
        if cfg.redundancy_top > 0 and len(ranked) > 1:
            ranked = self._without_redundancy(ranked, prep)
        labels: list[str] = []
        scores_out: list[float] = []
        chunks_out: list[int] = []
        seen: set[str] = set()
        for (c, s), lab in zip(ranked, self.tables.labels([c for c, _ in ranked])):
            if lab is None or lab in seen:
                continue
            seen.add(lab)
            labels.append(lab)
            scores_out.append(s)
            chunks_out.append(c)
        if len(labels) < cfg.min_passages:
            self._fill(prep, total, seen, labels, scores_out, chunks_out)
        if self.reranker is not None and labels:
            self._rerank(prep.query, labels, scores_out, chunks_out)
        return labels, scores_out, chunks_out

    def _without_redundancy(self, ranked: list[tuple[int, float]], prep: _Prepared) -> list[tuple[int, float]]:
        """``ranked`` re-ordered by :func:`~noderag.search.redundancy.redundancy_order` (its first
        ``redundancy_top`` positions one at a time): a passage matching no content word of the question that
        the passages above it lack, and no closer to the query vector than they are, loses its BM25 credit."""
        chunks = np.fromiter((c for c, _ in ranked), dtype=np.int64, count=len(ranked))
        share = self._lexical_share(chunks, prep)
        if share is None or self.config.passage_lexical_weight <= 0:
            return ranked
        scores = np.fromiter((s for _, s in ranked), dtype=np.float64, count=len(ranked))
        terms = content_terms(prep.lex_terms)
        if not terms:
            return ranked
        matched = self.lexical.term_impacts(terms, chunks) > 0
        order, adjusted = redundancy_order(scores, self.config.passage_lexical_weight * share, matched,
                                           self._cosines(chunks, prep), self.config.redundancy_top)
        return [(int(chunks[i]), a) for i, a in zip(order.tolist(), adjusted.tolist())]

    def _rerank(self, query: str, labels: list[str], scores: list[float], chunks: list[int]) -> None:
        """Reorder the ``rerank_top`` best passages by the cross-encoder (in place); their scores become
        its logits, and the passages after them keep their order below the lowest of those."""
        top = min(self.config.rerank_top, len(labels))
        texts = passage_texts(self.store, self.tables, np.asarray(chunks[:top], dtype=np.int64),
                              self._document_titles())
        logits = self.reranker.score(query, texts).astype(np.float64)
        order = np.argsort(-logits, kind="stable").tolist()
        labels[:top] = [labels[i] for i in order]
        chunks[:top] = [chunks[i] for i in order]
        head = [float(logits[i]) for i in order]
        rest = scores[top:]
        scores[:] = head + [head[-1] - 1.0 - (rest[0] - r) for r in rest]

    def _fill(self, prep: _Prepared, ranked: dict[int, float], seen: set[str], labels: list[str],
              scores: list[float], chunks: list[int]) -> None:
        """Extend a short passage list to ``min_passages`` from the lexical and dense rankings.

        The graph's candidates run out on small corpora and on questions whose seeds reach few
        passages; the next passages are those BM25 and the query vector rank best (scored as
        any candidate: dense + lexical), appended after the graph's.
        """
        cfg = self.config
        want = cfg.min_passages - len(labels)
        parts = [prep.lex_ids[np.argsort(-prep.lex_scores, kind="stable")][: 4 * cfg.min_passages]]
        vecs = self.store.vectors
        if len(vecs) > 0:
            k = min(8 * cfg.min_passages, len(vecs))
            ids, _ = vecs.search(prep.vector[None, :], k, threads=1, expansion=max(cfg.expansion_search, k))
            ids = np.asarray(ids, dtype=np.int64).ravel()
            ids = ids[(ids >= 0) & (ids < self.n)]
            parts.append(self._chunk[ids[self._active[ids]]])
        extra = np.unique(np.concatenate(parts))
        extra = extra[extra >= 0]
        extra = extra[np.fromiter((c not in ranked for c in extra.tolist()), dtype=bool, count=extra.size)]
        if not extra.size:
            return
        base = cfg.passage_dense_weight * self._cosines(extra, prep) + self._lexical_term(extra, prep)
        floor = scores[-1] if scores else 0.0
        for i in np.lexsort((extra, -base)).tolist():
            lab = self.tables.label(int(extra[i]))
            if lab is None or lab in seen:
                continue
            seen.add(lab)
            labels.append(lab)
            scores.append(min(float(base[i]), floor))  # after every graph candidate: scores stay non-increasing
            floor = scores[-1]
            chunks.append(int(extra[i]))
            want -= 1
            if want == 0:
                return

    def _document_titles(self) -> dict[int, str]:
        """doc_id -> title, read once per searcher (the reranker's passages, bridges by title)."""
        if self._titles is None:
            self._titles = document_titles(self.store)
        return self._titles

    def _lexical_term(self, chunks: np.ndarray, prep: _Prepared) -> np.ndarray:
        """``passage_lexical_weight`` * BM25(query, chunk) / the query's best BM25, for ``chunks`` in any order."""
        w = self.config.passage_lexical_weight
        share = self._lexical_share(chunks, prep) if w > 0 else None
        return np.zeros(chunks.shape[0]) if share is None else w * share

    def _residual_lexical_term(self, source: int, chunks: np.ndarray, prep: _Prepared) -> np.ndarray:
        """:meth:`_lexical_term` without the query terms the ``source`` passage matches (BM25 over the other terms
        / the query's best BM25), for ``chunks`` in any order: how well each chunk fits what the question asks
        beyond the source (0 when the source matches every term)."""
        return self._residual_lexical_terms([(source, chunks)], prep)[0]

    def _residual_lexical_terms(self, groups: list[tuple[int, np.ndarray]], prep: _Prepared) -> list[np.ndarray]:
        """:meth:`_residual_lexical_term` of each ``(source, chunks)`` pair, in one read of the terms' postings
        for every source and chunk together."""
        w = self.config.passage_lexical_weight
        sizes = [int(np.asarray(chunks).shape[0]) for _, chunks in groups]
        top = float(prep.lex_scores.max()) if prep.lex_scores.size else 0.0
        if self.lexical is None or w <= 0 or not sum(sizes) or not prep.lex_terms or top <= 0:
            return [np.zeros(k) for k in sizes]
        ids = np.concatenate([np.concatenate([[source], chunks]) for source, chunks in groups]).astype(np.int64)
        impacts = self.lexical.term_impacts(prep.lex_terms, ids)
        out, at = [], 0
        for k in sizes:
            block, at = impacts[:, at:at + 1 + k], at + 1 + k
            rest = block[:, 0] <= 0  # the terms the source does not match
            out.append(w * block[rest, 1:].sum(axis=0) / top)
        return out

    def _lexical_share(self, chunks: np.ndarray, prep: _Prepared) -> np.ndarray | None:
        """BM25(query, chunk) / the query's best BM25 for ``chunks`` in any order (0 without a shared term);
        None when the query has no lexical hit at all (nothing to weigh the graph's mass by)."""
        if not prep.lex_ids.size or not chunks.size or float(prep.lex_scores.max()) <= 0:
            return None
        pos = np.minimum(np.searchsorted(prep.lex_ids, chunks), prep.lex_ids.size - 1)
        return np.where(prep.lex_ids[pos] == chunks, prep.lex_scores[pos], 0.0) / float(prep.lex_scores.max())

    def _cosines(self, chunks: np.ndarray, prep: _Prepared) -> np.ndarray:
        """:meth:`_dense` of some chunks for one query, each chunk's vector read once per query (the
        candidates, bridges, title links and the fill ask for overlapping sets)."""
        memo = prep.cosines
        ids = chunks.tolist()
        missing = [c for c in ids if c not in memo]
        if missing:
            memo.update(zip(missing, self._dense(np.asarray(missing, dtype=np.int64), prep.vector).tolist()))
        return np.fromiter((memo[c] for c in ids), dtype=np.float64, count=len(ids))

    def _dense(self, chunks: np.ndarray, vector: np.ndarray) -> np.ndarray:
        """Query similarity of some T nodes: the cosine with each one's stored vector (0 when not stored),
        averaged with its best semantic unit's (``passage_unit_similarity``; units are its S neighbours)."""
        if not self.config.passage_unit_similarity or chunks.size == 0:
            return self._stored_cosines(chunks, vector)
        owner, units = self._typed_neighbours(chunks, _S)
        cos = self._stored_cosines(np.concatenate([chunks, units]), vector)  # one look-up per shard
        own = cos[:chunks.size]
        if not units.size:
            return own
        best = np.full(chunks.shape[0], -np.inf)
        np.maximum.at(best, owner, cos[chunks.size:])
        return np.where(np.isfinite(best), 0.5 * (own + best), own)

    def _stored_cosines(self, ids: np.ndarray, vector: np.ndarray) -> np.ndarray:
        """Cosine similarity of the query with the stored vectors of some nodes (0 when not stored)."""
        if ids.size == 0:
            return np.zeros(0)
        vecs = self.store.vectors
        try:  # T and S nodes are always embedded: one look-up in the common case
            rows = np.asarray(vecs.get(ids), dtype=np.float64)
            return rows @ vector.astype(np.float64)
        except ValueError:
            present = np.asarray(vecs.contains(ids), dtype=bool)
        out = np.zeros(ids.shape[0])
        if present.any():
            rows = np.asarray(vecs.get(ids[present]), dtype=np.float64)
            out[present] = rows @ vector.astype(np.float64)
        return out

    def _finish(self, prep: _Prepared, ppr: tuple[np.ndarray, np.ndarray] | None) -> RetrievalResult:
        picked = self._select(prep, ppr)
        ids = [p[0] for p in picked]
        texts = self.tables.texts(ids)  # only the returned nodes' texts are read
        types = self.types[np.asarray(ids, dtype=np.int64)].tolist() if ids else []
        nodes = [RetrievedNode(nid, _NODE_TYPES[t], float(sc), text, origin)
                 for (nid, sc, origin), text, t in zip(picked, texts, types)]
        passages, pscores, pnodes = self._rank_passages(prep, ppr)
        sources = [nid for nid, t in zip(ids, types) if t == _T or t == _S]
        docs_of = self._doc[np.asarray(sources, dtype=np.int64)].tolist() if sources else []
        docs = [self.tables.doc_label(d) for d in dict.fromkeys(d for d in docs_of if d >= 0)]  # first-seen order
        priority = sorted(range(len(nodes)), key=lambda i: (_PRIORITY[nodes[i].origin], i))
        context, n_tok, ctx_ids = assemble_context([nodes[i] for i in priority], self.config.context_tokens,
                                                   self._count_tokens, self._line_tokens)
        best = float(prep.entry_sims.max()) if prep.entry_sims.size else None
        min_sim = float(self.config.min_similarity)
        matched = bool(prep.name_ids.size) or (best is not None and best >= min_sim)
        passages = passage_records(self.store, self.tables, passages, pscores, pnodes)  # titles and texts
        return RetrievalResult(prep.query, nodes, passages, pscores, pnodes, docs, context, n_tok, ctx_ids,
                               list(prep.entities), prep.name_ids.tolist(),
                               generation=getattr(self.store, "generation", None), best_similarity=best,
                               min_similarity=min_sim, matched=matched)


def _search_graph(store: Any) -> Any:
    """The store's graph; when not loaded yet, memory-mapped without the numba invariant pass.

    The searcher validates the layer PPR runs on itself (``PPROperator``: numpy checks of indptr,
    column ranges, weights and type codes, O(nnz)), so the graph's own compiled check would only
    repeat it, and loading numba's kernel cache costs ~0.5 s at the first query after open.
    """
    if "graph" in getattr(store, "__dict__", {}) or not hasattr(store, "path") or getattr(store, "deltas", None):
        return store.graph
    from ..graph.hetero import HeteroGraph

    meta = Path(store.path) / "graph" / "meta.json"
    if not meta.is_file() or (Path(store.path) / SCRUBBED).is_file():  # scrubbed: the store leaves their edges out
        return store.graph
    return HeteroGraph.load(store.path, mmap=True, validate=False)


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
