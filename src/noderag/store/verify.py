"""Index integrity: blake2b checksums of every index file, recorded in the manifest, and two checks.

``cheap`` (every open; reads headers and footers only, milliseconds): each recorded file
exists with its recorded size; ``.npy`` headers parse and account for the file size; Parquet
files carry their magic and a readable footer; the usearch file's matrix and index headers
parse and its vector count and dimension match the manifest; JSON files parse.

``full`` (``noderag verify``, ``Index.open(dir, verify="full")``): the cheap check, every file's
checksum, the manifest's own digest, and the structural invariants: CSR ``indptr`` of n + 1
entries from 0 to nnz, monotone; ``indices`` in [0, n); weights finite and >= 0; node types
known; the node and document tables agree with the graph; the vector keys are exactly the
embedded nodes (active T, S, A, H).

Errors are :class:`IndexDamagedError`, one line naming the file: "damaged header in
graph/indices.npy", never a raw parser error.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .layout import (COMMUNITIES, CURRENT, DELTAS, DOCUMENTS, LINKED, LLM_CACHE, LOCK_FILE, MANIFEST, NODES, NODE_KEY_ORDER, NODE_KEYS,
                     NODE_KEYS_SORTED, NODE_TEXT_OFF, NODE_TYPES, READERS, SCRUBBED, SCRUBBED_KEYS, VECTORS)
from .errors import IndexDamagedError, fd_exhaustion

__all__ = ["CHECKSUMS", "IndexDamagedError", "VerifyReport", "file_checksums", "graph_damage", "manifest_digest",
           "reading", "verify_index", "VERIFY_LEVELS"]

CHECKSUMS = "checksums"
VERIFY_LEVELS = ("none", "cheap", "full")
# files of an index folder that are not index content: the writer lock, a readers' lock file, and the
# LLM cache that queries append to
_NOT_CONTENT = frozenset({LOCK_FILE, READERS, LLM_CACHE, MANIFEST})
_BLOCK = 1 << 20
# node type codes (graph.types.NodeType): T S N R A H O; the embedded ones are T, S, A, H
_N_TYPES = 7
_EMBEDDED_TYPES = (0, 1, 4, 5)
_TYPE_NAMES = ("text", "semantic_unit", "entity", "relationship", "attribute", "high_level", "overview")


@contextmanager
def reading(root: str | os.PathLike, rel: str):
    """Turn a reader's raw error on the index file ``rel`` (pyarrow, numpy, usearch) into :class:`IndexDamagedError`."""
    from ..graph.storage import FormatVersionError

    try:
        yield
    except (IndexDamagedError, FileNotFoundError, FormatVersionError):
        raise
    except (ValueError, OSError, RuntimeError, IndexError) as exc:  # ArrowInvalid is a ValueError, ArrowIOError an OSError
        _not_damage(exc, root, rel)
        named, detail = _named_file(root, str(exc))
        raise IndexDamagedError(root, named or rel, "unreadable data",
                                f"{type(exc).__name__}: {detail}"[:200]) from None


def _not_damage(exc: BaseException, root: str | os.PathLike, rel: str) -> None:
    """Raise the error ``exc`` really is when it is no damage of ``rel``: the process out of file descriptors."""
    found = fd_exhaustion(exc, root, rel)
    if found is not None:
        raise found from None
    if isinstance(exc, MemoryError):
        raise exc


def _named_file(root: str | os.PathLike, message: str) -> tuple[str | None, str]:
    """(file relative to ``root``, rest of the message) when ``message`` starts with the path of a file under
    ``root`` (as the loaders' errors do: "ROOT/query/label_off.npy: offsets ..."), else (None, message)."""
    prefix = os.fspath(root).rstrip("/") + "/"
    if not message.startswith(prefix):
        return None, message
    path, sep, rest = message[len(prefix):].partition(": ")
    if not sep or not path or " " in path:
        return None, message
    return path, rest


@dataclass
class VerifyReport:
    """What a check covered: level, files and bytes checked, seconds, warnings (one line each)."""

    root: str
    level: str
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)


