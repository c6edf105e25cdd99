"""The bridging stages on a hand-built graph: "about" passages, the best shared-entity passage per source, title
bridges, followers ranking after their source, and the agreement cap."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderag.graph.hetero import HeteroGraph
from noderag.graph.keys import canonical_name, node_keys
from noderag.graph.types import NodeType as NT
from noderag.search import Searcher, SearchConfig
from noderag.search.ranking import AgreementCap, Bridges, DenseFit, Distinct, EntryPoints, LexicalFit, rank
from noderag.search.ranking.bridges import bonus, source_strengths
from noderag.search.ranking.links import ABOUT_SPLIT

from test_search import BagEmbedder, ExactVectors, ToyStore

# id, type, text, name, chunk, source
NODES = [
    (0, NT.T, "Hello Love is an album by Hank Snow recorded in Nashville.", None, 0, "p-album"),
    (1, NT.T, "Hank Snow was born in Canada.", None, 1, "p-snow"),
    (2, NT.T, "Nora Snow is a writer. She is the granddaughter of Hank Snow. She lives in Halifax.", None, 2, "p-grand"),
    (3, NT.T, "Hank Snow fans meet every year. They eat pie. Pie is sweet.", None, 3, "p-fans"),
    (4, NT.S, "Hello Love is an album by Hank Snow recorded in Nashville.", None, 0, "p-album"),
    (5, NT.S, "Hank Snow was born in Canada.", None, 1, "p-snow"),
    (6, NT.S, "Nora Snow is a writer.", None, 2, "p-grand"),
    (7, NT.S, "She is the granddaughter of Hank Snow.", None, 2, "p-grand"),
    (8, NT.S, "She lives in Halifax.", None, 2, "p-grand"),
    (9, NT.S, "Hank Snow fans meet every year.", None, 3, "p-fans"),
    (10, NT.S, "They eat pie.", None, 3, "p-fans"),
    (11, NT.S, "Pie is sweet.", None, 3, "p-fans"),
    (12, NT.N, "Hank Snow", "Hank Snow", -1, None),
    (13, NT.N, "Hello Love", "Hello Love", -1, None),
    (14, NT.N, "Nora Snow", "Nora Snow", -1, None),
    (15, NT.N, "Halifax", "Halifax", -1, None),
    (16, NT.T, "It is the capital of the state and a centre of country music.", None, 4, "p-nash"),
    (17, NT.S, "It is the capital of the state and a centre of country music.", None, 4, "p-nash"),
]
# document titles: p-nash is reached only through its title, which p-album names ("Nashville")
TITLES = {0: "Hello Love (song)", 1: "Hank Snow", 2: "Nora Snow", 3: "Snow fans", 4: "Nashville, Tennessee"}
# units -> their passage, units -> the entities they name ("Hank Snow" is named by one unit of p-grand
# and of p-fans out of three: they share the entity without being about it)
STRUCT = [(4, 0), (5, 1), (6, 2), (7, 2), (8, 2), (9, 3), (10, 3), (11, 3), (17, 16),
          (4, 12), (4, 13), (5, 12), (6, 14), (7, 12), (8, 15), (9, 12)]


def bridge_store(nodes: list = NODES, struct: list = STRUCT, titles: dict = TITLES) -> ToyStore:
    types = np.array([t for _, t, *_ in nodes], np.uint8)
    keys = node_keys(types.tolist(), [canonical_name(x[2]) for x in nodes])
    s, d = (np.array(c) for c in zip(*struct))
    g = HeteroGraph.from_coo(types, keys, s, d, np.ones(s.size, np.float32))
    table = pa.table({
        "id": pa.array([x[0] for x in nodes], pa.int32()),
        "type": pa.array(types, pa.uint8()),
        "key": pa.array(keys, pa.uint64()),
        "name": pa.array([x[3] for x in nodes], pa.string()),
        "text": pa.array([x[2] for x in nodes], pa.string()),
        "doc_id": pa.array([x[4] for x in nodes], pa.int32()),
        "chunk_id": pa.array([x[4] for x in nodes], pa.int32()),
        "source_id": pa.array([x[5] for x in nodes], pa.string()),
        "mentions": pa.array([1] * len(nodes), pa.int32()),
    })
    emb = BagEmbedder()
    embedded = [x[0] for x in nodes if x[1] in (NT.T, NT.S)]
    store = ToyStore(g, table, ExactVectors(embedded, emb.embed([nodes[i][2] for i in embedded])), emb)
    store.documents = pa.table({"doc_id": pa.array(list(titles), pa.int32()), "title": list(titles.values())})
    return store


@pytest.fixture(scope="module")
def store():
    return bridge_store()


# one entry point (p-album), no PPR, no names from the question, no lexical signal: the bridges alone add passages
BASE = SearchConfig(vector_top_k=1, use_ppr=False, entity_source="none", lexical_top_k=0, min_passages=0)
Q = "Hello Love album: where does the granddaughter live?"


def stages(bridges=None, lexical: bool = False, cap: bool = False) -> list:
    """Entry points and dense fit (+ BM25), then ``bridges`` (+ the agreement cap), one passage per label."""
    out = [EntryPoints(), DenseFit()] + ([LexicalFit()] if lexical else [])
    return out + ([bridges] if bridges else []) + ([AgreementCap()] if cap else []) + [Distinct()]


def ranked(store, q: str = Q, cfg: SearchConfig = BASE, **kw):
    return Searcher(store, cfg, stages=stages(**kw)).retrieve(q)


def test_without_bridges_the_first_round_is_the_entry_point_alone(store):
    assert ranked(store).passages == ["p-album"]


def test_bridges_add_the_about_passage_the_best_shared_one_and_the_titled_one(store):
    """From p-album: p-snow is about Hank Snow, whom it names; p-grand shares Hank Snow and fits the question
    best among the passages sharing it; p-nash is the article whose title (Nashville) it names."""
    r = ranked(store, bridges=Bridges(top=1, weight=0.3))
    assert r.passages[0] == "p-album"
    assert set(r.passages) == {"p-album", "p-snow", "p-grand", "p-nash"}
    about_only = ranked(store, bridges=Bridges(top=1, weight=0.3, shared_per_source=0))
    assert set(about_only.passages) == {"p-album", "p-snow", "p-nash"}
    wide = ranked(store, bridges=Bridges(top=1, weight=0.3, shared_per_source=3))
    assert set(wide.passages) == {"p-album", "p-snow", "p-grand", "p-fans", "p-nash"}


#: names no title (Q names "Hello Love", p-album's own: a question-title bridge lifts p-album itself)
UNTITLED = "which album: where does the granddaughter live?"


def test_a_shared_entity_or_title_bridge_ranks_after_its_source_and_an_about_bridge_need_not(store):
    r = ranked(store, UNTITLED, bridges=Bridges(top=1, weight=5.0))
    assert r.passages[0] == "p-snow"  # an "about" bridge with a large bonus may lead
    for follower in ("p-grand", "p-nash"):
        assert r.passages.index(follower) > r.passages.index("p-album")
        assert r.passage_scores[r.passages.index(follower)] < r.passage_scores[r.passages.index("p-album")]


def test_the_agreement_cap_holds_bridges_below_the_passage_dense_and_lexical_agree_on(store):
    cfg, q = BASE.replace(lexical_top_k=1), UNTITLED
    free = ranked(store, q, cfg, bridges=Bridges(top=1, weight=5.0), lexical=True)
    assert free.passages[0] == "p-snow"  # without the cap the bonus lifts the bridge above the answer
    capped = ranked(store, q, cfg, bridges=Bridges(top=1, weight=5.0), lexical=True, cap=True)
    assert capped.passages[0] == "p-album" and set(capped.passages) == set(free.passages)
    assert max(capped.passage_scores[1:]) < capped.passage_scores[0]  # every bridge held below it
    # the cap alone (nothing bridged) changes no score
    plain = ranked(store, q, cfg, lexical=True)
    assert ranked(store, q, cfg, lexical=True, cap=True).passage_scores == plain.passage_scores


def test_a_title_the_question_names_is_no_title_bridge_but_a_full_strength_one(store):
    q = Q + " Nashville"
    assert "p-nash" not in ranked(store, q).passages  # the first round does not reach it
    strong = ranked(store, q, bridges=Bridges(top=1, weight=5.0))
    first = ranked(store, q)  # p-album, alone in the first round
    # full strength, not held below the first round's passage as a title bridge is; p-album, whose title
    # ("Hello Love") the question names too, gets the same bonus and stays first
    assert strong.passages[:2] == ["p-album", "p-nash"]
    assert strong.passage_scores[1] > first.passage_scores[0] + 4.0


def test_a_passage_the_question_names_by_title_keeps_its_bonus_among_the_first_round_ones(store):
    """With two first-round passages, the question's titled passage (p-grand, "Nora Snow") is one of them; it still
    gets the bonus, so the bridge from its peer (p-snow) does not overtake it; one first-round passage: the same."""
    q, cfg = "Hello Love album by Nora Snow", BASE.replace(vector_top_k=2)
    one, two = (ranked(store, q, cfg, bridges=Bridges(top=k, weight=5.0)) for k in (1, 2))
    for r in (one, two):
        assert r.passages.index("p-grand") < r.passages.index("p-snow"), r.passages
    assert two.passage_scores[two.passages.index("p-grand")] == one.passage_scores[one.passages.index("p-grand")]


def _context(store, q: str = Q, cfg: SearchConfig = BASE):
    s = Searcher(store, cfg)
    ctx = s.query_context(q)
    ctx.dense_weight = 1.0
    return s, ctx


def test_a_bridge_is_as_strong_as_the_passage_it_starts_from(store):
    """Every kind of bridge from a source ("about", shared-entity, title) is scaled by that source's strength."""
    s, ctx = _context(store, UNTITLED)
    album = s.tables.labels(list(range(s.n))).index("p-album")
    full, full_follows = bonus(ctx, [album], [1.0])
    half, half_follows = bonus(ctx, [album], [0.5])
    label = {c: s.tables.label(c) for c in full}
    assert {label[c] for c in full} == {"p-snow", "p-grand", "p-nash"}  # about, shared, title
    assert {label[c] for c in full_follows} == {"p-grand", "p-nash"}
    assert half.keys() == full.keys() and half_follows == full_follows
    for c, b in full.items():
        assert half[c] == pytest.approx(0.5 * b), label[c]


