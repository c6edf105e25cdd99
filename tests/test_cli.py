"""The ``noderag`` command: build, stats, demo, config files, and user errors without tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from noderag.cli import main
from noderag.config import ConfigError, NodeRAGConfig, load_config
from noderag.data import demo_dir


def test_build_and_stats(tmp_path, capsys):
    idx = tmp_path / "idx"
    cfg = tmp_path / "cfg.toml"
    cfg.write_text('seed = 3\n[decompose]\nbatch_size = 5\n[communities]\nmin_size = 3\n', encoding="utf-8")
    rc = main(["build", str(demo_dir()), "--index", str(idx), "--embed", "hash:64", "--config", str(cfg),
               "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "12 new document(s)" in out and "semantic_unit" in out and "vectors.usearch" in out
    assert main(["stats", str(idx), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["counts"]["documents"] == 12 and stats["bytes_total"] > 0
    assert stats["counts"]["edges"]["semantic"] == 0  # the semantic layer is built only when asked for
    from noderag.store.manifest import read_manifest

    m = read_manifest(idx)  # the current generation's
    assert m["config"]["seed"] == 3 and m["config"]["decompose"]["batch_size"] == 5
    assert m["config"]["communities"]["min_size"] == 3 and m["config"]["embed"]["spec"] == "hash:64"
    # rebuilding with the same inputs adds nothing
    assert main(["build", str(demo_dir()), "--index", str(idx), "--no-progress"]) == 0
    assert "0 new document(s), 12 duplicate(s)" in capsys.readouterr().out


def test_user_errors_exit_1_with_message(tmp_path, capsys):
    assert main(["build", str(tmp_path / "missing"), "--index", str(tmp_path / "i")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("noderag build: error: ") and "missing: no such file" in err
    bad = tmp_path / "bad.toml"
    bad.write_text("[chunk]\nmax_tokenz = 5\n", encoding="utf-8")
    assert main(["build", str(demo_dir()), "--index", str(tmp_path / "i"), "--config", str(bad)]) == 1
    assert "chunk.max_tokenz" in capsys.readouterr().err
    assert main(["stats", str(tmp_path)]) == 1
    assert "not an index directory" in capsys.readouterr().err


def test_cli_subprocess_has_no_traceback(tmp_path):
    j = tmp_path / "c.jsonl"
    j.write_text('{"id": "a", "text": "ok"}\n{broken\n', encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "noderag.cli", "build", str(j), "--index", str(tmp_path / "i")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "c.jsonl:2: malformed JSON" in r.stderr and "Traceback" not in r.stderr


def test_config_files_toml_yaml_and_overrides(tmp_path):
    t = tmp_path / "c.toml"
    t.write_text('[chunk]\nmax_tokens = 256\n[search]\nvector_top_k = 7\n[importance]\nmin_mentions = 3\n',
                 encoding="utf-8")
    c = load_config(t)
    assert c.chunk.max_tokens == 256 and c.search.vector_top_k == 7 and c.importance.min_mentions == 3
    y = tmp_path / "c.yaml"
    y.write_text("decompose:\n  method: nlp\n  dates: false\nsemantic:\n  k: 4\n", encoding="utf-8")
    c = load_config(y)
    assert c.decompose.dates is False and c.semantic.k == 4
    assert NodeRAGConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) \['colour'\]"):
        NodeRAGConfig.from_dict({"colour": 1})
    with pytest.raises(ConfigError, match="semantic.k must be an int >= 1"):
        NodeRAGConfig.from_dict({"semantic": {"k": 0}})
    with pytest.raises(ConfigError, match="unknown config key 'embed.nope'"):
        c.with_overrides({"embed.nope": 1})
    bad = tmp_path / "c.txt"
    bad.write_text("x", encoding="utf-8")
    with pytest.raises(ConfigError, match="expected a .toml"):
        load_config(bad)
    broken = tmp_path / "b.toml"
    broken.write_text("[chunk\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="b.toml"):
        load_config(broken)
