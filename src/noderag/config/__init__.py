"""One configuration tree for building and searching an index (plain dataclasses).

Load it from a TOML or YAML file with :func:`load_config`, or build it from a
dict with :meth:`NodeRAGConfig.from_dict`; unknown keys are errors naming the
key. Every section validates its own values and names the bad one.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Mapping

__all__ = [
    "ChunkConfig",
    "ExecutorConfig",
    "UpdateConfig",
    "DecomposeConfig",
    "AttributeConfig",
    "CommunityConfig",
    "EmbedConfig",
    "SemanticConfig",
    "LLMConfig",
    "ImportanceConfig",
    "SearchConfig",
    "QuotaConfig",
    "NodeRAGConfig",
    "load_config",
    "ConfigError",
]


from ..errors import ConfigError  # noqa: E402  (one error type for every section, search included)
from ..graph.importance import ImportanceConfig  # noqa: E402
from ..llm.options import LLMOptions  # noqa: E402  (the [llm] settings, declared once beside their table)
from ..retry import RetrySettings  # noqa: E402  (the [embed] timeouts and retries, declared with the clients')
from .keys import reject_unknown_keys  # noqa: E402
from .search import QuotaConfig, SearchConfig  # noqa: E402


def _check(cond: bool, name: str, value: Any, what: str) -> None:
    if not cond:
        raise ConfigError(f"{name} must be {what}, got {value!r}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass
class ChunkConfig:
    """Token-based, boundary-aware chunking.

    Attributes
    ----------
    max_tokens : int, default=1024
        Upper bound of one chunk in tokens of the offline tokenizer.
    min_tokens : int, default=64
        A trailing piece shorter than this is merged into the previous chunk when it fits.
    """

    max_tokens: int = 1024
    min_tokens: int = 64

    def validate(self) -> None:
        _check(_is_int(self.max_tokens) and self.max_tokens >= 16, "chunk.max_tokens", self.max_tokens, "an int >= 16")
        _check(_is_int(self.min_tokens) and 0 <= self.min_tokens <= self.max_tokens, "chunk.min_tokens",
               self.min_tokens, "an int in [0, chunk.max_tokens]")


@dataclass
class DecomposeConfig:
    """How chunks become semantic units, entities and relationships.

    Attributes
    ----------
    method : {"nlp", "llm"}, default="nlp"
        ``nlp``: rule-based, zero LLM tokens; ``llm``: one structured call per chunk.
    unit_min_tokens : int, default=8
        nlp: a sentence shorter than this is grouped with its neighbour.
    unit_max_tokens : int, default=96
        nlp: a sentence group never grows beyond this.
    title_entity : bool, default=True
        A passage title (JSONL ``title``, Markdown heading) is an entity mentioned by every unit.
    title_prefix : bool, default=True
        nlp: prefix a unit that does not contain its passage title with ``"Title: "`` so it stands alone.
    dates : bool, default=True
        nlp: years and full dates are entities.
    numbers : bool, default=False
        nlp: other numbers with a unit word ("3 million", "42 km") are entities.
    link_known_names : bool, default=True
        Every unit also mentions each known entity name that occurs in it as a whole-word phrase.
    max_relation_words : int, default=8
        nlp: entity pairs further apart than this many words form no relationship.
    use_spacy : bool, default=False
        nlp: add spaCy NER entities when spaCy and a model are installed.
    spacy_model : str, default="en_core_web_sm"
    batch_size : int, default=64
        Chunks per decomposition batch (one journal append, one LLM batch).
    max_retries : int, default=2
        llm: retries of an invalid or failed response before it is recorded as a failure.
    max_units, max_entities, max_relations : int
        llm: JSON schema bounds per chunk.
    """

    method: str = "nlp"
    unit_min_tokens: int = 8
    unit_max_tokens: int = 96
    title_entity: bool = True
    title_prefix: bool = True
    dates: bool = True
    numbers: bool = False
    link_known_names: bool = True
    max_relation_words: int = 8
    use_spacy: bool = False
    spacy_model: str = "en_core_web_sm"
    batch_size: int = 64
    max_retries: int = 2
    max_units: int = 32
    max_entities: int = 64
    max_relations: int = 64

    def validate(self) -> None:
        _check(self.method in ("nlp", "llm"), "decompose.method", self.method, "'nlp' or 'llm'")
        for name in ("unit_min_tokens", "max_relation_words", "max_retries"):
            v = getattr(self, name)
            _check(_is_int(v) and v >= 0, f"decompose.{name}", v, "an int >= 0")
        for name in ("unit_max_tokens", "batch_size", "max_units", "max_entities", "max_relations"):
            v = getattr(self, name)
            _check(_is_int(v) and v >= 1, f"decompose.{name}", v, "an int >= 1")
        for name in ("title_entity", "title_prefix", "dates", "numbers", "link_known_names", "use_spacy"):
            v = getattr(self, name)
            _check(isinstance(v, bool), f"decompose.{name}", v, "a bool")


@dataclass
class AttributeConfig:
    """A nodes for important entities.

    Attributes
    ----------
    summary_tokens : int, default=160
        Token budget of one attribute summary (nlp: extractive; llm: max output).
    max_units : int, default=12
        At most this many neighbouring units are considered (or sent to the LLM) per entity.
    """

    summary_tokens: int = 160
    max_units: int = 12

    def validate(self) -> None:
        _check(_is_int(self.summary_tokens) and self.summary_tokens >= 8, "attributes.summary_tokens",
               self.summary_tokens, "an int >= 8")
        _check(_is_int(self.max_units) and self.max_units >= 1, "attributes.max_units", self.max_units, "an int >= 1")


@dataclass
class CommunityConfig:
    """Leiden communities on the S/N/R/A graph and their H/O nodes.

    Attributes
    ----------
    enabled : bool, default=True
    resolution : float, default=1.0
    objective : {"modularity", "rb"}, default="modularity"
    min_size : int, default=4
        Communities with fewer members (or no semantic unit) get no H node.
    summary_tokens : int, default=160
        Token budget of one H description.
    title_entities : int, default=3
        nlp: the O title joins this many of the community's most mentioned entity names.
    links : int, default=10
        Each H links to this many community members (S, A) most similar to it.
    max_members : int, default=24
        llm: at most this many member texts go into one community prompt.
    iterations : int, default=2
        Leiden iterations (leidenalg's default; -1 runs until no improvement, much slower).
    engine : {"igraph", "leidenalg"}, default="igraph"
        igraph's built-in Leiden (17x faster than leidenalg on a 400k-node graph at equal
        modularity) or leidenalg's optimiser.
    warm_start : bool, default=True
        A merging compaction (or an insert that recomputes the index keeping node ids) starts Leiden
        from the communities the base stored (``communities.npy``; nodes added since in communities of
        their own) instead of from singletons, so more communities, H/O nodes and (LLM builds) cached
        summaries stay as they were. A full compaction and a fresh build always start cold.
    """

    enabled: bool = True
    resolution: float = 1.0
    objective: str = "modularity"
    min_size: int = 4
    summary_tokens: int = 160
    title_entities: int = 3
    links: int = 10
    max_members: int = 24
    iterations: int = 2
    engine: str = "igraph"
    warm_start: bool = True

    def validate(self) -> None:
        _check(isinstance(self.enabled, bool), "communities.enabled", self.enabled, "a bool")
        _check(isinstance(self.warm_start, bool), "communities.warm_start", self.warm_start, "a bool")
        _check(self.engine in ("igraph", "leidenalg"), "communities.engine", self.engine,
               "'igraph' or 'leidenalg'")
        _check(_is_int(self.iterations) and (self.iterations >= 1 or self.iterations == -1),
               "communities.iterations", self.iterations, "an int >= 1 or -1")
        _check(_is_num(self.resolution) and self.resolution > 0, "communities.resolution", self.resolution, "a number > 0")
        _check(self.objective in ("modularity", "rb"), "communities.objective", self.objective, "'modularity' or 'rb'")
        for name in ("min_size", "summary_tokens", "title_entities", "links", "max_members"):
            v = getattr(self, name)
            _check(_is_int(v) and v >= 1, f"communities.{name}", v, "an int >= 1")


@dataclass
class EmbedConfig(RetrySettings):
    """Embedding backend of T, S, A, H nodes and the stored HNSW index.

    Attributes
    ----------
    spec : str, default="auto"
        Spec for ``noderag.embed.make_embedder``. ``auto`` chooses at build time from the corpus:
        the English default (``default``, all-MiniLM-L6-v2) or, when a quarter or more of the
        documents is Chinese, the multilingual ``use``; the index stores the resolved spec and its
        queries use it (``noderag.embed.resolve_auto_spec``).
        ``static:wordllama`` (the ``static`` extra: a token table, mean-pooled) embeds about 85x
        more texts per CPU-second than the default, at a recall cost on multi-hop questions
        (``docs/embedders.md``): the choice for corpora the default cannot embed in time.
    batch_size : int, default=1024
        Texts per embedding call (one resumable batch file each).
    vector_dtype : {"i8", "f16", "f32"}, default="i8"
        Storage type of ``vectors.usearch`` (i8: a quarter of f32, cosine ranks nearly unchanged).
    connectivity : int, default=12
        HNSW links per node of ``vectors.usearch``.
    expansion_add : int, default=64
        HNSW candidate list while inserting (usearch's default is 128). The index is built
        on one thread so that it is identical in every run, which makes insertion the
        costliest step of a large build; 64 halves it (issue 9). On 40k hash vectors,
        recall@10 against exact search: 0.852 at 64 vs 0.893 at 128.
    vector_shards : int or "auto", default="auto"
        HNSW graphs ``vectors.usearch`` is split into (``noderag.graph.vectors``): each is built by
        one thread and the shards in parallel, so a build uses every core and the index is the same
        for any thread count; a query searches every shard. ``auto``: one below 32,768 T and S
        vectors, else one per 262,144, at least 2 and at most 8 (``vector_shard_count``). More
        shards build cheaper but search slower: a query pays each shard's descent, and the shards
        together outgrow the CPU cache. On 484k hash vectors (10^5 passages), 2/4/8 shards: build
        169/136/114 CPU s, HNSW distances per query at a beam of 128 2,155/2,756/3,562, and the
        whole query 15-20% faster with 2 than with 4; on 195k, recall@10 0.91/0.88/0.79.
    extractive_mean : bool, default=True
        An extractive (nlp) A or H node, whose text is a few semantic units, gets the unit-norm
        mean of those units' vectors instead of a model call.
    late_units : bool, default=False
        Opt-in "late chunking": a semantic unit that is a verbatim span of its chunk (every
        ``nlp`` unit) gets the mean of its tokens' states from one forward pass over
        "title: chunk" instead of a model call of its own, when the embedder offers
        ``embed_with_spans`` (the default ONNX one does). T vectors then include the title.
        About halves the embedding time of an ``nlp`` build for about one point of
        retrieval recall (``benchmarks/results/build.md``, ``retrieval_musique_late.md``).
    timeout_s, connect_timeout_s, max_retries, backoff_base_s, backoff_max_s : optional
        ``openai:`` embedder: request timeouts and retries (None: the backend's default).
    api_key_env : str, optional
        ``openai:`` embedder: environment variable holding the API key (default
        ``NODERAG_EMBED_API_KEY``, then ``OPENAI_API_KEY``).
    options : dict, default={}
        Other keyword settings of the embedding backend (e.g. ``{dim = 256}`` for ``openai:``,
        ``{device = "cuda"}`` for ``st:``); an unknown one is an error at build time naming it.
    """

    spec: str = "auto"
    batch_size: int = 1024
    vector_dtype: str = "i8"
    connectivity: int = 12
    expansion_add: int = 64
    vector_shards: int | str = "auto"
    extractive_mean: bool = True
    late_units: bool = False
    api_key_env: str | None = None
    options: dict = field(default_factory=dict)

    def validate(self) -> None:
        _check(isinstance(self.spec, str) and bool(self.spec), "embed.spec", self.spec, "a non-empty str")
        _check(_is_int(self.batch_size) and self.batch_size >= 1, "embed.batch_size", self.batch_size, "an int >= 1")
        _check(self.vector_dtype in ("i8", "f16", "f32"), "embed.vector_dtype", self.vector_dtype,
               "'i8', 'f16' or 'f32'")
        _check(_is_int(self.connectivity) and self.connectivity >= 2, "embed.connectivity", self.connectivity,
               "an int >= 2")
        _check(_is_int(self.expansion_add) and self.expansion_add >= 1, "embed.expansion_add", self.expansion_add,
               "an int >= 1")
        _check(self.vector_shards == "auto" or (_is_int(self.vector_shards) and 1 <= self.vector_shards <= 64),
               "embed.vector_shards", self.vector_shards, "'auto' or an int from 1 to 64")
        _check(isinstance(self.extractive_mean, bool), "embed.extractive_mean", self.extractive_mean, "a bool")
        _check(isinstance(self.late_units, bool), "embed.late_units", self.late_units, "a bool")
        for name, v, what in self.retry_problems()[:1]:  # the first, as every other check
            raise ConfigError(f"embed.{name} must be None or {what}, got {v!r}")
        _check(self.api_key_env is None or (isinstance(self.api_key_env, str) and bool(self.api_key_env)),
               "embed.api_key_env", self.api_key_env, "None or a non-empty str")
        _check(isinstance(self.options, dict), "embed.options", self.options, "a table")

    def vector_shard_count(self, n_vectors: int) -> int:
        """HNSW shards for an index of ``n_vectors`` T and S vectors (``vector_shards``, ``auto`` resolved)."""
        if self.vector_shards != "auto":
            return int(self.vector_shards)
        if n_vectors < 32_768:
            return 1
        return max(2, min(8, -(-int(n_vectors) // 262_144)))

    def backend_options(self) -> dict[str, Any]:
        """Keyword arguments for ``noderag.embed.make_embedder`` beyond the spec (set values only).

        Raises ``ConfigError`` when ``api_key_env`` names an unset variable.
        """
        out = self.retry_settings()
        if self.api_key_env is not None:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise ConfigError(f"embed.api_key_env names {self.api_key_env!r}, which is not set in the environment")
            out["api_key"] = key
        out.update(self.options)
        return out


@dataclass
class SemanticConfig:
    """kNN semantic layer among embedded nodes.

    Attributes
    ----------
    enabled : bool, default=False
        Off by default: search weights the layer 0 (``search.semantic_weight``), because
        with weight 1 it costs recall (MuSiQue recall@5 0.728 -> 0.695, HotpotQA
        0.895 -> 0.885; ``benchmarks/results/retrieval_*.md``), and it was the most
        expensive build stage at scale (issue 9). Enable it to search with
        ``semantic_weight > 0``.
    k : int, default=10
        Neighbours per embedded node.
    """

    enabled: bool = False
    k: int = 10

    def validate(self) -> None:
        _check(isinstance(self.enabled, bool), "semantic.enabled", self.enabled, "a bool")
        _check(_is_int(self.k) and self.k >= 1, "semantic.k", self.k, "an int >= 1")


@dataclass
class LLMConfig(LLMOptions):
    """LLM backend used by the ``llm`` decomposer, augmentation and answers (``spec=None``: no LLM).

    Every setting other than ``spec``/``cache``/``options`` is ``None`` for "the backend's default"; the
    command line sets them with ``--llm-option KEY=VALUE``. They are declared once, in
    :class:`noderag.llm.options.LLMOptions`, their ranges and defaults in :data:`noderag.llm.options.LLM_OPTIONS`.

    Attributes
    ----------
    spec : str or None
        ``openai:MODEL@URL``, ``vllm:PATH`` or ``llamacpp:PATH.gguf``.
    cache : bool, default=True
        Every call goes through the index's ``llm_cache.sqlite``.
    dialect : {"auto", "json_schema", "json_object", "vllm", "none"}, optional
        openai structured-output dialect (default ``auto``: json_schema, falling back to
        json_object once when the server rejects it).
    max_concurrency : int, optional
        openai: requests in flight at once (default 8).
    timeout_s, connect_timeout_s : float, optional
        openai: read / connect timeouts (default 600 / 10).
    max_retries : int, optional
        openai: retries of a transient HTTP failure (default 4; permanent errors are not retried).
    backoff_base_s, backoff_max_s : float, optional
        openai: retry delays.
    max_validation_retries : int, optional
        Retries of an output that fails its JSON schema (default 2).
    api_key_env : str, optional
        openai: environment variable that holds the API key (default ``NODERAG_LLM_API_KEY``,
        then ``OPENAI_API_KEY``).
    temperature, top_p : float, optional
        Sampling of every request (default greedy: 0 and 1).
    seed : int, optional
        Sampling seed of every request (default 0).
    max_tokens : int, optional
        Completion budget of every request (default: per task, ``noderag.llm.prompts.MAX_TOKENS``).
    options : dict, default={}
        Engine settings of the backend (vllm ``tensor_parallel_size``, ``gpu_memory_utilization``,
        ``max_model_len``; llamacpp ``n_ctx``, ``n_threads``, ``n_gpu_layers``).
    """

    spec: str | None = None
    cache: bool = True
    options: dict = field(default_factory=dict)

    def validate(self) -> None:
        from ..llm.options import LLM_OPTIONS, OptionError, parse_option_value

        _check(self.spec is None or (isinstance(self.spec, str) and bool(self.spec)), "llm.spec", self.spec,
               "None or a non-empty str")
        _check(isinstance(self.cache, bool), "llm.cache", self.cache, "a bool")
        _check(isinstance(self.options, dict), "llm.options", self.options, "a table")
        try:
            for f in fields(self):
                if f.name in LLM_OPTIONS and getattr(self, f.name) is not None:
                    setattr(self, f.name, parse_option_value(f.name, getattr(self, f.name), where="llm."))
            for k, v in self.options.items():
                if k not in LLM_OPTIONS or hasattr(self, k):
                    raise ConfigError(f"llm.options.{k}: unknown engine option; known: "
                                      f"{sorted(o for o in LLM_OPTIONS if not hasattr(self, o))}")
                self.options[k] = parse_option_value(k, v, where="llm.options.")
        except OptionError as exc:
            raise ConfigError(str(exc)) from None

    def backend_options(self) -> dict[str, Any]:
        """Keyword arguments for ``noderag.llm.make_llm`` (set values only)."""
        from ..llm.options import LLM_OPTIONS

        out = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name in LLM_OPTIONS and getattr(self, f.name) is not None}
        out.update(self.options)
        return out


@dataclass
class ExecutorConfig:
    """Where decomposition and T/S embedding run (``local``: in this process; ``ray``: on a Ray cluster).

    Not part of the index's identity: a Ray build equals the local build, so it may change between runs.

    Attributes
    ----------
    kind : {"local", "ray"}, default="local"
    address : str or None
        Ray cluster: ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``; ``None`` starts a local Ray instance.
    workers : int or None
        Ray: workers per stage (``None``: one per CPU of the cluster, one per GPU for GPU backends).
        Local: worker processes for the CPU-bound stages (``nlp`` decomposition, the ``hash``
        embedder) of a large build (``None``: one per CPU; 1: in-process only). Never changes the index.
    llm_concurrency : int, default=8
        Total in-flight requests to an ``openai:`` server across all workers.
    connect_timeout_s : float, default=15
        Seconds to wait for a silent cluster address before failing (a refused connection fails after 5 s).
    """

    kind: str = "local"
    address: str | None = None
    workers: int | None = None
    llm_concurrency: int = 8
    connect_timeout_s: float = 15.0

    def validate(self) -> None:
        _check(self.kind in ("local", "ray"), "executor.kind", self.kind, "'local' or 'ray'")
        _check(self.address is None or (isinstance(self.address, str) and self.address.strip() != ""),
               "executor.address", self.address, "auto, HOST:PORT or ray://HOST:PORT")
        _check(self.workers is None or (_is_int(self.workers) and self.workers >= 1), "executor.workers",
               self.workers, "an int >= 1")
        _check(_is_int(self.llm_concurrency) and self.llm_concurrency >= 1, "executor.llm_concurrency",
               self.llm_concurrency, "an int >= 1")
        _check(isinstance(self.connect_timeout_s, (int, float)) and not isinstance(self.connect_timeout_s, bool)
               and self.connect_timeout_s > 0, "executor.connect_timeout_s", self.connect_timeout_s, "a number > 0")


#: ``update.compaction``: how an insert past ``update.max_delta_share`` compacts the index
COMPACTION_MODES = ("background", "inline", "off")


@dataclass
class UpdateConfig:
    """How an insert writes a finished index: a small delta segment beside the base, or the whole index again.

    Not part of the index's identity (like ``executor``): it decides how a write is done, and
    ``noderag compact --full`` gives the index a fresh build of the same documents gives.

    Attributes
    ----------
    segments : bool, default=True
        An insert of new documents writes only a delta segment (their nodes, edges, vectors and
        query tables; ``noderag.store.segments``); the global stages (importance and A nodes,
        communities and H/O nodes, name links from older units to the new names) wait for the next
        compaction. ``False``: every insert recomputes them over the whole index, as a build does.
    max_delta_share : float, default=0.25
        The deltas may hold this share of the base's documents; an insert past it compacts the
        index (recomputing every global stage), so queries never pay for many large deltas.
    compaction : {"background", "inline", "off"}, default="background"
        How an insert past ``max_delta_share`` compacts. ``"background"``: the insert writes its
        delta and returns; a detached, low-priority process (:mod:`noderag.indexing.update.background`)
        compacts afterwards and yields to any writer that comes meanwhile, which starts it again
        when done. Should deltas still reach twice the share (the compactions kept being
        interrupted, or never ran: the process was killed with its container), the insert
        compacts inline. ``"inline"``: the insert itself recomputes the whole index.
        ``"off"``: never by itself (``noderag compact``).
    """

    segments: bool = True
    max_delta_share: float = 0.25
    compaction: str = "background"

    def validate(self) -> None:
        _check(isinstance(self.segments, bool), "update.segments", self.segments, "a bool")
        _check(isinstance(self.max_delta_share, (int, float)) and not isinstance(self.max_delta_share, bool)
               and 0 <= self.max_delta_share, "update.max_delta_share", self.max_delta_share, "a number >= 0")
        _check(self.compaction in COMPACTION_MODES, "update.compaction", self.compaction,
               " or ".join(repr(m) for m in COMPACTION_MODES))


#: The sections that shape an index: an insert must use the ones the index was built with.
BUILD_SECTIONS = ("chunk", "decompose", "importance", "attributes", "communities", "embed", "semantic", "seed")


@dataclass
class NodeRAGConfig:
    """The whole configuration tree; ``seed`` seeds every random algorithm of the build."""

    chunk: ChunkConfig = field(default_factory=ChunkConfig)
    decompose: DecomposeConfig = field(default_factory=DecomposeConfig)
    importance: ImportanceConfig = field(default_factory=ImportanceConfig)
    attributes: AttributeConfig = field(default_factory=AttributeConfig)
    communities: CommunityConfig = field(default_factory=CommunityConfig)
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    semantic: SemanticConfig = field(default_factory=SemanticConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    seed: int = 0

    def validate(self) -> "NodeRAGConfig":
        """Check every section; raise ``ConfigError`` naming the bad value. Returns self."""
        _check(_is_int(self.seed) and self.seed >= 0, "seed", self.seed, "an int >= 0")
        for name in ("chunk", "decompose", "attributes", "communities", "embed", "semantic", "llm", "executor",
                     "update"):
            getattr(self, name).validate()
        imp = self.importance
        _check(isinstance(imp, ImportanceConfig), "importance", imp, "an ImportanceConfig")
        if hasattr(imp, "validate"):
            imp.validate()  # ConfigError naming importance.<field>
        _check(isinstance(self.search, SearchConfig), "search", self.search, "a SearchConfig")
        self.search.validate()  # ConfigError naming search.<field>
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict of every field (what the manifest stores)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = v.to_dict() if hasattr(v, "to_dict") else (asdict(v) if is_dataclass(v) else v)
        return out

    def to_index_dict(self) -> dict[str, Any]:
        """What an index records of its configuration: everything but ``search`` and ``update``.

        Search settings are query-time settings (the current defaults, a config file, flags) and
        update settings say how the next write is done; a copy in the manifest would only suggest
        that queries or later writes read it.
        """
        out = self.to_dict()
        out.pop("search", None)
        out.pop("update", None)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "NodeRAGConfig":
        """Build and validate from a nested mapping; unknown keys raise ``ConfigError`` naming them."""
        data = dict(data or {})
        reject_unknown_keys(data, cls)
        kwargs: dict[str, Any] = {}
        simple = {"chunk": ChunkConfig, "decompose": DecomposeConfig, "attributes": AttributeConfig,
                  "communities": CommunityConfig, "embed": EmbedConfig, "semantic": SemanticConfig,
                  "llm": LLMConfig, "importance": ImportanceConfig, "executor": ExecutorConfig,
                  "update": UpdateConfig}
        for name, value in data.items():
            if name == "seed":
                kwargs["seed"] = value
            elif name == "search":
                if not isinstance(value, Mapping):
                    raise ConfigError(f"search must be a table, got {value!r}")
                try:
                    kwargs["search"] = SearchConfig.from_dict(value)
                except (TypeError, ValueError) as exc:
                    raise ConfigError(str(exc)) from None
            else:
                kwargs[name] = _section(simple[name], name, value)
        return cls(**kwargs).validate()

    @classmethod
    def for_run(cls, config: "NodeRAGConfig | None", stored: Mapping[str, Any] | None, *, llm_given: bool = False,
                executor: "ExecutorConfig | None" = None) -> tuple["NodeRAGConfig", list[str]]:
        """The configuration one build run uses, reconciled once, and the notes to tell the user.

        ``stored``: the ``config`` of the index's manifest (None for a new index). An existing index
        keeps its build sections (:data:`BUILD_SECTIONS`; a different one is a ``ConfigError``) and
        takes ``llm``, ``search`` and ``executor`` from ``config``. An LLM given to the run means
        LLM decomposition; ``executor`` replaces the section; a search that needs the semantic
        layer turns it on for a new index and is an error for an index built without it.
        """
        if config is not None and llm_given and config.decompose.method != "llm":
            config = replace(config, decompose=replace(config.decompose, method="llm"))
        out = (config or cls()).validate() if stored is None else cls._with_stored(config, stored)
        if llm_given and out.decompose.method != "llm":
            out.decompose = replace(out.decompose, method="llm")
        if executor is not None:
            out = replace(out, executor=executor)
        notes = []
        if out.search.semantic_weight > 0 and not out.semantic.enabled:
            if stored is not None:
                raise ConfigError(f"search.semantic_weight = {out.search.semantic_weight} needs the semantic kNN "
                                  "layer, which this index was built without (semantic.enabled = false): rebuild it "
                                  "with semantic.enabled = true, or search with search.semantic_weight = 0")
            out = replace(out, semantic=replace(out.semantic, enabled=True))  # a new index: build the layer
            notes.append("semantic.enabled: building the semantic kNN layer, which search.semantic_weight > 0 uses")
        return out, notes

    @classmethod
    def _with_stored(cls, config: "NodeRAGConfig | None", stored: Mapping[str, Any]) -> "NodeRAGConfig":
        """The stored configuration of an existing index, with the sections a run may change from ``config``."""
        kept = cls.from_dict({k: v for k, v in stored.items() if k != "executor"})
        if config is None:  # where the last run executed is no setting of the index
            kept.executor = ExecutorConfig()
            return kept.validate()
        a, b = config.to_dict(), kept.to_dict()
        if a["embed"]["spec"] == "auto":  # the index resolved "auto" when it was built
            a["embed"]["spec"] = b["embed"]["spec"]
        diff = [k for k in BUILD_SECTIONS if a.get(k) != b.get(k)]
        if diff:
            raise ConfigError(
                f"the index was built with a different configuration ({', '.join(diff)} differ); "
                "an insert uses the index's own configuration — pass no config or the same one")
        kept.llm, kept.search, kept.executor, kept.update = config.llm, config.search, config.executor, config.update
        return kept.validate()

    def with_overrides(self, overrides: Mapping[str, Any]) -> "NodeRAGConfig":
        """Copy with dotted-key overrides applied (``{"embed.spec": "hash:64", "seed": 3}``)."""
        data = self.to_dict()
        for dotted, value in overrides.items():
            if value is None:
                continue
            parts = dotted.split(".")
            node = data
            for p in parts[:-1]:
                if p not in node or not isinstance(node[p], dict):
                    raise ConfigError(f"unknown config key {dotted!r}")
                node = node[p]
            if parts[-1] not in node:
                raise ConfigError(f"unknown config key {dotted!r}")
            node[parts[-1]] = value
        return NodeRAGConfig.from_dict(data)


def _section(cls, name: str, value: Any):
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name} must be a table, got {value!r}")
    reject_unknown_keys(value, cls, name)
    return cls(**dict(value))


def load_config(path: str | os.PathLike) -> NodeRAGConfig:
    """Read a TOML (``.toml``) or YAML (``.yaml``/``.yml``) file into a validated config."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} not found")
    raw = p.read_bytes()
    suffix = p.suffix.lower()
    try:
        if suffix == ".toml":
            import tomllib

            data = tomllib.loads(raw.decode("utf-8"))
        elif suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(raw.decode("utf-8")) or {}
        else:
            raise ConfigError(f"config file {p}: expected a .toml, .yaml or .yml file")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {p}: not valid UTF-8 at byte {exc.start}") from None
    except ConfigError:
        raise
    except Exception as exc:  # tomllib.TOMLDecodeError / yaml.YAMLError carry line info
        raise ConfigError(f"config file {p}: {exc}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"config file {p}: top level must be a table/mapping")
    try:
        return NodeRAGConfig.from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"config file {p}: {exc}") from None
    except TypeError as exc:
        raise ConfigError(f"config file {p}: {exc}") from None

