"""Segments of a generation: the base at the top of its folder, and the delta segments inserts add.

A generation folder holds its base segment (the files :mod:`noderag.store.layout` names) and,
after inserts that ran as deltas, delta segments under ``deltas/<name>/``. A delta is a small
index of what one insert added: the rows of its nodes and documents, their decompositions, the
structural edges it brought (global node ids; an edge may end at an older node), its name links,
its vectors (an HNSW shard of its own) and its query tables. Node and document ids are global and
contiguous: the base holds nodes ``[0, n0)``, each delta the next range.

An insert's new generation shares every file of the previous one as a hard link (the same bytes on
disk, never copied) and adds one delta folder and a new manifest. The checksums of shared files are
carried over (same inode, same bytes), so a commit reads and writes only the delta. The removal
rule stays per generation: a shared file lives while any generation links it.

Manifest entry ``deltas``: a list, oldest first, of ``{"name", "first_node", "nodes",
"first_document", "documents"}``; absent (or empty) for a compacted index, whose folder is exactly
what a fresh build writes.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .aliases import ALIASES, Aliases, read_aliases, write_aliases
from .errors import IndexDamagedError, fd_exhaustion
from .layout import DELTAS, MANIFEST, READERS

__all__ = ["Delta", "deltas_of", "segment_folders", "share_generation", "next_delta_name", "delta_entry",
           "concat_npy", "concat_parquet", "has_scrubbed", "scrubbed_overlay", "without_nodes", "base_graph",
           "generation_graph", "base_keys", "tombstoned_keys"]


@dataclass(frozen=True)
class Delta:
    """One delta segment as the manifest lists it: its folder name and its node and document id ranges."""

    name: str
    first_node: int
    nodes: int
    first_document: int
    documents: int

    @property
    def end_node(self) -> int:
        return self.first_node + self.nodes


def deltas_of(manifest: dict[str, Any], where: Path) -> list[Delta]:
    """The delta segments of a generation (oldest first), checked to continue each other's id ranges."""
    raw = manifest.get(DELTAS) or []
    if not isinstance(raw, list):
        raise IndexDamagedError(where, MANIFEST, "damaged field", f"{DELTAS} must be a list")
    out: list[Delta] = []
    for i, entry in enumerate(raw):
        try:
            d = Delta(**entry)
        except TypeError as exc:
            raise IndexDamagedError(where, MANIFEST, "damaged field", f"{DELTAS}[{i}]: {exc}") from None
        ints = (d.first_node, d.nodes, d.first_document, d.documents)
        if not isinstance(d.name, str) or not d.name.isdigit() or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in ints):
            raise IndexDamagedError(where, MANIFEST, "damaged field", f"{DELTAS}[{i}] = {entry!r}")
        if out and (d.first_node != out[-1].end_node
                    or d.first_document != out[-1].first_document + out[-1].documents):
            raise IndexDamagedError(where, MANIFEST, "damaged field",
                                    f"{DELTAS}[{i}] does not continue the id ranges of {DELTAS}[{i - 1}]")
        out.append(d)
    return out


def delta_entry(d: Delta) -> dict[str, Any]:
    """The manifest entry of one delta."""
    return asdict(d)


def segment_folders(path: Path, manifest: dict[str, Any]) -> list[Path]:
    """The folders of a generation's segments, base first."""
    return [path] + [path / DELTAS / d.name for d in deltas_of(manifest, path)]


def next_delta_name(deltas: list[Delta]) -> str:
    """A folder name no delta of the generation uses (names only grow, so a shared folder keeps its own)."""
    return str(max((int(d.name) for d in deltas), default=0) + 1)