# a second passage about Hank Snow (p-tour), and a second document titled "Nashville, Tennessee" (p-nash2)
MORE_NODES = NODES + [
    (18, NT.T, "Hank Snow toured Europe.", None, 18, "p-tour"),
    (19, NT.S, "Hank Snow toured Europe.", None, 18, "p-tour"),
    (20, NT.T, "Its studios record country music.", None, 20, "p-nash2"),
    (21, NT.S, "Its studios record country music.", None, 20, "p-nash2"),
]
MORE_STRUCT = STRUCT + [(19, 18), (19, 12), (21, 20)]
MORE_TITLES = {**TITLES, 18: "Hank Snow on tour", 20: "Nashville, Tennessee"}


def _bonus_by_label(store) -> tuple[dict[str, float], set[str]]:
    s, ctx = _context(store)
    album = s.tables.labels(list(range(s.n))).index("p-album")
    gained, follows = bonus(ctx, [album], [1.0], shared_per_source=0)
    return {s.tables.label(c): b for c, b in gained.items()}, {s.tables.label(c) for c in follows}


def test_an_entity_many_passages_are_about_leads_to_each_more_weakly():
    """p-album names Hank Snow, whom two passages (p-snow, p-tour) are about: each "about" bridge is divided by
    2 ** ABOUT_SPLIT; p-snow, whose title p-album also names, is as strong as its source."""
    bonus_more, follows = _bonus_by_label(bridge_store(MORE_NODES, MORE_STRUCT, MORE_TITLES))
    assert bonus_more["p-tour"] == pytest.approx(2.0 ** -ABOUT_SPLIT)
    assert bonus_more["p-snow"] == pytest.approx(1.0)
    assert "p-snow" not in follows  # an "about" bridge, not held below p-album
    alone, _ = _bonus_by_label(bridge_store())  # p-snow alone is about Hank Snow: undivided
    assert alone["p-snow"] == pytest.approx(1.0)


