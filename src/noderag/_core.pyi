"""Type stub for the private native module noderag._core (use the noderag.graph wrappers)."""

import numpy as np
import numpy.typing as npt

__version__: str

class PPRKernel:
    """Shallow personalized PageRank over fixed CSR arrays; the arrays must stay unmodified."""

    def __init__(
        self,
        indptr: npt.NDArray[np.int64] | npt.NDArray[np.int32],
        indices: npt.NDArray[np.int32],
        weights: npt.NDArray[np.float32],
        types: npt.NDArray[np.uint8],
        check_edges: bool = True,
    ) -> None: ...
    @property
    def n(self) -> int: ...
    @property
    def nnz(self) -> int: ...
    @property
    def mirrored(self) -> bool: ...
    @property
    def n_grouped(self) -> int: ...
    min_skip_segment: int
    def query(
        self,
        seeds: npt.NDArray[np.int32] | npt.NDArray[np.int64],
        weights: npt.NDArray[np.float32] | npt.NDArray[np.float64] | None,
        k_per_type: npt.NDArray[np.int64],
        alpha: float,
        iterations: int,
        restart: bool,
        epsilon: float,
        push_epsilon: float,
    ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float32], float, int]: ...
    def run(
        self,
        seeds: npt.NDArray[np.int32],
        weights: npt.NDArray[np.float32],
        offsets: npt.NDArray[np.int64],
        k_per_type: npt.NDArray[np.int64],
        alpha: float,
        iterations: int,
        restart: bool,
        epsilon: float,
        push_epsilon: float,
        n_threads: int,
        out_ids: npt.NDArray[np.int32],
        out_scores: npt.NDArray[np.float32],
        out_error: npt.NDArray[np.float64],
        out_support: npt.NDArray[np.int64],
    ) -> None: ...

def typed_neighbours(
    indptr: npt.NDArray[np.int64] | npt.NDArray[np.int32],
    indices: npt.NDArray[np.int32],
    types: npt.NDArray[np.uint8],
    active: npt.NDArray[np.bool_],
    nodes: npt.NDArray[np.int64],
    node_type: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Active neighbours of type ``node_type`` of each of ``nodes``: (position in ``nodes`` of each
    neighbour's owner, neighbour id), grouped by owner in adjacency order. Raises IndexError for a node id
    outside [0, n) and ValueError for a damaged row it reads (offsets or column ids)."""
    ...

def sum_postings(
    ords: npt.NDArray[np.int32],
    weights: npt.NDArray[np.float32] | npt.NDArray[np.float64],
    acc: npt.NDArray[np.float64],
    marks: npt.NDArray[np.uint64],
    ids: npt.NDArray[np.int64] | None = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """``weights`` summed per passage ordinal ``ords`` in the zeroed scratch ``acc`` (n_pass entries) and the
    bitset ``marks`` ((n_pass + 63) // 64 words), each posting added in order; both are zero again on return.
    Returns (touched ordinals ascending, or ``ids[ordinal]`` with ``ids``; their sums). Raises ValueError for
    mismatched shapes or an ordinal outside [0, n_pass)."""
    ...

def sum_runs(
    ords: npt.NDArray[np.int32],
    weights: npt.NDArray[np.float32] | npt.NDArray[np.float64],
    bounds: npt.NDArray[np.int64],
    n_pass: int,
    ids: npt.NDArray[np.int64] | None = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The impacts of runs ``[bounds[j], bounds[j + 1])`` of postings, each ascending by passage ordinal, summed per
    ordinal block by block (runs added in order: the sums of :func:`sum_postings` over the same postings).
    Returns (touched ordinals ascending, or ``ids[ordinal]``; their sums). Raises ValueError for bad bounds, an
    ordinal outside [0, n_pass) or a run out of order."""
    ...

def run_impacts(
    ords: npt.NDArray[np.int32],
    weights: npt.NDArray[np.float32] | npt.NDArray[np.float64],
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    targets: npt.NDArray[np.int32],
) -> npt.NDArray[np.float64]:
    """The impact of each run ``[starts[j], ends[j])`` (ordinals ascending) on each target ordinal: float64
    (runs, targets), 0 where the run lacks it. Raises ValueError for a run outside the postings."""
    ...

def about_links(
    indptr: npt.NDArray[np.int64] | npt.NDArray[np.int32],
    indices: npt.NDArray[np.int32],
    types: npt.NDArray[np.uint8],
    active: npt.NDArray[np.bool_],
    chunk: npt.NDArray[np.int64],
    hop: npt.NDArray[np.int64],
    src: npt.NDArray[np.int64],
    ents: npt.NDArray[np.int64],
    strength: npt.NDArray[np.float64],
    split: npt.NDArray[np.float64],
    max_degree: int,
    about_share: float,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The passages about each entity slot (``ents[i]``, named by source ``src[i]`` of ``hop``): (passage ids in
    order of first reach, their largest strength share / split[m] * strength[src]). Raises ValueError for a
    damaged row, IndexError for an entity id outside the graph."""
    ...

def shared_links(
    indptr: npt.NDArray[np.int64] | npt.NDArray[np.int32],
    indices: npt.NDArray[np.int32],
    types: npt.NDArray[np.uint8],
    active: npt.NDArray[np.bool_],
    chunk: npt.NDArray[np.int64],
    hop: npt.NDArray[np.int64],
    src: npt.NDArray[np.int64],
    ents: npt.NDArray[np.int64],
    excluded: npt.NDArray[np.int64],
    weight: npt.NDArray[np.float64],
    max_degree: int,
    max_entities: int,
    max_shared: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The passages sharing a rare entity with each source (one entry per naming unit in ``src``/``ents``): (source
    positions, passage ids, strengths summed from ``weight[degree]`` in entry order), source by source."""
    ...

def redundancy_order(
    scores: npt.NDArray[np.float64],
    credit: npt.NDArray[np.float64],
    matched: npt.NDArray[np.bool_],
    cosines: npt.NDArray[np.float64],
    top: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The greedy order of ranked passages without redundancy (:func:`noderag.search.redundancy.redundancy_order`):
    (positions, their scores)."""
    ...

def title_candidates(
    hashes: npt.NDArray[np.uint64],
    can_start: npt.NDArray[np.bool_],
    first: npt.NDArray[np.uint64],
    first_mask: npt.NDArray[np.int64],
    heads: npt.NDArray[np.uint64],
    max_tokens: int,
    q: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The title heads a text's tokens may start (:meth:`noderag.search.titles.TitleLinks.named_groups`): (starts,
    lengths, lo, hi) of every head hash found in ``heads``, by start, longest first."""
    ...

class LineWords:
    """Cached per-word token counts of context lines (:meth:`noderag.tokenize.LineCounter.count_spans`): spans of
    UTF-8 bytes split as ``str.split()`` splits their text; an all-zero span (an erased text) has no word."""

    def __init__(self, max_cached: int) -> None: ...
    def missing(
        self, blob: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]
    ) -> tuple[list[bytes], list[bytes]]:
        """(distinct words without a cached count, distinct last words without a cached line break), in order of
        first sight; both caches are emptied first when they hold more than ``max_cached`` words."""
        ...
    def add(self, words: list[bytes], counts: list[int], last: list[bytes], breaks: list[int]) -> None: ...
    def spaced(self, words: list[bytes]) -> list[int]:
        """The cached counts of ``words`` (each must be cached)."""
        ...
    def count(
        self, blob: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(tokens of each span's line from the cached counts, its word count); RuntimeError for a word not cached."""
        ...
    def __len__(self) -> int: ...