def share_generation(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> tuple[list[str], int]:
    """Hard-link every index file of the generation folder ``src`` into ``dst`` (not its manifest or readers' lock,
    nor the files under the ``skip`` prefixes: the delta segments a delete rewrites).

    Returns (relative paths shared, bytes copied): a file system without hard links between these
    folders gets copies instead, and the bytes say what that cost.
    """
    from ..graph.storage import tree_files

    shared: list[str] = []
    copied = 0
    made: set[str] = set()  # folders of dst made so far (one mkdir per folder, not per file)
    src_s, dst_s = os.fspath(src), os.fspath(dst)
    for rel in tree_files(src):
        if rel in (MANIFEST, READERS) or (skip and rel.startswith(skip)):
            continue
        folder = rel.rpartition("/")[0]
        if folder not in made:
            os.makedirs(os.path.join(dst_s, folder), exist_ok=True)
            made.add(folder)
        source, target = os.path.join(src_s, rel), os.path.join(dst_s, rel)
        try:
            os.link(source, target)
        except OSError:  # EXDEV, EPERM (no hard links here): a copy keeps the generation complete
            shutil.copyfile(source, target)
            copied += os.stat(target).st_size
        shared.append(rel)
    if skip and (src / ALIASES).is_dir():
        shared = _trim_aliases(src, dst, skip, shared)
    return shared, copied


def _trim_aliases(src: Path, dst: Path, skip: tuple[str, ...], shared: list[str]) -> list[str]:
    """A delete that rewrites delta segments (the ``skip`` prefixes) re-assembles their nodes onto the segments
    before them, merged by key: the alias entries of their old nodes go (written anew, no longer shared)."""
    from .manifest import read_manifest

    gone = [d.first_node for d in deltas_of(read_manifest(src) or {}, src) if f"{DELTAS}/{d.name}/" in skip]
    table = read_aliases(src)
    if not gone or table is None:
        return shared
    keep = table.dup < min(gone)
    for name in ("dup.npy", "canon.npy"):
        os.unlink(dst / ALIASES / name)
    write_aliases(dst, Aliases(table.dup[keep], table.canon[keep]))
    return [rel for rel in shared if not rel.startswith(f"{ALIASES}/")]


def concat_npy(folders: list[Path], name: str, dtype) -> np.ndarray:
    """One ``.npy`` array of every segment, concatenated (memory-mapped when there is only the base)."""
    from ..graph.storage import load_npy

    parts = [np.asarray(load_npy(f / name, True, dtype=dtype, ndim=1, shape=None)) for f in folders]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def concat_parquet(folders: list[Path], name: str, columns=None):
    """One Parquet table of every segment, concatenated (the base's rows first; no copy of the data)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    # ParquetFile, not read_table: the latter loads pyarrow.dataset (and pandas), ~0.5 s a process
    tables = [pq.ParquetFile(f / name, memory_map=True).read(columns=columns) for f in folders]
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="default")


def delta_edges(folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, w) of the structural edges a delta segment brought (each undirected edge once)."""
    from ..graph.storage import load_npy
    from .layout import DELTA_EDGES

    sub = folder / DELTA_EDGES
    src = np.asarray(load_npy(sub / "src.npy", True, dtype=np.int64, ndim=1, shape=None))
    dst = np.asarray(load_npy(sub / "dst.npy", True, dtype=np.int64, ndim=1, shape=src.shape))
    w = np.asarray(load_npy(sub / "w.npy", True, dtype=np.float32, ndim=1, shape=src.shape))
    return src, dst, w


def scrubbed_mask(path: Path, types: np.ndarray) -> np.ndarray | None:
    """The base's nodes a scrubbing delete made inactive (:mod:`noderag.indexing.update.scrub`: inactive T/S/N/R nodes;
    A/H/O nodes retired by inserts keep their edges), or None when there are none. Their edges are gone from
    the base; a delta segment's edges and name links that end at them are dropped where the segments are joined."""
    from ..graph.storage import load_npy
    from .layout import QUERY_DIR

    at = path / QUERY_DIR / "active.npy"
    if not at.is_file():
        return None
    active = np.asarray(load_npy(at, True, dtype=np.bool_, ndim=1, shape=(types.shape[0],)))
    mask = ~active & (np.asarray(types) <= 3)
    return mask if mask.any() else None


def _padded(csr, n: int):
    """``csr`` over ``n >= csr.n`` nodes (the new nodes have no edges in it), as a scipy matrix."""
    import scipy.sparse as sp

    indptr = np.asarray(csr.indptr, dtype=np.int64)
    if n > csr.n:
        indptr = np.concatenate([indptr, np.full(n - csr.n, indptr[-1], np.int64)])
    return sp.csr_array((np.asarray(csr.weights), np.asarray(csr.indices), indptr), shape=(n, n))


def has_scrubbed(manifest: dict[str, Any]) -> bool:
    """Whether a scrubbing delete made nodes of the generation's base inactive (its manifest counts them)."""
    return bool((manifest.get("counts") or {}).get("scrubbed_nodes"))


def scrubbed_overlay(path: Path, n: int) -> np.ndarray | None:
    """The ids in the generation's ``scrubbed.npy`` (None when it has none): the base's nodes deleted in place
    (:mod:`noderag.indexing.update.scrub`) whose edges the base's graph files, whose labels ``communities.npy`` and
    whose keys ``node_keys.npy`` still hold, shared as they are; :func:`base_graph` leaves those edges out and
    gives them their tombstone keys (``scrubbed_keys.npy``)."""
    from ..graph.storage import load_npy
    from .layout import SCRUBBED

    at = path / SCRUBBED
    if not at.is_file():
        return None
    try:
        ids = np.asarray(load_npy(at, False, dtype=np.int64, ndim=1))
    except ValueError as exc:
        raise IndexDamagedError(path, SCRUBBED, "unreadable array", str(exc)[:200]) from None
    if ids.size and (int(ids[0]) < 0 or int(ids[-1]) >= n or bool(np.any(ids[1:] <= ids[:-1]))):
        raise IndexDamagedError(path, SCRUBBED, "invalid node ids", f"not increasing node ids below {n}")
    return ids


def tombstoned_keys(path: Path, keys: np.ndarray) -> np.ndarray:
    """The base's node ``keys`` (as stored) with the tombstones of the nodes a delete in place scrubbed
    (``scrubbed_keys.npy``): a copy where there are any, else ``keys`` itself."""
    from ..graph.keys import KEY_DTYPE
    from ..graph.storage import load_npy
    from .layout import SCRUBBED_KEYS

    ids = scrubbed_overlay(path, keys.shape[0])
    if ids is None or not ids.size:
        return keys
    try:
        tomb = np.asarray(load_npy(path / SCRUBBED_KEYS, False, dtype=KEY_DTYPE, shape=ids.shape))
    except (ValueError, FileNotFoundError) as exc:
        raise IndexDamagedError(path, SCRUBBED_KEYS, "unreadable array", str(exc)[:200]) from None
    out = np.array(keys, dtype=KEY_DTYPE)
    out[ids] = tomb
    return out


def base_keys(path: Path, n: int | None = None) -> np.ndarray:
    """The keys of a generation's base as a delete in place left them (:func:`tombstoned_keys`)."""
    from ..graph.keys import KEY_DTYPE
    from ..graph.storage import load_npy
    from .layout import NODE_KEYS

    keys = np.asarray(load_npy(path / NODE_KEYS, True, dtype=KEY_DTYPE, ndim=1, shape=None if n is None else (n,)))
    return tombstoned_keys(path, keys)


def without_nodes(csr, ids: np.ndarray):
    """``csr`` without the entries in the rows or columns ``ids`` (sorted node ids): (indptr, indices, weights).

    Only the rows of ``ids`` and of their neighbours are looked at; the kept entries are one copy of the arrays.
    """
    indptr = np.asarray(csr.indptr, dtype=np.int64)
    indices = np.asarray(csr.indices, dtype=np.int32)
    weights = np.asarray(csr.weights, dtype=np.float32)
    n = indptr.shape[0] - 1
    dead = np.zeros(n, dtype=bool)
    dead[ids] = True

    def entries(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # (row, position) of every entry of rows
        lens = indptr[rows + 1] - indptr[rows]
        first = np.repeat(indptr[rows] - np.cumsum(lens) + lens, lens)
        return np.repeat(rows, lens), first + np.arange(int(lens.sum()), dtype=np.int64)

    _, at = entries(np.asarray(ids, dtype=np.int64))
    rows = np.unique(np.concatenate([np.asarray(ids, dtype=np.int64), indices[at].astype(np.int64)]))
    row_of, at = entries(rows)
    drop = at[dead[row_of] | dead[indices[at]]]
    if not drop.size:
        return indptr, indices, weights
    keep = np.ones(indices.shape[0], dtype=bool)
    keep[drop] = False
    lens = np.diff(indptr)
    lens -= np.bincount(np.searchsorted(indptr, drop, side="right") - 1, minlength=n)
    new_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=new_ptr[1:])
    return new_ptr, indices[keep], weights[keep]


def base_graph(path: Path, *, validate: bool = True):
    """The graph of a generation's base: memory-mapped, or after a delete in place (:func:`scrubbed_overlay`) a
    copy of its edge arrays without the scrubbed nodes' edges."""
    from ..graph.csr import CSR
    from ..graph.hetero import HeteroGraph

    base = HeteroGraph.load(path, mmap=True, validate=validate)
    ids = scrubbed_overlay(path, base.n)
    if ids is None or not ids.size:
        return base
    return base.with_layers(CSR(*without_nodes(base.structural, ids)), CSR(*without_nodes(base.semantic, ids)),
                            keys=tombstoned_keys(path, np.asarray(base.keys)))


def generation_graph(path: Path, manifest: dict[str, Any], *, validate: bool = True):
    """The graph of the generation at ``path``: its base (:func:`base_graph`) and, when it has any, its deltas'
    edges (:func:`segmented_graph`)."""
    deltas = deltas_of(manifest, path)
    if deltas:
        return segmented_graph(path, deltas, validate=validate, scrubbed=has_scrubbed(manifest))
    return base_graph(path, validate=validate)


def segmented_graph(path: Path, deltas: list[Delta], *, validate: bool = True, scrubbed: bool = False):
    """The graph of a generation with delta segments: the base's layers over every node, plus each delta's edges
    (``scrubbed``: :func:`has_scrubbed`; the deltas' edges to scrubbed nodes are left out). The edges of a
    segmented build's duplicate nodes end at their canonical node (:mod:`noderag.store.aliases`).

    One copy of the base's edge arrays at open, the deltas' edges spliced in (:func:`with_edges`); a
    compacted generation opens its graph memory-mapped instead.
    """
    from ..graph.csr import CSR
    from ..graph.hetero import HeteroGraph
    from ..graph.keys import KEY_DTYPE
    from ..graph.types import TYPE_DTYPE
    from .layout import NODE_KEYS, NODE_TYPES

    base = base_graph(path, validate=validate)
    types = np.concatenate([np.asarray(base.types)] + [_delta_array(path, d, NODE_TYPES, TYPE_DTYPE) for d in deltas])
    keys = np.concatenate([np.asarray(base.keys)] + [_delta_array(path, d, NODE_KEYS, KEY_DTYPE) for d in deltas])
    n = int(types.shape[0])
    if n != (deltas[-1].end_node if deltas else base.n):
        raise IndexDamagedError(path, MANIFEST, "damaged field", f"{DELTAS} end at node {deltas[-1].end_node}, "
                                f"the segments hold {n} nodes")
    parts = [_checked_delta_edges(path, d, n) for d in deltas]
    src = np.concatenate([p[0] for p in parts])
    dst = np.concatenate([p[1] for p in parts])
    w = np.concatenate([p[2] for p in parts])
    if scrubbed and src.size:
        keep = without_scrubbed(path, np.asarray(base.types), src, dst)
        src, dst, w = src[keep], dst[keep], w[keep]
    aliases = live_aliases(path, read_aliases(path, n), np.asarray(base.types)) if scrubbed else read_aliases(path, n)
    if aliases is not None and len(aliases) and src.size:  # a segmented build's duplicates: one node each
        src, dst = aliases.resolve(src), aliases.resolve(dst)
        keep = src != dst
        src, dst, w = src[keep], dst[keep], w[keep]
    structural = CSR(*with_edges(base.structural, n, src, dst, w))
    semantic = _padded(base.semantic, n)
    semantic_csr = CSR(semantic.indptr.astype(np.int64), np.asarray(semantic.indices, dtype=np.int32),
                       np.asarray(semantic.data, dtype=np.float32))
    return HeteroGraph(types.astype(TYPE_DTYPE), keys.astype(KEY_DTYPE), structural, semantic_csr)


@contextmanager
def _named(path: Path, rel: str):
    """A loader's error on the file ``rel`` of the generation at ``path`` as :class:`IndexDamagedError` naming it
    (running out of file descriptors stays that: :func:`~noderag.store.errors.fd_exhaustion`)."""
    try:
        yield
    except (ValueError, OSError, IndexError) as exc:
        if isinstance(exc, (IndexDamagedError, FileNotFoundError)):
            raise
        found = fd_exhaustion(exc, path, rel)
        if found is not None:
            raise found from None
        raise IndexDamagedError(path, rel, "unreadable array", f"{type(exc).__name__}: {exc}"[:200]) from None


def _delta_array(path: Path, d: Delta, name: str, dtype) -> np.ndarray:
    """One array of delta ``d`` of the generation at ``path`` (node types checked to be known types), its
    damage named as the delta's file (``deltas/1/node_types.npy``), not the base's."""
    from .layout import NODE_TYPES

    rel = f"{DELTAS}/{d.name}/{name}"
    with _named(path, rel):
        arr = concat_npy([path / DELTAS / d.name], name, dtype)
    if arr.shape[0] != d.nodes:
        raise IndexDamagedError(path, rel, "wrong length", f"{arr.shape[0]} entries, the manifest lists {d.nodes} "
                                "nodes")
    if name == NODE_TYPES and arr.size and int(arr.max()) >= 7:
        raise IndexDamagedError(path, rel, "invalid node type", f"found {int(arr.max())}; node types are 0..6")
    return arr


def _checked_delta_edges(path: Path, d: Delta, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The edges of delta ``d`` (:func:`delta_edges`), ids in ``[0, n)`` and weights finite and >= 0; damage
    names the delta's file (``deltas/1/edges/src.npy``)."""
    from .layout import DELTA_EDGES

    sub = f"{DELTAS}/{d.name}/{DELTA_EDGES}"
    with _named(path, f"{sub}/"):
        src, dst, w = delta_edges(path / DELTAS / d.name)
    for name, ids in (("src", src), ("dst", dst)):
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
            raise IndexDamagedError(path, f"{sub}/{name}.npy", "id out of range", f"edges must end at nodes < {n}, "
                                    f"found {int(ids.min()) if int(ids.min()) < 0 else int(ids.max())}")
    if w.size and (not np.all(np.isfinite(w)) or float(w.min()) < 0):
        raise IndexDamagedError(path, f"{sub}/w.npy", "invalid weight", "not finite or negative")
    return src, dst, w


def live_aliases(path: Path, aliases, types: np.ndarray):
    """``aliases`` without the entries whose canonical node a delete in place scrubbed: such a duplicate stands for
    itself again (its segment still holds the key)."""
    gone = scrubbed_mask(path, types) if aliases is not None and len(aliases) else None
    return aliases if gone is None else aliases.where(~_ends_at(gone, aliases.canon))


def _ends_at(mask: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``mask[ids]`` for ids that may lie past the mask (False there)."""
    ids = np.asarray(ids, dtype=np.int64)
    inside = ids < mask.shape[0]
    out = np.zeros(ids.shape[0], dtype=bool)
    out[inside] = mask[ids[inside]]
    return out


def without_scrubbed(path: Path, types: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Which of the edges ``(src, dst)`` of a generation at ``path`` keep (none of them ends at a scrubbed node)."""
    gone = scrubbed_mask(path, types)
    if gone is None:
        return np.ones(np.asarray(src).shape[0], dtype=bool)
    return ~(_ends_at(gone, src) | _ends_at(gone, dst))


def with_edges(csr, n: int, src: np.ndarray, dst: np.ndarray, w: np.ndarray, *, max_spliced_rows: int = 65536):
    """(indptr, indices, weights) of ``csr`` over ``n`` nodes plus the undirected edges ``(src, dst, w)``.

    The sum ``csr + A + A.T`` (``A``: the edges as a sparse matrix; an edge already there adds to its
    weight), computed for the rows the edges touch only and spliced between the untouched rows'
    runs, which are copied as they are: a graph with small deltas opens in one copy of its arrays
    instead of a sparse sum over every edge. Equal, entry for entry, to scipy's sum of the whole
    matrices (``tests/test_segments.py``). Past ``max_spliced_rows`` touched rows (deltas near a quarter of
    the base) the splice's per-row pieces cost more than the whole sum, which is then what runs.
    """
    import scipy.sparse as sp

    indptr = np.asarray(csr.indptr, dtype=np.int64)
    indices = np.asarray(csr.indices, dtype=np.int32)
    weights = np.asarray(csr.weights, dtype=np.float32)
    if n > indptr.shape[0] - 1:
        indptr = np.concatenate([indptr, np.full(n - (indptr.shape[0] - 1), indptr[-1], np.int64)])
    if not src.size:
        return indptr, indices, weights
    rows = np.unique(np.concatenate([src, dst]))
    if rows.size > max_spliced_rows:
        whole = sp.csr_array((weights, indices, indptr), shape=(n, n))
        added = sp.coo_array((w, (src, dst)), shape=(n, n))
        merged = (whole + added + added.T).tocsr()
        merged.sort_indices()
        return (merged.indptr.astype(np.int64), merged.indices.astype(np.int32, copy=False),
                merged.data.astype(np.float32, copy=False))
    starts, ends = indptr[rows], indptr[rows + 1]
    lens = ends - starts
    local_ptr = np.zeros(rows.size + 1, np.int64)
    np.cumsum(lens, out=local_ptr[1:])
    take = np.repeat(starts - local_ptr[:-1], lens) + np.arange(int(local_ptr[-1]), dtype=np.int64)
    old = sp.csr_array((weights[take], indices[take], local_ptr), shape=(rows.size, n))
    a = sp.coo_array((w, (np.searchsorted(rows, src), dst)), shape=(rows.size, n))
    a_t = sp.coo_array((w, (np.searchsorted(rows, dst), src)), shape=(rows.size, n))
    merged = (old + a + a_t).tocsr()
    merged.sort_indices()
    new_lens = np.diff(indptr)
    new_lens[rows] = np.diff(merged.indptr)
    out_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(new_lens, out=out_ptr[1:])
    # the output, in order: base entries before the first touched row, that row's merged entries, the base
    # entries up to the next touched row, ...
    cuts = np.concatenate([[0], ends])
    stops = np.concatenate([starts, [indptr[-1]]])
    mptr = merged.indptr
    idx_parts, w_parts = [], []
    for k in range(rows.size + 1):
        idx_parts.append(indices[cuts[k]:stops[k]])
        w_parts.append(weights[cuts[k]:stops[k]])
        if k < rows.size:
            idx_parts.append(merged.indices[mptr[k]:mptr[k + 1]])
            w_parts.append(merged.data[mptr[k]:mptr[k + 1]])
    out_idx = np.concatenate(idx_parts).astype(np.int32, copy=False)
    out_w = np.concatenate(w_parts).astype(np.float32, copy=False)
    return out_ptr, out_idx, out_w
