"""``SearchConfig``: the settings a user changes, validated from one constraint table."""

from __future__ import annotations

import re
from dataclasses import fields

import pytest

from noderag.config import ConfigError
from noderag.config.search import CONSTRAINTS, QuotaConfig, SearchConfig

#: Per field, values the table must reject.
BAD = {
    "vector_top_k": [-1, 1.5, True, "3", None], "expansion_search": [0, -2, 2.0, False],
    "lexical_top_k": [-1, 0.5, None], "entity_source": ["spacy", "", 1, None], "max_name_matches": [-1, 2.5],
    "use_ppr": [1, 0, "yes", None], "alpha": [-0.1, 1.5, "0.5", True, None], "iterations": [-1, 2.0, True],
    "rule": ["bogus", "", None], "semantic_weight": [-1.0, "1", True, float("nan")], "ppr_candidates": [0, -3, 1.0],
    "bridging": [1, "true", None], "min_passages": [-1, 3.5], "rerank": ["", "   ", 3, True],
    "rerank_top": [0, -1, 2.0], "context_tokens": [-1, 1.5, None], "min_similarity": [-1.5, 1.01, "0.3", True],
    "n_threads": [0, -1, 2.0, True, "4"],
}


def test_every_user_field_has_a_constraint_and_there_are_at_most_twenty():
    names = [f.name for f in fields(SearchConfig)]
    assert len(names) <= 20
    assert set(CONSTRAINTS) == set(names) - {"quotas"}
    assert set(BAD) == set(CONSTRAINTS)
    SearchConfig().validate()


@pytest.mark.parametrize("name", sorted(BAD))
def test_the_table_rejects_each_bad_value_naming_the_field_and_the_value(name):
    what, _ = CONSTRAINTS[name]
    for value in BAD[name]:
        with pytest.raises(ConfigError, match=rf"^search\.{name} must be {re.escape(what)}, got {re.escape(repr(value))}$"):
            SearchConfig(**{name: value}).validate()
        with pytest.raises(ConfigError, match=rf"^search\.{name} must be "):
            SearchConfig.from_dict({name: value})


def test_good_values_pass():
    cfg = SearchConfig(vector_top_k=0, alpha=1, min_similarity=-1.0, rerank="onnx:/m", n_threads=2, use_ppr=False,
                       rule="restart", semantic_weight=0.5, bridging=False, entity_source="none")
    assert cfg.validate() is cfg


def test_quotas_are_checked_by_name():
    for value in (-1, 1.5, True):
        with pytest.raises(ConfigError, match=rf"^search\.quotas\.others must be an int >= 0, got {value!r}$"):
            SearchConfig(quotas=QuotaConfig(others=value)).validate()
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) \['search\.quotas\."):
        SearchConfig.from_dict({"quotas": {"people": 3}})
    with pytest.raises(ConfigError, match="search.quotas must be a QuotaConfig"):
        SearchConfig(quotas={"entities": 3}).validate()


def test_unknown_keys_are_errors():
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) \['search\.bogus'\]"):
        SearchConfig.from_dict({"bogus": 1})
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) \['search\.bridge_mode'\]"):
        SearchConfig.from_dict({"bridge_mode": "shared", "alpha": 0.4})  # a tuning constant, not a setting


def test_replace_validates_and_keeps_the_class():
    assert SearchConfig().replace(iterations=3).iterations == 3
    with pytest.raises(ConfigError, match=r"^search\.iterations must be an int >= 0, got -1$"):
        SearchConfig().replace(iterations=-1)
