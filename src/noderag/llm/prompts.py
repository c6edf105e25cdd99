"""Prompts and JSON schemas (English and Chinese): static instructions first, variable text last.

Every array in a schema has ``maxItems`` and every string ``maxLength``, so constrained decoding
cannot loop; the schema also carries the output format, so prompts need no long examples.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from ..lang.detect import detect_language as _detect_language
from .types import LLMRequest, Sampling

__all__ = [
    "LANGS",
    "detect_language",
    "decompose_schema",
    "community_schema",
    "query_entities_schema",
    "answer_schema",
    "DECOMPOSE_SCHEMA",
    "COMMUNITY_SCHEMA",
    "QUERY_ENTITIES_SCHEMA",
    "ANSWER_SCHEMA",
    "SYSTEM_PROMPTS",
    "USER_TEMPLATES",
    "MAX_TOKENS",
    "decompose_request",
    "attribute_request",
    "community_request",
    "query_entities_request",
    "answer_request",
]

LANGS = ("en", "zh")

#: Default completion budget per task (bounded so a small model cannot run away).
MAX_TOKENS = {"decompose": 2048, "attribute": 320, "community": 768, "query": 160, "answer": 320}


def _s(max_len: int) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": max_len}


def _arr(items: dict[str, Any], max_items: int) -> dict[str, Any]:
    return {"type": "array", "maxItems": max_items, "items": items}


def _obj(props: dict[str, dict[str, Any]], name: str | None = None) -> dict[str, Any]:
    o: dict[str, Any] = {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
    if name:
        o = {"title": name, **o}
    return o


def decompose_schema(max_units: int = 16, max_entities: int = 16, max_relations: int = 16) -> dict[str, Any]:
    """Schema of a decomposition: ``{"units": [{"text", "entities", "relations": [{source, relation, target}]}]}``."""
    relation = _obj({"source": _s(100), "relation": _s(120), "target": _s(100)})
    unit = _obj({"text": _s(800), "entities": _arr(_s(100), max_entities), "relations": _arr(relation, max_relations)})
    return _obj({"units": _arr(unit, max_units)}, "decomposition")


def community_schema(max_elements: int = 6) -> dict[str, Any]:
    """Schema of community high-level elements: ``{"elements": [{"title", "description"}]}``."""
    return _obj({"elements": _arr(_obj({"title": _s(120), "description": _s(600)}), max_elements)}, "community")


def query_entities_schema(max_entities: int = 12) -> dict[str, Any]:
    """Schema of query entities: ``{"entities": [str]}``."""
    return _obj({"entities": _arr(_s(100), max_entities)}, "query_entities")


def answer_schema(max_citations: int = 12) -> dict[str, Any]:
    """Schema of a short answer with citations: ``{"answer": str, "citations": [context id]}``."""
    return _obj({"answer": _s(400), "citations": _arr(_s(40), max_citations)}, "answer")


DECOMPOSE_SCHEMA = decompose_schema()
COMMUNITY_SCHEMA = community_schema()
QUERY_ENTITIES_SCHEMA = query_entities_schema()
ANSWER_SCHEMA = answer_schema()

# --------------------------------------------------------------------------- templates
SYSTEM_PROMPTS: dict[str, dict[str, str]] = {
    "en": {
        "decompose": (
            "Split the text into semantic units. A unit is a short self-contained paraphrase of one "
            "event or fact that keeps its names, numbers and dates. For each unit list its entities "
            "(names as written in the text: people, places, organisations, works, dates, things) and "
            "the relations between them as source, relation, target, where source and target are "
            "among its entities and relation is a short phrase. "
            'Reply in JSON: {"units":[{"text":"","entities":[""],"relations":[{"source":"","relation":"","target":""}]}]}'
        ),
        "attribute": (
            "Summarise the entity from the facts given: its key attributes and most important "
            "relations, in at most 120 words of plain text. Use only the facts."
        ),
        "community": (
            "The texts come from one cluster. Give its most important and distinct high-level "
            "elements (themes, concepts, insights); merge near-duplicates. Each has a short title "
            'and a one- or two-sentence description. Reply in JSON: {"elements":[{"title":"","description":""}]}'
        ),
        "query": (
            "List the key entities of the question: names, places, dates, titles and specific terms, "
            'no common words. Reply in JSON: {"entities":[""]}'
        ),
        "answer": (
            "Answer the question using only the context. Give a short answer: the exact name, date, "
            "number or phrase, not a sentence. If the context is not enough, answer \"unknown\". List "
            'the ids of the context items you used. Reply in JSON: {"answer":"","citations":["id"]}'
        ),
    },
    "zh": {
        "decompose": (
            "将文本划分为语义单元。每个单元是对一个事件或事实的简短、独立的改写，保留其中的名称、数字和日期。"
            "为每个单元列出实体（按原文写法：人物、地点、机构、作品、日期、事物），以及实体之间的关系"
            "（source、relation、target，source 和 target 来自该单元的实体，relation 为简短短语）。"
            '以 JSON 回答：{"units":[{"text":"","entities":[""],"relations":[{"source":"","relation":"","target":""}]}]}'
        ),
        "attribute": "根据给出的事实概括该实体：其主要属性和最重要的关系，纯文本，不超过200字。只使用给出的事实。",
        "community": (
            "这些文本来自同一聚类。给出其中最重要且互不相同的高层次要素（主题、概念、见解），合并相近的条目。"
            '每条有简短标题和一两句描述。以 JSON 回答：{"elements":[{"title":"","description":""}]}'
        ),
        "query": '列出问题中的关键实体：名称、地点、日期、标题和专有术语，不要常见词。以 JSON 回答：{"entities":[""]}',
        "answer": (
            "只根据上下文回答问题。给出简短答案：确切的名称、日期、数字或短语，不要写成句子。"
            "若上下文信息不足，回答“未知”。列出你使用的上下文条目的 id。"
            '以 JSON 回答：{"answer":"","citations":["id"]}'
        ),
    },
}

#: User-message templates (the variable part, always last).
USER_TEMPLATES: dict[str, dict[str, str]] = {
    "en": {
        "decompose": "{text}",
        "attribute": "Entity: {entity}\nFacts:\n{units}\nRelations:\n{relations}",
        "community": "{texts}",
        "query": "{query}",
        "answer": "Context:\n{context}\nQuestion: {query}",
    },
    "zh": {
        "decompose": "{text}",
        "attribute": "实体：{entity}\n事实：\n{units}\n关系：\n{relations}",
        "community": "{texts}",
        "query": "{query}",
        "answer": "上下文：\n{context}\n问题：{query}",
    },
}


def detect_language(text: str) -> str:
    """Return ``"zh"`` when at least 20% of the letters are CJK ideographs, else ``"en"``
    (the rule of :func:`noderag.lang.detect_language`, which the ``nlp`` decomposer uses per chunk too)."""
    return _detect_language(text)


def _lang(lang: str, sample: str) -> str:
    if lang == "auto":
        return detect_language(sample)
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {LANGS} or 'auto', got {lang!r}")
    return lang


def _req(task: str, lang: str, user: str, schema: dict | None, max_tokens: int | None, seed: int, rid: str | None) -> LLMRequest:
    return LLMRequest(
        messages=[
            {"role": "system", "content": SYSTEM_PROMPTS[lang][task]},
            {"role": "user", "content": user},
        ],
        schema=schema,
        sampling=Sampling(temperature=0.0, max_tokens=max_tokens or MAX_TOKENS[task], seed=seed),
        id=rid,
    )


def _check_text(value: Any, what: str) -> None:
    """A request's main input must be text with something in it (``what``: "function: argument")."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty string")


