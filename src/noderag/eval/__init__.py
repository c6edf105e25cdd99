"""Evaluation: answer scores, retrieval metrics with intervals, dataset loaders and ``evaluate``.

``noderag.eval.answers``: SQuAD-style EM/F1 and the LLM judge (importable from here, their historical
path). ``noderag.eval.metrics``: per-question passage scores, bootstrap intervals, paired comparisons,
breakdowns. ``noderag.eval.loaders``: the dataset formats. ``noderag.eval.run``: :func:`evaluate`, what
``noderag eval`` runs (``batches``: one batch ranked by every method; ``summary``: the figures from the
batches, over one index or averaged over several; ``report``: results.md, the plot, per-question rows).
"""

from __future__ import annotations

from .answers import (JUDGE_SCHEMA, answer_tokens, exact_match, judge_request, normalize_answer, parse_judgement,
                      token_f1)
from .loaders import Dataset, DatasetError, Question, detect_format, load_dataset
from .metrics import bootstrap_interval, breakdown, musique_hops, paired_bootstrap, passage_scores
from .run import KNOWN_METHODS, METHODS, EvalMismatchError, evaluate

__all__ = ["normalize_answer", "answer_tokens", "exact_match", "token_f1", "judge_request", "parse_judgement",
           "JUDGE_SCHEMA", "passage_scores", "bootstrap_interval", "paired_bootstrap", "breakdown", "musique_hops",
           "Dataset", "DatasetError", "Question", "detect_format", "load_dataset", "evaluate", "EvalMismatchError",
           "METHODS", "KNOWN_METHODS"]
