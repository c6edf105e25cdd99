"""SQuAD-style answer scores on hand-made cases (values worked out from the official v1.1 definition)."""

from __future__ import annotations

import pytest

from noderag.eval import exact_match, judge_request, normalize_answer, parse_judgement, token_f1
from noderag.llm.types import LLMResult


def test_normalisation_drops_case_articles_punctuation_and_spaces():
    assert normalize_answer("The  Beatles!") == "beatles"
    assert normalize_answer("An apple, a day.") == "apple day"
    assert normalize_answer("theatre") == "theatre"  # an article only as a whole word


@pytest.mark.parametrize("pred,gold,em", [
    ("the Eiffel Tower", "Eiffel Tower", 1.0),
    ("Eiffel tower.", "The Eiffel Tower", 1.0),
    ("Paris", ["France", "paris"], 1.0),              # an alias matches
    ("1,000", "1000", 1.0),                            # punctuation inside a number is dropped
    ("1000.5", "10005", 1.0),                          # ... as the official script does
    ("3", "three", 0.0),                               # no number words
    ("Barack Obama", "Obama", 0.0),
    ("", "Obama", 0.0),
])
def test_exact_match(pred, gold, em):
    assert exact_match(pred, gold) == em


def test_token_f1_values():
    # pred tokens {barack, obama}, gold {obama}: P=1/2, R=1, F1=2/3
    assert token_f1("Barack Obama", "Obama") == pytest.approx(2 / 3)
    # articles do not count: "the cat sat" vs "a cat sat on mat": common {cat, sat}: P=1, R=2/4 -> 2/3
    assert token_f1("the cat sat", "a cat sat on mat") == pytest.approx(2 / 3)
    # best over aliases
    assert token_f1("New York City", ["NYC", "New York"]) == pytest.approx(0.8)
    # repeated tokens count with multiplicity: pred [a? no] "new new york" vs "new york": common 2 -> P=2/3 R=1
    assert token_f1("new new york", "new york") == pytest.approx(0.8)
    assert token_f1("Paris", "London") == 0.0
    assert token_f1("", "") == 1.0 and token_f1("x", "") == 0.0


def test_cjk_is_scored_per_character():
    assert exact_match("台北市。", "台北市") == 1.0
    assert token_f1("台北", "台北市") == pytest.approx(0.8)


def test_gold_must_not_be_an_empty_list():
    with pytest.raises(ValueError, match="non-empty list"):
        exact_match("x", [])


def test_judge_prompt_and_verdicts():
    r = judge_request("Who wrote Hamlet?", ["William Shakespeare", "Shakespeare"], "Shakespeare")
    assert "Gold answer: William Shakespeare" in r.messages[1]["content"]
    assert "Also accepted: Shakespeare" in r.messages[1]["content"] and r.schema["required"] == ["verdict"]
    ok = LLMResult(value={"verdict": "correct"}, text="", usage=None, latency_s=0, error=None, cached=False,
                   attempts=1, id=None)
    bad = LLMResult(value=None, text="", usage=None, latency_s=0, error="HTTP 500", cached=False, attempts=1, id=None)
    assert parse_judgement(ok) == 1.0 and parse_judgement(bad) is None
