"""Prompt templates and schemas: bounded schemas, static-prefix layout, both languages."""

from __future__ import annotations

import jsonschema
import pytest

from noderag.llm import prompts as P
from noderag.llm.testing import ScriptedLLM

SCHEMAS = {
    "decompose": P.DECOMPOSE_SCHEMA,
    "community": P.COMMUNITY_SCHEMA,
    "query": P.QUERY_ENTITIES_SCHEMA,
    "answer": P.ANSWER_SCHEMA,
}


def _walk(node, path="$"):
    yield path, node
    if isinstance(node, dict):
        for k, v in node.get("properties", {}).items():
            yield from _walk(v, f"{path}.{k}")
        if "items" in node:
            yield from _walk(node["items"], f"{path}[]")


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_schemas_are_valid_and_every_array_and_string_is_bounded(name):
    schema = SCHEMAS[name]
    jsonschema.Draft202012Validator.check_schema(schema)
    kinds = set()
    for path, node in _walk(schema):
        kinds.add(node["type"])
        if node["type"] == "array":
            assert isinstance(node.get("maxItems"), int), f"{name}: {path} has no maxItems"
        if node["type"] == "string":
            assert isinstance(node.get("maxLength"), int), f"{name}: {path} has no maxLength"
        if node["type"] == "object":
            assert node["additionalProperties"] is False and set(node["required"]) == set(node["properties"])
    assert "array" in kinds


def test_decompose_schema_accepts_a_real_decomposition_and_rejects_runaway_output():
    good = {"units": [{"text": "Jan Solovej edits the Journal of Mathematical Physics.",
                       "entities": ["Jan Solovej", "Journal of Mathematical Physics"],
                       "relations": [{"source": "Jan Solovej", "relation": "edits",
                                      "target": "Journal of Mathematical Physics"}]}]}
    jsonschema.validate(good, P.DECOMPOSE_SCHEMA)
    runaway = {"units": [{"text": "x", "entities": ["e"] * 17, "relations": []}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(runaway, P.DECOMPOSE_SCHEMA)
    small = P.decompose_schema(max_units=2)
    assert small["properties"]["units"]["maxItems"] == 2


def test_static_instructions_first_variable_text_last():
    a = P.decompose_request("Alice met Bob in Paris.", id="c1")
    b = P.decompose_request("Carol founded Acme in 1999.")
    assert a.messages[0] == b.messages[0] and a.messages[0]["role"] == "system"
    assert a.messages[-1]["content"] == "Alice met Bob in Paris." and a.id == "c1"
    assert a.schema is P.DECOMPOSE_SCHEMA and a.sampling.temperature == 0.0
    assert a.sampling.max_tokens == P.MAX_TOKENS["decompose"]
    ans = P.answer_request("Who met Bob?", [("S1", "Alice met Bob."), ("T2", "Paris is in France.")])
    user = ans.messages[-1]["content"]
    assert user.index("[S1] Alice met Bob.") < user.index("[T2]") < user.index("Question: Who met Bob?")
    assert user.endswith("Who met Bob?")
    att = P.attribute_request("Alice", ["Alice met Bob."], [("Alice", "met", "Bob")])
    assert att.schema is None and "Alice | met | Bob" in att.messages[-1]["content"]
    com = P.community_request(["t1", "t2"])
    assert com.messages[-1]["content"] == "- t1\n- t2" and com.schema is P.COMMUNITY_SCHEMA
    q = P.query_entities_request("Where was Alice born?")
    assert q.schema is P.QUERY_ENTITIES_SCHEMA


def test_chinese_prompts_selected_by_detection_or_explicitly():
    assert P.detect_language("艾米莉·罗伯茨博士前往巴黎参加会议。") == "zh"
    assert P.detect_language("Paris is the capital of France.") == "en"
    zh = P.decompose_request("艾米莉·罗伯茨博士前往巴黎参加会议。")
    assert zh.messages[0]["content"] == P.SYSTEM_PROMPTS["zh"]["decompose"]
    assert P.answer_request("谁?", [("S1", "x")], lang="zh").messages[-1]["content"].startswith("上下文")
    assert set(P.SYSTEM_PROMPTS["en"]) == set(P.SYSTEM_PROMPTS["zh"]) == set(P.USER_TEMPLATES["zh"])
    with pytest.raises(ValueError, match="lang"):
        P.query_entities_request("x", lang="fr")
    with pytest.raises(ValueError, match="text"):
        P.decompose_request("  ")
    with pytest.raises(ValueError, match="context|query"):
        P.answer_request("", [])


def test_prompts_round_trip_through_scripted_backend():
    def respond(r):
        if r.schema is P.ANSWER_SCHEMA:
            return {"answer": "Alice", "citations": ["S1"]}
        return {"entities": ["Alice"]}

    llm = ScriptedLLM(respond)
    out = llm.run([P.query_entities_request("Who met Bob?"),
                   P.answer_request("Who met Bob?", [("S1", "Alice met Bob.")])], stage="answer")
    assert out[0].value == {"entities": ["Alice"]} and out[1].value["citations"] == ["S1"]


def test_rule_based_test_double_answers_every_prompt_validly():
    from noderag.llm.testing import rule_based_respond

    llm = ScriptedLLM(rule_based_respond, max_validation_retries=0)
    text = ("The Journal of Mathematical Physics is published by the American Institute of Physics. "
            "It began in 1960. Jan Philip Solovej of the University of Copenhagen edits it.")
    out = llm.run([
        P.decompose_request(text),
        P.attribute_request("Jan Philip Solovej", ["Jan Philip Solovej edits it."]),
        P.community_request(["Paris is in France.", "The Seine flows through Paris."]),
        P.query_entities_request("Who edits the Journal of Mathematical Physics?"),
        P.answer_request("Who edits it?", [("S3", "Jan Philip Solovej edits it.")]),
    ], stage="decompose")
    assert all(r.ok for r in out), [r.error for r in out]
    units = out[0].value["units"]
    assert len(units) == 3 and "Journal of Mathematical Physics" in units[0]["entities"]
    assert "1960" in units[1]["entities"] and units[2]["relations"][0] == {
        "source": "Jan Philip Solovej", "relation": "related to", "target": "University of Copenhagen"}
    assert out[3].value["entities"] == ["Journal of Mathematical Physics"]
    assert out[4].value["citations"] == ["S3"] and out[1].value.startswith("Summary: Entity: Jan")
