"""Records, validation, token ledger, cache and the scripted test double."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from noderag.llm import (
    CachedBackend,
    LLMCache,
    LLMRequest,
    LLMResult,
    Sampling,
    TokenLedger,
    Usage,
    cache_key,
)
from noderag.llm.testing import ScriptedLLM
from noderag.llm.validate import SchemaValidators, check_output, parse_json_text

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}}},
    "required": ["n"],
    "additionalProperties": False,
}


def req(i: int, schema=SCHEMA, **kw) -> LLMRequest:
    return LLMRequest([{"role": "user", "content": f"item {i}"}], schema, Sampling(**kw), id=f"r{i}")


def n_of(r: LLMRequest) -> int:
    return int(r.messages[-1]["content"].split()[1])


# ----------------------------------------------------------------------------- records
def test_request_and_sampling_validation():
    with pytest.raises(ValueError, match="messages"):
        LLMRequest([])
    with pytest.raises(ValueError, match=r"messages\[0\]"):
        LLMRequest([{"role": "user"}])
    with pytest.raises(ValueError, match="schema"):
        LLMRequest([{"role": "user", "content": "x"}], schema="{}")
    with pytest.raises(ValueError, match="max_tokens"):
        Sampling(max_tokens=0)
    with pytest.raises(ValueError, match="top_p"):
        Sampling(top_p=0.0)
    assert Sampling().with_seed(3).seed == 3
    assert Usage(1, 2, 3) + Usage(1, 1, 1, True) == Usage(2, 3, 4, True)
    assert Usage.from_dict(Usage(5, 6, 7).to_dict()) == Usage(5, 6, 7)


# -------------------------------------------------------------------------- validation
def test_parse_json_text_accepts_fence_and_reports_position():
    assert parse_json_text('{"a": 1}') == {"a": 1}
    assert parse_json_text('```json\n{"a": 1}\n```') == {"a": 1}
    with pytest.raises(ValueError, match="invalid JSON"):
        parse_json_text('{"a": ')


def test_check_output_reports_schema_path():
    v = SchemaValidators()
    assert check_output('{"n": 1}', SCHEMA, v) == ({"n": 1}, None)
    value, err = check_output('{"n": 1, "tags": ["a", "b", "c"]}', SCHEMA, v)
    assert value is None and "tags" in err and "schema violation" in err
    value, err = check_output('{"n": "x"}', SCHEMA, v)
    assert value is None and "at n" in err
    assert check_output("free text", None, v) == ("free text", None)
    with pytest.raises(ValueError, match="invalid JSON schema"):
        v.get({"type": "no-such-type"})


# ------------------------------------------------------------------------------ ledger
def test_ledger_counts_round_trip_and_table():
    led = TokenLedger()
    led.record(
        "decompose",
        [
            LLMResult(value=1, usage=Usage(10, 5, 4), attempts=2),
            LLMResult(error="bad", usage=Usage(7, 3, 0), attempts=3),
            LLMResult(value=1, usage=Usage(10, 5, 4), cached=True, attempts=0),
        ],
        wall_s=1.5,
    )
    led.record("answer", [LLMResult(value="x", usage=Usage(3, 2, 0, estimated=True))], wall_s=0.25)
    st = led.stages["decompose"]
    assert (st.requests, st.failures, st.cache_hits, st.attempts) == (3, 1, 1, 5)
    assert (st.prompt_tokens, st.completion_tokens, st.cached_tokens) == (17, 8, 4)  # hits add no tokens
    assert list(led.stages) == ["decompose", "answer"]
    d = json.loads(json.dumps(led.to_dict()))
    again = TokenLedger.from_dict(d)
    assert again.to_dict() == led.to_dict()
    tot = again.totals()
    assert tot.requests == 4 and tot.prompt_tokens == 20 and tot.estimated
    table = led.format_table()
    assert "decompose" in table and "total" in table and "~3" in table
    with pytest.raises(ValueError, match="unknown counters"):
        TokenLedger.from_dict({"decompose": {"tokens": 1}})
    led.merge(again)
    assert led.stages["decompose"].requests == 6


# ------------------------------------------------------------------------ scripted LLM
def test_scripted_llm_retries_invalid_then_records_failure():
    seen = []

    def respond(r):
        seen.append((n_of(r), r.sampling.seed, r.sampling.temperature))
        if n_of(r) == 1:
            return "not json"  # always invalid
        if n_of(r) == 2 and r.sampling.seed == 0:
            return {"n": "wrong type"}  # invalid on the first attempt only
        if n_of(r) == 3:
            raise RuntimeError("boom")
        return {"n": n_of(r)}

    llm = ScriptedLLM(respond, max_validation_retries=2)
    out = llm.run([req(i) for i in range(5)], stage="decompose")
    assert [r.id for r in out] == ["r0", "r1", "r2", "r3", "r4"]
    assert out[0].value == {"n": 0} and out[0].attempts == 1
    assert out[1].error is not None and "invalid JSON" in out[1].error and out[1].attempts == 3
    assert out[2].value == {"n": 2} and out[2].attempts == 2
    assert out[3].error == "RuntimeError: boom" and out[3].attempts == 1  # call errors are not re-asked
    assert out[4].ok
    assert sorted((s, t) for n, s, t in seen if n == 1) == [(0, 0.0), (1, 0.3), (2, 0.3)]  # shifted seed, not greedy
    st = llm.ledger.stages["decompose"]
    assert st.requests == 5 and st.failures == 2 and st.attempts == 1 + 3 + 2 + 1 + 1


# ------------------------------------------------------------------------------- cache
def test_cache_key_covers_model_messages_schema_sampling():
    base = cache_key("m", req(1))
    assert base == cache_key("m", req(1))
    assert len({base, cache_key("m2", req(1)), cache_key("m", req(2)), cache_key("m", req(1, schema=None)),
                cache_key("m", req(1, max_tokens=7)), cache_key("m", req(1, seed=1))}) == 6
    # key is independent of dict ordering inside the schema
    reordered = dict(reversed(list(SCHEMA.items())))
    assert cache_key("m", req(1, schema=reordered)) == base


def test_cached_backend_hits_make_no_call_and_failures_are_not_cached(tmp_path):
    calls = []

    def respond(r):
        calls.append(n_of(r))
        return "broken" if n_of(r) == 2 else {"n": n_of(r)}

    cache = LLMCache(tmp_path / "c.sqlite")
    llm = CachedBackend(ScriptedLLM(respond, max_validation_retries=0), cache)
    batch = [req(0), req(1), req(2), req(1)]  # a duplicate inside the batch
    first = llm.run(batch, stage="decompose")
    assert calls == [0, 1, 2]
    assert first[3].value == {"n": 1} and first[3].cached and first[3].id == "r1"
    assert first[2].error and len(cache) == 2
    calls.clear()
    second = llm.run(batch, stage="decompose")
    assert calls == [2]  # only the failed one is asked again
    assert [r.cached for r in second] == [True, True, False, True]
    assert second[0].value == {"n": 0} and second[0].attempts == 0
    st = llm.ledger.stages["decompose"]
    assert st.requests == 8 and st.cache_hits == 4 and st.failures == 2
    cache.close()
    # the cache persists across processes/instances
    with LLMCache(tmp_path / "c.sqlite") as again:
        assert again.get(cache_key("scripted-test-double", req(0))).value == {"n": 0}
        with pytest.raises(ValueError, match="failed result"):
            again.put("k", "m", LLMResult(error="x"))


def test_cache_rejects_non_sqlite_file(tmp_path):
    p = tmp_path / "junk.sqlite"
    p.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ValueError, match="junk.sqlite"):
        LLMCache(p)


def test_cache_concurrent_writer_processes(tmp_path):
    db = tmp_path / "shared.sqlite"
    code = textwrap.dedent(
        """
        import sys
        from noderag.llm import LLMCache, LLMResult
        c = LLMCache(sys.argv[1])
        w = sys.argv[2]
        for i in range(150):
            c.put(f"{w}-{i}", "m", LLMResult(value={"i": i}, text=str(i)))
        c.close()
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(db), w]) for w in ("a", "b", "c")]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    with LLMCache(db) as c:
        assert len(c) == 450
        assert c.get("b-149").value == {"i": 149}