def _blake2b_file(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        while block := fh.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


def _json_default(obj: Any) -> Any:
    from ..graph.storage import _json_default as convert  # the conversion the manifest writer uses

    return convert(obj)


def manifest_digest(manifest: dict[str, Any]) -> str:
    """blake2b-128 of the manifest's content without its ``checksums`` entry (canonical JSON)."""
    body = {k: v for k, v in manifest.items() if k != CHECKSUMS}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False,
                      default=_json_default)
    # a round trip first: numbers and tuples read back exactly as they will from the written file
    text = json.dumps(json.loads(text), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def _manifest_bytes(manifest: dict[str, Any]) -> bytes:
    """The bytes :func:`~noderag.graph.storage.atomic_write_json` writes for ``manifest`` (its exact format)."""
    text = json.dumps(manifest, sort_keys=True, ensure_ascii=False, indent=2, allow_nan=False)
    return (text + "\n").encode("utf-8")


def _content_files(root: Path) -> list[str]:
    """Relative POSIX paths of the index files under ``root`` (not the manifest, lock or LLM cache)."""
    from ..graph.storage import tree_files

    return [rel for rel in tree_files(root) if rel not in _NOT_CONTENT and not rel.startswith("stages/")]


def file_checksums(root: str | os.PathLike, manifest: dict[str, Any],
                   known: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``checksums`` entry of a manifest: blake2b-128 of every index file in ``root`` and of the manifest.

    ``known``: checksums of files shared (hard-linked) from a generation that recorded them, taken
    as they are instead of reading the bytes again. Call it last, with every other manifest entry
    set: the manifest digest covers them.
    """
    root = Path(root)
    known = known or {}
    return {"algorithm": "blake2b-128",
            "files": {rel: known[rel] if rel in known else _blake2b_file(root / rel) for rel in _content_files(root)},
            "manifest": manifest_digest(manifest)}


# ----------------------------------------------------------------------------- cheap checks per file kind

def _npy_header(root: Path, rel: str) -> tuple[np.dtype, tuple[int, ...], int]:
    """(dtype, shape, data offset) of a ``.npy`` file, its size checked; IndexDamagedError when unreadable."""
    from numpy.lib import format as npformat

    path = root / rel
    try:
        with open(path, "rb") as fh:
            version = npformat.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = npformat.read_array_header_1_0(fh)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = npformat.read_array_header_2_0(fh)
            else:
                raise ValueError(f"unknown .npy version {version}")
            offset = fh.tell()
    except Exception as exc:  # numpy raises ValueError, SyntaxError, tokenize.TokenError... on a bad header
        _not_damage(exc, root, rel)
        raise IndexDamagedError(root, rel, "damaged header", f"{type(exc).__name__}: {exc}"[:200]) from None
    if dtype.hasobject or fortran:
        raise IndexDamagedError(root, rel, "damaged header", f"dtype {dtype}, fortran_order {fortran}")
    expected = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    size = path.stat().st_size
    if size != expected:
        raise IndexDamagedError(root, rel, "wrong size", f"{size} bytes, the header says {expected}")
    return dtype, tuple(int(s) for s in shape), offset


def _parquet_meta(root: Path, rel: str):
    import pyarrow.parquet as pq

    path = root / rel
    with open(path, "rb") as fh:
        head = fh.read(4)
        fh.seek(max(0, path.stat().st_size - 4))
        tail = fh.read(4)
    if head != b"PAR1" or tail != b"PAR1":
        raise IndexDamagedError(root, rel, "damaged header or footer", "no PAR1 magic")
    try:
        return pq.read_metadata(path)
    except Exception as exc:  # pyarrow.ArrowInvalid / OSError on a damaged footer
        _not_damage(exc, root, rel)
        raise IndexDamagedError(root, rel, "damaged footer", f"{type(exc).__name__}: {exc}"[:200]) from None


_USEARCH_SCALAR_BYTES = {"f64": 8.0, "f32": 4.0, "f16": 2.0, "bf16": 2.0, "i8": 1.0, "u8": 1.0, "b1": 0.125}


def _usearch_meta(root: Path, rel: str) -> dict[str, Any]:
    """Header facts of a usearch file: vector count and dimensions from the matrix and index headers."""
    from usearch.index import Index

    path = root / rel
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(16)
    if len(head) < 8:
        raise IndexDamagedError(root, rel, "damaged header", "shorter than its matrix header")
    try:
        meta = Index.metadata(str(path))
    except Exception as exc:  # usearch raises RuntimeError/ValueError on a damaged header
        _not_damage(exc, root, rel)
        raise IndexDamagedError(root, rel, "damaged header", f"{type(exc).__name__}: {exc}"[:200]) from None
    if not meta or not meta.get("matrix_included", False):
        raise IndexDamagedError(root, rel, "damaged header", "no usearch index header")
    # the vectors come first: rows and bytes per row (two u32, or two u64 for huge matrices), then the rows
    wide = bool(meta.get("matrix_uses_64_bit_dimensions", False))
    header = 16 if wide else 8
    if len(head) < header:
        raise IndexDamagedError(root, rel, "damaged header", "shorter than its matrix header")
    rows, row_bytes = (int(x) for x in np.frombuffer(head[:header], dtype="<u8" if wide else "<u4"))
    scalar = str(getattr(meta.get("kind_scalar"), "name", meta.get("kind_scalar"))).lower()
    width = _USEARCH_SCALAR_BYTES.get(scalar)
    dims = int(meta.get("dimensions", -1))
    count = int(meta.get("count_present", -1)) + int(meta.get("count_deleted", 0))
    if rows != count or (width is not None and row_bytes != int(np.ceil(dims * width))):
        raise IndexDamagedError(root, rel, "damaged header",
                                f"matrix of {rows} rows x {row_bytes} bytes, index header {count} x {dims} {scalar}")
    start = header + rows * row_bytes
    with open(path, "rb") as fh:
        fh.seek(start)
        magic = fh.read(7)
    if magic != b"usearch" or start >= size:
        raise IndexDamagedError(root, rel, "damaged header", "the index header is not after the vectors")
    return {"count": int(meta.get("count_present", 0)), "dim": dims, "scalar": scalar}


def _json_file(root: Path, rel: str) -> Any:
    try:
        return json.loads((root / rel).read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise IndexDamagedError(root, rel, "damaged JSON", str(exc)[:200]) from None


# ----------------------------------------------------------------------------- the checks

def _read_manifest(root: Path) -> dict[str, Any]:
    path = root / MANIFEST
    if not path.is_file():
        raise IndexDamagedError(root, MANIFEST, "missing file")
    data = _json_file(root, MANIFEST)
    if not isinstance(data, dict):
        raise IndexDamagedError(root, MANIFEST, "damaged JSON", "not an object")
    return data


def _embedded_count(manifest: dict[str, Any]) -> int | None:
    counts = manifest.get("counts") or {}
    active = counts.get("active_nodes")
    if not isinstance(active, dict):
        return None
    # the vectors of nodes a scrubbing delete made inactive stay until the next compaction
    return int(sum(int(active.get(_TYPE_NAMES[t], 0)) for t in _EMBEDDED_TYPES)) + int(counts.get("scrubbed_vectors", 0))


def verify_index(root: str | os.PathLike, level: str = "full", *, manifest: dict[str, Any] | None = None,
                 progress: Callable[[str], None] | None = None) -> VerifyReport:
    """Check the index files in ``root`` (the folder with ``manifest.json``); raise :class:`IndexDamagedError`.

    Parameters
    ----------
    root : index directory (its current generation is checked) or a generation folder
    level : "cheap" or "full" (see the module docstring); "none" checks nothing
    manifest : the parsed manifest when the caller has read it already
    progress : callable(str), optional, told each file as it is checksummed
    """
    if level not in VERIFY_LEVELS:
        raise ValueError(f"verify must be one of {VERIFY_LEVELS}, got {level!r}")
    root = Path(root)
    if (root / CURRENT).is_file():  # an index directory: check the generation readers open
        from .generations import current_path

        root = current_path(root)
    t0 = time.perf_counter()
    report = VerifyReport(str(root), level)
    if level == "none":
        return report
    if manifest is None:
        manifest = _read_manifest(root)
    sums = manifest.get(CHECKSUMS)
    sizes = manifest.get("bytes") or {}
    if isinstance(sums, dict) and isinstance(sums.get("files"), dict):
        files = sorted(sums["files"])
    else:
        sums = None
        files = sorted(k for k in sizes if k not in _NOT_CONTENT)
        report.warnings.append("no checksums recorded (built by an older noderag): sizes, headers and "
                               "structure checked, not the bytes")
    present = set(_content_files(root))
    facts: dict[str, Any] = {}
    for rel in files:
        path = root / rel
        if rel not in present:
            raise IndexDamagedError(root, rel, "missing file")
        size = path.stat().st_size
        if rel in sizes and int(sizes[rel]) != size:
            raise IndexDamagedError(root, rel, "wrong size", f"{size} bytes, the manifest says {int(sizes[rel])}")
        report.files += 1
        report.bytes += size
        if rel.endswith(".npy"):
            facts[rel] = _npy_header(root, rel)
        elif rel.endswith(".parquet"):
            facts[rel] = _parquet_meta(root, rel)
        elif rel.endswith(".usearch"):
            facts[rel] = _usearch_meta(root, rel)
        elif rel.endswith(".json"):
            facts[rel] = _json_file(root, rel)
    _check_header_facts(root, manifest, facts)
    if level == "full":
        if sums is not None:
            if manifest_digest(manifest) != sums.get("manifest"):
                raise IndexDamagedError(root, MANIFEST, "checksum mismatch", "its content differs from the build's")
            if (root / MANIFEST).read_bytes() != _manifest_bytes(manifest):
                raise IndexDamagedError(root, MANIFEST, "altered bytes", "not as the manifest writer wrote it")
            for rel in files:
                if progress is not None:
                    progress(rel)
                if _blake2b_file(root / rel) != sums["files"][rel]:
                    raise IndexDamagedError(root, rel, "checksum mismatch")
        _check_structure(root, manifest, facts)
    report.seconds = time.perf_counter() - t0
    return report


def check_files(root: str | os.PathLike, manifest: dict[str, Any], prefixes: tuple[str, ...]) -> int:
    """Checksum the files of a generation folder whose paths start with one of ``prefixes`` (the ones a
    writer is about to read); raise :class:`IndexDamagedError` naming the first that differs. Returns bytes read."""
    from concurrent.futures import ThreadPoolExecutor

    root = Path(root)
    sums = ((manifest.get(CHECKSUMS) or {}).get("files")) or {}
    rels = sorted(r for r in sums if r.startswith(prefixes))
    for rel in rels:
        if not (root / rel).is_file():
            raise IndexDamagedError(root, rel, "missing file")
    with ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as pool:  # hashlib releases the GIL
        got = list(pool.map(lambda rel: _blake2b_file(root / rel), rels))
    for rel, digest in zip(rels, got):  # the first damaged file in path order, whatever the threads did
        if digest != sums[rel]:
            raise IndexDamagedError(root, rel, "checksum mismatch")
    return sum((root / rel).stat().st_size for rel in rels)


def _check_header_facts(root: Path, manifest: dict[str, Any], facts: dict[str, Any]) -> None:
    """Cheap cross-checks: array shapes against graph/meta.json, table rows and vector count against the graph."""
    meta = facts.get("graph/meta.json")
    if not isinstance(meta, dict):
        return
    n = meta.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise IndexDamagedError(root, "graph/meta.json", "damaged field", f"n = {n!r}")
    for rel in (NODE_TYPES, NODE_KEYS, NODE_KEY_ORDER, NODE_KEYS_SORTED, COMMUNITIES):
        if rel in facts and facts[rel][1] != (n,):
            raise IndexDamagedError(root, rel, "wrong shape", f"{facts[rel][1]}, the graph has {n} nodes")
    if NODE_TEXT_OFF in facts and facts[NODE_TEXT_OFF][1] != (n + 1,):
        raise IndexDamagedError(root, NODE_TEXT_OFF, "wrong shape",
                                f"{facts[NODE_TEXT_OFF][1]}, the graph has {n} nodes")
    for layer, sub in (("structural", "graph"), ("semantic", "semantic")):
        nnz = meta.get(f"{layer}_nnz")
        if f"{sub}/indptr.npy" in facts and facts[f"{sub}/indptr.npy"][1] != (n + 1,):
            raise IndexDamagedError(root, f"{sub}/indptr.npy", "wrong shape",
                                    f"{facts[f'{sub}/indptr.npy'][1]}, expected ({n + 1},)")
        for name in ("indices", "weights"):
            rel = f"{sub}/{name}.npy"
            if rel in facts and facts[rel][1] != (nnz,):
                raise IndexDamagedError(root, rel, "wrong shape", f"{facts[rel][1]}, graph/meta.json says nnz = {nnz}")
    if NODES in facts and facts[NODES].num_rows != n:
        raise IndexDamagedError(root, NODES, "wrong row count",
                                f"{facts['nodes.parquet'].num_rows} rows, the graph has {n} nodes")
    deltas = _deltas(root, manifest)
    for d in deltas:
        _check_delta_facts(root, d, facts, (manifest.get("embedder") or {}).get("dim"))
    shards = [facts[rel] for rel in _vector_shard_files(facts)]
    shards += [facts[rel] for d in deltas for rel in _vector_shard_files(facts, f"{DELTAS}/{d.name}/")]
    if shards:
        count = sum(v["count"] for v in shards)
        want = _embedded_count(manifest)
        if want is not None and count != want:
            raise IndexDamagedError(root, VECTORS, "wrong vector count",
                                    f"{count} vectors, the manifest has {want} embedded nodes")
        for folder in [""] + [f"{DELTAS}/{d.name}/" for d in deltas]:
            _check_keys_file(root, facts, folder)
        dim = (manifest.get("embedder") or {}).get("dim")
        for rel in _vector_shard_files(facts):
            if isinstance(dim, int) and facts[rel]["dim"] != dim:
                raise IndexDamagedError(root, rel, "wrong dimension", f"{facts[rel]['dim']}, the embedder has {dim}")


def _deltas(root: Path, manifest: dict[str, Any]) -> list:
    from .segments import deltas_of

    return deltas_of(manifest, root)


def _check_delta_facts(root: Path, d, facts: dict[str, Any], dim) -> None:
    """A delta segment's node arrays, node rows and vector dimension against its manifest entry."""
    pre = f"{DELTAS}/{d.name}/"
    for rel in (NODE_TYPES, NODE_KEYS, "query/active.npy"):
        if pre + rel not in facts:
            raise IndexDamagedError(root, pre + rel, "missing file")
        if facts[pre + rel][1] != (d.nodes,):
            raise IndexDamagedError(root, pre + rel, "wrong shape", f"{facts[pre + rel][1]}, the manifest lists "
                                    f"{d.nodes} nodes in {DELTAS}/{d.name}")
    if pre + NODE_TEXT_OFF in facts and facts[pre + NODE_TEXT_OFF][1] != (d.nodes + 1,):
        raise IndexDamagedError(root, pre + NODE_TEXT_OFF, "wrong shape", f"{facts[pre + NODE_TEXT_OFF][1]}, the "
                                f"manifest lists {d.nodes} nodes in {DELTAS}/{d.name}")
    if pre + NODES in facts and facts[pre + NODES].num_rows != d.nodes:
        raise IndexDamagedError(root, pre + NODES, "wrong row count", f"{facts[pre + NODES].num_rows} rows, "
                                f"the manifest lists {d.nodes} nodes")
    vec = facts.get(pre + VECTORS)
    if vec is not None and isinstance(dim, int) and vec["dim"] != dim:
        raise IndexDamagedError(root, pre + VECTORS, "wrong dimension", f"{vec['dim']}, the embedder has {dim}")


def _check_keys_file(root: Path, facts: dict[str, Any], folder: str) -> None:
    """The vectors' keys in add order (``vectors.keys.npy``), if there: int64, one per vector of the folder's shards."""
    from ..graph.vector_slots import keys_path

    rel = folder + str(keys_path(VECTORS))
    if rel not in facts:
        return
    count = sum(facts[f]["count"] for f in _vector_shard_files(facts, folder))
    dtype, shape, _ = facts[rel]
    if dtype != np.dtype("<i8") or shape != (count,):
        raise IndexDamagedError(root, rel, "wrong shape", f"{dtype} {shape}, the vector index holds {count} vectors")


def _vector_shard_files(facts: dict[str, Any], folder: str = "") -> list[str]:
    """``vectors.usearch`` and its shard siblings ``vectors.J.usearch`` present in ``facts``, in shard order
    (``folder``: of a delta segment, whose vectors may be sharded too: a segment-parallel build's parts)."""
    from ..graph.vectors import shard_path

    out = []
    while folder + str(shard_path(VECTORS, len(out))) in facts:
        out.append(folder + str(shard_path(VECTORS, len(out))))
    return out


def _array(root: Path, rel: str) -> np.ndarray:
    from ..graph.storage import load_npy

    try:
        return load_npy(root / rel, mmap=True)
    except (ValueError, OSError) as exc:
        _not_damage(exc, root, rel)
        raise IndexDamagedError(root, rel, "unreadable array", str(exc)[:200]) from None


def _check_structure(root: Path, manifest: dict[str, Any], facts: dict[str, Any]) -> None:
    """The structural invariants of the graph, tables and vectors (vectorised, O(n + nnz))."""
    meta = facts.get("graph/meta.json")
    if not isinstance(meta, dict):
        raise IndexDamagedError(root, "graph/meta.json", "missing file")
    n = int(meta["n"])
    types = _check_graph_arrays(root, meta)
    try:
        from ..graph.hetero import HeteroGraph

        HeteroGraph.load(root, mmap=True, validate=True)  # sorted unique columns, no loops, symmetric
    except ValueError as exc:
        raise IndexDamagedError(root, "graph/", "invalid graph", str(exc)[:300]) from None
    _check_key_order(root, n)
    _check_communities(root, n)
    _check_scrubbed(root, n)
    _check_node_texts(root, n)
    _check_tables(root, n, types)
    _check_vectors(root, n, types)


def _check_key_order(root: Path, n: int) -> None:
    """The stored key order of a large graph (both files or neither): node ids in range, and the sorted keys
    strictly increasing and equal to ``node_keys[order]`` (O(n))."""
    have = [(root / rel).is_file() for rel in (NODE_KEY_ORDER, NODE_KEYS_SORTED)]
    if not any(have):
        return
    if not all(have):
        raise IndexDamagedError(root, NODE_KEYS_SORTED if have[0] else NODE_KEY_ORDER, "missing file",
                                "the stored key order needs both files")
    order = np.asarray(_array(root, NODE_KEY_ORDER), dtype=np.int64)
    if order.shape != (n,) or (n and (int(order.min()) < 0 or int(order.max()) >= n)):
        raise IndexDamagedError(root, NODE_KEY_ORDER, "node id out of range", f"{n} nodes")
    got = np.asarray(_array(root, NODE_KEYS_SORTED))
    if got.shape != (n,) or not np.array_equal(got, np.asarray(_array(root, NODE_KEYS))[order]):
        raise IndexDamagedError(root, NODE_KEYS_SORTED, "keys differ from node_keys.npy in the stored order")
    if n > 1 and not bool(np.all(got[1:] > got[:-1])):
        raise IndexDamagedError(root, NODE_KEY_ORDER, "not a sorted order of the keys")


def _check_communities(root: Path, n: int) -> None:
    """The stored Leiden labels, if any: int32, one per node, -1 or a label."""
    if not (root / COMMUNITIES).is_file():
        return
    labels = _array(root, COMMUNITIES)
    if labels.dtype != np.int32 or labels.shape != (n,):
        raise IndexDamagedError(root, COMMUNITIES, "wrong shape", f"{labels.dtype} {labels.shape}, the graph has {n} nodes")
    if n and int(labels.min()) < -1:
        raise IndexDamagedError(root, COMMUNITIES, "value out of range", f"label {int(labels.min())}")


def _check_node_texts(root: Path, n: int) -> None:
    """The node texts beside ``nodes.parquet``, if there: offsets from 0, monotone, ending where the pages do."""
    from .node_texts import node_texts

    try:
        texts = node_texts(root / NODES, n)
    except ValueError as exc:
        raise IndexDamagedError(root, NODES, "damaged metadata", str(exc)[:200]) from None
    if texts is not None and texts.n and bool(np.any(texts.offsets[1:] < texts.offsets[:-1])):
        raise IndexDamagedError(root, NODE_TEXT_OFF, "invalid offsets", "not monotone")


def _check_scrubbed(root: Path, n: int) -> None:
    """The nodes a delete in place scrubbed, if any: increasing node ids of the graph, with one tombstone key
    each (none equal to a stored key)."""
    from .segments import base_keys

    if (root / SCRUBBED).is_file():
        keys = base_keys(root, n)
        if np.unique(keys).shape[0] != n:
            raise IndexDamagedError(root, SCRUBBED_KEYS, "duplicate keys", "a tombstone equals another node's key")


def _check_graph_arrays(root: Path, meta: dict[str, Any]) -> np.ndarray:
    """Node types in range; each layer's CSR ``indptr`` from 0 to nnz and monotone, ``indices`` in [0, n),
    ``weights`` finite and >= 0 (O(n + nnz)); returns the node types. Raises IndexDamagedError naming the file."""
    n = int(meta["n"])
    types = _array(root, NODE_TYPES)
    if types.shape != (n,):
        raise IndexDamagedError(root, NODE_TYPES, "wrong shape", f"{types.shape}, the graph has {n} nodes")
    if types.size and int(types.max()) >= _N_TYPES:
        raise IndexDamagedError(root, NODE_TYPES, "value out of range", f"type code {int(types.max())}")
    for layer, sub in (("structural", "graph"), ("semantic", "semantic")):
        nnz = int(meta.get(f"{layer}_nnz", 0))
        indptr = _array(root, f"{sub}/indptr.npy").astype(np.int64)
        if indptr.shape != (n + 1,) or indptr[0] != 0 or indptr[-1] != nnz:
            raise IndexDamagedError(root, f"{sub}/indptr.npy", "invalid CSR offsets",
                                    f"shape {indptr.shape}, from {int(indptr[0])} to {int(indptr[-1])}, nnz {nnz}")
        if np.any(np.diff(indptr) < 0):
            raise IndexDamagedError(root, f"{sub}/indptr.npy", "invalid CSR offsets", "not monotone")
        indices = _array(root, f"{sub}/indices.npy")
        if indices.shape != (nnz,):
            raise IndexDamagedError(root, f"{sub}/indices.npy", "wrong shape", f"{indices.shape}, nnz {nnz}")
        if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= n):
            raise IndexDamagedError(root, f"{sub}/indices.npy", "node id out of range",
                                    f"[{int(indices.min())}, {int(indices.max())}] with {n} nodes")
        weights = _array(root, f"{sub}/weights.npy")
        if weights.shape != (nnz,):
            raise IndexDamagedError(root, f"{sub}/weights.npy", "wrong shape", f"{weights.shape}, nnz {nnz}")
        if weights.size and (not np.all(np.isfinite(weights)) or float(weights.min()) < 0):
            raise IndexDamagedError(root, f"{sub}/weights.npy", "invalid weight", "not finite or negative")
    return types


def graph_damage(root: str | os.PathLike, exc: BaseException) -> BaseException:
    """The :class:`IndexDamagedError` naming the graph file behind ``exc``, an error loading or validating the
    graph of the generation folder ``root`` (its headers and CSR invariants are checked again, O(n + nnz):
    call it on the failure path only). Returns ``exc`` itself when it is already named or a configuration error."""
    from ..errors import ConfigError

    if isinstance(exc, (IndexDamagedError, ConfigError)) or not isinstance(exc, (ValueError, IndexError)):
        return exc
    root = Path(root)
    try:
        meta = _json_file(root, "graph/meta.json")
        if not isinstance(meta, dict) or isinstance(meta.get("n"), bool) or not isinstance(meta.get("n"), int):
            raise IndexDamagedError(root, "graph/meta.json", "damaged field", f"n = {meta!r}"[:80])
        for rel in (NODE_TYPES, NODE_KEYS, "graph/indptr.npy", "graph/indices.npy",
                    "graph/weights.npy", "semantic/indptr.npy", "semantic/indices.npy", "semantic/weights.npy"):
            if (root / rel).is_file():
                _npy_header(root, rel)
        _check_graph_arrays(root, meta)
    except IndexDamagedError as found:
        return found
    except OSError:  # a file gone meanwhile: the original error says more
        return exc
    named, detail = _named_file(root, str(exc))
    return IndexDamagedError(root, named or "graph/", "invalid graph", f"{type(exc).__name__}: {detail}"[:200])


def _column(root: Path, rel: str, table, name: str) -> np.ndarray:
    if name not in table.column_names:
        raise IndexDamagedError(root, rel, "missing column", name)
    return table.column(name).to_numpy(zero_copy_only=False)


def _read_table(root: Path, rel: str, columns: list[str]):
    import pyarrow.parquet as pq

    try:
        return pq.read_table(root / rel, columns=[c for c in columns if c in pq.read_schema(root / rel).names])
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError on damaged pages
        _not_damage(exc, root, rel)
        raise IndexDamagedError(root, rel, "damaged data", f"{type(exc).__name__}: {exc}"[:200]) from None


def _check_tables(root: Path, n: int, types: np.ndarray) -> None:
    nodes = _read_table(root, NODES, ["id", "type", "doc_id", "chunk_id", "active"])
    if not np.array_equal(_column(root, NODES, nodes, "id"), np.arange(n)):
        raise IndexDamagedError(root, NODES, "wrong node ids", "ids are not 0..n-1")
    if not np.array_equal(_column(root, NODES, nodes, "type"), np.asarray(types)):
        raise IndexDamagedError(root, NODES, "node types differ from node_types.npy")
    docs = _read_table(root, DOCUMENTS, ["doc_id", "chunk_ids"])
    n_docs = docs.num_rows
    doc_ids = _column(root, NODES, nodes, "doc_id")
    if doc_ids.size and (int(doc_ids.min()) < -1 or int(doc_ids.max()) >= max(n_docs, 1)):
        raise IndexDamagedError(root, NODES, "document id out of range", f"{n_docs} documents")
    chunk_ids = _column(root, NODES, nodes, "chunk_id")
    if chunk_ids.size and (int(chunk_ids.min()) < -1 or int(chunk_ids.max()) >= n):
        raise IndexDamagedError(root, NODES, "chunk id out of range", f"{n} nodes")
    flat = docs.column("chunk_ids").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= n or np.any(np.asarray(types)[flat] != 0)):
        raise IndexDamagedError(root, DOCUMENTS, "chunk id out of range", "not a text node id")
    if (root / LINKED).is_file():
        linked = _read_table(root, LINKED, ["src", "dst"])
        for c in ("src", "dst"):
            v = _column(root, LINKED, linked, c)
            if v.size and (int(v.min()) < 0 or int(v.max()) >= n):
                raise IndexDamagedError(root, LINKED, "node id out of range", c)


