"""The communities stage: Leiden communities of the S/N/R/A graph -> H (summary) and O (title) nodes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..graph.csr import CSR
from ..graph.keys import canonical_name, node_key
from ..graph.types import A, H, N, O, R, S

from .assemble import EdgeList, NodeTable, cat_edges
from .attributes import Attributes
from .augment import (block_mean, block_sims, budget_join_count, column_sums, mean_vectors, retire_unproduced,
                      subgraph_csr)
from .node_vectors import NodeVectors

__all__ = ["Communities", "communities_stage", "add_communities"]



@dataclass
class Communities:
    """What the communities stage made: H and O node ids, their edges, failures, community count."""

    h_ids: list[int] = field(default_factory=list)
    o_ids: list[int] = field(default_factory=list)
    edges: EdgeList = field(default_factory=EdgeList)
    failures: dict = field(default_factory=dict)
    count: int = 0
    retired: int = 0
    leiden_s: float = 0.0  # wall seconds of the Leiden call alone (the stage report shows it)
    membership: np.ndarray | None = None  # Leiden's labels of the nodes the stage saw (-1: not in the graph)
    warm: bool = False  # Leiden started from a stored partition


def communities_stage(table: NodeTable, base: EdgeList, link: EdgeList, attrs: Attributes, vec: NodeVectors,
                      emb, backend, config, stages: Path, bars, initial: np.ndarray | None = None) -> Communities:
    """Leiden communities of the S/N/R/A graph and their H/O nodes (H vectors in ``vec``); then every
    A/H/O node this run did not produce is retired. ``initial``: stored labels of the first nodes to
    start Leiden from (:func:`warm_start_labels`), else it starts from singletons."""

    out = Communities()
    if config.communities.enabled:
        from ..graph.communities import leiden

        from .embedding import embed_texts_resumable

        types = table.types_array()
        n1 = len(table)
        snra = subgraph_csr(n1, types, *cat_edges(base, link, attrs.edges), (S, N, R, A))
        start = None if initial is None else warm_start_labels(initial, n1)
        t0 = time.perf_counter()
        membership = np.asarray(leiden(snra, resolution=config.communities.resolution,
                                       objective=config.communities.objective, seed=config.seed,
                                       n_iterations=config.communities.iterations,
                                       engine=config.communities.engine, initial_membership=start))
        out.leiden_s = time.perf_counter() - t0
        out.membership, out.warm = membership, start is not None
        out.count = int(membership.max()) + 1 if membership.size else 0
        sn = subgraph_csr(n1, types, *cat_edges(base, link), (S, N))  # after Leiden: not held at its peak
        counter = {"n": 0}

        def vectors_of(ids: np.ndarray) -> np.ndarray:
            return vec[np.asarray(ids, dtype=np.int64)]

        def embed_h(texts: list[str]) -> np.ndarray:
            counter["n"] += 1
            with bars.bar(len(texts), "embed H") as bar:
                return embed_texts_resumable(emb, texts, stages / f"emb_h{counter['n']}",
                                             batch_size=config.embed.batch_size, progress=bar)

        out.h_ids, out.o_ids, out.edges, out.failures, hv = add_communities(
            table, snra, membership, sn, config.communities, vectors_of=vectors_of, embed_texts=embed_h,
            llm=backend, seed=config.seed, mean_of_units=config.embed.extractive_mean)
        if out.h_ids:
            vec[np.asarray(out.h_ids, dtype=np.int64)] = hv
        vec.drop_resident()  # the member vectors read for the H nodes
    out.retired = retire_unproduced(table, set(attrs.ids) | set(out.h_ids) | set(out.o_ids))
    return out


def warm_start_labels(stored: np.ndarray, n: int) -> np.ndarray:
    """Leiden's starting labels for ``n`` nodes from the labels ``stored`` for the first of them (node ids
    kept since): each later node, and each node stored without a community, starts alone (-1)."""
    out = np.full(n, -1, np.int64)
    k = min(n, int(stored.shape[0]))
    out[:k] = stored[:k]
    return out


def stored_labels(membership: np.ndarray, n: int) -> np.ndarray:
    """The labels a generation stores for its ``n`` nodes (int32, -1 for the nodes added after Leiden)."""
    out = np.full(n, -1, np.int32)
    out[: membership.shape[0]] = membership
    return out


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
    failures: dict[str, str] = {}
    elements = (_extractive_elements(table, types, groups, snr_sn, config, vectors_of) if llm is None
                else _llm_elements(table, types, groups, config, llm, seed, failures))
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
            sims = block_sims(cand, vectors_of, h_vec)
            top = cand[np.lexsort((cand, -sims))][: config.links]
            src.extend([hid] * top.size)
            dst.extend(top.tolist())
            wts.extend([1.0] * top.size)
    edges = EdgeList()
    edges.add(src, dst, wts)
    return h_ids, o_ids, edges, failures, hv


def _extractive_elements(table: NodeTable, types: np.ndarray, groups: list[np.ndarray], snr_sn: CSR, config,
                         vectors_of: Callable[[np.ndarray], np.ndarray]) -> list[tuple[int, str, str, list[int]]]:
    """One element per community without an LLM: its most central units as the description, its most
    mentioned entities as the title. (community index, description, title, representative unit ids)."""
    elements = []
    sn_matrix = snr_sn.to_scipy()  # once: building it per community cost 3 s at 10^5 passages
    for ci, g in enumerate(groups):
        su = g[types[g] == S]
        sims = block_sims(su, vectors_of, block_mean(su, vectors_of))
        order = np.lexsort((su, -sims))
        rep_ids = su[order][:3].tolist()
        desc, k = budget_join_count([table.texts[i] for i in rep_ids], config.summary_tokens)
        rep_ids = rep_ids[:k]
        ents = g[types[g] == N]
        if ents.size:
            # in-community mention weight of each entity (S-N edges from member units)
            weight = column_sums(sn_matrix[su], ents)
            wordy = np.asarray([any(ch.isalpha() for ch in (table.names[i] or "")) for i in ents.tolist()])
            top = ents[np.lexsort((ents, -weight, ~wordy))][: config.title_entities]
            title = ", ".join(table.names[i] or table.texts[i] for i in top.tolist())
        else:
            title = " ".join(desc.split()[:8])
        elements.append((ci, desc, title, rep_ids))
    return elements


def _llm_elements(table: NodeTable, types: np.ndarray, groups: list[np.ndarray], config, llm, seed: int,
                  failures: dict[str, str]) -> list[tuple[int, str, str, None]]:
    """The elements the LLM writes for each community (one request each); failures are noted by community."""
    from ..llm.prompts import community_request

    reqs = []
    for ci, g in enumerate(groups):
        ms = g[np.isin(types[g], (S, A))]
        texts = [table.texts[i] for i in ms[: config.max_members].tolist()]
        reqs.append(community_request(texts, seed=seed, id=f"community-{ci}"))
    results = llm.run(reqs, stage="communities") if reqs else []
    elements = []
    for ci, res in enumerate(results):
        els = res.value.get("elements") if res.error is None and isinstance(res.value, dict) else None
        if not isinstance(els, list):
            failures[f"community {ci}"] = res.error or "reply has no 'elements' list"
            continue
        for el in els:
            if isinstance(el, dict) and isinstance(el.get("description"), str) and el["description"].strip():
                title = el.get("title") if isinstance(el.get("title"), str) else ""
                elements.append((ci, " ".join(el["description"].split()), " ".join(title.split()), None))
    return elements