def test_a_title_two_documents_bear_is_one_bridge_to_the_passage_the_question_picks():
    """p-album names "Nashville": the two documents titled "Nashville, Tennessee" are one subject and get one
    bridge."""
    grouped, _ = _bonus_by_label(bridge_store(MORE_NODES, MORE_STRUCT, MORE_TITLES))
    assert len({"p-nash", "p-nash2"} & grouped.keys()) == 1
    from noderag.search.titles import TitleLinks

    docs = np.array(sorted(MORE_TITLES))
    links = TitleLinks(MORE_TITLES, docs, docs)
    assert links.named_groups("Hank Snow recorded in Nashville.") == [[1], [4, 20]]
    assert links.named_docs("Hank Snow recorded in Nashville.") == [1, 4, 20]


def test_source_strengths_are_scores_over_the_best_sources():
    assert source_strengths([2.0, 1.0]) == [1.0, 0.5]
    assert source_strengths([2.0, -1.0]) == [1.0, 0.0]  # a negative score bridges with no strength
    assert source_strengths([0.0, -0.5]) == [1.0, 1.0]  # nothing to compare with: full strength
    assert source_strengths([]) == []


def test_the_bridges_stage_starts_from_the_best_first_round_passages_at_their_strengths(store, monkeypatch):
    """The sources are the ``top`` best first-round passages; their strengths their scores over the best one's."""
    import noderag.search.ranking.bridges as br

    seen = []
    real = br.bonus
    monkeypatch.setattr(br, "bonus", lambda ctx, hop1, strengths, *rest: (seen.append((hop1, strengths)),
                                                                          real(ctx, hop1, strengths, *rest))[1])
    s = Searcher(store, BASE.replace(vector_top_k=3), stages=stages(bridges=Bridges(top=2)))
    r = s.retrieve("pie is sweet granddaughter")
    (hop1, strengths), = seen
    assert s.tables.labels(hop1) == ["p-fans", "p-grand"] == [p for p in r.passages if p in ("p-fans", "p-grand")]
    scores = [r.passage_scores[r.passages.index(p)] for p in ("p-fans", "p-grand")]  # sources keep their scores
    assert strengths == pytest.approx([1.0, scores[1] / scores[0]])


