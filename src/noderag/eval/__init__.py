"""Evaluation: answer scores (``noderag.eval.answers``) and retrieval metrics with intervals (``noderag.eval.metrics``).

The answer scores keep their historical import path (``from noderag.eval import exact_match``).
"""

from __future__ import annotations

from .answers import (JUDGE_SCHEMA, answer_tokens, exact_match, judge_request, normalize_answer, parse_judgement,
                      token_f1)
from .metrics import bootstrap_interval, breakdown, musique_hops, paired_bootstrap, passage_scores

__all__ = ["normalize_answer", "answer_tokens", "exact_match", "token_f1", "judge_request", "parse_judgement",
           "JUDGE_SCHEMA", "passage_scores", "bootstrap_interval", "paired_bootstrap", "breakdown", "musique_hops"]
