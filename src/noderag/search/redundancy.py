"""Redundancy in a ranked passage list: a passage that adds nothing the passages above it do not hold.

A multi-hop question needs passages that each match a different part of it ("What amount of TEUs did the
location where the 26th Chess Olympiad occur handle in 2010?": one passage for the Olympiad, one for the
port's TEUs). Ranked by score alone, the second slot often goes to a near-copy of the first ("41st Chess
Olympiad", matching the same words). :func:`redundancy_order` re-ranks greedily: a passage that matches
no content word of the question (:func:`content_terms`) that the passages ranked above it do not already
match, and that the query vector does not prefer to all of them, is *redundant* and loses its BM25 credit. A single-passage answer is not moved by
this: the passage that answers such a question either matches a term the others lack or is the one the
embedding prefers.
"""

from __future__ import annotations

import numpy as np

from ..lang.entities import STOP

__all__ = ["content_terms", "redundancy_order"]


def content_terms(terms: list[str]) -> list[str]:
    """The question's BM25 terms that say what it asks: not function words (:data:`noderag.lang.entities.STOP`:
    "the", "of", "where", ...), which every passage matches in some measure and which would make any
    passage "new"."""
    return [t for t in terms if t not in STOP]


def redundancy_order(scores: np.ndarray, credit: np.ndarray, matched: np.ndarray, cosines: np.ndarray,
                     top: int) -> tuple[np.ndarray, np.ndarray]:
    """Greedy order of candidate passages without redundancy: (positions into the inputs, their scores).

    Parameters
    ----------
    scores : float64 (n,)
        Passage scores, in ranked order (ties keep this order).
    credit : float64 (n,)
        The part of each score that BM25 gave (``passage_lexical_weight`` * share); a redundant passage loses it.
    matched : bool (terms, n)
        Which question terms (its content words) each passage matches.
    cosines : float64 (n,)
        Query similarity of each passage.
    top : int
        Positions chosen one at a time; the rest follow in the order of their scores given those ``top``.

    At each position, the passage of highest score wins, where a passage is redundant (scored without its
    ``credit``) when every term it matches is matched by a passage already placed and its cosine is no
    higher than theirs. The returned scores are non-increasing: what is placed only makes the others more
    redundant.
    """
    scores = np.asarray(scores, dtype=np.float64)
    credit = np.asarray(credit, dtype=np.float64)
    cosines = np.asarray(cosines, dtype=np.float64)
    matched = np.asarray(matched, dtype=bool)
    n = scores.shape[0]
    covered = np.zeros(matched.shape[0], dtype=bool)
    best_cos = -np.inf
    left = np.ones(n, dtype=bool)
    order = np.empty(n, dtype=np.int64)
    out = np.empty(n, dtype=np.float64)

    def current() -> np.ndarray:
        new_term = (matched & ~covered[:, None]).any(axis=0)
        return np.where(~new_term & (cosines <= best_cos), scores - credit, scores)

    k = 0
    for _ in range(min(top, n)):
        value = np.where(left, current(), -np.inf)
        i = int(np.argmax(value))  # the first of equal values: the ranked order breaks ties
        order[k], out[k] = i, value[i]
        k += 1
        left[i] = False
        covered |= matched[:, i]
        best_cos = max(best_cos, float(cosines[i]))
    if k < n:
        rest = np.flatnonzero(left)
        value = current()[rest]
        tail = np.argsort(-value, kind="stable")
        order[k:], out[k:] = rest[tail], value[tail]
    return order, out
