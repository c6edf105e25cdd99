"""Pick the decomposer named by the configuration."""

from __future__ import annotations

from .base import Decomposer

__all__ = ["make_decomposer"]


def make_decomposer(config, llm=None, seed: int = 0) -> Decomposer:
    """The decomposer named by ``config.method`` (``llm`` needs a backend)."""
    if config.method == "nlp":
        from .nlp import NLPDecomposer

        return NLPDecomposer(config)
    if llm is None:
        raise ValueError("decompose.method = 'llm' needs an LLM backend (--llm SPEC)")
    from .llm import LLMDecomposer

    return LLMDecomposer(llm, config, seed)
