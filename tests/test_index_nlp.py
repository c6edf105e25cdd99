"""The rule-based decomposer: entities, relations, units, titles."""

from __future__ import annotations

from noderag.config import DecomposeConfig
from noderag.indexing.decompose.base import ChunkDecomposition, ChunkInput
from noderag.indexing.decompose.nlp import NLPDecomposer, extract_mentions, sentence_relations, title_aliases


def _names(sentence, **kw):
    return [m.text for m in extract_mentions(sentence, **kw)]


def test_capitalised_names_with_connectors_and_leading_the():
    assert _names("The Journal of Mathematical Physics is published by the American Institute of Physics.") == [
        "Journal of Mathematical Physics", "American Institute of Physics"]
    assert _names("Ludwig van Beethoven moved to New York City.") == ["Ludwig van Beethoven", "New York City"]
    assert _names("However, he said nothing.") == []
    assert _names("Smith's house is in Paris.") == ["Smith", "Paris"]


def test_quoted_titles_dates_and_numbers():
    s = 'In 1963 she released "Songs of the Sea" and on 12 March 1990 a second album.'
    assert _names(s) == ["1963", "Songs of the Sea", "12 March 1990"]
    assert _names("It has 3 million inhabitants.", numbers=True) == ["3 million"]
    assert _names("It has 3 million inhabitants.") == []
    assert _names("Its 2018 Impact Factor is 1.355", dates=False) == ["Impact Factor"]


def test_relations_use_connecting_words():
    s = "Jan Philip Solovej works at the University of Copenhagen in Denmark."
    m = extract_mentions(s)
    rels = sentence_relations(s, m, max_words=8)
    assert ("Jan Philip Solovej", "works at the", "University of Copenhagen") in rels
    assert ("University of Copenhagen", "in", "Denmark") in rels
    assert ("Jan Philip Solovej", "works at the in", "Denmark") in rels
    assert sentence_relations(s, m, max_words=2) == [("University of Copenhagen", "in", "Denmark")]


def test_units_titles_and_prefix():
    dec = NLPDecomposer(DecomposeConfig())
    text = ("Person - centered therapy was developed by Carl Rogers. It spread widely. "
            "Rogers taught at the University of Chicago from 1945 to 1957.")
    [out] = dec.decompose([ChunkInput(3, text, "Person-centered therapy")])
    assert isinstance(out, ChunkDecomposition) and out.chunk_id == 3 and out.error is None
    texts = [u.text for u in out.units]
    # the title is an entity of every unit; units without it are prefixed with it
    assert all("Person-centered therapy" in u.entities for u in out.units)
    assert texts[0].startswith("Person - centered therapy was developed")
    assert any(t.startswith("Person-centered therapy: ") for t in texts[1:])
    assert "Person" not in [e for u in out.units for e in u.entities]  # sentence-initial common word dropped
    assert "Carl Rogers" in out.units[0].entities
    # a short sentence ("It spread widely.") is grouped with a neighbour
    assert len(out.units) == 2


def test_decomposer_is_pure_and_deterministic():
    dec = NLPDecomposer(DecomposeConfig())
    chunks = [ChunkInput(i, f"Alice Brown met Bob Stone in Paris in {1900 + i}.", None) for i in range(3)]
    a = [c.to_json() for c in dec.decompose(chunks)]
    b = [c.to_json() for c in dec.decompose(list(reversed(chunks)))]
    assert a == list(reversed(b))


def test_title_aliases_and_their_use():
    assert title_aliases("The Prestige (film)") == ["Prestige"]
    assert title_aliases("Fall River (Wyoming, Idaho)") == ["Fall River"]
    assert title_aliases("Kessel") == []
    dec = NLPDecomposer(DecomposeConfig())
    [out] = dec.decompose([ChunkInput(0, "It was released in 2006.", "The Prestige (film)")])
    assert out.units[0].entities == ["2006", "The Prestige (film)", "Prestige"]
    assert out.units[0].text == "The Prestige (film): It was released in 2006."


def test_for_connector_and_sentence_initial_common_words():
    assert _names("He joined the Institute for Advanced Study in 1950.") == ["Institute for Advanced Study", "1950"]
    assert "Kessel for Port Emmerich" not in _names("Boats leave Kessel for Port Emmerich daily.")
    dec = NLPDecomposer(DecomposeConfig())
    text = ("Ferries of the Grey Heron Line leave Kessel every day. "
            "The Grey Heron Line was founded in Kessel by Jonas Pell.")
    [out] = dec.decompose([ChunkInput(0, text, None)])
    ents = [e for u in out.units for e in u.entities]
    assert "Grey Heron Line" in ents and not any(e.startswith("Ferries") for e in ents)
    # a heading that repeats the title is not a unit; unit whitespace is normalised
    [md] = dec.decompose([ChunkInput(1, "# Kessel\n\nKessel is a port city on the mainland coast.\nIt is old.", "Kessel")])
    assert [u.text for u in md.units] == ["Kessel is a port city on the mainland coast. It is old."]