def _templated(task: str, lang: str, sample: str, schema: dict | None, max_tokens: int | None, seed: int,
               rid: str | None, **fields: str) -> LLMRequest:
    """The request of ``task`` in ``lang`` ("auto": the language of ``sample``): the task's system prompt and its
    user template filled with ``fields``."""
    lg = _lang(lang, sample)
    return _req(task, lg, USER_TEMPLATES[lg][task].format(**fields), schema, max_tokens, seed, rid)


def _bullets(items: Iterable[str]) -> str:
    return "\n".join(f"- {t}" for t in items)


def decompose_request(
    text: str, *, lang: str = "auto", schema: dict | None = None, max_tokens: int | None = None,
    seed: int = 0, id: str | None = None,
) -> LLMRequest:
    """Request decomposing one chunk into semantic units with entities and relations."""
    _check_text(text, "decompose_request: text")
    return _templated("decompose", lang, text, schema or DECOMPOSE_SCHEMA, max_tokens, seed, id, text=text)


def attribute_request(
    entity: str, units: Sequence[str], relations: Sequence[tuple[str, str, str]] = (), *,
    lang: str = "auto", max_tokens: int | None = None, seed: int = 0, id: str | None = None,
) -> LLMRequest:
    """Request a plain-text attribute summary of ``entity`` from its semantic units and relations."""
    _check_text(entity, "attribute_request: entity")
    rels = _bullets(f"{s} | {r} | {t}" for s, r, t in relations) or "-"
    return _templated("attribute", lang, entity + " ".join(units), None, max_tokens, seed, id, entity=entity,
                      units=_bullets(units) or "-", relations=rels)


def community_request(
    texts: Sequence[str], *, lang: str = "auto", schema: dict | None = None, max_tokens: int | None = None,
    seed: int = 0, id: str | None = None,
) -> LLMRequest:
    """Request high-level elements ``{title, description}`` of one community's texts."""
    if not texts:
        raise ValueError("community_request: texts must be non-empty")
    return _templated("community", lang, " ".join(texts[:20]), schema or COMMUNITY_SCHEMA, max_tokens, seed, id,
                      texts=_bullets(texts))


def query_entities_request(
    query: str, *, lang: str = "auto", schema: dict | None = None, max_tokens: int | None = None,
    seed: int = 0, id: str | None = None,
) -> LLMRequest:
    """Request the key entities of a search query."""
    _check_text(query, "query_entities_request: query")
    return _templated("query", lang, query, schema or QUERY_ENTITIES_SCHEMA, max_tokens, seed, id, query=query)


def answer_request(
    query: str, context: Sequence[tuple[str, str]], *, lang: str = "auto", schema: dict | None = None,
    max_tokens: int | None = None, seed: int = 0, id: str | None = None,
) -> LLMRequest:
    """Request an answer citing context ids; ``context`` is a sequence of ``(id, text)`` pairs."""
    _check_text(query, "answer_request: query")
    ctx = "\n".join(f"[{cid}] {text}" for cid, text in context) or "-"
    return _templated("answer", lang, query, schema or ANSWER_SCHEMA, max_tokens, seed, id, context=ctx, query=query)
