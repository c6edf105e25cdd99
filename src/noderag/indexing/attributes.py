"""The attributes stage: important entities (k-core, betweenness, mentions) -> A nodes and their edges."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..graph.csr import CSR
from ..graph.keys import canonical_name, node_key
from ..graph.types import A, N, R, S

from .assemble import EdgeList, NodeTable, cat_edges, mention_counts
from .augment import Adjacency, budget_join_count, mean_vectors, subgraph_csr
from .node_vectors import NodeVectors

__all__ = ["Attributes", "attributes_stage", "add_attributes"]



@dataclass
class Attributes:
    """What the attributes stage made: A node ids and edges, failures, the important entities."""

    ids: list[int]
    edges: EdgeList
    failures: dict
    important: np.ndarray


def attributes_stage(table: NodeTable, base: EdgeList, link: EdgeList, vec: NodeVectors, emb, backend, config,
                     stages: Path, bars) -> Attributes:
    """Important entities (k-core, betweenness, mentions) and their A nodes, with A vectors in ``vec``."""
    from ..graph.importance import important_entities

    from .embedding import embed_texts_resumable

    n0 = len(table)
    types = table.types_array()
    s1, d1, w1 = cat_edges(base, link)
    mentions = mention_counts(n0, types, s1, d1, w1)
    snr = subgraph_csr(n0, types, s1, d1, w1, (S, N, R))
    del s1, d1, w1
    important = important_entities(snr, types, mentions, config.importance,
                                   nodes=np.flatnonzero(np.isin(types, (S, N, R))), seed=config.seed)
    a_ids, a_edges, a_fail, a_sources = add_attributes(table, snr, mentions, important, config.attributes,
                                                       llm=backend, seed=config.seed)
    a_arr = np.asarray(a_ids, dtype=np.int64)
    if config.embed.extractive_mean and a_ids and all(a in a_sources for a in a_ids):
        vec[a_arr] = mean_vectors([a_sources[a] for a in a_ids], lambda ids: vec[ids])
    else:
        with bars.bar(int(a_arr.size), "embed A") as bar:
            vec[a_arr] = embed_texts_resumable(emb, [table.texts[i] for i in a_ids], stages / "emb_a",
                                               batch_size=config.embed.batch_size, progress=bar)
    vec.drop_resident()  # the unit vectors read for the means
    return Attributes(a_ids, a_edges, a_fail, important)


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
    adj = Adjacency(snr)
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
            body, k = budget_join_count(units, config.summary_tokens) if units else (name, 0)
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
