"""Answer scores: SQuAD-style exact match and token F1, and an LLM-judge prompt in the spirit of NodeRAG.

``exact_match`` and ``token_f1`` follow the official SQuAD v1.1 evaluation script (lower case, drop
punctuation and the articles a/an/the, collapse whitespace; F1 over the bag of tokens), taking the
maximum over the acceptable answers when ``gold`` is a list (answer plus aliases). Text with CJK
ideographs is split into single characters, as the CMRC/DRCD evaluations do.
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from collections import Counter
from typing import Any, Iterable, Sequence

__all__ = ["normalize_answer", "answer_tokens", "exact_match", "token_f1", "judge_request", "parse_judgement",
           "JUDGE_SCHEMA"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)
_CJK = re.compile(r"([\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff])")


def normalize_answer(s: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    s = str(s).lower()
    s = "".join(ch for ch in s if ch not in _PUNCT and not unicodedata.category(ch).startswith("P"))
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def answer_tokens(s: str) -> list[str]:
    """Tokens of the normalised answer (CJK ideographs one token each)."""
    return _CJK.sub(r" \1 ", normalize_answer(s)).split()


def _golds(gold: str | Iterable[str]) -> list[str]:
    if isinstance(gold, str):
        return [gold]
    out = [str(g) for g in gold if g is not None]
    if not out:
        raise ValueError("gold must be a string or a non-empty list of strings")
    return out


def exact_match(prediction: str, gold: str | Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer, else 0.0."""
    p = normalize_answer(prediction)
    return float(any(p == normalize_answer(g) for g in _golds(gold)))


def _f1(pred: list[str], gold: list[str]) -> float:
    common = Counter(pred) & Counter(gold)
    same = sum(common.values())
    if not pred or not gold:
        return float(pred == gold)  # SQuAD 2.0: both empty is a match, one empty is 0
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, gold: str | Sequence[str]) -> float:
    """Token-level F1 of the prediction against the best gold answer."""
    p = answer_tokens(prediction)
    return max(_f1(p, answer_tokens(g)) for g in _golds(gold))


# ----------------------------------------------------------------------------- LLM judge

JUDGE_SCHEMA: dict[str, Any] = {
    "title": "judgement", "type": "object", "additionalProperties": False,
    "properties": {"verdict": {"type": "string", "enum": ["correct", "incorrect"]}},
    "required": ["verdict"],
}

_JUDGE_SYSTEM = (
    "You judge answers to questions. Given a question, the gold answer (with accepted aliases) and a "
    "predicted answer, decide whether the prediction conveys the same answer as the gold one. Wording, "
    "extra detail and formatting do not matter; a different or missing answer is incorrect. "
    'Reply in JSON: {"verdict":"correct"} or {"verdict":"incorrect"}'
)


def judge_request(question: str, gold: str | Sequence[str], prediction: str, *, max_tokens: int = 16,
                  id: str | None = None):
    """An LLM request judging ``prediction`` against ``gold`` (greedy, schema-constrained)."""
    from ..llm.types import LLMRequest, Sampling

    golds = _golds(gold)
    user = (f"Question: {question}\nGold answer: {golds[0]}\n"
            + (f"Also accepted: {'; '.join(golds[1:])}\n" if len(golds) > 1 else "")
            + f"Predicted answer: {prediction or '(none)'}")
    return LLMRequest([{"role": "system", "content": _JUDGE_SYSTEM}, {"role": "user", "content": user}],
                      JUDGE_SCHEMA, Sampling(temperature=0.0, max_tokens=max_tokens), id)


def parse_judgement(result: Any) -> float | None:
    """1.0 (correct), 0.0 (incorrect) or None (the judge call failed) from a judge result."""
    if not getattr(result, "ok", False):
        return None
    v = result.value
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return None
    verdict = str(v.get("verdict", "")).strip().lower() if isinstance(v, dict) else ""
    return {"correct": 1.0, "incorrect": 0.0}.get(verdict)
