"""Shared pieces of the integration, MCP and export tests: the indexes they run on, optional imports.

The optional frameworks (LangChain, LlamaIndex, the MCP SDK, psycopg) and the PostgreSQL server are
installed by the ``test`` extra and ``.ci/run``; under CI a missing one fails the test instead of
skipping it, so a green CI run means every door was exercised.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import pytest

import noderag
from noderag.data import demo_dir

REPO = Path(__file__).resolve().parents[1]
DEV = REPO.parent / "shared" / "data" / "musique"
_BUILT: dict[str, object] = {}


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def need(module: str):
    """Import ``module``; skip without it locally, fail under CI (where the test extra installs it)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if under_ci():
            raise AssertionError(f"{module} is not installed: CI installs it with the test extra") from exc
        pytest.skip(f"{module} not installed (pip install -e '.[test]')")


def demo(tmp_path_factory) -> noderag.Index:
    """The demo corpus built once per test session (nlp mode, ``hash:64`` embedder)."""
    if "demo" not in _BUILT:
        root = tmp_path_factory.mktemp("doors-demo")
        _BUILT["demo"] = noderag.build([str(demo_dir())], str(root / "index"), embed="hash:64", progress=False)
    return _BUILT["demo"]


def dev_sample(tmp_path_factory) -> tuple[noderag.Index, list[str]]:
    """A 150-passage slice of the MuSiQue dev sample (built once per session) and its first 40 questions."""
    if "dev" not in _BUILT:
        if not (DEV / "corpus.jsonl").is_file():
            if under_ci():
                raise AssertionError(f"{DEV}: the dev sample is missing (CI lays shared/ beside the clone)")
            pytest.skip(f"{DEV}: dev sample not present")
        root = tmp_path_factory.mktemp("doors-dev")
        corpus = root / "corpus.jsonl"
        with open(DEV / "corpus.jsonl", encoding="utf-8") as fh:
            corpus.write_text("".join(line for _, line in zip(range(150), fh)), encoding="utf-8")
        with open(DEV / "questions.jsonl", encoding="utf-8") as fh:
            questions = [json.loads(line)["question"] for _, line in zip(range(40), fh)]
        index = noderag.build([str(corpus)], str(root / "idx"), embed="hash:64", progress=False)
        _BUILT["dev"] = (index, questions)
    return _BUILT["dev"]