def _check_vectors(root: Path, n: int, types: np.ndarray) -> None:
    if not (root / VECTORS).is_file():
        return
    import pyarrow.parquet as pq

    from ..graph.vectors import VectorIndex

    try:
        vindex = VectorIndex.load(root / VECTORS, view=True, direct=False)  # usearch's own key tables
        keys = np.sort(vindex.keys())
    except Exception as exc:  # usearch raises RuntimeError ("Out of memory!") on a damaged body
        _not_damage(exc, root, VECTORS)
        raise IndexDamagedError(root, VECTORS, "unreadable vectors", f"{type(exc).__name__}: {exc}"[:200]) from None
    _check_add_order(root, vindex, keys)
    active = pq.read_table(root / NODES, columns=["active"]).column("active").to_numpy(zero_copy_only=False)
    embedded = np.isin(np.asarray(types), _EMBEDDED_TYPES)
    want = np.flatnonzero(embedded & active.astype(bool))
    # every active embedded node has its vector; a scrubbing delete leaves the vectors of the inactive nodes it
    # scrubbed (never returned) until the next compaction
    if not (np.isin(want, keys).all() and (keys.size == want.size or (
            keys.size and keys.max() < embedded.size and embedded[keys].all()))):
        raise IndexDamagedError(root, VECTORS, "wrong vector keys",
                                f"{keys.size} keys, {want.size} embedded nodes")


def _check_add_order(root: Path, vindex, keys: np.ndarray) -> None:
    """The keys file, if any, against the vector index: it fits the shards (sizes, sample rows) and holds
    exactly the index's keys (``keys``, sorted)."""
    from ..graph.vector_slots import SlotTable, keys_path

    rel = str(keys_path(VECTORS))
    if not (root / rel).is_file():
        return
    _, order, why = SlotTable.open(root / VECTORS, vindex._shards, vindex.dtype)
    if order is None:
        raise IndexDamagedError(root, rel, "keys differ from the vector index", why[:200])
    if not np.array_equal(np.sort(order), keys):
        raise IndexDamagedError(root, rel, "keys differ from the vector index", f"{order.shape[0]} keys")
