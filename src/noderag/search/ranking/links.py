"""Where a passage leads, by the graph and by titles: the walks the bridging round reads (no LLM call).

A multi-hop question's next passage is most often the one *about* an entity the first passage names, sometimes
one that merely shares a rare entity with it, or the article whose title the first passage names. These
functions find them by walking the structural graph (passage -> units -> entities -> units -> passages,
bounded by an entity degree cap) and by title heads (:mod:`noderag.search.titles`).
"""

from __future__ import annotations

import numpy as np

from ..._core import about_links, shared_links
from ...graph.types import NodeType
from ..titles import TitleLinks
from .context import IndexView, QueryContext

__all__ = ["ABOUT_SHARE", "ABOUT_SPLIT", "MAX_DEGREE", "MAX_SHARED", "absent", "about", "shared_each",
           "source_entities", "title_links", "title_groups", "titled_passages"]

_T, _S, _N = int(NodeType.T), int(NodeType.S), int(NodeType.N)
#: A passage is about an entity when at least half of its semantic units name it (a majority, not a tuned weight).
ABOUT_SHARE = 0.5
#: An "about" bridge through an entity that ``m`` reached passages are about is divided by ``m ** ABOUT_SPLIT``:
#: an entity many passages are about (a country, a league) leads to each of them less surely (0-0.5 tried on
#: the English dev samples, benchmarks/bench_retrieval.py).
ABOUT_SPLIT = 0.25
#: Entities of higher structural degree do not bridge: a hub links everything, so it says nothing, and the cap
#: bounds each walk to MAX_DEGREE units per entity.
MAX_DEGREE = 60
#: At most this many entities per source passage are walked: bounds the tail of a long, name-dense passage.
MAX_ENTITIES = 128
#: At most this many passages sharing an entity with a source are scored against the question (the most strongly
#: linked): each costs a vector look-up of the passage and its units. Per source the median is 13 passages on an
#: English and 26 on a Chinese dev sample (95th percentile 50 and 73, at most 118); 48 left every dev recall
#: figure as it was (benchmarks/bench_retrieval.py).
MAX_SHARED = 48


