"""Language support: script detection, Simplified/Traditional folding and Chinese text processing.

``detect`` and ``fold`` are light (regular expressions, one vendored table); ``zh`` loads the
segmenter on first use.
"""

from __future__ import annotations

from .detect import CorpusLanguage, cjk_ratio, corpus_language, detect_language, has_han
from .fold import fold_zh

__all__ = ["CorpusLanguage", "cjk_ratio", "corpus_language", "detect_language", "fold_zh", "has_han"]
