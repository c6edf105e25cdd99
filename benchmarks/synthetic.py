"""Seeded synthetic graphs shaped like a NodeRAG heterograph, for the kernel benchmarks.

The generator is vectorised numpy (no per-edge Python loop) and deterministic for a
given ``(n_nodes, seed, config)``. Shape, per text chunk (T):

- about five semantic units (S), each linked to its chunk (S–T, weight 1);
- every unit mentions 2–6 entities (N) drawn from a Zipf law over an entity
  vocabulary (S–N, weight = mention count), so a few entities are hubs;
- relationship nodes (R) link pairs of entities co-mentioned in one unit (N–R–N);
- the most-mentioned entities get an attribute node (A, edge N–A);
- high-level elements (H) with an overview title each (H–O) link to about ten
  community members (H–S, H–A) from one region of the corpus;
- a semantic layer of kNN links among the embedded nodes (T, S, A, H), about
  ``knn_k`` per node, approximated without embeddings by random *local*
  neighbours in a one-dimensional "topic" order, with cosine-like weights in (0, 1).

Node ids are type blocks in the order T, S, N, R, A, H, O (entities in order of
first mention, as an insertion-ordered build would number them). No node is
isolated. The chunk count is solved from ``n_nodes`` with the expected number of
distinct entities, so the realised node count lands within about 1 % of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from noderag.graph.csr import CSR, csr_from_coo
from noderag.graph.types import EMBEDDED_TYPES, N_TYPES, NodeType

__all__ = ["SyntheticConfig", "SyntheticGraph", "make_graph", "sample_seed_lists"]


@dataclass(frozen=True)
class SyntheticConfig:
    """Shape parameters of the synthetic NodeRAG graph."""

    units_per_chunk: tuple[int, int] = (3, 7)  # inclusive range, mean 5
    mentions_per_unit: tuple[int, int] = (2, 6)  # inclusive range, mean 4
    relations_per_unit: tuple[int, int] = (1, 1)  # inclusive range (each a co-mentioned pair)
    zipf_exponent: float = 1.1
    vocab_per_chunk: float = 4.0  # entity vocabulary size = this × chunks
    attribute_fraction: float = 0.03  # share of (distinct) entities that get an A node
    chunks_per_high_level: int = 5
    members_per_high_level: int = 10
    knn_k: int = 10
    knn_window: int = 200  # neighbours are drawn within this many positions in topic order
    knn_global_fraction: float = 0.05  # share of kNN links to a random far node

    def __post_init__(self) -> None:
        for name in ("units_per_chunk", "mentions_per_unit", "relations_per_unit"):
            lo, hi = getattr(self, name)
            if not (1 <= lo <= hi):
                raise ValueError(f"{name} must be (lo, hi) with 1 <= lo <= hi, got {(lo, hi)}")
        if self.mentions_per_unit[0] < 2:
            raise ValueError(f"mentions_per_unit must start at >= 2 (relationships need a pair), got {self.mentions_per_unit}")
        if self.zipf_exponent <= 0:
            raise ValueError(f"zipf_exponent must be > 0, got {self.zipf_exponent}")
        if self.knn_k < 1 or self.knn_window < 1:
            raise ValueError(f"knn_k and knn_window must be >= 1, got {self.knn_k}, {self.knn_window}")


@dataclass
class SyntheticGraph:
    """Node table and the two COO edge layers of a synthetic NodeRAG graph."""

    types: np.ndarray  # uint8 (n,)
    keys: np.ndarray  # uint64 (n,), unique
    mentions: np.ndarray  # int64 (n,): units mentioning the node (entities), else 0
    struct_src: np.ndarray
    struct_dst: np.ndarray
    struct_w: np.ndarray
    sem_src: np.ndarray
    sem_dst: np.ndarray
    sem_w: np.ndarray
    n_chunks: int
    seed: int
    config: SyntheticConfig = field(default_factory=SyntheticConfig)

    @property
    def n(self) -> int:
        return int(self.types.shape[0])

    def structural(self) -> CSR:
        """Structural layer as a symmetric CSR."""
        return csr_from_coo(self.n, self.struct_src, self.struct_dst, self.struct_w)

    def semantic(self) -> CSR:
        """Semantic (kNN) layer as a symmetric CSR."""
        return csr_from_coo(self.n, self.sem_src, self.sem_dst, self.sem_w)

    def combined(self) -> CSR:
        """Both layers summed into one symmetric CSR (the operator PPR runs on)."""
        return csr_from_coo(
            self.n,
            np.concatenate([self.struct_src, self.sem_src]),
            np.concatenate([self.struct_dst, self.sem_dst]),
            np.concatenate([self.struct_w, self.sem_w]),
        )

    def type_counts(self) -> dict[str, int]:
        """Number of nodes per type letter."""
        counts = np.bincount(self.types, minlength=N_TYPES)
        return {t.name: int(counts[t]) for t in NodeType}


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """Bijective 64-bit mix (so distinct inputs give distinct keys)."""
    z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _zipf_probs(vocab: int, exponent: float) -> np.ndarray:
    p = np.arange(1, vocab + 1, dtype=np.float64) ** -exponent
    return p / p.sum()


def _expected_nodes(chunks: int, cfg: SyntheticConfig) -> float:
    """Expected node count for ``chunks`` chunks (distinct entities from the Zipf law)."""
    units = chunks * sum(cfg.units_per_chunk) / 2
    mentions = units * sum(cfg.mentions_per_unit) / 2
    relations = units * sum(cfg.relations_per_unit) / 2
    vocab = max(1, int(round(cfg.vocab_per_chunk * chunks)))
    entities = float(np.sum(-np.expm1(-mentions * _zipf_probs(vocab, cfg.zipf_exponent))))
    attributes = max(1.0, round(cfg.attribute_fraction * entities))
    high = max(1, -(-chunks // cfg.chunks_per_high_level))
    return chunks + units + entities + relations + attributes + 2 * high


def _solve_chunks(n_nodes: int, cfg: SyntheticConfig) -> int:
    lo, hi = 1, max(2, n_nodes)
    while lo < hi:  # smallest chunk count whose expected size reaches n_nodes
        mid = (lo + hi) // 2
        if _expected_nodes(mid, cfg) < n_nodes:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _ranges(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For counts c_i: (owner index repeated c_i times, position 0..c_i-1 within owner)."""
    owner = np.repeat(np.arange(counts.shape[0]), counts)
    starts = np.cumsum(counts) - counts
    return owner, np.arange(owner.shape[0]) - starts[owner]