def absent(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``~np.isin(a, b)``; for the few ids a bridge walk excludes, one broadcast comparison, else a binary search
    of ``a`` in sorted ``b`` (the question's name matches: ``b`` is small, ``a`` a walk's thousands of ids, which
    ``np.isin`` would sort)."""
    if b.size == 0:
        return np.ones(a.shape[0], bool)
    if b.size <= 16:
        return ~(a[:, None] == b[None, :]).any(axis=1)
    b = np.sort(b)
    return b[np.minimum(np.searchsorted(b, a), b.size - 1)] != a


def source_entities(view: IndexView, hop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position in ``hop`` of the source, entity) of every entity the units of the ``hop`` passages name, one per
    naming unit, by source in walk order: the walk :func:`about` and :func:`shared_each` both start with, done once
    for both when the caller passes it on."""
    u_src, units = view.walk(hop, _S)
    e_unit, ents = view.walk(units, _N)
    return np.asarray(u_src, dtype=np.int64)[np.asarray(e_unit, dtype=np.int64)], np.asarray(ents, dtype=np.int64)


def about(ctx: QueryContext, hop1: list[int], strength: dict[int, float],
          walked: tuple[np.ndarray, np.ndarray] | None = None) -> dict[int, float]:
    """The passages about an entity that the ``hop1`` passages name and the question does not.

    From each ``hop1`` passage: its units -> their entities (not the question's name matches; not years or
    numbers; degree <= :data:`MAX_DEGREE`) -> those entities' units -> their passages. A passage is about the
    entity when at least :data:`ABOUT_SHARE` of its units name it; its strength is that share over
    ``m ** ABOUT_SPLIT`` (``m`` the passages the source reaches that are about the entity) times its
    source's ``strength``; the strongest if several lead to it (in order of first reach). The walk from the
    entities on is one pass of the core (:func:`noderag._core.about_links`). ``walked``:
    :func:`source_entities` of ``hop1``.
    """
    view = ctx.view
    hop = np.asarray(hop1, dtype=np.int64)
    src, ents = _source_entities(ctx, hop, walked)  # one slot per (source, entity), by source then entity
    if not ents.size:
        return {}
    g = view.walk
    by_source = np.asarray([strength[c] for c in hop1], dtype=np.float64)
    split = np.arange(MAX_DEGREE + 1, dtype=np.float64) ** ABOUT_SPLIT  # as numpy computes each m ** ABOUT_SPLIT
    ids, values = about_links(g.indptr, g.indices, g.types, g.active, _chunk_column(view), hop, src, ents, by_source,
                              split, MAX_DEGREE, ABOUT_SHARE)
    return dict(zip(ids.tolist(), values.tolist()))


def _source_entities(ctx: QueryContext, hop: np.ndarray, walked: tuple[np.ndarray, np.ndarray] | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(source position in ``hop``, entity) of each distinct entity a source's units name that the question
    does not and whose name has a letter, at most :data:`MAX_ENTITIES` per source (the lowest ids), by source
    then entity: every source's entities in one walk."""
    view = ctx.view
    src, ents = walked if walked is not None else source_entities(view, hop)
    if not ents.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    key = np.unique(src * (view.n + 1) + ents)
    src, ents = key // (view.n + 1), key % (view.n + 1)
    keep = absent(ents, ctx.name_ids)
    src, ents = src[keep], ents[keep]
    keep = _is_name(view, ents)
    src, ents = src[keep], ents[keep]
    first = np.searchsorted(src, src)  # each slot's rank within its source
    keep = np.arange(src.size) - first < MAX_ENTITIES
    return src[keep], ents[keep]


def shared_each(ctx: QueryContext, hop1: list[int], walked: tuple[np.ndarray, np.ndarray] | None = None
                ) -> list[tuple[int, dict[int, float]]]:
    """Per ``hop1`` passage, ``(source, {passage: strength})`` in ``hop1`` order: the passages (not in ``hop1``)
    linked to it through a shared entity of degree <= :data:`MAX_DEGREE` that the question does not name (its
    first :data:`MAX_ENTITIES`), with strength sum(1 / log(1 + degree)) over the shared entities, at most the
    :data:`MAX_SHARED` most strongly linked (ties to the lower id). All sources walked in one pass of the core (:func:`noderag._core.shared_links`), each passage's strength summed
    in the same order as source by source. ``walked``: :func:`source_entities` of ``hop1``."""
    view = ctx.view
    hop = np.asarray(hop1, dtype=np.int64)
    src, ents = walked if walked is not None else source_entities(view, hop)  # a block per source (walk order)
    out: list[tuple[int, dict[int, float]]] = [(c, {}) for c in hop1]
    if not ents.size:
        return out
    g = view.walk
    weight = np.zeros(MAX_DEGREE + 1)
    weight[1:] = 1.0 / np.log1p(np.arange(1, MAX_DEGREE + 1, dtype=np.float64))  # as numpy computes each; a reached
    # entity has a degree of at least 1
    pos, ids, strength = shared_links(g.indptr, g.indices, g.types, g.active, _chunk_column(view), hop,
                                      np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(ents, dtype=np.int64),
                                      np.sort(np.asarray(ctx.name_ids, dtype=np.int64)), weight, MAX_DEGREE,
                                      MAX_ENTITIES, MAX_SHARED)
    for p, c, v in zip(pos.tolist(), ids.tolist(), strength.tolist()):
        out[p][1][c] = v
    return out


def _chunk_column(view: IndexView) -> np.ndarray:
    """Each node's passage (int64, -1 for none), as the core's walks take it."""
    return np.ascontiguousarray(view.chunk, dtype=np.int64)


def _is_name(view: IndexView, ents: np.ndarray) -> np.ndarray:
    """Which entity nodes have a name with a letter (a year or a number is no entity a passage is about);
    each name is read once per searcher, its flag kept in a per-node array (-1: not read yet)."""
    flags = view.cache.get("name_flags")
    if flags is None:
        flags = view.cache["name_flags"] = np.full(view.n, -1, dtype=np.int8)
    got = flags[ents]
    if (got < 0).any():
        todo = np.unique(ents[got < 0])
        flags[todo] = [any(ch.isalpha() for ch in (name or "")) for name in view.tables.texts(todo.tolist())]
        got = flags[ents]
    return got > 0


def title_links(view: IndexView) -> TitleLinks:
    """The index's title links, built at the first query that bridges by title."""
    links = view.cache.get("title_links")
    if links is None:
        titles = view.title_columns() if view.title_columns is not None else view.titles()
        links = view.cache["title_links"] = TitleLinks.of(titles, view.types, view.doc, view.active, _T)
    return links


def title_groups(view: IndexView, groups: list[list[int]], hop1: list[int]) -> list[np.ndarray]:
    """The passages (not in ``hop1``) of each title named, ``groups`` being the documents of each title: a title
    names one subject, however many documents bear it, so the question picks one passage among them all."""
    links = title_links(view)
    hop = np.asarray(hop1, dtype=np.int64)
    out = []
    for g in groups:
        found = links.passages_of(g)
        found = found[absent(found, hop)]
        if found.size:
            out.append(found)
    return out


def titled_passages(ctx: QueryContext, hop1: list[int], in_query: set[int]) -> list[tuple[int, np.ndarray]]:
    """``(hop1 passage, passages)``: the passages (not in ``hop1``) of each title a ``hop1`` passage names,
    without the documents whose title the question names itself (``in_query``) and the passage's own."""
    view = ctx.view
    links = title_links(view)
    found: list[tuple[int, np.ndarray]] = []
    for c, text in zip(hop1, view.tables.texts(hop1)):
        own = int(view.doc[c])
        groups = [[d for d in g if d != own and d not in in_query] for g in links.named_groups(text or "")]
        found.extend((c, group) for group in title_groups(view, groups, hop1))
    return found
