"""What a run is, resolved once before its first stage: the run kind (a type each) and the immutable plan.

:func:`noderag.indexing.run.start_run` reads the previous generation, the configuration, the inputs and the
deletion and decides which kind of run this is; the driver's stages then read the plan (never the caller's
arguments) and branch on the kind's type and the few facts it carries, not on flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Union

__all__ = ["FreshBuild", "Recompute", "Compaction", "DeltaInsert", "Scrub", "RunKind", "RunPlan"]


@dataclass(frozen=True)
class FreshBuild:
    """The first build of an index: every stage over the new documents."""

    reassembles = False  # there are no older documents to re-assemble
    reads_old_vectors = False


@dataclass(frozen=True)
class Recompute:
    """An insert, replacement or delete that recomputes every stage over the whole index (``reason``: why not a
    delta segment). A delete or replacement re-assembles the surviving documents first."""

    reason: str
    reassembles: bool = False  # documents were deleted or replaced: node ids are renumbered
    reads_old_vectors = True


@dataclass(frozen=True)
class Compaction:
    """``noderag compact``: "merge" recomputes every global stage over every segment into one; "full" also
    re-assembles every document in its original order and embeds every vector again, as a fresh build does."""

    mode: str  # "merge" or "full"
    reads_old_vectors = True

    @property
    def reassembles(self) -> bool:
        return self.mode == "full"


@dataclass(frozen=True)
class DeltaInsert:
    """New documents added as a delta segment beside the shared segments (:mod:`noderag.indexing.update.delta`).

    ``segments``: the query tables of the segments it builds on. A delete inside the deltas is one too: the
    deltas from ``rewrites`` on are re-assembled into one new delta whose first node is ``delta_from``.
    """

    segments: tuple = ()
    delta_from: int | None = None
    rewrites: int | None = None
    reassembles = False

    @property
    def reads_old_vectors(self) -> bool:
        """Only a rewrite reuses stored vectors (of the re-assembled nodes); an insert's old nodes keep theirs."""
        return self.delta_from is not None


@dataclass(frozen=True)
class Scrub:
    """A delete of base documents in place (:mod:`noderag.indexing.update.scrub`); ``then_insert``: a
    replacement, whose new versions are inserted by a second run once the old ones are scrubbed."""

    then_insert: bool = False


RunKind = Union[FreshBuild, Recompute, Compaction, DeltaInsert, Scrub]


@dataclass(frozen=True)
class RunPlan:
    """Everything a run's stages read and nobody changes: where, with what, on what, and of which kind."""

    root: Path
    config: Any  # NodeRAGConfig, reconciled with the index's own (NodeRAGConfig.for_run)
    previous: Any  # the previous generation (noderag.indexing.previous.Previous), or None
    kind: RunKind
    run_id: str
    say: Callable[[str], None]
    drop: tuple[int, ...] = ()  # doc ids deleted or replaced
    n_new: int = 0  # new documents
    duplicates: int = 0  # input documents skipped (already indexed)
    ingest_s: float = 0.0
    first_document: int = 0  # the id of the run's first new (or re-assembled) document
    language: dict | None = None  # what embed.spec "auto" saw of the corpus
    llm: Any = None  # the caller's LLM (backend or spec), or None
    embedder: Any = None  # the caller's embedder, or None
    allow_failures: bool = False

    @property
    def stages(self) -> Path:
        return self.root / "stages"

    @property
    def final(self) -> Path:
        return self.stages / "final"

    @property
    def compaction(self) -> str | None:
        """"merge" or "full" for a compaction, else None (the manifest's run record)."""
        return self.kind.mode if isinstance(self.kind, Compaction) else None
