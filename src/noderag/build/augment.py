"""Augment: important entities -> A nodes; Leiden communities -> H and O nodes.

Both steps are recomputed from the whole T/S/N/R graph on every build and
insert (they depend on global structure). Node keys make the result stable:
an A node is keyed by its entity, so an entity that stays important keeps its
A id (its text is refreshed); H/O nodes are keyed by their content. A/H/O
nodes that a later insert no longer produces are retired (``active`` False,
no edges, no vector); ids are never reused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..graph.csr import CSR, csr_from_coo
from ..graph.keys import canonical_name, node_key
from ..graph.types import NodeType

from .assemble import EdgeList, NodeTable

__all__ = ["AugmentFailure", "add_attributes", "add_communities", "mean_vectors", "retire_unproduced", "subgraph_csr"]

T, S, N, R, A, H, O = (int(t) for t in NodeType)


class AugmentFailure(RuntimeError):
    """LLM augmentation failed for some items after retries; the message names them."""


@dataclass(frozen=True)
class _Adjacency:
    csr: CSR

    def neighbors(self, v: int) -> np.ndarray:
        return self.csr.indices[self.csr.indptr[v]:self.csr.indptr[v + 1]]

    def weights(self, v: int) -> np.ndarray:
        return self.csr.weights[self.csr.indptr[v]:self.csr.indptr[v + 1]]


def subgraph_csr(n: int, types: np.ndarray, src: np.ndarray, dst: np.ndarray, w: np.ndarray,
                 keep_types: Sequence[int]) -> CSR:
    """Symmetric CSR over all ``n`` nodes with only the edges whose two ends have a type in ``keep_types``."""
    keep = np.zeros(7, dtype=bool)
    keep[list(keep_types)] = True
    m = keep[types[src]] & keep[types[dst]]
    return csr_from_coo(n, src[m], dst[m], w[m], symmetric=True)


def _budget_join_count(texts: Sequence[str], budget: int) -> tuple[str, int]:
    """Join leading ``texts`` within ``budget`` tokens (at least one); return (text, how many)."""
    from ..tokenize import count_tokens

    out: list[str] = []
    used = 0
    for t in texts:
        n = count_tokens(t)
        if out and used + n > budget:
            break
        out.append(t)
        used += n
        if used >= budget:
            break
    return " ".join(out), len(out)


def mean_vectors(groups: Sequence[Sequence[int]], vectors_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Unit-norm mean vector of each group of node ids (the vector of an extractive summary)."""
    out = []
    for g in groups:
        v = vectors_of(np.asarray(g, dtype=np.int64)).mean(axis=0)
        out.append(v / max(float(np.linalg.norm(v)), 1e-12))
    return np.asarray(out, dtype=np.float32)


def add_attributes(table: NodeTable, snr: CSR, mentions: np.ndarray, important: np.ndarray, config, *,
                   llm=None, seed: int = 0) -> tuple[list[int], EdgeList, dict[int, str], dict[int, list[int]]]:
    """Create or refresh one A node per important entity (ids in ``important``, ascending).

    nlp (``llm is None``): extractive summary, the entity's most central units (most
    entity mentions, then heaviest link, then lowest id) within ``config.summary_tokens``.
    llm: one attribute prompt per entity with its units and relationships.

    Returns (A node ids, N-A edges, failures {entity id: error}, sources {A id: S ids of an
    extractive summary}).
    """
    types = table.types_array()
    adj = _Adjacency(snr)
    s_degree = np.diff(snr.indptr)
    jobs: list[tuple[int, str, list[str], list[str]]] = []
    unit_ids: dict[int, list[int]] = {}
    for e in np.asarray(important, dtype=np.int64).tolist():
        nb = adj.neighbors(e)
        wt = adj.weights(e)
        is_s = types[nb] == S
        s_ids, s_w = nb[is_s], wt[is_s]
        order = np.lexsort((s_ids, -s_w, -s_degree[s_ids]))
        unit_ids[e] = s_ids[order][: config.max_units].tolist()
        units = [table.texts[i] for i in unit_ids[e]]
        rels = [table.texts[i] for i in nb[types[nb] == R][: config.max_units].tolist()]
        name = table.names[e] or table.texts[e]
        jobs.append((e, name, units, rels))
    texts: dict[int, str] = {}
    used: dict[int, list[int]] = {}
    failures: dict[int, str] = {}
    if llm is None:
        for e, name, units, _ in jobs:
            body, k = _budget_join_count(units, config.summary_tokens) if units else (name, 0)
            texts[e] = body if body.startswith(f"{name}:") else f"{name}: {body}"
            used[e] = unit_ids[e][:k]
    else:
        from ..llm.prompts import attribute_request

        reqs = [attribute_request(name, units, (), max_tokens=max(32, config.summary_tokens * 2), seed=seed,
                                  id=f"attr-{e}") for e, name, units, rels in
                [(e, n, u + r, r) for e, n, u, r in jobs]]
        results = llm.run(reqs, stage="attributes") if reqs else []
        for (e, name, _, _), res in zip(jobs, results):
            value = res.value if res.error is None else None
            text = value if isinstance(value, str) else (res.text if res.error is None else "")
            if not text or not text.strip():
                failures[e] = res.error or "empty summary"
                continue
            texts[e] = f"{name}: {' '.join(text.split())}"
    a_ids: list[int] = []
    sources: dict[int, list[int]] = {}
    src, dst = [], []
    for e, _, _, _ in jobs:
        if e not in texts:
            continue
        canon = canonical_name(table.names[e] or table.texts[e])
        aid, created = table.add(A, node_key(A, canon), name=None, text=texts[e])
        if not created:
            table.texts[aid] = texts[e]
            table.active[aid] = True
        a_ids.append(aid)
        if used.get(e):
            sources[aid] = used[e]
        src.append(e)
        dst.append(aid)
    edges = EdgeList()
    edges.add(src, dst, np.ones(len(src), np.float32))
    del mentions
    return a_ids, edges, failures, sources


