"""The NodeRAG importance rule: which entities get an attribute (A) node.

An entity (type ``N``) is important when it is mentioned at least
``min_mentions`` times and it is structurally central, i.e. it lies in the
k-core (core number >= k) **or** its sampled betweenness exceeds the mean
betweenness times a factor. With the defaults this is the reference NodeRAG
rule: ``k = round(ln n * sqrt(mean degree))`` and
``factor = round(log10 n)`` over a 10-pivot betweenness sample.

Both measures are computed on the graph the caller passes, over all its nodes
(the mean betweenness is the mean over every node of that graph), or, with
``nodes``, on the subgraph induced by those nodes (``n``, the mean degree, the
pivots and the mean betweenness then refer to that subgraph only). The reference
measures the S/N/R graph: pass the structural layer with
``nodes = ids of the S, N and R nodes`` so that chunk (T) and other nodes do not
dilute ``n`` and the mean degree.

Small-graph rules (the reference crashes on ``log(0)``): ``n == 0`` gives no
entities; the automatic k is clamped to at least 1, so isolated nodes (core 0)
never count as central; ``round(log10 n)`` may be 0 for ``n < 4``, and then any
entity with positive betweenness passes (the strict ``>`` keeps zero out).
Python's ``round`` (half to even) is used, as in the reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .csr import CSR, induced_csr, validate_csr
from .types import NodeType

__all__ = ["ImportanceConfig", "important_entities", "resolve_thresholds"]


@dataclass(frozen=True)
class ImportanceConfig:
    """Thresholds of the importance rule; ``None`` means the paper's automatic value.

    Attributes
    ----------
    k_core : int or None, default=None
        Core-number threshold; ``None`` = ``max(1, round(ln n * sqrt(mean degree)))``.
    betweenness_factor : int or None, default=None
        Multiple of the mean betweenness to exceed; ``None`` = ``round(log10 n)``.
    betweenness_pivots : int, default=10
        Number of sampled pivot sources (``k`` of :func:`betweenness`).
    min_mentions : int, default=2
        Minimum mention count ("mentioned more than once").
    weighted : bool, default=False
        Use edge weights as lengths in betweenness (the reference does not).

    The pivot sample's seed is not a setting here: it is the configuration's top-level ``seed`` (the one seed of
    every random algorithm of a build), passed to :func:`important_entities`.
    """

    k_core: int | None = None
    betweenness_factor: int | None = None
    betweenness_pivots: int = 10
    min_mentions: int = 2
    weighted: bool = False

    def __post_init__(self):
        self.validate()

    def validate(self) -> "ImportanceConfig":
        """Raise ``ConfigError`` (a ``ValueError``) naming the first bad field; return self."""
        for name in ("k_core", "betweenness_factor"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0):
                raise ConfigError(f"importance.{name} must be a non-negative integer or None, got {value!r}")
        if isinstance(self.betweenness_pivots, bool) or not isinstance(self.betweenness_pivots, (int, np.integer)) \
                or self.betweenness_pivots < 1:
            raise ConfigError(f"importance.betweenness_pivots must be a positive integer, got {self.betweenness_pivots!r}")
        if isinstance(self.min_mentions, bool) or not isinstance(self.min_mentions, (int, np.integer)):
            raise ConfigError(f"importance.min_mentions must be an integer, got {self.min_mentions!r}")
        if not isinstance(self.weighted, bool):
            raise ConfigError(f"importance.weighted must be a bool, got {self.weighted!r}")
        return self


def resolve_thresholds(n: int, nnz: int, config: ImportanceConfig = ImportanceConfig()) -> tuple[int, int]:
    """The (k-core threshold, betweenness factor) used for a graph of ``n`` nodes and ``nnz`` stored entries."""
    if n <= 0:
        return (config.k_core if config.k_core is not None else 1,
                config.betweenness_factor if config.betweenness_factor is not None else 0)
    mean_degree = nnz / n  # each undirected edge is stored twice: this is the mean degree
    k = config.k_core
    if k is None:
        k = max(1, round(math.log(n) * math.sqrt(mean_degree)))
    factor = config.betweenness_factor
    if factor is None:
        factor = round(math.log10(n))
    return int(k), int(factor)


def important_entities(
    csr: CSR,
    node_types,
    mention_counts,
    config: ImportanceConfig = ImportanceConfig(),
    *,
    nodes=None,
    seed: int = 0,
) -> np.ndarray:
    """Sorted int32 ids of the important entities of ``csr`` (see the module docstring).

    Parameters
    ----------
    csr : CSR
        Symmetric graph over ``n`` nodes on which centrality is measured.
    node_types : array-like of shape (n,)
        Node type codes (:class:`NodeType`); only ``NodeType.N`` nodes can be returned.
    mention_counts : array-like of shape (n,)
        Number of mentions per node (only entities' values are read).
    config : ImportanceConfig, default=ImportanceConfig()
    nodes : array-like of int or None, default=None
        Measure centrality on the subgraph induced by these node ids (duplicates
        ignored); ``None`` uses the whole graph. Returned ids are ids of ``csr``.
    seed : int, default=0
        Seed of the betweenness pivot sample (a build passes its top-level ``seed``).
    """
    if not isinstance(csr, CSR):
        raise TypeError(f"csr must be a noderag.graph.csr.CSR, got {type(csr).__name__}")
    if not isinstance(config, ImportanceConfig):
        raise TypeError(f"config must be an ImportanceConfig, got {type(config).__name__}")
    checked = validate_csr(csr.indptr, csr.indices, csr.weights, name="csr")
    n = checked.n
    types = np.asarray(node_types)
    mentions = np.asarray(mention_counts)
    if types.shape != (n,):
        raise ValueError(f"node_types must have shape ({n},) like csr, got {types.shape}")
    if mentions.shape != (n,):
        raise ValueError(f"mention_counts must have shape ({n},) like csr, got {mentions.shape}")
    if not np.issubdtype(types.dtype, np.integer):
        raise ValueError(f"node_types must be integer type codes, got dtype {types.dtype}")
    if not (np.issubdtype(mentions.dtype, np.integer) or np.issubdtype(mentions.dtype, np.floating)):
        raise ValueError(f"mention_counts must be numeric, got dtype {mentions.dtype}")
    candidates = (types == int(NodeType.N)) & (mentions >= config.min_mentions)
    members = None
    if nodes is not None:
        checked, members = induced_csr(checked, nodes)
        candidates = candidates[members]
    if checked.n == 0 or not candidates.any():
        return np.zeros(0, np.int32)
    k, factor = resolve_thresholds(checked.n, checked.nnz, config)
    from .betweenness import betweenness  # Numba kernels: imported here so that reading a config does not
    from .kcore import core_numbers  # load Numba (0.6 s at every Index.open)

    central = core_numbers(checked) >= k
    scores = betweenness(checked, k=config.betweenness_pivots, seed=seed,
                         weighted=config.weighted)
    central |= scores > scores.mean() * factor
    local = np.flatnonzero(candidates & central)
    return (local if members is None else members[local]).astype(np.int32)
