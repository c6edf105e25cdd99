"""Aliases of a segmented generation: the nodes of later segments whose content key an earlier segment holds.

A segment-parallel build (:mod:`noderag.indexing.segmented`) builds each part of the corpus into a complete
segment of its own, so an entity or relationship that several parts mention is a node in each of them. The
generation lists each such duplicate once, beside the node that stands for all of them (its canonical node: the
one of the earliest segment, the lowest id), in ``aliases/dup.npy`` and ``aliases/canon.npy`` (int64, sorted
by duplicate id). Readers apply the table where the segments are joined: the duplicates' edges end at their
canonical node instead (:func:`noderag.store.segments.segmented_graph`: PPR walks across segments through it as
through one node), a name lookup answers the canonical node, and the duplicates are inactive to a query.

The table is a merge of each segment's sorted keys against the keys of the segments before it: the driver
holds one sorted key array of the distinct keys (16 bytes a distinct node), never a hash map.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import IndexDamagedError

__all__ = ["ALIASES", "Aliases", "merge_keys", "write_aliases", "read_aliases", "has_aliases"]

ALIASES = "aliases"  # the folder of a generation's alias table (dup.npy, canon.npy)


class Aliases:
    """A duplicate -> canonical node id map (sorted duplicate ids); ids that are no duplicate map to themselves."""

    def __init__(self, dup: np.ndarray, canon: np.ndarray) -> None:
        self.dup = np.asarray(dup, dtype=np.int64)
        self.canon = np.asarray(canon, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.dup.shape[0])

    def resolve(self, ids) -> np.ndarray:
        """The canonical id of each of ``ids`` (int64, same shape)."""
        ids = np.asarray(ids, dtype=np.int64)
        if not self.dup.size or not ids.size:
            return ids
        pos = np.minimum(np.searchsorted(self.dup, ids), self.dup.shape[0] - 1)
        hit = self.dup[pos] == ids
        return np.where(hit, self.canon[pos], ids)

    def where(self, keep: np.ndarray) -> "Aliases":
        """The entries ``keep`` (a boolean mask over the entries) only."""
        return Aliases(self.dup[keep], self.canon[keep])

    def resolve_list(self, ids: list[int]) -> list[int]:
        """:meth:`resolve` of a list, each canonical id once, in first-seen order."""
        return list(dict.fromkeys(self.resolve(np.asarray(ids, dtype=np.int64)).tolist())) if ids else []


def merge_keys(segments: list[tuple[int, np.ndarray]]) -> Aliases:
    """The alias table of segments given as (first node id, keys in node order), in id order.

    Each segment's keys are sorted once and merged against the sorted distinct keys of the segments before
    it; a key found there makes the node a duplicate of the node that brought it first.
    """
    known_keys = np.zeros(0, dtype=np.uint64)
    known_ids = np.zeros(0, dtype=np.int64)
    dups, canons = [], []
    for first, keys in segments:
        keys = np.asarray(keys, dtype=np.uint64)
        order = np.argsort(keys, kind="stable")
        sk, ids = keys[order], first + order.astype(np.int64)
        if known_keys.size:
            pos = np.minimum(np.searchsorted(known_keys, sk), known_keys.shape[0] - 1)
            hit = known_keys[pos] == sk
        else:
            pos, hit = np.zeros(sk.shape[0], np.int64), np.zeros(sk.shape[0], bool)
        dups.append(ids[hit])
        canons.append(known_ids[pos[hit]])
        new_k, first_at = np.unique(sk[~hit], return_index=True)  # a key twice in one segment: its first node
        new_ids = ids[~hit][first_at]
        at = np.searchsorted(known_keys, new_k)
        known_keys = np.insert(known_keys, at, new_k)
        known_ids = np.insert(known_ids, at, new_ids)
    dup = np.concatenate(dups) if dups else np.zeros(0, np.int64)
    canon = np.concatenate(canons) if canons else np.zeros(0, np.int64)
    order = np.argsort(dup, kind="stable")
    return Aliases(dup[order], canon[order])


def write_aliases(folder: Path, aliases: Aliases) -> None:
    """Write the alias table into the generation folder ``folder``."""
    from ..graph.storage import atomic_save_npy

    (folder / ALIASES).mkdir(parents=True, exist_ok=True)
    atomic_save_npy(folder / ALIASES / "dup.npy", aliases.dup)
    atomic_save_npy(folder / ALIASES / "canon.npy", aliases.canon)


def has_aliases(folder: Path) -> bool:
    """Whether the generation folder ``folder`` lists duplicate nodes (a recompute must then re-assemble its
    documents, which makes each key one node again)."""
    if not (folder / ALIASES / "dup.npy").is_file():
        return False
    aliases = read_aliases(folder)  # read (and checked) once
    return aliases is not None and len(aliases) > 0


def read_aliases(folder: Path, n: int | None = None) -> Aliases | None:
    """The alias table of the generation folder ``folder`` (None when it has none), checked: duplicate ids
    increasing, each canonical id lower than its duplicate, all below ``n`` when given."""
    from ..graph.storage import load_npy

    sub = folder / ALIASES
    if not sub.is_dir():
        return None
    try:
        dup = np.asarray(load_npy(sub / "dup.npy", False, dtype=np.int64, ndim=1))
        canon = np.asarray(load_npy(sub / "canon.npy", False, dtype=np.int64, ndim=1, shape=dup.shape))
    except (ValueError, OSError) as exc:
        raise IndexDamagedError(folder, f"{ALIASES}/", "unreadable array", str(exc)[:200]) from None
    if dup.size and (bool(np.any(dup[1:] <= dup[:-1])) or bool(np.any(canon >= dup)) or int(canon.min()) < 0
                     or (n is not None and int(dup[-1]) >= n)):
        raise IndexDamagedError(folder, f"{ALIASES}/dup.npy", "invalid node ids",
                                "duplicate ids must increase, each above its canonical id and below the node count")
    return Aliases(dup, canon)
