"""Shared pieces of the integration, MCP and export tests: the indexes they run on, optional imports.

The optional frameworks (LangChain, LlamaIndex, the MCP SDK, psycopg) and the PostgreSQL server are
installed by the ``test`` extra and ``.ci/run``; under CI a missing one fails the test instead of
skipping it, so a green CI run means every door was exercised.
"""

from __future__ import annotations

import importlib

import pytest

import noderag
from noderag.data import demo_dir

from conftest import MUSIQUE, musique_queries, under_ci

_BUILT: dict[str, object] = {}


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
    """The first 150 passages of the MuSiQue slice in ``tests/data`` (built once per session) and 40 queries
    (``conftest.musique_queries``: the slice's questions, then their gold sub-questions)."""
    if "dev" not in _BUILT:
        root = tmp_path_factory.mktemp("doors-dev")
        corpus = root / "corpus.jsonl"
        with open(MUSIQUE / "corpus.jsonl", encoding="utf-8") as fh:
            corpus.write_text("".join(line for _, line in zip(range(150), fh)), encoding="utf-8")
        questions = musique_queries(40)
        index = noderag.build([str(corpus)], str(root / "idx"), embed="hash:64", progress=False)
        _BUILT["dev"] = (index, questions)
    return _BUILT["dev"]
