"""Search configuration: one plain dataclass, loadable from a dict (TOML/YAML section)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

__all__ = ["SearchConfig", "QuotaConfig"]

from ..errors import ConfigError
from ..graph.ppr import DEFAULT_RULE, RULES as _RULES

_ENTITY_SOURCES = ("nlp", "llm", "none")
_BRIDGE_MODES = ("about_shared", "about", "shared")


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
        """Raise ``ConfigError`` (a ``ValueError``) naming the bad quota."""
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"search.quotas.{f.name} must be an int >= 0, got {value!r}")


@dataclass
class SearchConfig:
    """Every knob of query-time retrieval; defaults are the benchmarked ones.

    Attributes
    ----------
    vector_top_k : int, default=10
        Entry points: nearest embedded nodes (T, S, A, H) of the query vector.
    expansion_search : int, default=128
        HNSW search beam (usearch's default is 64). With indexes built at ``embed.expansion_add``
        64, a beam of 128 recovers the recall the cheaper build gives up, for ~0.05 ms a query
        (benchmarks/bench_hnsw_leiden.py).
    vector_weight : float
        Personalisation mass given to the vector entry points (split by similarity).
    name_weight : float
        Personalisation mass given to the entity / overview name matches.
    max_name_matches : int
        At most this many N/O nodes matched per query entity (shortest names first).
    contains_weight : float
        Relative seed weight of a whole-word containment match (exact and in-query matches: 1).
    name_degree_power : float
        Name seeds are weighted by ``(1 + degree) ** -name_degree_power`` (0: uniform).
    entity_source : {"nlp", "llm", "none"}
        How query entities are extracted; "llm" needs an LLM backend.
    match_names_in_query : bool
        Also match every known name that occurs as a whole-word phrase in the query.
    use_ppr : bool
        Run shallow PPR; without it only entry points and name matches are used.
    alpha, iterations, rule
        Shallow PPR damping, iteration count t and update rule ("restart" | "lazy").
    structural_weight, semantic_weight : float
        Layer weights of the combined operator PPR runs on.
    ppr_candidates : int
        Top-k per type returned by the PPR kernel (>= every quota).
    quotas : QuotaConfig
        Typed selection quotas.
    passage_dense_weight, passage_text_weight, passage_unit_weight : float
        Source-passage score: cosine(query, chunk) + propagated T mass + propagated S mass
        summed per chunk (both normalised by their maximum).
    passage_unit_similarity : bool, default=True
        A passage's cosine with the query is the mean of its own vector's and its best semantic unit's
        (the unit that says what the question asks outweighs the rest of a long passage); False: its own alone.
    passage_mass_lexical : bool, default=True
        A passage's propagated T and S mass counts in proportion to its own BM25 against the question
        (over the question's best; graph proximity to the seeds AND the passage's own evidence), so a
        hub passage near the seeds that shares no word with the question is not carried up by the walk
        alone. False, or a question without any lexical hit: the mass counts whole.
    lexical_top_k : int, default=10
        Lexical entry points: the best BM25 passages of the question (``query/lex_*``; words for
        English, the segmenter's words for Chinese). 0 turns the lexical signal off.
    lexical_weight : float, default=0.5
        Personalisation mass given to the lexical entry points (split by BM25 score).
    passage_lexical_weight : float, default=0.5
        Source-passage score term: BM25(question, passage) / the question's best BM25.
    min_passages : int, default=10
        A query returns at least this many passages when the corpus has them: when the graph's
        candidates run out, the list is filled from the lexical and dense rankings.
    redundancy_top : int, default=10
        The first positions of the passage list are filled one at a time, and a passage that matches no
        content word of the question the passages above it do not already match, and that is no closer to the query
        vector than they are, loses its BM25 credit there (:mod:`noderag.search.redundancy`): a multi-hop
        question's second passage is the one that matches what the first does not. 0 turns it off.
    rerank : str or None, default=None
        Cross-encoder spec (:class:`noderag.search.rerank.CrossEncoderReranker`) that reorders the
        ``rerank_top`` best passages; off by default.
    rerank_top : int, default=20
    bridge_mode : {"about_shared", "about", "shared"}, default="about_shared"
        Query-time bridging from the ``bridge_top`` best passages: "about" adds the passages *about* an
        entity they name that the question does not (at least half of the passage's units name it);
        "shared" (the earlier rule) adds every passage sharing an entity of degree <= ``bridge_max_degree``;
        "about_shared" adds the "about" passages and, per source passage, the
        ``bridge_shared_per_source`` passages sharing such an entity that the question ranks best.
    bridge_shared_per_source : int, default=1
        Shared-entity bridges kept per source passage in "about_shared" mode (0: "about" alone).
    bridge_titles : bool, default=True
        Also bridge to the passage (the question's best) of every document whose title a source passage
        names ("... West Chicago High School" -> "West Chicago, Illinois"); ranked after its source.
    bridge_question_titles : bool, default=True
        Also bridge to the passage (the question's best) of every document whose title the question itself
        names ("... the state Rochester is in" -> "Rochester, New York"), as strongly as an "about" bridge.
    bridge_agree_top : int, default=2
        A bridge lifts a passage at most to just below the passages that are among the
        ``bridge_agree_top`` best by cosine and by BM25 alike (0: no such floor).
    bridge_shared_residual : bool, default=True
        The shared-entity bridge of a source is the passage that fits best (dense + BM25) the question terms
        the source does not match; False: the whole question's terms.
    bridge_source_strength : bool, default=True
        A bridge is as strong as the passage it starts from: the bonus of the passages a ``bridge_top``
        passage leads to is scaled by its score over the best one's (False: every source at full strength).
    bridge_about_split : float, default=0.25
        An "about" bridge through an entity that ``m`` of the passages a source reaches are about is divided by
        ``m ** bridge_about_split``: an entity many passages are about (a country, a league) leads to each of
        them less surely than one that a single passage is about (0: each at full strength).
    bridge_title_groups : bool, default=True
        A title that several documents bear names one subject: one bridge goes to the passage the question
        picks among all their passages (False: one bridge per document).
    bridge_top, bridge_weight, bridge_max_degree
        Passages bridged from, the most a bridge adds to a passage's score, and the degree cap of a
        bridging entity.
    context_tokens : int
        Token budget of the assembled context text.
    min_similarity : float, default=0.3
        A result is ``matched`` (confident) when a name matched or its best entry-point cosine
        similarity reaches this. Measured on MuSiQue (benchmarks/results/query_similarity.md): real
        questions' best similarity is >= 0.26 (median 0.38) with the default embedder and junk
        queries 0.14-0.34 (median 0.2); with ``hash:384`` punctuation-only queries score 0.
    n_threads : int or None
        Threads of batched vector search and PPR (None: all cores).
    """

    vector_top_k: int = 10
    expansion_search: int = 128
    vector_weight: float = 1.0
    name_weight: float = 1.0
    max_name_matches: int = 8
    contains_weight: float = 0.1
    name_degree_power: float = 0.0
    entity_source: str = "nlp"
    match_names_in_query: bool = True
    use_ppr: bool = True
    alpha: float = 0.5
    iterations: int = 2
    rule: str = DEFAULT_RULE
    structural_weight: float = 1.0
    semantic_weight: float = 0.0
    ppr_candidates: int = 30
    quotas: QuotaConfig = field(default_factory=QuotaConfig)
    passage_dense_weight: float = 1.0
    passage_text_weight: float = 0.4
    passage_unit_weight: float = 0.4
    passage_unit_similarity: bool = True
    passage_mass_lexical: bool = True
    lexical_top_k: int = 10
    lexical_weight: float = 0.5
    passage_lexical_weight: float = 0.5
    min_passages: int = 10
    redundancy_top: int = 10
    rerank: str | None = None
    rerank_top: int = 20
    bridge_mode: str = "about_shared"
    bridge_shared_per_source: int = 1
    bridge_agree_top: int = 2
    bridge_titles: bool = True
    bridge_question_titles: bool = True
    bridge_top: int = 2
    bridge_weight: float = 0.6
    bridge_max_degree: int = 60
    bridge_shared_residual: bool = True
    bridge_source_strength: bool = True
    bridge_about_split: float = 0.25
    bridge_title_groups: bool = True
    context_tokens: int = 2500
    min_similarity: float = 0.3
    n_threads: int | None = None

    def validate(self) -> "SearchConfig":
        """Check every field; raise ``ConfigError`` (a ``ValueError``) naming the field and its value. Returns self."""
        def _int(name: str, lo: int) -> None:
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ConfigError(f"search.{name} must be an int >= {lo}, got {v!r}")

        def _nonneg(name: str) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise ConfigError(f"search.{name} must be a number >= 0, got {v!r}")

        _int("vector_top_k", 0)
        _int("expansion_search", 1)
        _int("max_name_matches", 0)
        _int("iterations", 0)
        _int("ppr_candidates", 1)
        _int("context_tokens", 0)
        _int("bridge_top", 0)
        _int("bridge_shared_per_source", 0)
        _int("bridge_agree_top", 0)
        _int("lexical_top_k", 0)
        _int("min_passages", 0)
        _int("redundancy_top", 0)
        _int("rerank_top", 1)
        if self.rerank is not None and (not isinstance(self.rerank, str) or not self.rerank.strip()):
            raise ConfigError(f"search.rerank must be None or a reranker spec string, got {self.rerank!r}")
        _int("bridge_max_degree", 0)
        for name in ("vector_weight", "name_weight", "contains_weight", "name_degree_power",
                     "structural_weight", "semantic_weight",
                     "passage_dense_weight", "passage_text_weight", "passage_unit_weight", "bridge_weight",
                     "lexical_weight", "passage_lexical_weight", "bridge_about_split"):
            _nonneg(name)
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not 0.0 <= self.alpha <= 1.0:
            raise ConfigError(f"search.alpha must be in [0, 1], got {self.alpha!r}")
        if (isinstance(self.min_similarity, bool) or not isinstance(self.min_similarity, (int, float))
                or not -1.0 <= self.min_similarity <= 1.0):
            raise ConfigError(f"search.min_similarity must be a number in [-1, 1], got {self.min_similarity!r}")
        if self.rule not in _RULES:
            raise ConfigError(f"search.rule must be one of {_RULES}, got {self.rule!r}")
        if not isinstance(self.passage_unit_similarity, bool):
            raise ConfigError(f"search.passage_unit_similarity must be true or false, got {self.passage_unit_similarity!r}")
        if not isinstance(self.passage_mass_lexical, bool):
            raise ConfigError(f"search.passage_mass_lexical must be true or false, got {self.passage_mass_lexical!r}")
        for flag in ("bridge_titles", "bridge_question_titles", "bridge_source_strength", "bridge_shared_residual",
                     "bridge_title_groups"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(f"search.{flag} must be true or false, got {getattr(self, flag)!r}")
        if self.bridge_mode not in _BRIDGE_MODES:
            raise ConfigError(f"search.bridge_mode must be one of {_BRIDGE_MODES}, got {self.bridge_mode!r}")
        if self.entity_source not in _ENTITY_SOURCES:
            raise ConfigError(f"search.entity_source must be one of {_ENTITY_SOURCES}, got {self.entity_source!r}")
        if self.n_threads is not None and (not isinstance(self.n_threads, int) or self.n_threads < 1):
            raise ConfigError(f"search.n_threads must be None or an int >= 1, got {self.n_threads!r}")
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
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown search config key(s) {unknown}; known: {sorted(known)}")
        quotas = data.pop("quotas", None)
        if isinstance(quotas, Mapping):
            qknown = {f.name for f in fields(QuotaConfig)}
            qunknown = sorted(set(quotas) - qknown)
            if qunknown:
                raise ConfigError(f"unknown search.quotas key(s) {qunknown}; known: {sorted(qknown)}")
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
        return SearchConfig.from_dict(data)
