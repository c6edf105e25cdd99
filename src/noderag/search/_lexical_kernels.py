"""Numba kernels of :mod:`noderag.search.lexical`: exact top-k BM25 over impact-ordered postings (MaxScore with
completion from the forward table) and BM25 impacts of given passages read from the forward table.

Imported by the lexical index only when its forward table is present (an index built before it searches
without Numba).

A query's terms are given in *slot* order (the order the scores sum them in: the terms sorted as strings), with
their rows in the postings (``starts``/``ends``, the ends capped at ``max_postings``) and the last posting a
capped list reads (``cap_w``, ``cap_node``: an impact-ordered list holds a passage within its cap iff its impact
is higher, or equal with a node id no higher; ``-inf`` for an uncapped list). ``q_rank``/``q_slot`` are the
terms' vocabulary ranks, sorted, with the slot of each.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["forward_impacts", "forward_scores", "maxscore_top"]


@njit(cache=True)
def _row_impacts(x, fwd_node, fwd_ptr, fwd_term, fwd_weight, q_rank, q_slot, cap_w, cap_node, vals):
    """``vals[slot]`` = the impact of each query term on passage ``x`` within its list's cap (vals zeroed before)."""
    row = np.searchsorted(fwd_node, x)
    if row >= fwd_node.shape[0] or fwd_node[row] != x:
        return
    p, pe = fwd_ptr[row], fwd_ptr[row + 1]
    q, qe = 0, q_rank.shape[0]
    while p < pe and q < qe:
        t = fwd_term[p]
        r = q_rank[q]
        if t < r:
            p += 1
        elif t > r:
            q += 1
        else:
            w = fwd_weight[p]
            while q < qe and q_rank[q] == t:
                s = q_slot[q]
                if w > cap_w[s] or (w == cap_w[s] and x <= cap_node[s]):
                    vals[s] = w
                q += 1
            p += 1


@njit(cache=True)
def forward_impacts(ids, fwd_node, fwd_ptr, fwd_term, fwd_weight, q_rank, q_slot, cap_w, cap_node):  # pragma: no cover
    """float64 (slots, len(ids)): each query term's impact on each passage (0 outside the passage or its cap)."""
    n_slots = cap_w.shape[0]
    out = np.zeros((n_slots, ids.shape[0]))
    vals = np.zeros(n_slots)
    for i in range(ids.shape[0]):
        vals[:] = 0.0
        _row_impacts(ids[i], fwd_node, fwd_ptr, fwd_term, fwd_weight, q_rank, q_slot, cap_w, cap_node, vals)
        for s in range(n_slots):
            out[s, i] = vals[s]
    return out


@njit(cache=True)
def _score(x, fwd_node, fwd_ptr, fwd_term, fwd_weight, q_rank, q_slot, cap_w, cap_node, vals):
    vals[:] = 0.0
    _row_impacts(x, fwd_node, fwd_ptr, fwd_term, fwd_weight, q_rank, q_slot, cap_w, cap_node, vals)
    total = 0.0
    for s in range(vals.shape[0]):  # in slot order: the sums of the postings' accumulation, bit for bit
        total += vals[s]
    return total


@njit(cache=True)
def forward_scores(ids, fwd_node, fwd_ptr, fwd_term, fwd_weight, q_rank, q_slot, cap_w, cap_node):  # pragma: no cover
    """float64 BM25 score of each passage of ``ids`` over the query terms."""
    out = np.zeros(ids.shape[0])
    vals = np.zeros(cap_w.shape[0])
    for i in range(ids.shape[0]):
        out[i] = _score(ids[i], fwd_node, fwd_ptr, fwd_term, fwd_weight, q_rank, q_slot, cap_w, cap_node, vals)
    return out


@njit(cache=True)
def _kth_largest(values, n, k):  # pragma: no cover - compiled
    """The ``k``-th largest of ``values[:n]`` (n >= k >= 1)."""
    part = np.partition(-values[:n], k - 1)
    return -part[k - 1]


@njit(cache=True)
def _better(s, x, s2, x2):  # pragma: no cover - compiled
    """Whether (score s, id x) ranks before (s2, x2): higher score, then lower id."""
    return s > s2 or (s == s2 and x < x2)


@njit(cache=True)
def _slot(keys, x, mask):  # pragma: no cover - compiled
    """The slot of node ``x`` in an open-addressing table (linear probing; -1 marks a free slot)."""
    h = (np.uint64(x) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)
    i = np.int64(h) & mask
    while keys[i] != x and keys[i] != -1:
        i = (i + 1) & mask
    return i


