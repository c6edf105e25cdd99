"""Personalisation of the walk: how a query's entry points share the PPR restart mass."""

from __future__ import annotations

import numpy as np

__all__ = ["seed_weights", "VECTOR_WEIGHT", "NAME_WEIGHT", "LEXICAL_WEIGHT"]

#: The vector entry points share this much mass, by similarity (the reference NodeRAG's 1).
VECTOR_WEIGHT = 1.0
#: The name matches share as much as the vector entry points (the reference NodeRAG's 1).
NAME_WEIGHT = 1.0
#: The lexical entry points share half as much, by BM25 score: they add passages the vector misses on rare
#: words without drowning the others (0.25-1.0 tried, benchmarks/bench_retrieval.py).
LEXICAL_WEIGHT = 0.5


def seed_weights(entry: np.ndarray, sims: np.ndarray, names: np.ndarray, rel: np.ndarray,
                 lex: np.ndarray, lex_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PPR seeds and their weights (int32, float32): vector hits share :data:`VECTOR_WEIGHT` by similarity,
    name hits :data:`NAME_WEIGHT` by match weight ``rel``, lexical passage hits :data:`LEXICAL_WEIGHT` by BM25."""
    parts_i, parts_w = [], []
    if entry.size:
        s = np.clip(sims, 0.0, None).astype(np.float64)
        s = s / s.sum() if s.sum() > 0 else np.full(entry.size, 1.0 / entry.size)
        parts_i.append(entry)
        parts_w.append(VECTOR_WEIGHT * s)
    if names.size:
        w = np.asarray(rel, np.float64)
        if w.sum() > 0:
            parts_i.append(names)
            parts_w.append(NAME_WEIGHT * w / w.sum())
    if lex.size and float(lex_scores.sum()) > 0:
        parts_i.append(lex)
        parts_w.append(LEXICAL_WEIGHT * lex_scores / lex_scores.sum())
    if not parts_i:
        return np.zeros(0, np.int32), np.zeros(0, np.float32)
    return np.concatenate(parts_i).astype(np.int32), np.concatenate(parts_w).astype(np.float32)
