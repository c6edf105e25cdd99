"""Search configuration: the settings a user changes, one plain dataclass validated from one constraint table.

The tuning constants of passage ranking (how much a bridge may lift a passage, the weight of BM25 against the
query vector, ...) are not settings: each lives in the ranking stage that uses it
(:mod:`noderag.search.ranking`), with the reason it has its value.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

from ..errors import ConfigError
from .keys import reject_unknown_keys
from ..graph.ppr import DEFAULT_RULE, RULES as _RULES

__all__ = ["SearchConfig", "QuotaConfig", "CONSTRAINTS"]



def _int(lo: int) -> tuple[str, Any]:
    return f"an int >= {lo}", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= lo


def _real(lo: float, hi: float) -> tuple[str, Any]:
    return (f"a number in [{lo:g}, {hi:g}]",
            lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi)


def _one_of(*choices: Any) -> tuple[str, Any]:
    return f"one of {choices}", lambda v: isinstance(v, str) and v in choices


_BOOL = ("true or false", lambda v: isinstance(v, bool))
_NONNEG = ("a number >= 0", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0)
_SPEC = ("None or a reranker spec string", lambda v: v is None or (isinstance(v, str) and bool(v.strip())))
_THREADS = ("None or an int >= 1", lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1))

#: Every field's constraint, in the manner of scikit-learn's ``_parameter_constraints``: field -> (what it
#: must be, in words; the check). :meth:`SearchConfig.validate` reads this table and nothing else.
CONSTRAINTS: dict[str, tuple[str, Any]] = {
    "vector_top_k": _int(0), "expansion_search": _int(1), "lexical_top_k": _int(0),
    "entity_source": _one_of("nlp", "llm", "none"), "max_name_matches": _int(0),
    "use_ppr": _BOOL, "alpha": _real(0.0, 1.0), "iterations": _int(0), "rule": _one_of(*_RULES),
    "semantic_weight": _NONNEG, "ppr_candidates": _int(1), "bridging": _BOOL, "min_passages": _int(0),
    "rerank": _SPEC, "rerank_top": _int(1), "context_tokens": _int(0), "min_similarity": _real(-1.0, 1.0),
    "n_threads": _THREADS,
}
QUOTA_CONSTRAINT = _int(0)


@dataclass
class QuotaConfig:
    """How many nodes of each kind the typed selection keeps after PPR.

    The defaults are the reference NodeRAG's: entities 10, relationships 30,
    overviews 10, and 10 other retrievable nodes (T, S, A, H) beyond the entry points.
    """

    entities: int = 10
    relationships: int = 30
    overviews: int = 10
    others: int = 10

    def validate(self) -> None:
        """Raise ``ConfigError`` (a ``ValueError``) naming the bad quota and its value."""
        what, ok = QUOTA_CONSTRAINT
        for f in fields(self):
            value = getattr(self, f.name)
            if not ok(value):
                raise ConfigError(f"search.quotas.{f.name} must be {what}, got {value!r}")


@dataclass
class SearchConfig:
    """The settings of query-time retrieval a user would change; defaults are the benchmarked ones.

    Attributes
    ----------
    vector_top_k : int, default=10
        Entry points: nearest embedded nodes (passages, units, attributes, summaries) of the query vector.
    expansion_search : int, default=128
        HNSW search beam. With indexes built at ``embed.expansion_add`` 64, a beam of 128 recovers the recall
        the cheaper build gives up, for ~0.05 ms a query (benchmarks/bench_hnsw_leiden.py).
    lexical_top_k : int, default=10
        Lexical entry points: the best BM25 passages of the question (words for English, the segmenter's words
        for Chinese). 0 turns the lexical entry points off (BM25 still scores the candidates).
    entity_source : {"nlp", "llm", "none"}, default="nlp"
        How query entities are extracted; "llm" needs an LLM backend. Names the question contains as whole
        words are matched in every case but "none".
    max_name_matches : int, default=8
        At most this many entity / overview nodes matched per query entity (shortest names first).
    use_ppr : bool, default=True
        Run shallow personalised PageRank; without it only entry points and name matches are used.
    alpha, iterations, rule
        Shallow PPR damping, number of steps t and update rule ("restart" | "lazy").
    semantic_weight : float, default=0.0
        Weight of the semantic kNN layer in the operator PPR walks (the structural layer weighs 1); > 0 needs
        an index built with the semantic layer.
    ppr_candidates : int, default=30
        Top-k per node type the PPR kernel returns (>= every quota).
    quotas : QuotaConfig
        Typed selection quotas.
    bridging : bool, default=True
        The bridging round: from the best first-round passages to the passages they lead to (the passage about
        an entity they name, one sharing a rare entity, the article whose title they name), for questions
        whose answer takes a second hop.
    min_passages : int, default=10
        A query returns at least this many passages when the corpus has them: when the graph's candidates
        run out, the list is filled from the lexical and dense rankings.
    rerank : str or None, default=None
        Cross-encoder spec (:class:`noderag.search.rerank.CrossEncoderReranker`) that reorders the
        ``rerank_top`` best passages; off by default.
    rerank_top : int, default=20
    context_tokens : int, default=2500
        Token budget of the assembled context text.
    min_similarity : float, default=0.3
        A result is ``matched`` (confident) when a name matched or its best entry-point cosine similarity
        reaches this (benchmarks/results/query_similarity.md: real questions score >= 0.26, median 0.38, with
        the default embedder; junk queries 0.14-0.34, median 0.2).
    n_threads : int or None
        Cores a batch (``retrieve_many``) uses: the threads of its vector search and PPR, and the processes its
        questions are split over where forking is safe (:mod:`noderag.search.forked`); and the threads a single
        query's vector search spreads a sharded index over (usearch's own, outside the GIL). 1 keeps one process
        and one thread (None: the cores other work leaves idle).
    """

    vector_top_k: int = 10
    expansion_search: int = 128
    lexical_top_k: int = 10
    entity_source: str = "nlp"
    max_name_matches: int = 8
    use_ppr: bool = True
    alpha: float = 0.5
    iterations: int = 2
    rule: str = DEFAULT_RULE
    semantic_weight: float = 0.0
    ppr_candidates: int = 30
    quotas: QuotaConfig = field(default_factory=QuotaConfig)
    bridging: bool = True
    min_passages: int = 10
    rerank: str | None = None
    rerank_top: int = 20
    context_tokens: int = 2500
    min_similarity: float = 0.3
    n_threads: int | None = None

    def validate(self) -> "SearchConfig":
        """Check every field against :data:`CONSTRAINTS`; raise ``ConfigError`` (a ``ValueError``) naming the
        field and its value. Returns self."""
        for name, (what, ok) in CONSTRAINTS.items():
            value = getattr(self, name)
            if not ok(value):
                raise ConfigError(f"search.{name} must be {what}, got {value!r}")
        if not isinstance(self.quotas, QuotaConfig):
            raise ConfigError(f"search.quotas must be a QuotaConfig, got {type(self.quotas).__name__}")
        self.quotas.validate()
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict of every field."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "SearchConfig":
        """Build from a mapping (e.g. the ``[search]`` table of a config file); unknown keys are errors."""
        data = dict(data or {})
        reject_unknown_keys(data, cls, "search")
        quotas = data.pop("quotas", None)
        if isinstance(quotas, Mapping):
            reject_unknown_keys(quotas, QuotaConfig, "search.quotas")
            quotas = QuotaConfig(**quotas)
        elif quotas is None:
            quotas = QuotaConfig()
        return cls(quotas=quotas, **data).validate()

    def replace(self, **changes: Any) -> "SearchConfig":
        """Copy with some fields changed (validated)."""
        data = self.to_dict()
        data.update(changes)
        if isinstance(data.get("quotas"), QuotaConfig):
            data["quotas"] = asdict(data["quotas"])
        return type(self).from_dict(data)