@njit(cache=True)
def _stop_here(part, n_act, k, rem, next_len, slack, exact_cost):  # pragma: no cover - compiled
    """Whether MaxScore may stop reading: the lists left cannot lift a passage they alone hold into the top
    ``k``, and scoring the passages that could still rank costs less than reading the next list."""
    floor = _kth_largest(part, n_act, k) * (1.0 - slack)
    if rem * (1.0 + slack) >= floor:
        return False
    left = 0
    for i in range(n_act):
        if (part[i] + rem) * (1.0 + slack) >= floor:
            left += 1
    return left * exact_cost <= next_len


@njit(cache=True)
def _read_lists(k, starts, ends, post_node, post_weight, active, check_active, slack, exact_cost):  # pragma: no cover
    """Partial scores of the passages met in the lists read, highest first impact first: (their node ids, partial
    scores, the first impacts of the lists left summed, postings read)."""
    n_t = starts.shape[0]
    first = np.zeros(n_t)
    total = 0
    for t in range(n_t):
        if ends[t] > starts[t]:
            first[t] = post_weight[starts[t]]
        total += ends[t] - starts[t]
    order = np.argsort(-first, kind="mergesort")
    rem = first.sum()
    bits = 4
    while (1 << bits) < 2 * total:
        bits += 1
    mask = (1 << bits) - 1
    keys = np.full(1 << bits, -1, np.int64)
    vals = np.zeros(1 << bits)
    live = np.empty(total, np.int64)  # slots of the passages that may rank
    part = np.empty(total)
    n_act, best, read = 0, 0.0, 0
    for j in range(n_t):
        t = order[j]
        # checking costs a pass over the passages met: a list shorter than that is read instead
        if n_act >= k and 4 * (ends[t] - starts[t]) >= n_act and rem * (1.0 + slack) < best * (1.0 - slack):
            for i in range(n_act):
                part[i] = vals[live[i]]
            if _stop_here(part, n_act, k, rem, ends[t] - starts[t], slack, exact_cost):
                break
        for p in range(starts[t], ends[t]):
            x = np.int64(post_node[p])
            i = _slot(keys, x, mask)
            if keys[i] == -1:
                keys[i] = x
                if check_active and not active[x]:
                    vals[i] = -np.inf  # met, never ranked
                else:
                    live[n_act] = i
                    n_act += 1
            vals[i] += post_weight[p]
            if vals[i] > best:
                best = vals[i]
        read += ends[t] - starts[t]
        rem -= first[t]
    ids = np.empty(n_act, np.int64)
    for i in range(n_act):
        ids[i] = keys[live[i]]
        part[i] = vals[live[i]]
    return ids, part[:n_act], max(rem, 0.0), read


@njit(cache=True)
def maxscore_top(k, starts, ends, post_node, post_weight, active, check_active, fwd_node, fwd_ptr, fwd_term,
                 fwd_weight, q_rank, q_slot, cap_w, cap_node, slack, exact_cost, stats):  # pragma: no cover
    """The ``k`` best passages by BM25: (node ids, scores), best first, ties by lower id.

    MaxScore over impact-ordered lists: lists are read whole (within their caps), highest first impact first,
    summing partial scores per passage, until the lists left could together add less than the ``k``-th best
    partial score (a passage met only in them cannot rank) and scoring the passages that still could costs less
    than the next list. Those are then scored exactly from the forward table, highest upper bound (partial +
    lists left) first, until the next bound is below the ``k``-th exact score. ``slack`` (relative) keeps every
    bound safe against rounding; ``stats``: passages met, passages that could rank, passages scored, postings.
    """
    ids, part, rem, read = _read_lists(k, starts, ends, post_node, post_weight, active, check_active, slack,
                                       exact_cost)
    n_act = ids.shape[0]
    floor = _kth_largest(part, n_act, k) * (1.0 - slack) if n_act >= k else -np.inf
    ub = (part + rem) * (1.0 + slack)
    cand = np.flatnonzero(ub >= floor)
    cand = cand[np.argsort(-ub[cand], kind="mergesort")]
    out_ids = np.full(k, -1, np.int64)
    out_s = np.zeros(k)
    n_out = 0
    vals = np.zeros(cap_w.shape[0])
    for i in cand:
        if n_out == k and ub[i] < out_s[k - 1]:
            break
        x = ids[i]
        s = _score(x, fwd_node, fwd_ptr, fwd_term, fwd_weight, q_rank, q_slot, cap_w, cap_node, vals)
        stats[2] += 1
        if n_out < k:
            pos = n_out
            n_out += 1
        elif _better(s, x, out_s[k - 1], out_ids[k - 1]):
            pos = k - 1
        else:
            continue
        while pos > 0 and _better(s, x, out_s[pos - 1], out_ids[pos - 1]):
            out_s[pos], out_ids[pos] = out_s[pos - 1], out_ids[pos - 1]
            pos -= 1
        out_s[pos], out_ids[pos] = s, x
    stats[0], stats[1], stats[3] = n_act, cand.shape[0], read
    return out_ids[:n_out], out_s[:n_out]
