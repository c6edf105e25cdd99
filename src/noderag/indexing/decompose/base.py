"""Decomposition records and the decomposer protocol (chunk -> semantic units, entities, relations)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

from ...errors import NodeRAGError

__all__ = ["Unit", "ChunkDecomposition", "ChunkInput", "Decomposer", "DecomposeFailure"]


@dataclass(frozen=True)
class ChunkInput:
    """What a decomposer sees of one chunk: its id, text and the passage title (if any)."""

    chunk_id: int
    text: str
    title: str | None = None


@dataclass
class Unit:
    """One semantic unit.

    Attributes
    ----------
    text : str
        The unit's text (an independent statement).
    entities : list of str
        Surface forms of the entities it mentions, one item per mention.
    relations : list of (source, relation, target)
        Relationships stated in it, between entity surface forms.
    """

    text: str
    entities: list[str] = field(default_factory=list)
    relations: list[tuple[str, str, str]] = field(default_factory=list)


@dataclass
class ChunkDecomposition:
    """Units of one chunk, or the error that prevented decomposing it."""

    chunk_id: int
    units: list[Unit] = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> str:
        """One JSON line (the journal format)."""
        return json.dumps({
            "chunk_id": self.chunk_id,
            "units": [{"text": u.text, "entities": u.entities, "relations": [list(r) for r in u.relations]}
                      for u in self.units],
            "error": self.error,
        }, ensure_ascii=False, separators=(",", ":"))

    def recorded_units(self) -> list[Unit]:
        """The units as :meth:`from_obj` reads them back from :meth:`to_json` (strings, triples only)."""
        return [Unit(str(u.text), [str(e) for e in u.entities], [tuple(str(x) for x in r) for r in u.relations
                                                                  if len(r) == 3]) for u in self.units]

    @classmethod
    def from_obj(cls, obj: Any) -> "ChunkDecomposition":
        """Parse one journal record (a dict); raises ``ValueError`` on a malformed one."""
        if not isinstance(obj, dict) or not isinstance(obj.get("chunk_id"), int):
            raise ValueError("record must be an object with an int 'chunk_id'")
        units = []
        for u in obj.get("units") or []:
            rels = [tuple(str(x) for x in r) for r in u.get("relations", []) if len(r) == 3]
            units.append(Unit(str(u["text"]), [str(e) for e in u.get("entities", [])], rels))
        err = obj.get("error")
        return cls(int(obj["chunk_id"]), units, None if err is None else str(err))


class DecomposeFailure(NodeRAGError, RuntimeError):
    """Chunks failed to decompose after retries; ``failures`` maps chunk id to the error."""

    def __init__(self, failures: dict[int, str]):
        self.failures = dict(failures)
        items = ", ".join(f"chunk {k}: {v}" for k, v in list(self.failures.items())[:5])
        more = "" if len(self.failures) <= 5 else f" (+{len(self.failures) - 5} more)"
        super().__init__(f"{len(self.failures)} chunk(s) failed to decompose: {items}{more}")


@runtime_checkable
class Decomposer(Protocol):
    """Turns chunks into semantic units; one result per input, in input order."""

    name: str

    def decompose(self, chunks: Sequence[ChunkInput]) -> list[ChunkDecomposition]:
        ...
