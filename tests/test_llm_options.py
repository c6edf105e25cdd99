"""Backend settings from [llm]/[embed] and --llm-option: parsing, validation, and what reaches the backend."""

from __future__ import annotations

import subprocess
import sys

import pytest

from noderag.config import ConfigError, NodeRAGConfig
from noderag.llm import CachedBackend, LLMCache, LLMRequest, Sampling, make_llm
from noderag.llm.options import OptionError, llm_option_overrides, parse_llm_options
from noderag.llm.sampling import SamplingOverride
from noderag.llm.testing import ScriptedLLM


def test_parse_llm_options_converts_and_names_bad_key():
    got = parse_llm_options(["dialect=json_object", "max-concurrency=2", "timeout_s=30", "temperature=0.7"])
    assert got == {"dialect": "json_object", "max_concurrency": 2, "timeout_s": 30.0, "temperature": 0.7}
    with pytest.raises(OptionError, match="unknown LLM option 'dialekt'"):
        parse_llm_options(["dialekt=json_object"])
    with pytest.raises(OptionError, match="max_concurrency: must be >= 1"):
        parse_llm_options(["max_concurrency=0"])
    with pytest.raises(OptionError, match="timeout_s: expected a float, got 'soon'"):
        parse_llm_options(["timeout_s=soon"])
    with pytest.raises(OptionError, match="expected KEY=VALUE"):
        parse_llm_options(["dialect"])


def test_option_overrides_land_in_the_llm_section():
    ov = llm_option_overrides(["dialect=json_object", "n_ctx=512", "max_retries=1"])
    cfg = NodeRAGConfig().with_overrides({"llm.spec": "openai:m@http://127.0.0.1:1/v1", **ov})
    assert cfg.llm.dialect == "json_object" and cfg.llm.max_retries == 1 and cfg.llm.options == {"n_ctx": 512}
    assert cfg.llm.backend_options() == {"dialect": "json_object", "max_retries": 1, "n_ctx": 512}


def test_llm_section_validates_each_field():
    with pytest.raises(ConfigError, match="llm.dialect: expected one of"):
        NodeRAGConfig.from_dict({"llm": {"dialect": "xml"}})
    with pytest.raises(ConfigError, match=r"llm.options.foo: unknown engine option"):
        NodeRAGConfig.from_dict({"llm": {"options": {"foo": 1}}})
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) \['llm.dilect'\]"):
        NodeRAGConfig.from_dict({"llm": {"dilect": "json_object"}})


def test_make_llm_applies_openai_settings_and_api_key_env(monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-test")
    llm = make_llm("openai:m@http://127.0.0.1:1/v1", dialect="json_object", max_concurrency=3, timeout_s=7,
                   max_retries=0, api_key_env="MY_KEY")
    assert (llm.config.dialect, llm.config.max_concurrency, llm.config.timeout_s, llm.config.max_retries,
            llm.config.api_key) == ("json_object", 3, 7, 0, "sk-test")
    monkeypatch.delenv("MY_KEY")
    with pytest.raises(Exception, match="api_key_env names 'MY_KEY'"):
        make_llm("openai:m@http://127.0.0.1:1/v1", api_key_env="MY_KEY")


def test_option_for_another_backend_is_an_error(tmp_path):
    with pytest.raises(OptionError, match="'dialect' applies to the openai backend, not 'llamacpp'"):
        make_llm(f"llamacpp:{tmp_path / 'm.gguf'}", dialect="json_object")


def test_sampling_options_rewrite_requests_outside_the_cache(tmp_path):
    sent = []
    inner = ScriptedLLM(lambda req: sent.append(req.sampling) or "plain text")
    llm = SamplingOverride(CachedBackend(inner, LLMCache(tmp_path / "c.sqlite")), temperature=0.5, seed=7)
    r = LLMRequest([{"role": "user", "content": "hi"}], None, Sampling(max_tokens=9))
    llm.run([r], stage="answer")
    assert [(s.temperature, s.seed, s.max_tokens) for s in sent] == [(0.5, 7, 9)]
    assert llm.ledger.stages["answer"].requests == 1
    again = llm.run([r], stage="answer")  # same overridden request: a cache hit, no second call
    assert again[0].cached and len(sent) == 1


def test_embed_section_options_and_api_key_env(monkeypatch):
    cfg = NodeRAGConfig.from_dict({"embed": {"spec": "hash:8", "timeout_s": 5, "options": {"dim": 16}}})
    assert cfg.embed.backend_options() == {"timeout_s": 5, "dim": 16}
    cfg = NodeRAGConfig.from_dict({"embed": {"api_key_env": "NO_SUCH_VAR_XYZ"}})
    monkeypatch.delenv("NO_SUCH_VAR_XYZ", raising=False)
    with pytest.raises(ConfigError, match="embed.api_key_env names 'NO_SUCH_VAR_XYZ'"):
        cfg.embed.backend_options()
    with pytest.raises(ConfigError, match="embed.max_retries"):
        NodeRAGConfig.from_dict({"embed": {"max_retries": -1}})


def test_cli_build_rejects_unknown_llm_option_naming_it(tmp_path):
    doc = tmp_path / "a.txt"
    doc.write_text("Alice met Bob in Paris.")
    p = subprocess.run([sys.executable, "-m", "noderag.cli", "build", str(doc), "--index", str(tmp_path / "ix"),
                        "--llm", "openai:m@http://127.0.0.1:1/v1", "--llm-option", "max_concurency=2"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    assert "unknown LLM option 'max_concurency'" in p.stderr and "Traceback" not in p.stderr


def test_llm_settings_are_declared_once():
    """Every [llm] setting of the config tree is an option of the one table, and every non-engine option is one."""
    from dataclasses import fields

    from noderag.config import LLMConfig
    from noderag.llm.options import CONFIG_KEYS, LLM_OPTIONS

    settings = tuple(f.name for f in fields(LLMConfig) if f.name not in ("spec", "cache", "options"))
    assert set(settings) == set(CONFIG_KEYS)
    assert all(LLMConfig.__dataclass_fields__[k].default is None for k in settings)  # None: the backend's default
    assert set(LLM_OPTIONS) - set(CONFIG_KEYS) == {"tensor_parallel_size", "gpu_memory_utilization", "max_model_len",
                                                   "n_ctx", "n_threads", "n_gpu_layers"}