def test_passages_held_at_one_ceiling_keep_their_order_without_it(store):
    _, ctx = _context(store)
    cands = np.array([7, 3, 5, 9, 1, 4])
    scores = np.array([1.0, 1.0, 1.0, 2.0, 0.5, 0.5])
    ctx.uncapped = {7: 1.8, 3: 1.2}  # 7 and 3 were held at 1.0; 5 scored 1.0 on its own
    assert rank(cands, scores, ctx)[0].tolist() == [9, 7, 3, 5, 1, 4]
    ctx.uncapped = {}
    assert rank(cands, scores, ctx)[0].tolist() == [9, 3, 5, 7, 1, 4]
def test_title_heads_match_capitalised_whole_word_phrases_longest_first():
    from noderag.search.titles import TitleLinks, title_head

    assert title_head("Brand (play)") == "Brand"
    assert title_head("West Chicago, Illinois") == "West Chicago"
    assert title_head("Jackson County Courthouse (Jacksonville, Oregon)") == "Jackson County Courthouse"
    links = TitleLinks({0: "West Chicago, Illinois", 1: "Chicago", 2: "The (band)", 3: "West Chicago High School"},
                       np.array([10, 11, 12, 13]), np.array([0, 1, 2, 3]))
    assert links.named_docs("He went to West Chicago High School in Chicago.") == [3, 1]
    assert links.named_docs("a school in west chicago") == []  # not capitalised: no name
    assert links.named_docs("The band played.") == []  # a lone stop word is no title
    assert links.named_docs("Born in West Chicago.") == [0]
    assert links.passages(1).tolist() == [11] and links.passages(7).tolist() == []


