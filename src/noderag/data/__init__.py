"""A small demo corpus shipped with noderag (a made-up island chain) and a few questions about it."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["demo_dir", "demo_questions"]


def demo_dir() -> Path:
    """Directory of the twelve demo documents (.md and .txt)."""
    return Path(__file__).resolve().parent / "demo"


def demo_questions() -> list[dict]:
    """Demo questions: dicts with ``id``, ``question``, ``answer`` and ``supporting_sources`` (file names)."""
    path = Path(__file__).resolve().parent / "demo_questions.jsonl"
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
