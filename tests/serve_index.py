"""The demo index shared by the serve tests: built once per test session (nlp mode, ``hash:64`` embedder)."""

from __future__ import annotations

from pathlib import Path

import noderag
from noderag.data import demo_dir

_BUILT: dict[str, Path] = {}

#: A demo question whose answer is in the demo corpus (12_vellmar_heritage_trust.md).
QUESTION = "Who founded the Vellmar Heritage Trust?"


def demo_index(tmp_path_factory) -> Path:
    """Path of the demo index, built on first use under the session's temporary directory."""
    if "index" not in _BUILT:
        root = tmp_path_factory.mktemp("serve-demo")
        noderag.build([str(demo_dir())], str(root / "index"), embed="hash:64", progress=False)
        _BUILT["index"] = root / "index"
    return _BUILT["index"]