def test_titles_match_without_their_accents():
    """A question spells "Akinoshū Kenji" as "Akinoshu Kenji": the title matches either way, accents and case
    folded on both sides; Han titles are untouched."""
    from noderag.search.titles import TitleLinks, fold_token

    assert fold_token("Akinoshū") == "akinoshu" and fold_token("Tekezé") == "tekeze" and fold_token("馬祖") == "馬祖"
    links = TitleLinks({0: "Akinoshū Kenji", 1: "Tekeze River", 2: "馬祖列島"}, np.array([10, 11, 12]),
                       np.array([0, 1, 2]))
    assert links.named_docs("What kind of plane dropped the bomb on Akinoshu Kenji's birthplace?") == [0]
    assert links.named_docs("Where does the Tekezé River flow?") == [1]
    assert links.named_docs("Akinoshū Kenji and the Tekeze River") == [0, 1]
    assert links.named_docs("馬祖列島在哪裡") == [2]


def test_absent_is_the_complement_of_isin_for_small_and_large_exclusions():
    from noderag.search.ranking.links import absent as _absent

    rng = np.random.default_rng(3)
    a = rng.integers(0, 50, 200)
    for size in (0, 1, 5, 16, 17, 40):
        b = rng.integers(0, 50, size)
        assert _absent(a, b).tolist() == (~np.isin(a, b)).tolist()


def test_title_links_skip_words_that_start_no_title():
    from noderag.search.titles import TitleLinks

    links = TitleLinks({0: "Hank Snow", 1: "Nashville, Tennessee"}, np.array([5, 6]), np.array([0, 1]))
    assert links.named_docs("Snow fell on Hank Snow in Nashville and Tennessee.") == [0, 1]
    assert links.named_docs("Snow Hank.") == []


def _entities(view, c: int) -> np.ndarray:
    """The entities a passage's units name, one per naming unit (adjacency order)."""
    _, units = view.walk(np.asarray([c], dtype=np.int64), int(NT.S))
    return view.walk(units, int(NT.N))[1]


def _shared(ctx, c: int, skip: list[int]) -> dict[int, float]:
    """The shared-entity walk of one source alone (the reference the core's walk of all sources keeps): passages
    linked to ``c`` through a shared entity of degree <= MAX_DEGREE the question does not name, strength
    sum(1 / log(1 + degree)); ``skip`` are not bridged to."""
    from noderag.search.ranking import links

    view = ctx.view
    ents = _entities(view, c)
    if ctx.name_ids.size:
        ents = ents[links.absent(ents, ctx.name_ids)]
    deg = (view.s_indptr[ents + 1] - view.s_indptr[ents]).astype(np.float64)
    ents, deg = ents[deg <= links.MAX_DEGREE][:links.MAX_ENTITIES], deg[deg <= links.MAX_DEGREE][:links.MAX_ENTITIES]
    if not ents.size:
        return {}
    owner, s_of = view.walk(ents, int(NT.S))
    ch = view.chunk[s_of].astype(np.int64)
    ok = (ch >= 0) & (ch != c) & links.absent(ch, np.asarray(skip, dtype=np.int64))
    ch, w = ch[ok], (1.0 / np.log1p(deg))[owner[ok]]
    if not ch.size:
        return {}
    uniq, inv = np.unique(ch, return_inverse=True)
    strength = np.bincount(inv, weights=w, minlength=uniq.size)
    if uniq.size > links.MAX_SHARED:
        keep = np.lexsort((uniq, -strength))[:links.MAX_SHARED]
        uniq, strength = uniq[keep], strength[keep]
    return dict(zip(uniq.tolist(), strength.tolist()))


def _unit_counts(view, chunks: np.ndarray) -> np.ndarray:
    """Units per passage (at least 1), one walk over the distinct passages."""
    uniq, inv = np.unique(chunks, return_inverse=True)
    o2, _ = view.walk(uniq, int(NT.S))
    return np.maximum(np.bincount(o2, minlength=uniq.size), 1)[inv].astype(np.float64)


