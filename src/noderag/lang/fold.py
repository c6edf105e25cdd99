"""Simplified/Traditional folding: each Traditional character maps to its Simplified form.

Character by character, so a folded string keeps the length and the offsets of the original
(segmenter spans on folded text index the text as written), and a name inside a text stays a
substring after folding (phrase-level conversion could rewrite the two differently). Used by
:func:`noderag.graph.keys.canonical_name` and CJK lexical matching; stored text keeps its script.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

__all__ = ["fold_zh", "fold_table"]

_TABLE = Path(__file__).resolve().parent / "data" / "zh_fold.tsv"


@lru_cache(maxsize=1)
def fold_table() -> dict[int, str]:
    """``str.translate`` table of the vendored ``data/zh_fold.tsv`` (read once, immutable use only)."""
    table: dict[int, str] = {}
    for lineno, line in enumerate(_TABLE.read_text("utf-8").splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        src, sep, dst = line.partition("\t")
        if not sep or len(src) != 1 or len(dst) != 1:
            raise ValueError(f"{_TABLE}:{lineno}: expected 'char<TAB>char', got {line!r}")
        table[ord(src)] = dst
    return table


def fold_zh(text: str) -> str:
    """``text`` with Traditional characters replaced by Simplified ones (ASCII text returned as is)."""
    if text.isascii():
        return text
    return text.translate(fold_table())
