"""The answer path: one short-answer prompt (en/zh), citations checked against the context, failures reported."""

from __future__ import annotations

from noderag.llm import prompts as P
from noderag.llm.answer import answer_many
from noderag.llm.testing import ScriptedLLM

CTX = [("3", "Hank Snow recorded Hello Love."), ("7", "Hello Love was released in 1974.")]


def test_prompt_asks_for_a_short_answer_and_ids_in_both_languages():
    en = P.answer_request("Who recorded Hello Love?", CTX)
    assert "short answer" in en.messages[0]["content"] and "ids" in en.messages[0]["content"]
    assert en.messages[1]["content"].startswith("Context:\n[3] Hank Snow")
    zh = P.answer_request("谁录制了这首歌？", CTX)
    assert "简短答案" in zh.messages[0]["content"] and "id" in zh.messages[0]["content"]
    assert en.schema == zh.schema == P.ANSWER_SCHEMA


def test_citations_outside_the_context_are_reported_not_kept():
    llm = ScriptedLLM(lambda req: {"answer": " Hank  Snow ", "citations": ["[3]", "7", "3", "99", "S1"]})
    [a] = answer_many(llm, [("Who recorded Hello Love?", CTX)])
    assert a.ok and a.answer == "Hank Snow" and a.cited == ["3", "7"]
    assert a.invalid_citations == ["99", "S1"]
    assert llm.ledger.stages["answer"].requests == 1 and a.usage.prompt > 0


def test_malformed_then_valid_output_is_retried():
    replies = iter(["not json at all", '{"answer": "Hank Snow", "citations": ["3"]}'])
    llm = ScriptedLLM(lambda req: next(replies), max_validation_retries=0)
    [a] = answer_many(llm, [("Who recorded Hello Love?", CTX)])
    assert a.ok and a.answer == "Hank Snow" and a.attempts == 2 and llm.calls == 2


def test_empty_answers_are_reported_per_question_never_dropped():
    def respond(req):
        if "1974" in req.messages[1]["content"] and "When" in req.messages[1]["content"]:
            return {"answer": "1974", "citations": ["7"]}
        return {"answer": "   ", "citations": []}  # whitespace passes minLength; still empty

    llm = ScriptedLLM(respond)
    out = answer_many(llm, [("Who recorded it?", CTX), ("When was it released?", CTX)], retries=2)
    assert len(out) == 2
    assert out[0].error is not None and "empty answer" in out[0].error and out[0].attempts == 3
    assert out[0].answer == "" and out[1].ok and out[1].answer == "1974"
    assert llm.calls == 4  # question 0 asked 3 times, question 1 once
