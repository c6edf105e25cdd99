"""What passage ranking reads: the index's side (:class:`IndexView`, one per searcher) and the query's
(:class:`QueryContext`, one per query), so that no stage calls back into the searcher."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

import numpy as np
from threadpoolctl import ThreadpoolController

from ...graph.types import NodeType

__all__ = ["IndexView", "QueryContext"]

_T, _S = int(NodeType.T), int(NodeType.S)
#: BLAS threads for the query-vector products: one. A second thread saves nothing on a few hundred rows, and after the
#: product it spins for a while, taking a core from the query on a busy machine.
_BLAS = ThreadpoolController()


def _product(rows: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``rows @ vector`` on one BLAS thread."""
    with _BLAS.limit(limits=1, user_api="blas"):
        return rows @ vector


@dataclass
class IndexView:
    """The per-node columns, graph walk, vectors, BM25 postings and titles one searcher ranks with.

    ``walk(nodes, node_type) -> (owner positions, neighbour ids)`` gives the active typed neighbours
    (:class:`~noderag.graph.walk.TypedNeighbours`); ``tables`` the texts and labels
    (:class:`~noderag.search.query_index.QueryIndex`); ``titles()`` doc_id -> title, read once when first asked;
    ``title_columns()`` the same as columns.
    """

    n: int
    types: np.ndarray
    chunk: np.ndarray
    doc: np.ndarray
    active: np.ndarray
    s_indptr: np.ndarray
    walk: Callable[[Any, int], tuple[np.ndarray, np.ndarray]]
    vectors: Any
    lexical: Any
    tables: Any
    titles: Callable[[], dict[int, str]]
    cache: dict = field(default_factory=dict)  # what stages keep per searcher (title links, name flags)
    #: () -> (doc ids, pyarrow title column) of the documents table, or None: the title links read the column's
    #: bytes instead of a dict of every title (O(documents) Python at the first bridging query)
    title_columns: Callable[[], Any] | None = None

    def stored_cosines(self, ids: np.ndarray, vector: np.ndarray) -> np.ndarray:
        """Cosine similarity of the query with the stored vectors of some nodes (0 when not stored)."""
        if ids.size == 0:
            return np.zeros(0)
        try:  # passages and units are always embedded: one look-up in the common case
            rows = np.asarray(self.vectors.get(ids), dtype=np.float64)
            return _product(rows, vector.astype(np.float64))
        except ValueError:
            present = np.asarray(self.vectors.contains(ids), dtype=bool)
        out = np.zeros(ids.shape[0])
        if present.any():
            rows = np.asarray(self.vectors.get(ids[present]), dtype=np.float64)
            out[present] = _product(rows, vector.astype(np.float64))
        return out


@dataclass
class QueryContext:
    """What one query knows when its passages are ranked.

    Filled before ranking: the query text, its entities, vector entry points, name matches, PPR seeds, the
    unit-norm query vector, its BM25 terms and hits, the PPR result. Filled by stages: the fit weights the
    stage list gives (:mod:`~noderag.search.ranking.fit`), the first-round passages bridges start from and
    what each bridge added, and the scores a ceiling held passages below (``uncapped``, for ties).
    """

    query: str
    entities: list[str]
    entry_ids: np.ndarray  # int64, vector order
    entry_sims: np.ndarray  # float32
    name_ids: np.ndarray  # int64
    seeds: np.ndarray  # int32
    weights: np.ndarray  # float32
    vector: np.ndarray  # float32 (dim,), L2-normalised
    lex_keys: np.ndarray  # int64, sorted: every passage sharing a term with the query (lex_key_of)
    lex_scores: np.ndarray  # float64, their BM25 scores
    lex_top: np.ndarray  # int64: the lexical entry points, best first
    lex_terms: list[str] = field(default_factory=list)  # the query's BM25 terms, sorted
    lex_postings: Any = None  # their postings, read once (lexical.QueryPostings), or None
    view: IndexView | None = None
    ppr: tuple[np.ndarray, np.ndarray] | None = None  # per-type top ids and scores, (7, k) each
    seed_keep: float = 0.0  # the share of its personalisation mass a seed keeps through the walk
    dense_weight: float = 0.0
    lexical_weight: float = 0.0
    cosines: dict[int, float] = field(default_factory=dict)  # chunk -> its query similarity, once per query
    first: dict[int, float] = field(default_factory=dict)  # first-round scores (before bridges)
    hop1: list[int] = field(default_factory=list)  # the passages bridges start from
    bridged: dict[int, tuple[float, float]] = field(default_factory=dict)  # chunk -> (score before, lifted)
    uncapped: dict[int, float] = field(default_factory=dict)  # chunk held at a ceiling -> its score without it
    labels: dict[int, str | None] = field(default_factory=dict)  # chunk -> its source label, read once per query

    def lex_key_of(self, chunks: np.ndarray) -> np.ndarray:
        """The keys of some passages in :attr:`lex_keys`: their ordinals in the query's postings where it has them
        (-1 for no bound passage), else their node ids."""
        postings = self.lex_postings
        return np.asarray(chunks, dtype=np.int64) if postings is None else postings.ordinals(chunks)

    def lex_id_of(self, keys: np.ndarray) -> np.ndarray:
        """The node ids of some :attr:`lex_keys`."""
        postings = self.lex_postings
        return np.asarray(keys, dtype=np.int64) if postings is None else postings.ids(keys)

    @cached_property
    def lex_best(self) -> float:
        """The query's best BM25 score (0 without a lexical hit); the stages ask for it a few times a query."""
        return float(self.lex_scores.max()) if self.lex_scores.size else 0.0