def _about_per_source(ctx, hop1: list[int], strength: dict[int, float]) -> dict[int, float]:
    """The "about" walk source by source (the reference the one-walk form keeps)."""
    from noderag.search.ranking import links

    view, out, hop = ctx.view, {}, np.asarray(hop1, dtype=np.int64)
    for c in hop1:
        ents = np.unique(_entities(view, c))
        ents = ents[links.absent(ents, ctx.name_ids)]
        ents = ents[links._is_name(view, ents)][:links.MAX_ENTITIES]
        if not ents.size:
            continue
        owner, s_of = view.walk(ents, int(NT.S))
        small = np.bincount(owner, minlength=ents.size) <= links.MAX_DEGREE
        owner, s_of = owner[small[owner]], s_of[small[owner]]
        ch = view.chunk[s_of].astype(np.int64)
        ok = (ch >= 0) & links.absent(ch, hop)
        owner, ch = owner[ok].astype(np.int64), ch[ok]
        if not ch.size:
            continue
        pair, k = np.unique(owner * (view.n + 1) + ch, return_counts=True)
        c2s, ent_of = pair % (view.n + 1), pair // (view.n + 1)
        share = k / _unit_counts(view, c2s)
        about = share >= links.ABOUT_SHARE
        c2s, ent_of, share = c2s[about], ent_of[about], share[about]
        share = share / np.bincount(ent_of, minlength=ents.size)[ent_of].astype(np.float64) ** links.ABOUT_SPLIT
        for c2, v in zip(c2s.tolist(), (share * strength[c]).tolist()):
            out[c2] = max(out.get(c2, 0.0), v)
    return out


@pytest.mark.parametrize("max_entities", [1, 128])
def test_about_over_several_sources_equals_the_walk_source_by_source(monkeypatch, max_entities):
    """The "about" walk of all sources at once (one walk for all) gives the bridges, floats and order of the
    walk source by source, the per-source entity cap included, for every ordered pair of sources."""
    from noderag.search.ranking import links

    monkeypatch.setattr(links, "MAX_ENTITIES", max_entities)
    s, ctx = _context(bridge_store(MORE_NODES, MORE_STRUCT, MORE_TITLES))
    chunks = np.flatnonzero(s.types == int(NT.T)).tolist()
    strength = {c: 1.0 / (1 + i) for i, c in enumerate(chunks)}
    seen_bridge = False
    for a in chunks:
        for b in chunks:
            hop1 = [a] if a == b else [a, b]
            got, want = links.about(ctx, hop1, strength), _about_per_source(ctx, hop1, strength)
            assert list(got.items()) == list(want.items()), hop1
            seen_bridge |= bool(got)
    assert seen_bridge


@pytest.mark.parametrize("cap", [1, 128])
def test_shared_of_every_source_at_once_equals_each_source_alone(monkeypatch, cap):
    """The shared-entity walk of all sources at once gives each source the passages, strengths (the same float
    sums) and order of the walk of that source alone, with the entity and passage caps."""
    from noderag.search.ranking import links

    monkeypatch.setattr(links, "MAX_ENTITIES", cap)
    monkeypatch.setattr(links, "MAX_SHARED", cap)
    s, ctx = _context(bridge_store(MORE_NODES, MORE_STRUCT, MORE_TITLES))
    chunks = np.flatnonzero(s.types == int(NT.T)).tolist()
    seen = False
    for a in chunks:
        for b in chunks:
            hop1 = [a] if a == b else [a, b]
            got = links.shared_each(ctx, hop1)
            want = [(c, _shared(ctx, c, hop1)) for c in hop1]
            assert [(c, list(d.items())) for c, d in got] == [(c, list(d.items())) for c, d in want], hop1
            seen |= any(d for _, d in got)
    assert seen


class _RandomView:
    """The parts of an IndexView the bridge walks read, over a random graph (names: a node's id spelled out)."""

    def __init__(self, types, active, src, dst):
        from noderag.graph.walk import TypedNeighbours

        n = types.size
        a, b = np.r_[src, dst], np.r_[dst, src]
        order = np.lexsort((b, a))
        a, b = a[order], b[order]
        self.n = n
        self.s_indptr = np.r_[0, np.cumsum(np.bincount(a, minlength=n))].astype(np.int64)
        self.walk = TypedNeighbours(self.s_indptr, b.astype(np.int32), types, active)
        self.types, self.active = types, active
        self.chunk = np.full(n, -1, np.int64)
        t_ids = np.flatnonzero(types == int(NT.T))
        for u in np.flatnonzero(types == int(NT.S)).tolist():  # a unit's passage: a T neighbour, else none
            _, ts = self.walk(np.array([u]), int(NT.T))
            self.chunk[u] = ts[0] if ts.size else -1
        self.chunk[t_ids] = t_ids
        self.cache: dict = {}
        self.tables = self

    def texts(self, ids):
        return [("Name %d" % i) if i % 7 else "1999" for i in ids]  # every 7th entity a number


