"""The executor setting without Ray: config section, CLI flags, Ray never imported by default, a clear error without it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from noderag.config import ConfigError, ExecutorConfig, NodeRAGConfig
from noderag.data import demo_dir


def test_executor_section_defaults_and_validation():
    cfg = NodeRAGConfig.from_dict({"executor": {"kind": "ray", "address": "10.0.0.1:6379", "workers": 4}})
    assert cfg.executor == ExecutorConfig(kind="ray", address="10.0.0.1:6379", workers=4)
    assert NodeRAGConfig().executor.kind == "local"
    with pytest.raises(ConfigError, match="executor.kind must be 'local' or 'ray'"):
        NodeRAGConfig.from_dict({"executor": {"kind": "spark"}})
    with pytest.raises(ConfigError, match="executor.workers"):
        NodeRAGConfig.from_dict({"executor": {"workers": 0}})
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) \['executor.nodes'\]"):
        NodeRAGConfig.from_dict({"executor": {"nodes": 2}})


def test_default_path_never_imports_ray():
    code = ("import sys, noderag, noderag.cli, noderag.index.pipeline, noderag.index.executor, "
            "noderag.index.executor.local, noderag.index.executor.stages\n"
            "bad = sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.'))\n"
            "assert not bad, bad")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_ray_executor_without_ray_names_the_install_command(tmp_path):
    code = ("import sys; sys.modules['ray'] = None\n"  # as if Ray were not installed
            "from noderag.cli import main\n"
            f"sys.exit(main(['build', {str(demo_dir())!r}, '--index', {str(tmp_path / 'idx')!r}, "
            "'--executor', 'ray', '--no-progress']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "pip install 'noderag[ray]'" in p.stderr and "Traceback" not in p.stderr
