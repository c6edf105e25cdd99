"""Backends are made from their config sections in one way, and answers go through the index's LLM cache."""

from __future__ import annotations

import pytest

import noderag
from noderag.config import EmbedConfig, LLMConfig
from noderag.llm import CachedBackend, from_config as llm_from_config
from noderag.store.layout import LLM_CACHE


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("backends")
    (root / "a.txt").write_text("Ada Lovelace wrote the first program. Charles Babbage designed the engine.\n")
    config = noderag.NodeRAGConfig.from_dict({"llm": {"spec": "openai:tiny@http://127.0.0.1:9/v1", "max_retries": 0}})
    idx = noderag.build([str(root / "a.txt")], str(root / "idx"), config=config, embed="hash:32", progress=False)
    yield idx
    idx.close()


def _unwrap(backend):
    while not hasattr(backend, "config"):
        backend = backend.inner if hasattr(backend, "inner") else backend.backend
    return backend


def test_llm_from_config_applies_the_section_and_the_cache(tmp_path):
    cfg = LLMConfig(spec="openai:m@http://127.0.0.1:9/v1", max_concurrency=3, dialect="json_object")
    backend = llm_from_config(cfg, cache_path=tmp_path / "c.sqlite")
    assert isinstance(backend, CachedBackend) and (tmp_path / "c.sqlite").exists()
    inner = _unwrap(backend)
    assert inner.config.max_concurrency == 3 and inner.config.dialect == "json_object"
    backend.close()
    off = llm_from_config(LLMConfig(spec="openai:m@http://127.0.0.1:9/v1", cache=False), cache_path=tmp_path / "d.sqlite")
    assert not isinstance(off, CachedBackend) and not (tmp_path / "d.sqlite").exists()
    assert llm_from_config(LLMConfig()) is None


def test_option_items_go_on_top_of_the_section(index):
    from noderag.search.api import index_llm

    backend = index_llm(index, None, ["max_concurrency=5"])
    assert isinstance(backend, CachedBackend)
    assert str(index.root / LLM_CACHE) in str(backend.cache.path)
    assert _unwrap(backend).config.max_concurrency == 5 and _unwrap(backend).config.max_retries == 0
    backend.close()


def test_the_server_answers_through_the_index_cache(index, monkeypatch):
    """``noderag serve`` made its LLM without the index's cache, so its answers bypassed it."""
    pytest.importorskip("fastapi")
    import argparse

    import noderag.serve.app as app
    from noderag.serve.cli import add_serve_arguments, run_serve

    seen = {}

    class Stop(Exception):
        pass

    def capture(store, *, llm=None, **kw):
        seen["llm"] = llm
        raise Stop

    monkeypatch.setattr(app, "create_app", capture)
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    with pytest.raises(Stop):
        run_serve(parser.parse_args([str(index.root)]))
    assert isinstance(seen["llm"], CachedBackend)
    assert str(index.root / LLM_CACHE) in str(seen["llm"].cache.path)
    seen["llm"].close()


def test_embed_from_config_uses_the_section():
    from noderag.embed import from_config as embed_from_config

    emb = embed_from_config(EmbedConfig(spec="hash:48"))
    assert emb.dim == 48 and emb.embed(["a b c"]).shape == (1, 48)


def test_the_build_seed_reaches_the_betweenness_pivots(monkeypatch, tmp_path):
    """``seed`` is the one seed of every random algorithm: betweenness sampling too, not importance.seed."""
    import noderag.graph.betweenness as bt

    seen = []
    real = bt.betweenness

    def spy(*a, **k):
        seen.append(k.get("seed"))
        return real(*a, **k)

    monkeypatch.setattr(bt, "betweenness", spy)
    text = " ".join(f"Person{i} met Person{i + 1} in City{i % 3}." for i in range(60))
    (tmp_path / "a.txt").write_text(text)
    config = noderag.NodeRAGConfig.from_dict({"seed": 7, "importance": {"k_core": 1, "betweenness_factor": 1}})
    noderag.build([str(tmp_path / "a.txt")], str(tmp_path / "idx"), config=config, embed="hash:16",
                  progress=False).close()
    assert seen and set(seen) == {7}


def test_importance_has_no_seed_of_its_own():
    """The build's top-level ``seed`` is the only one: an ``importance.seed`` key is refused, not ignored."""
    from noderag.errors import ConfigError

    with pytest.raises(ConfigError, match=r"unknown config key\(s\) \['importance\.seed'\]"):
        noderag.NodeRAGConfig.from_dict({"importance": {"seed": 3}})


def test_streaming_belongs_to_the_backend():
    """A backend without a stream says so (the server falls back to run); wrappers pass astream through,
    the sampling wrapper with its sampling applied."""
    import asyncio

    from noderag.llm.base import BaseBackend
    from noderag.llm.prompts import answer_request
    from noderag.llm.sampling import SamplingOverride
    from noderag.llm.types import StreamUnavailable

    seen = []

    class Streams(BaseBackend):
        model_id = "streams"

        async def astream(self, request):
            seen.append(request.sampling.temperature)
            yield '{"answer": "ok", "citations": ["1"]}'

    async def collect(backend, req):
        return [p async for p in backend.astream(req)]

    req = answer_request("q?", [(1, "a passage")])
    with pytest.raises(StreamUnavailable):
        asyncio.run(collect(BaseBackend(), req))
    wrapped = SamplingOverride(Streams(), temperature=0.5)
    assert asyncio.run(collect(wrapped, req)) == ['{"answer": "ok", "citations": ["1"]}'] and seen == [0.5]
    res = wrapped.streamed_result(req, '{"answer": "ok", "citations": ["1"]}', 0.01)
    assert res.error is None and res.value["answer"] == "ok"