def make_graph(n_nodes: int, seed: int = 0, config: SyntheticConfig | None = None) -> SyntheticGraph:
    """Generate a synthetic NodeRAG graph of about ``n_nodes`` nodes, deterministic in ``seed``."""
    cfg = config or SyntheticConfig()
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, (int, np.integer)) or n_nodes < 50:
        raise ValueError(f"n_nodes must be an integer >= 50, got {n_nodes!r}")
    rng = np.random.default_rng(seed)
    chunks = _solve_chunks(int(n_nodes), cfg)

    # --- units per chunk, mentions per unit (Zipf entities), relationships per unit
    upc = rng.integers(cfg.units_per_chunk[0], cfg.units_per_chunk[1] + 1, size=chunks)
    unit_chunk, _ = _ranges(upc)
    n_units = unit_chunk.shape[0]
    mpu = rng.integers(cfg.mentions_per_unit[0], cfg.mentions_per_unit[1] + 1, size=n_units)
    mention_unit, mention_pos = _ranges(mpu)
    vocab = max(1, int(round(cfg.vocab_per_chunk * chunks)))
    cdf = np.cumsum(_zipf_probs(vocab, cfg.zipf_exponent))
    cdf[-1] = 1.0
    mention_word = np.searchsorted(cdf, rng.random(mention_unit.shape[0]), side="right")
    # entity ids in order of first mention (insertion order of a streaming build)
    words, first = np.unique(mention_word, return_index=True)
    order = np.argsort(first, kind="stable")
    rank_of_word = np.empty(words.shape[0], np.int64)
    rank_of_word[order] = np.arange(words.shape[0])
    mention_ent = rank_of_word[np.searchsorted(words, mention_word)]
    n_ent = words.shape[0]

    rpu = rng.integers(cfg.relations_per_unit[0], cfg.relations_per_unit[1] + 1, size=n_units)
    rpu = np.minimum(rpu, mpu - 1)
    rel_unit, _ = _ranges(rpu)
    n_rel = rel_unit.shape[0]
    unit_start = np.cumsum(mpu) - mpu
    # a relationship links two different mention slots of its unit: (a, a + d), d in 1..m-1
    m_rel = mpu[rel_unit]
    a = (rng.random(n_rel) * m_rel).astype(np.int64)
    d = 1 + (rng.random(n_rel) * (m_rel - 1)).astype(np.int64)
    b = (a + d) % m_rel
    rel_e1 = mention_ent[unit_start[rel_unit] + a]
    rel_e2 = mention_ent[unit_start[rel_unit] + b]

    # --- attributes for the most-mentioned entities
    ent_units = np.unique(mention_unit * np.int64(n_ent) + mention_ent) % n_ent
    ent_mentions = np.bincount(ent_units, minlength=n_ent)
    n_attr = max(1, int(round(cfg.attribute_fraction * n_ent)))
    attr_ent = np.argsort(-ent_mentions, kind="stable")[:n_attr]

    # --- high-level elements over regions of chunks
    n_high = max(1, -(-chunks // cfg.chunks_per_high_level))

    # --- id blocks
    counts = [chunks, n_units, n_ent, n_rel, n_attr, n_high, n_high]
    base = np.concatenate([[0], np.cumsum(counts)])
    n = int(base[-1])
    t0, s0, e0, r0, a0, h0, o0 = (int(x) for x in base[:-1])
    types = np.repeat(np.arange(N_TYPES, dtype=np.uint8), counts)

    # structural edges
    srcs, dsts, ws = [], [], []

    def add(src, dst, w=None):
        srcs.append(np.asarray(src, np.int64))
        dsts.append(np.asarray(dst, np.int64))
        ws.append(np.ones(len(src), np.float32) if w is None else np.asarray(w, np.float32))

    add(s0 + np.arange(n_units), t0 + unit_chunk)  # S–T
    add(s0 + mention_unit, e0 + mention_ent)  # S–N, duplicates summed into counts
    add(r0 + np.arange(n_rel), e0 + rel_e1)  # R–N
    add(r0 + np.arange(n_rel), e0 + rel_e2)  # R–N
    add(a0 + np.arange(n_attr), e0 + attr_ent)  # A–N
    add(h0 + np.arange(n_high), o0 + np.arange(n_high))  # H–O
    # H members: units of its chunk region, plus attributes of entities first seen there
    k_mem = cfg.members_per_high_level
    h_rep = np.repeat(np.arange(n_high), k_mem)
    region_chunk = np.minimum(h_rep * cfg.chunks_per_high_level + rng.integers(0, cfg.chunks_per_high_level, h_rep.shape[0]), chunks - 1)
    chunk_start = np.cumsum(upc) - upc
    member_unit = chunk_start[region_chunk] + (rng.random(h_rep.shape[0]) * upc[region_chunk]).astype(np.int64)
    add(h0 + h_rep, s0 + member_unit)  # H–S
    first_unit_of_ent = np.full(n_ent, n_units, np.int64)
    np.minimum.at(first_unit_of_ent, mention_ent, mention_unit)
    attr_chunk = unit_chunk[first_unit_of_ent[attr_ent]]
    attr_high = attr_chunk // cfg.chunks_per_high_level
    add(h0 + attr_high, a0 + np.arange(n_attr))  # H–A (each A belongs to the H of its region)

    # --- semantic layer: local kNN in a 1-D topic order of embedded nodes
    pos = np.empty(n, np.float64)
    pos[t0:s0] = np.arange(chunks)
    pos[s0:e0] = unit_chunk + rng.random(n_units) * 0.5
    pos[a0:h0] = attr_chunk + rng.random(n_attr) * 0.5
    pos[h0:o0] = np.arange(n_high) * cfg.chunks_per_high_level + cfg.chunks_per_high_level / 2
    embedded = np.flatnonzero(np.isin(types, np.asarray(EMBEDDED_TYPES, np.uint8)))
    emb_sorted = embedded[np.argsort(pos[embedded], kind="stable")]
    n_emb = emb_sorted.shape[0]
    k = min(cfg.knn_k, n_emb - 1)
    if k >= 1:
        q = np.repeat(np.arange(n_emb), k)
        window = min(cfg.knn_window, n_emb - 1)
        off = 1 + np.floor(rng.exponential(window / 4.0, q.shape[0])).astype(np.int64)
        off = np.minimum(off, window)
        off = np.where(rng.random(q.shape[0]) < 0.5, off, -off)
        far = rng.random(q.shape[0]) < cfg.knn_global_fraction
        off[far] = rng.integers(1, n_emb, int(far.sum()))
        nb = (q + off) % n_emb
        sim = np.clip(0.95 - 0.4 * np.abs(off) / max(window, 1) + rng.normal(0.0, 0.03, q.shape[0]), 0.05, 0.99)
        sim[far] = rng.uniform(0.2, 0.5, int(far.sum()))
        u, v = emb_sorted[q], emb_sorted[nb]
        keep = u != v
        u, v, sim = u[keep], v[keep], sim[keep]
        lo_, hi_ = np.minimum(u, v), np.maximum(u, v)
        pair = lo_ * np.int64(n) + hi_
        order = np.lexsort((-sim, pair))  # per pair keep the highest similarity
        pair, sim = pair[order], sim[order]
        first_of_pair = np.concatenate(([True], pair[1:] != pair[:-1]))
        pair, sim = pair[first_of_pair], sim[first_of_pair]
        sem_src, sem_dst, sem_w = pair // n, pair % n, sim.astype(np.float32)
    else:
        sem_src = sem_dst = np.zeros(0, np.int64)
        sem_w = np.zeros(0, np.float32)

    mentions = np.zeros(n, np.int64)
    mentions[e0:r0] = ent_mentions
    keys = _splitmix64(np.arange(n, dtype=np.uint64) ^ _splitmix64(np.full(n, seed, np.uint64)))
    return SyntheticGraph(
        types=types,
        keys=keys,
        mentions=mentions,
        struct_src=np.concatenate(srcs),
        struct_dst=np.concatenate(dsts),
        struct_w=np.concatenate(ws),
        sem_src=sem_src,
        sem_dst=sem_dst,
        sem_w=sem_w,
        n_chunks=chunks,
        seed=seed,
        config=cfg,
    )


def sample_seed_lists(graph: SyntheticGraph, n_queries: int, seeds_per_query: int = 20, seed: int = 0) -> list[np.ndarray]:
    """Seed node ids for ``n_queries`` queries, as a search would find them.

    Each query draws ``seeds_per_query`` distinct nodes: three quarters from the
    embedded types (vector-search entry points) and the rest from entities and
    overviews (name matches), uniformly within each pool.
    """
    rng = np.random.default_rng(seed)
    emb = np.flatnonzero(np.isin(graph.types, np.asarray(EMBEDDED_TYPES, np.uint8)))
    names = np.flatnonzero(np.isin(graph.types, np.asarray([NodeType.N, NodeType.O], np.uint8)))
    n_name = min(seeds_per_query // 4, names.shape[0])
    n_emb = min(seeds_per_query - n_name, emb.shape[0])
    out = []
    for _ in range(n_queries):
        s = np.concatenate([rng.choice(emb, n_emb, replace=False), rng.choice(names, n_name, replace=False)])
        out.append(s.astype(np.int32))
    return out
