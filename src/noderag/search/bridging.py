"""Query-time bridging (no LLM call): from the best first-round passages to the passages they lead to.

A multi-hop question's next passage is most often the one *about* an entity the first passage names
("... is an album by Hank Snow" -> the passage about Hank Snow), sometimes one that merely shares a
rare entity with it, or the article whose title the first passage names. :class:`Bridging` finds
those passages by walking the structural graph (passage -> units -> entities -> units -> passages,
bounded by an entity degree cap) and by title heads (:mod:`noderag.search.titles`), and scores them
against the question with the searcher's own dense and lexical terms. The searcher decides where a
bridged passage ranks (:meth:`noderag.search.searcher.Searcher._rank_passages`).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..graph.types import NodeType

__all__ = ["Bridging", "ABOUT_SHARE", "absent", "source_strengths"]

_T, _S, _N = int(NodeType.T), int(NodeType.S), int(NodeType.N)
#: A passage is about an entity when at least half of its semantic units name it (a majority, not a tuned weight).
ABOUT_SHARE = 0.5


def absent(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``~np.isin(a, b)``; for the few ids a bridge walk excludes (``b`` of at most 16), one broadcast
    comparison instead of ``np.isin``'s sort."""
    if b.size == 0:
        return np.ones(a.shape[0], bool)
    if b.size <= 16:
        return ~(a[:, None] == b[None, :]).any(axis=1)
    return ~np.isin(a, b)


def source_strengths(scores: list[float]) -> list[float]:
    """Each bridging source's strength: its passage score over the best source's (in [0, 1]; 1.0 when the best
    scores <= 0). A bridge is as strong as the passage it starts from, so the passages a weak second source
    leads to do not outrank those the passage the question fits best leads to."""
    top = max(scores, default=0.0)
    if top <= 0:
        return [1.0] * len(scores)
    return [min(max(s / top, 0.0), 1.0) for s in scores]