def _column_sums(rows, cols: np.ndarray) -> np.ndarray:
    """Sum of each column ``cols`` (ascending ids) over the sparse CSR rows ``rows``, float64.

    ``rows[:, cols].sum(axis=0)`` without scipy's column indexing, which allocates an array as
    long as the matrix is wide (2M columns at 10^5 passages) for every call: 16 MB per community.
    """
    pos = np.searchsorted(cols, rows.indices)
    hit = pos < cols.size
    hit[hit] = cols[pos[hit]] == rows.indices[hit]
    return np.bincount(pos[hit], weights=np.asarray(rows.data, dtype=np.float64)[hit], minlength=cols.size)


#: Vectors read at a time for a community's centroid and similarities (the largest communities hold
#: 10^5 units at 10^5 passages: reading them at once took a 150 MB float32 copy).
VECTOR_BLOCK = 8192


def _block_mean(ids: np.ndarray, vectors_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``vectors_of(ids).mean(axis=0)``, bit for bit, reading ``VECTOR_BLOCK`` vectors at a time (the float32
    sum runs row after row into one accumulator, as NumPy's reduction over the first axis does)."""
    acc = None
    for b in range(0, ids.size, VECTOR_BLOCK):
        block = vectors_of(ids[b:b + VECTOR_BLOCK])
        acc = block.sum(axis=0) if acc is None else np.add.reduce(np.concatenate((acc[None], block)), axis=0)
    return acc / ids.size


def _block_sims(ids: np.ndarray, vectors_of: Callable[[np.ndarray], np.ndarray], v: np.ndarray) -> np.ndarray:
    """Dot product of each vector of ``ids`` with ``v``, ``VECTOR_BLOCK`` vectors at a time.

    ``einsum``, not ``@``: BLAS's matrix-vector product rounds a row differently with the row count
    and its thread count (1 and 2 OpenBLAS threads gave other bits), so ties in the ranking could
    depend on the machine; einsum computes each row alone.
    """
    if ids.size == 0:
        return np.zeros(0, np.float32)
    return np.concatenate([np.einsum("ij,j->i", vectors_of(ids[b:b + VECTOR_BLOCK]), v)
                           for b in range(0, ids.size, VECTOR_BLOCK)])


def _community_lists(membership: np.ndarray, members_mask: np.ndarray) -> list[np.ndarray]:
    """Member id arrays per community label (labels ascending), only nodes in ``members_mask``."""
    ids = np.flatnonzero(members_mask & (membership >= 0))
    labels = membership[ids]
    order = np.argsort(labels, kind="stable")
    ids, labels = ids[order], labels[order]
    cuts = np.flatnonzero(np.diff(labels)) + 1
    return np.split(ids, cuts) if ids.size else []


def add_communities(table: NodeTable, graph: CSR, membership: np.ndarray, snr_sn: CSR, config, *,
                    vectors_of: Callable[[np.ndarray], np.ndarray],
                    embed_texts: Callable[[list[str]], np.ndarray],
                    llm=None, seed: int = 0, mean_of_units: bool = True
                    ) -> tuple[list[int], list[int], EdgeList, dict[str, str], np.ndarray]:
    """H (and one O each) per community of ``membership``; H links to its most similar members.

    ``graph``: the S/N/R/A structural graph the communities came from; ``snr_sn``:
    S-N edges (mention weights) for the O titles; ``vectors_of(ids)``: unit-norm vectors of
    S/A nodes; ``embed_texts(texts)``: unit-norm vectors of new H texts.

    ``mean_of_units``: an extractive H (nlp) gets the unit-norm mean of its units' vectors
    instead of a model call.

    Returns (H ids, O ids, edges H-O / H-S / H-A, failures {community: error}, H vectors).
    """
    types = table.types_array()
    n = len(types)
    member_mask = np.isin(types, (S, N, R, A)) & (np.diff(graph.indptr) > 0)
    groups = [g for g in _community_lists(membership[:n], member_mask)
              if g.size >= config.min_size and np.any(types[g] == S)]
    # community elements: (community index, description, title, representative unit ids or None)
    elements: list[tuple[int, str, str, list[int] | None]] = []
    failures: dict[str, str] = {}
    if llm is None:
        sn_matrix = snr_sn.to_scipy()  # once: building it per community cost 3 s at 10^5 passages
        for ci, g in enumerate(groups):
            su = g[types[g] == S]
            sims = _block_sims(su, vectors_of, _block_mean(su, vectors_of))
            order = np.lexsort((su, -sims))
            rep_ids = su[order][:3].tolist()
            desc, k = _budget_join_count([table.texts[i] for i in rep_ids], config.summary_tokens)
            rep_ids = rep_ids[:k]
            ents = g[types[g] == N]
            if ents.size:
                # in-community mention weight of each entity (S-N edges from member units)
                weight = _column_sums(sn_matrix[su], ents)
                wordy = np.asarray([any(ch.isalpha() for ch in (table.names[i] or "")) for i in ents.tolist()])
                top = ents[np.lexsort((ents, -weight, ~wordy))][: config.title_entities]
                title = ", ".join(table.names[i] or table.texts[i] for i in top.tolist())
            else:
                title = " ".join(desc.split()[:8])
            elements.append((ci, desc, title, rep_ids))
    else:
        from ..llm.prompts import community_request

        reqs = []
        for ci, g in enumerate(groups):
            ms = g[np.isin(types[g], (S, A))]
            texts = [table.texts[i] for i in ms[: config.max_members].tolist()]
            reqs.append(community_request(texts, seed=seed, id=f"community-{ci}"))
        results = llm.run(reqs, stage="communities") if reqs else []
        for ci, res in enumerate(results):
            els = res.value.get("elements") if res.error is None and isinstance(res.value, dict) else None
            if not isinstance(els, list):
                failures[f"community {ci}"] = res.error or "reply has no 'elements' list"
                continue
            for el in els:
                if isinstance(el, dict) and isinstance(el.get("description"), str) and el["description"].strip():
                    title = el.get("title") if isinstance(el.get("title"), str) else ""
                    elements.append((ci, " ".join(el["description"].split()), " ".join(title.split()), None))
    h_ids: list[int] = []
    h_seen: set[int] = set()
    o_ids: list[int] = []
    src, dst, wts = [], [], []
    new_h: list[int] = []
    h_reps: list[list[int] | None] = []
    for ci, desc, title, reps in elements:
        hkey = node_key(H, desc)
        hid, created = table.add(H, hkey, name=None, text=desc)
        table.active[hid] = True
        if hid in h_seen:
            continue
        h_seen.add(hid)
        h_ids.append(hid)
        new_h.append(ci)
        h_reps.append(reps)
        otitle = title or " ".join(desc.split()[:8])
        oid, _ = table.add(O, node_key(O, f"{canonical_name(otitle)}\x1f{hkey:016x}"), name=otitle, text=otitle)
        table.active[oid] = True
        o_ids.append(oid)
        src.append(hid)
        dst.append(oid)
        wts.append(1.0)
    hv = np.zeros((0, 0), np.float32)
    if h_ids:
        if mean_of_units and all(r for r in h_reps):
            hv = mean_vectors(h_reps, vectors_of)  # extractive: the text is those units
        else:
            hv = embed_texts([table.texts[h] for h in h_ids])
        for hid, ci, h_vec in zip(h_ids, new_h, hv):
            g = groups[ci]
            cand = g[np.isin(types[g], (S, A))]
            if cand.size == 0:
                continue
            sims = _block_sims(cand, vectors_of, h_vec)
            top = cand[np.lexsort((cand, -sims))][: config.links]
            src.extend([hid] * top.size)
            dst.extend(top.tolist())
            wts.extend([1.0] * top.size)
    edges = EdgeList()
    edges.add(src, dst, wts)
    return h_ids, o_ids, edges, failures, hv


def retire_unproduced(table: NodeTable, produced: set[int]) -> int:
    """Mark every A/H/O node not in ``produced`` inactive; return how many were retired."""
    types = table.types_array()
    count = 0
    for i in np.flatnonzero(np.isin(types, (A, H, O))).tolist():
        if i not in produced and table.active[i]:
            table.active[i] = False
            count += 1
    return count
