"""``pip install noderag`` alone pulls none of the frameworks behind the doors out of the index, each extra
brings only its own, and importing noderag (its CLI, the export and integrations packages) imports none
of them until a door is used."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FRAMEWORKS = {"langchain": "langchain-core", "llamaindex": "llama-index-core", "mcp": "mcp",
              "postgres": "psycopg"}
MODULES = ("langchain_core", "llama_index", "mcp", "psycopg")


def _name(req: str) -> str:
    return re.split(r"[\[<>=!~; ]", req, maxsplit=1)[0].lower()


def test_base_install_has_no_framework_and_each_extra_only_its_own():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    base = {_name(r) for r in project["dependencies"]}
    assert not base & set(FRAMEWORKS.values()), base & set(FRAMEWORKS.values())
    assert not any(b.startswith(("langchain", "llama-index", "psycopg")) for b in base)
    extras = project["optional-dependencies"]
    for extra, dist in FRAMEWORKS.items():
        assert [_name(r) for r in extras[extra]] == [dist], extra


def test_importing_noderag_imports_no_framework():
    code = ("import sys, noderag, noderag.cli, noderag.export, noderag.export.postgres, noderag.integrations, "
            "noderag.integrations.passages, noderag.integrations.mcp; noderag.cli._parser(); "
            f"print([m for m in {MODULES!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
