"""LLM decomposer: one schema-constrained call per chunk through an LLM backend.

Invalid output is retried by the backend (``max_validation_retries``) and then
once more here with another seed; a chunk that still fails becomes a
``ChunkDecomposition`` with ``error`` set, which the pipeline records in the
manifest and reports (it is never silently dropped).
"""

from __future__ import annotations

from typing import Any, Sequence

from .base import ChunkDecomposition, ChunkInput, Unit

__all__ = ["LLMDecomposer", "parse_decomposition"]


def parse_decomposition(chunk_id: int, value: Any) -> ChunkDecomposition:
    """Turn a validated JSON reply into a decomposition; raises ``ValueError`` on a malformed one."""
    if not isinstance(value, dict) or not isinstance(value.get("units"), list):
        raise ValueError("reply must be an object with a 'units' list")
    units: list[Unit] = []
    for i, u in enumerate(value["units"]):
        if not isinstance(u, dict) or not isinstance(u.get("text"), str):
            raise ValueError(f"units[{i}] must be an object with a string 'text'")
        text = u["text"].strip()
        if not text:
            continue
        ents = [e.strip() for e in u.get("entities") or [] if isinstance(e, str) and e.strip()]
        rels = []
        for r in u.get("relations") or []:
            if isinstance(r, dict):
                s, rel, t = r.get("source"), r.get("relation"), r.get("target")
            elif isinstance(r, (list, tuple)) and len(r) == 3:
                s, rel, t = r
            else:
                continue
            if all(isinstance(x, str) and x.strip() for x in (s, rel, t)):
                rels.append((s.strip(), rel.strip(), t.strip()))
        units.append(Unit(text, ents, rels))
    return ChunkDecomposition(chunk_id, units, None)


class LLMDecomposer:
    """Structured-output decomposer over any backend with ``run(requests, stage=...)``.

    Parameters
    ----------
    llm : LLM backend (``noderag.llm`` protocol)
    config : DecomposeConfig
    seed : int
    """

    name = "llm"

    def __init__(self, llm, config, seed: int = 0) -> None:
        from ...llm.prompts import decompose_schema

        self.llm = llm
        self.config = config
        self.seed = seed
        self.schema = decompose_schema(config.max_units, config.max_entities, config.max_relations)

    def _requests(self, chunks: Sequence[ChunkInput], attempt: int):
        from ...llm.prompts import decompose_request

        out = []
        for c in chunks:
            text = c.text if not c.title else f"{c.title}\n\n{c.text}"
            out.append(decompose_request(text, schema=self.schema, seed=self.seed + attempt, id=f"chunk-{c.chunk_id}"))
        return out

    def decompose(self, chunks: Sequence[ChunkInput]) -> list[ChunkDecomposition]:
        """One call per chunk; failing chunks are retried ``config.max_retries`` times with new seeds."""
        results: dict[int, ChunkDecomposition] = {}
        pending = list(chunks)
        errors: dict[int, str] = {}
        for attempt in range(self.config.max_retries + 1):
            if not pending:
                break
            replies = self.llm.run(self._requests(pending, attempt), stage="decompose")
            if len(replies) != len(pending):
                raise RuntimeError(f"LLM backend returned {len(replies)} results for {len(pending)} requests")
            retry = []
            for c, res in zip(pending, replies):
                if res.error is not None:
                    errors[c.chunk_id] = str(res.error)
                    retry.append(c)
                    continue
                try:
                    dec = parse_decomposition(c.chunk_id, res.value)
                except ValueError as exc:
                    errors[c.chunk_id] = f"invalid decomposition: {exc}"
                    retry.append(c)
                    continue
                if c.title and self.config.title_entity:
                    from .nlp import title_aliases

                    for u in dec.units:
                        for name in [c.title, *title_aliases(c.title)]:
                            if name.casefold() not in (e.casefold() for e in u.entities):
                                u.entities.append(name)
                results[c.chunk_id] = dec
                errors.pop(c.chunk_id, None)
            pending = retry
        for c in pending:
            results[c.chunk_id] = ChunkDecomposition(c.chunk_id, [], errors.get(c.chunk_id, "unknown error"))
        return [results[c.chunk_id] for c in chunks]
