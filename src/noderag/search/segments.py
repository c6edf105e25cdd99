"""The query tables of a segmented generation (a base and delta segments) behind one interface.

Each segment has its own memory-mapped ``query/`` tables (:class:`~noderag.search.query_index.QueryIndex`)
over a contiguous range of node ids. :class:`SegmentedTables` answers what the searcher asks of one
``QueryIndex``: the per-node columns (concatenated once at open: 17 bytes a node), texts, labels,
names (looked up in each segment, see :class:`SegmentedNames`) and BM25 postings (each segment's
impacts are on the scale of the whole index, see :class:`SegmentedLexical`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .entities import _NameMatching
from .lexical import top_scored

__all__ = ["SegmentedTables", "SegmentedNames", "SegmentedLexical"]


class SegmentedNames(_NameMatching):
    """Name look-ups over every segment's name tables: each segment holds the names its nodes brought.

    A name is in one segment only (an insert merges a known name into the node that has it), so
    exact and phrase look-ups are unions. Containment lists a segment's hits after the earlier
    segments' (shortest names first within a segment), and spans found in a query are resolved
    longest-first within each segment; compaction makes both exact again.
    """

    def __init__(self, parts: Sequence[_NameMatching]) -> None:
        self.parts = list(parts)
        self.max_tokens = max((p.max_tokens for p in self.parts), default=0)

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def exact(self, entity: str) -> list[int]:
        return [nid for p in self.parts for nid in p.exact(entity)]

    def containing(self, entity: str, limit: int) -> list[int]:
        out: list[int] = []
        for p in self.parts:
            if len(out) >= limit:
                break
            out.extend(p.containing(entity, limit - len(out)))
        return out

    def in_text(self, text: str) -> list[tuple[int, str]]:
        return [hit for p in self.parts for hit in p.in_text(text)]


class SegmentedLexical:
    """BM25 over every segment's postings: a passage's score comes from the segment that holds it."""

    def __init__(self, parts: Sequence, starts: np.ndarray) -> None:
        self.parts = list(parts)
        self._starts = np.asarray(starts, dtype=np.int64)

    @property
    def max_postings(self) -> int:
        return self.parts[0].max_postings

    @max_postings.setter
    def max_postings(self, value: int) -> None:
        for p in self.parts:
            p.max_postings = int(value)

    @property
    def n_terms(self) -> int:
        return sum(p.n_terms for p in self.parts)

    def bind_passages(self, ids: np.ndarray) -> None:
        """Give each segment the passage ids of its own range."""
        ids = np.asarray(ids, dtype=np.int64)
        bounds = np.searchsorted(ids, self._starts[1:])
        for p, part in zip(self.parts, np.split(ids, bounds)):
            p.bind_passages(part)

    def document_frequencies(self, hashes: np.ndarray) -> np.ndarray:
        return sum((p.document_frequencies(hashes) for p in self.parts), np.zeros(len(hashes), np.int64))

    def scores(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """(node ids ascending, BM25 scores) of every passage sharing a term with ``query``, all segments."""
        got = [p.scores(query) for p in self.parts]
        return np.concatenate([g[0] for g in got]), np.concatenate([g[1] for g in got])

    def search(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        return top_scored(*self.scores(query), k)


class SegmentedTables:
    """The query tables of every segment of a generation, answering as one :class:`QueryIndex` does."""

    def __init__(self, parts: Sequence) -> None:
        self.parts = list(parts)
        self._starts = np.asarray([p.first for p in self.parts], dtype=np.int64)
        end = 0
        for p in self.parts:
            if p.first != end:
                raise ValueError(f"{p.folder}: its nodes start at {p.first}, the segments before end at {end}")
            end += p.n
        self.n = end
        self.first = 0
        self.chunk = np.concatenate([np.asarray(p.chunk) for p in self.parts])
        self.doc = np.concatenate([np.asarray(p.doc) for p in self.parts])
        self.active = np.concatenate([np.asarray(p.active) for p in self.parts])
        self.names = SegmentedNames([p.names for p in self.parts])
        lex = [p.lexical for p in self.parts]
        self.lexical = SegmentedLexical(lex, self._starts) if all(x is not None for x in lex) else None

    def _part_of(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._starts, ids, side="right") - 1

    def texts(self, ids) -> list[str]:
        """Display texts of some nodes, each read from its own segment."""
        ids = np.asarray([int(i) for i in ids], dtype=np.int64)
        out: list[str] = [""] * ids.shape[0]
        which = self._part_of(ids)
        for k in np.unique(which).tolist():
            pos = np.flatnonzero(which == k)
            for j, text in zip(pos.tolist(), self.parts[k].texts(ids[pos])):
                out[j] = text
        return out

    def label(self, node: int) -> str | None:
        if not 0 <= node < self.n:
            return None
        return self.parts[int(self._part_of(np.asarray([node]))[0])].label(node)

    def doc_label(self, doc: int) -> str:
        for p in self.parts:
            ids = p._a["doclabel_id"]
            pos = int(np.searchsorted(ids, doc))
            if pos < ids.shape[0] and int(ids[pos]) == doc:
                return p._text("doclabel", pos)
        return f"doc:{doc}"