def test_backends_satisfy_the_protocol(tmp_path):
    """What ``LLMBackend`` promises: a ``model_id`` and ``run`` giving one result per request, in request order."""
    scripted = ScriptedLLM(lambda r: {"n": n_of(r)})
    cached = CachedBackend(scripted, LLMCache(tmp_path / "c.sqlite"))
    assert isinstance(scripted.model_id, str) and scripted.model_id
    assert cached.ledger is scripted.ledger and cached.model_id == scripted.model_id
    for backend in (scripted, cached, cached):  # the cached backend twice: its second run answers from the cache
        out = backend.run([req(3), req(1), req(2)], stage="decompose")
        assert [(r.id, r.value, r.ok) for r in out] == [("r3", {"n": 3}, True), ("r1", {"n": 1}, True),
                                                       ("r2", {"n": 2}, True)]
    assert [r.cached for r in out] == [True, True, True]
    assert scripted.run([], stage="decompose") == [] and cached.run([], stage="decompose") == []
    with pytest.raises(TypeError, match=r"requests\[0\]"):
        scripted.run([{"messages": []}], stage="decompose")
    cached.close()


def test_the_lazy_names_are_the_exported_names():
    """``noderag.llm.__all__`` is written out for linters; it lists exactly the names loaded on first use."""
    import noderag.llm as llm

    assert sorted(llm.__all__) == sorted(llm._HOME)
    assert all(getattr(llm, name) is not None for name in llm.__all__)