class Bridging:
    """The bridging round of one searcher.

    Parameters
    ----------
    config : SearchConfig
        Read at each call (``bridge_*``, ``passage_dense_weight``).
    n : int
        Nodes of the index.
    chunk, doc, active, types : ndarray
        The searcher's per-node columns.
    s_indptr : ndarray
        The structural layer's row pointers (entity degrees).
    walk : callable
        ``walk(nodes, node_type) -> (owner positions, neighbour ids)``: the active typed neighbours
        (:class:`~noderag.graph.walk.TypedNeighbours`).
    texts : callable
        Display texts of some node ids.
    titles : callable
        ``titles() -> {doc_id: title}``, read at the first bridge by title.
    cosines, lexical_term : callable
        ``f(sorted chunk ids, prepared query) -> float64 array``: the searcher's dense similarity
        (memoised per query) and weighted BM25 share.
    residual_terms : callable or None
        ``f([(source chunk, chunk ids), ...], prepared query) -> [float64 array, ...]``: for each source, the
        weighted BM25 share of its chunks over the query terms the source does not match
        (``bridge_shared_residual``), all sources in one read of the postings.
    """

    def __init__(self, config: Any, *, n: int, chunk: Any, doc: Any, active: Any, types: np.ndarray,
                 s_indptr: np.ndarray, walk: Callable, texts: Callable, titles: Callable[[], dict[int, str]],
                 cosines: Callable, lexical_term: Callable, residual_terms: Callable | None = None) -> None:
        self.config = config
        self.n = n
        self._chunk, self._doc, self._active, self._types = chunk, doc, active, types
        self._s_indptr = s_indptr
        self._walk, self._texts, self._titles = walk, texts, titles
        self._cosines, self._lexical_term = cosines, lexical_term
        self._residual_terms = residual_terms
        self._name_flags: dict[int, bool] = {}  # entity id -> its name has a letter
        self._title_links = None  # title heads -> documents, built at the first query that bridges by title

    def bonus(self, hop1: list[int], prep: Any, strengths: list[float] | None = None
              ) -> tuple[dict[int, float], set[int]]:
        """Bridge strength of every chunk reached from the ``hop1`` chunks under ``bridge_mode``, and the
        chunks that rank below every ``hop1`` chunk (the weaker, shared-entity bridges of "about_shared").

        ``strengths`` (one per ``hop1`` chunk, default 1.0) scale the bridges that start from it: a bridge
        is as strong as the passage it starts from (:func:`source_strengths`).

        "about_shared" takes the "about" bridges and, from each ``hop1`` chunk, the
        ``bridge_shared_per_source`` best (by dense + lexical score against the question) of the chunks
        sharing a low-degree entity with it that the question does not name. The second hop of a
        question is not always *about* the bridge entity (a granddaughter's passage says where the
        author was born); the question itself picks that passage among the few sharing an entity, by the
        terms the source does not match (``bridge_shared_residual``: "... the 26th Chess Olympiad ... TEUs
        ... in 2010" picks the passage on the port's TEUs, not another chess passage).
        Such a bridge follows the passages it comes from: it ranks after them. With ``bridge_titles``
        the best passage of each title a ``hop1`` passage names joins them (same rank rule; among the passages
        of every document bearing that title, :meth:`_title_groups`). With ``bridge_question_titles`` the best
        passage of each title the *question* names is a bridge of full strength, ranked as an "about" bridge:
        the question names its subject
        ("… the city where Rochester is" -> "Rochester, New York"), which the first round may rank low
        when the rest of the question's wording fits other passages better. That passage gets the bonus
        even when it is one of ``hop1``: else the bridges from the hop1 passages would overtake it.
        """
        cfg = self.config
        names = set(prep.name_ids.tolist())
        if cfg.bridge_mode == "shared":
            return self.shared(hop1), set()
        strength = dict(zip(hop1, strengths if strengths is not None else [1.0] * len(hop1)))
        out = self.about(hop1, names, strength)
        follows: set[int] = set()
        asked_groups = self._links().named_groups(prep.query) if cfg.bridge_titles or cfg.bridge_question_titles else []
        # a titled document's passage among the hop1 ones is bridged too: else the bridges from it and its peers
        # would overtake the very passage the question names
        asked = self._title_groups(asked_groups, []) if cfg.bridge_question_titles else []
        titled_of = self.titled_passages(hop1, {d for g in asked_groups for d in g}) if cfg.bridge_titles else []
        titled = [group for _, group in titled_of]
        shared_of = [] if cfg.bridge_mode == "about" or cfg.bridge_shared_per_source == 0 else \
            [(c, self.shared([c], names, skip=hop1)) for c in hop1]
        # one vector look-up for every passage compared below and every "about" bridge scored later
        pool = [np.fromiter(out, dtype=np.int64, count=len(out)), *asked, *titled,
                *(np.fromiter(sh, dtype=np.int64, count=len(sh)) for _, sh in shared_of)]
        pool_ids = np.unique(np.concatenate(pool))
        if pool_ids.size:
            self._cosines(pool_ids, prep)
        for c2 in self._best_of(asked, prep):  # each document whose title the question itself names
            out[c2] = 1.0  # as strong as an "about" bridge (and ranked as one): the question names its subject
        for (c, _), c2 in zip(titled_of, self._best_of(titled, prep)):  # each document a hop1 passage names by title
            if c2 not in out:
                out[c2] = strength[c]
                follows.add(c2)
            else:  # the passage a source names by title is as strong a bridge as its source, whatever else leads there
                out[c2] = max(out[c2], strength[c])
        if not shared_of:
            return out, follows
        about = set(out) - follows
        sources = [(c, shared, np.fromiter(sorted(shared), dtype=np.int64, count=len(shared)))
                   for c, shared in shared_of if shared]
        if cfg.bridge_shared_residual and self._residual_terms is not None:
            # what the question asks beyond each source
            lexicals = self._residual_terms([(c, cand) for c, _, cand in sources], prep) if sources else []
        else:
            lexicals = [self._lexical_term(cand, prep) for _, _, cand in sources]
        for (c, shared, cand), lexical in zip(sources, lexicals):
            fit = cfg.passage_dense_weight * self._cosines(cand, prep) + lexical
            for i in np.lexsort((cand, -fit))[: cfg.bridge_shared_per_source].tolist():
                c2 = int(cand[i])
                out[c2] = max(out.get(c2, 0.0), min(shared[c2], 1.0) * strength[c])
                if c2 not in about:
                    follows.add(c2)
        return out, follows

    def _best_of(self, groups: list[np.ndarray], prep: Any) -> list[int]:
        """The passage of each group that the question ranks best (dense + lexical; ties to the lower id),
        scored in one pass over all groups."""
        if not groups:
            return []
        cand = np.concatenate(groups)
        group = np.repeat(np.arange(len(groups)), [g.size for g in groups])
        fit = self.config.passage_dense_weight * self._cosines(cand, prep) + self._lexical_term(cand, prep)
        order = np.lexsort((cand, -fit, group))
        first = np.flatnonzero(np.r_[True, group[order][1:] != group[order][:-1]])
        return cand[order[first]].tolist()

    def titled_passages(self, hop1: list[int], in_query: set[int]) -> list[tuple[int, np.ndarray]]:
        """``(hop1 chunk, passages)``: the passages (not in ``hop1``) of each title a ``hop1`` passage names
        (:class:`~noderag.search.titles.TitleLinks`; :meth:`_title_groups`), in passage then text order,
        without the documents whose title the question names itself (``in_query``) and the passage's own
        document. The question picks one of each."""
        links = self._links()
        found: list[tuple[int, np.ndarray]] = []
        for c, text in zip(hop1, self._texts(hop1)):
            own = int(self._doc[c])
            groups = [[d for d in g if d != own and d not in in_query] for g in links.named_groups(text or "")]
            found.extend((c, group) for group in self._title_groups(groups, hop1))
        return found

    def _title_groups(self, groups: list[list[int]], hop1: list[int]) -> list[np.ndarray]:
        """The passages (not in ``hop1``) of each title named, ``groups`` being the documents of each title
        (:meth:`~noderag.search.titles.TitleLinks.named_groups`): a title names one subject, however many
        documents bear it, so one bridge goes to the passage the question picks among them all
        (``bridge_title_groups``; False: one bridge per document)."""
        if not self.config.bridge_title_groups:
            return self._passages_of([d for g in groups for d in g], hop1)
        return [np.concatenate(found) for found in (self._passages_of(g, hop1) for g in groups) if found]

    def _passages_of(self, docs: list[int], hop1: list[int]) -> list[np.ndarray]:
        """The passages of each of ``docs`` that are not in ``hop1`` (documents left without one are dropped)."""
        links = self._links()
        hop = np.asarray(hop1, dtype=np.int64)
        found = []
        for d in docs:
            cand = links.passages(d)
            cand = cand[absent(cand, hop)]
            if cand.size:
                found.append(cand)
        return found

    def _links(self):
        """The index's title links (:class:`~noderag.search.titles.TitleLinks`), built at the first query
        that bridges by title."""
        if self._title_links is None:
            from .titles import TitleLinks

            self._title_links = TitleLinks.of(self._titles(), self._types, self._doc, self._active, _T)
        return self._title_links

    def agreed_floor(self, chunks: np.ndarray, total: dict[int, float], prep: Any) -> float:
        """The score a bridged passage may not reach: just below the passages dense and lexical both rank top.

        A passage in the ``bridge_agree_top`` best of the candidates by cosine *and* by BM25 is one
        both first-hop signals agree on (on single-hop questions, most often the answer); a bridge
        bonus lifts a passage at most to just below it. ``inf`` when the two signals agree on none.
        """
        j = self.config.bridge_agree_top
        if j == 0 or not chunks.size or not prep.lex_ids.size:
            return np.inf
        dense = self._cosines(chunks, prep)
        lex = self._lexical_term(chunks, prep)
        if not lex.any():
            return np.inf
        agreed = set(chunks[np.lexsort((chunks, -dense))[:j]].tolist()) & set(chunks[np.lexsort((chunks, -lex))[:j]].tolist())
        return min(total[a] for a in agreed) - 1e-9 if agreed else np.inf

    def about(self, hop1: list[int], exclude: set[int], strength: dict[int, float] | None = None) -> dict[int, float]:
        """The passages about an entity that the ``hop1`` passages name and the question does not.

        From each ``hop1`` chunk: its units -> their entities (not in ``exclude``, the question's own
        names; not years or numbers; degree <= ``bridge_max_degree``) -> those entities' units -> their
        chunks. A chunk is about the entity when at least :data:`ABOUT_SHARE` of its units name it; its
        strength is that share (1.0 for a passage whose title is the entity) over ``m ** bridge_about_split``,
        ``m`` the number of passages the source reaches that are about the entity, times its source's
        ``strength`` (default 1.0); the strongest if several lead to it. Bounded by the degree cap.
        """
        maxdeg, split = self.config.bridge_max_degree, self.config.bridge_about_split
        out: dict[int, float] = {}
        hop = np.asarray(hop1, dtype=np.int64)
        excl = np.fromiter(exclude, dtype=np.int64, count=len(exclude))
        n_units: dict[int, int] = {}
        for c in hop1:
            scale = 1.0 if strength is None else strength[c]
            _, units = self._walk(np.asarray([c]), _S)
            _, ents = self._walk(units, _N)
            ents = np.unique(ents)
            ents = ents[absent(ents, excl)]
            if not ents.size:
                continue
            ents = ents[self._is_name(ents)]
            owner, s_of = self._walk(ents, _S)
            small = np.bincount(owner, minlength=ents.size) <= maxdeg  # hubs do not bridge
            owner, s_of = owner[small[owner]], s_of[small[owner]]
            ch = self._chunk[s_of].astype(np.int64)
            ok = (ch >= 0) & (ch != c) & absent(ch, hop)
            owner, ch = owner[ok], ch[ok]
            if not ch.size:
                continue
            pair, k = np.unique(owner * (self.n + 1) + ch, return_counts=True)  # (entity, chunk) -> its units
            c2s, ent_of = pair % (self.n + 1), pair // (self.n + 1)
            new = np.asarray(sorted({c2 for c2 in c2s.tolist() if c2 not in n_units}), dtype=np.int64)
            if new.size:
                o2, _ = self._walk(new, _S)
                n_units.update(zip(new.tolist(), np.maximum(np.bincount(o2, minlength=new.size), 1).tolist()))
            share = k / np.fromiter((n_units[c2] for c2 in c2s.tolist()), dtype=np.float64, count=c2s.size)
            is_about = share >= ABOUT_SHARE
            if not is_about.any():
                continue
            c2s, ent_of, share = c2s[is_about], ent_of[is_about], share[is_about]
            if split > 0:  # an entity many passages are about is a weaker lead to each of them
                share = share / np.bincount(ent_of, minlength=ents.size)[ent_of].astype(np.float64) ** split
            for c2, v in zip(c2s.tolist(), (share * scale).tolist()):
                out[c2] = max(out.get(c2, 0.0), v)
        return out

    def shared(self, hop1: list[int], exclude: set[int] | None = None,
               skip: list[int] | None = None) -> dict[int, float]:
        """Chunks linked to the ``hop1`` chunks through a shared low-degree entity, with bridge strength.

        Entities in ``exclude`` do not bridge; chunks in ``skip`` (default ``hop1``) are not bridged to.
        """
        maxdeg = self.config.bridge_max_degree
        skip_a = np.asarray(hop1 if skip is None else skip, dtype=np.int64)
        excl = np.fromiter(exclude or (), dtype=np.int64, count=len(exclude or ()))
        out: dict[int, float] = {}
        for c in hop1:
            _, units = self._walk(np.asarray([c]), _S)
            _, ents = self._walk(units, _N)  # an entity once per unit naming it
            if excl.size:
                ents = ents[absent(ents, excl)]
            deg = (self._s_indptr[ents + 1] - self._s_indptr[ents]).astype(np.float64)
            ents, deg = ents[deg <= maxdeg], deg[deg <= maxdeg]
            if not ents.size:
                continue
            owner, s_of = self._walk(ents, _S)
            ch = self._chunk[s_of].astype(np.int64)
            ok = (ch >= 0) & (ch != c) & absent(ch, skip_a)
            ch, w = ch[ok], (1.0 / np.log1p(deg))[owner[ok]]
            if not ch.size:
                continue
            uniq, inv = np.unique(ch, return_inverse=True)
            for c2, b in zip(uniq.tolist(), np.bincount(inv, weights=w, minlength=uniq.size).tolist()):
                out[c2] = out.get(c2, 0.0) + b
        return out

    def _is_name(self, ents: np.ndarray) -> np.ndarray:
        """Which entity nodes have a name with a letter (a year or a number is no entity a passage is about);
        names are read once per searcher (a bounded cache)."""
        cache = self._name_flags
        todo = [e for e in ents.tolist() if e not in cache]
        if todo:
            if len(cache) > 1_000_000:
                cache.clear()
            for e, name in zip(todo, self._texts(todo)):
                cache[e] = any(ch.isalpha() for ch in (name or ""))
        return np.fromiter((cache[e] for e in ents.tolist()), dtype=bool, count=ents.size)
