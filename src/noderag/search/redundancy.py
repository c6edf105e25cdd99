"""Redundancy in a ranked passage list: a passage that adds nothing the passages above it do not hold.

A multi-hop question needs passages that each match a different part of it (one passage for the event it
names, another for the place that event leads to). Ranked by score alone, the second slot often goes to a
near-copy of the first (another passage matching the same words). :func:`redundancy_order` re-ranks
greedily: a passage that matches no content word of the question (:func:`content_terms`) that the passages
ranked above it do not already match, and that the query vector does not prefer to all of them, is
*redundant* and loses its BM25 credit. A single-passage answer is not moved by this: the passage that
answers such a question either matches a term the others lack or is the one the embedding prefers.
"""

from __future__ import annotations

import numpy as np

from .._core import redundancy_order as _redundancy_order
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
    redundant. The greedy steps run in the C++ core (:func:`noderag._core.redundancy_order`): a few passes over the
    candidates per position instead of a dozen numpy calls.
    """
    scores = np.ascontiguousarray(scores, dtype=np.float64)
    credit = np.ascontiguousarray(credit, dtype=np.float64)
    cosines = np.ascontiguousarray(cosines, dtype=np.float64)
    matched = np.ascontiguousarray(matched, dtype=bool)
    n = scores.shape[0]
    if credit.shape != (n,) or cosines.shape != (n,) or matched.ndim != 2 or matched.shape[1] != n:
        raise ValueError(f"redundancy_order: scores, credit and cosines of shape ({n},) and matched (terms, {n}) "
                         f"expected, got {credit.shape}, {cosines.shape}, {matched.shape}")
    return _redundancy_order(scores, credit, matched, cosines, int(top))
