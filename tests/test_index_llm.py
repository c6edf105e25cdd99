"""LLM-mode build with the scripted test double: invalid JSON, a timeout, retries, failures recorded."""

from __future__ import annotations

import pytest

from noderag.config import DecomposeConfig, NodeRAGConfig
from noderag.data import demo_dir
from noderag.indexing.decompose.base import ChunkInput, DecomposeFailure
from noderag.indexing.decompose.llm import LLMDecomposer
from noderag.indexing.decompose.nlp import extract_mentions
from noderag.indexing.driver import build_index
from noderag.store.errors import IndexNotFoundError
from noderag.store.tables import IndexStore
from noderag.llm.prompts import SYSTEM_PROMPTS
from noderag.llm.testing import ScriptedLLM

BAD = "Skarn is the second largest island"
SLOW = "Tomas Reyke is a politician"


class Script:
    """Replies like a small model; the Skarn chunk always gets invalid JSON, the Reyke chunk times out once."""

    def __init__(self) -> None:
        self.decompose_texts: list[str] = []
        self.timed_out = False

    def __call__(self, req):
        system, user = req.messages[0]["content"], req.messages[-1]["content"]
        if system == SYSTEM_PROMPTS["en"]["decompose"]:
            self.decompose_texts.append(user)
            if BAD in user:
                return "this is { not json"
            if SLOW in user and not self.timed_out:
                self.timed_out = True
                raise TimeoutError("request timed out after 30 s")
            sentences = [s.strip() for s in user.replace("\n", " ").split(". ") if s.strip()]
            units = []
            for s in sentences[:4]:
                ents = [m.text for m in extract_mentions(s)][:4]
                rels = [{"source": a, "relation": "is linked to", "target": b} for a, b in zip(ents, ents[1:])]
                units.append({"text": s, "entities": ents, "relations": rels})
            return {"units": units}
        if system == SYSTEM_PROMPTS["en"]["attribute"]:
            return "A summary of " + user.split("\n", 1)[0]
        if system == SYSTEM_PROMPTS["en"]["community"]:
            first = user.split("\n", 1)[0][:60]
            return {"elements": [{"title": "Theme " + first[:20], "description": "About " + first}]}
        raise AssertionError(f"unexpected request {system[:40]!r}")


def _cfg() -> NodeRAGConfig:
    return NodeRAGConfig().with_overrides({"embed.spec": "hash:64", "decompose.batch_size": 4})


def test_llm_build_reports_failures_and_resumes(tmp_path):
    out = tmp_path / "idx"
    script = Script()
    llm = ScriptedLLM(script, max_validation_retries=1)
    with pytest.raises(DecomposeFailure) as info:
        build_index([demo_dir()], out, _cfg(), llm=llm, progress=False)
    msg = str(info.value)
    assert "1 chunk(s) failed" in msg and "07_skarn_island.txt" in msg and "JSON" in msg
    assert script.timed_out  # the timeout was retried and then succeeded
    # 2 validation attempts per call, 3 calls (decompose.max_retries = 2) for the bad chunk
    assert sum(BAD in t for t in script.decompose_texts) == 6
    # the failed build left no finished index behind, only its resumable stages
    with pytest.raises(IndexNotFoundError, match="index build is not finished"):
        IndexStore.open(out)
    assert (out / "stages").is_dir() and not (out / "manifest.json").exists()

    # rerun: only the failed chunk is asked again; with allow_failures the index is finished
    script2 = Script()
    llm2 = ScriptedLLM(script2, max_validation_retries=1)
    build_index([demo_dir()], out, _cfg(), llm=llm2, progress=False, allow_failures=True)
    assert script2.decompose_texts and all(BAD in t for t in script2.decompose_texts)
    store = IndexStore.open(out)
    m = store.manifest
    assert list(m["failures"]["decompose"].values())[0].startswith(str(demo_dir() / "07_skarn_island.txt"))
    assert m["config"]["decompose"]["method"] == "llm"
    assert m["tokens"]["decompose"]["prompt_tokens"] > 0 and m["tokens"]["decompose"]["failures"] >= 1
    assert m["counts"]["nodes"]["attribute"] > 0 and m["counts"]["nodes"]["high_level"] > 0
    texts = [store.texts[i] for i in range(len(store)) if store.types[i] == 4]
    assert all(": A summary of Entity: " in t for t in texts)
    assert (out / "llm_cache.sqlite").is_file() and "llm_cache.sqlite" in m["bytes"]
    # the failed chunk still has its T node (its text stays retrievable)
    assert any(BAD in store.texts[i] for i in range(len(store)) if store.types[i] == 0)


def test_llm_decomposer_rejects_malformed_replies():
    replies = iter([{"units": "nope"}, {"units": [{"text": 3}]}, {"units": [{"text": "Fine.", "entities": ["A"],
                                                                            "relations": [{"source": "A", "relation": "r", "target": "B"}]}]}])
    llm = ScriptedLLM(lambda req: next(replies), max_validation_retries=0)
    dec = LLMDecomposer(llm, DecomposeConfig(method="llm", max_retries=1))
    [res] = dec.decompose([ChunkInput(0, "Some text.", None)])
    assert res.error is not None and "units" in res.error
    [ok] = dec.decompose([ChunkInput(1, "Some text.", "Title")])
    assert ok.error is None and ok.units[0].relations == [("A", "r", "B")] and "Title" in ok.units[0].entities