@settings(max_examples=150, deadline=None)
@given(data=st.data(), n=st.integers(4, 60), degree=st.sampled_from([2, 3, 60]), cap=st.sampled_from([1, 2, 128]))
def test_the_cores_bridge_walks_equal_the_walks_source_by_source(data, n, degree, cap):
    """On random graphs (inactive nodes, hubs past the degree cap, units of no passage, question names), the core's
    one-pass walks give :func:`about` the per-source walk's passages, floats and order, and :func:`shared_each`
    those of the walk of each source alone."""
    from types import SimpleNamespace

    from noderag.search.ranking import links

    types = np.asarray(data.draw(st.lists(st.sampled_from([int(NT.T), int(NT.S), int(NT.N)]), min_size=n,
                                          max_size=n)), np.uint8)
    active = np.asarray(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool) | (np.arange(n) % 3 > 0)
    m = data.draw(st.integers(0, 4 * n))
    src = np.asarray(data.draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m)), np.int64)
    dst = np.asarray(data.draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m)), np.int64)
    keep = src != dst
    view = _RandomView(types, active, src[keep], dst[keep])
    chunks = np.flatnonzero(types == int(NT.T)).tolist()
    if not chunks:
        return
    hop1 = data.draw(st.lists(st.sampled_from(chunks), min_size=1, max_size=3, unique=True))
    names = np.flatnonzero(types == int(NT.N)).tolist()
    name_ids = np.asarray(data.draw(st.lists(st.sampled_from(names), max_size=2)) if names else [], np.int64)
    ctx = SimpleNamespace(view=view, name_ids=name_ids)
    strength = {c: 1.0 / (1 + i) for i, c in enumerate(hop1)}
    saved = links.MAX_DEGREE, links.MAX_ENTITIES, links.MAX_SHARED
    links.MAX_DEGREE, links.MAX_ENTITIES, links.MAX_SHARED = degree, cap, cap
    try:
        got, want = links.about(ctx, hop1, strength), _about_per_source(ctx, hop1, strength)
        assert list(got.items()) == list(want.items())
        got_shared = links.shared_each(ctx, hop1)
        want_shared = [(c, _shared(ctx, c, hop1)) for c in hop1]
    finally:
        links.MAX_DEGREE, links.MAX_ENTITIES, links.MAX_SHARED = saved
    assert [(c, sorted(d.items())) for c, d in got_shared] == [(c, sorted(d.items())) for c, d in want_shared]


def test_the_cores_walks_name_a_damaged_row():
    """A CSR row whose offsets leave the graph is a ValueError naming the row, never a read out of bounds."""
    from noderag._core import about_links, shared_links

    types = np.array([int(NT.T), int(NT.S), int(NT.N)], np.uint8)
    indptr = np.array([0, 1, 2, 99], np.int64)  # the entity's row ends past the 3 entries
    indices = np.array([1, 0, 1], np.int32)
    active, chunk = np.ones(3, bool), np.array([0, 0, -1], np.int64)
    hop, src, ents = np.array([0], np.int64), np.array([0], np.int64), np.array([2], np.int64)
    with pytest.raises(ValueError, match="the graph's row 2 is damaged"):
        about_links(indptr, indices, types, active, chunk, hop, src, ents, np.ones(1), np.ones(61), 60, 0.5)
    with pytest.raises(ValueError, match="the graph's row 2 is damaged"):
        shared_links(indptr, indices, types, active, chunk, hop, src, ents, np.zeros(0, np.int64), np.ones(200), 100,
                     128, 48)
    with pytest.raises(IndexError, match=r"entity ids must lie in \[0, 3\), got 5"):
        about_links(indptr, indices, types, active, chunk, hop, src, np.array([5], np.int64), np.ones(1), np.ones(61),
                    60, 0.5)
