"""The generation a run builds on: opened under the writer lock, its tables and decomposed edges loaded."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..store.layout import DOCUMENTS, LINKED, NODES, NODE_KEYS
from ..errors import BuildError
from ..graph.types import NodeType
from ..store.decompositions import DECOMPOSITIONS, read_decompositions
from ..store.generations import collect_garbage, current_generation, finish_pending_switch, generation_path
from ..store.manifest import MANIFEST, read_manifest
from .assemble import EdgeList, NodeTable

__all__ = ["LINKED", "Previous", "open_previous", "load_tables", "load_base", "derive_base"]

R = int(NodeType.R)


@dataclass(frozen=True)
class Previous:
    """The finished generation a run builds on."""

    generation: int
    path: Path
    manifest: dict[str, Any]


def open_previous(root: Path, say: Callable[[str], None]) -> Previous | None:
    """The current generation of ``root`` (None for a new index), after the housekeeping a writer owes:
    finishing a killed first build's pointer switch, removing unread generations, and dropping the
    stages of a run that was killed after its commit."""
    from ..graph.storage import check_format_version

    if finish_pending_switch(root) is not None:  # a first build killed right before its pointer switch
        say("completed the pointer switch of the build killed before it")
    if collect_garbage(root):  # raises IndexPointerError (touching nothing) when CURRENT is damaged
        say("removed generations no reader holds any more")
    gen = current_generation(root)
    path = generation_path(root, gen) if gen is not None else None
    manifest = read_manifest(path) if path is not None else None
    if manifest is None:
        return None
    check_format_version(manifest.get("format_version"), where=path / MANIFEST)
    if manifest.get("state") != "complete":
        raise BuildError(f"{path / MANIFEST}: unknown state {manifest.get('state')!r}")
    run_path = root / "stages" / "run.json"
    if run_path.is_file() and json.loads(run_path.read_text("utf-8")).get("run_id") == manifest.get("run_id"):
        shutil.rmtree(root / "stages")  # killed after its commit, before removing its stages: nothing is pending
    return Previous(gen, path, manifest)


def load_tables(root: Path, manifest: dict | None = None):
    """(NodeTable, docs list, chunk traces) of the finished generation folder ``root``, every segment's rows in id order."""
    import pyarrow as pa

    from ..graph.keys import KEY_DTYPE
    from ..store.segments import concat_npy, concat_parquet, segment_folders, tombstoned_keys
    from ..store.tables import read_nodes_file

    folders = segment_folders(root, manifest if manifest is not None else read_manifest(root) or {})
    parts = [read_nodes_file(f / NODES) for f in folders]
    tab = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
    cols = {c: tab.column(c).to_pylist() for c in ("type", "name", "text", "doc_id", "chunk_id",
                                                   "source_id", "active")}
    keys = concat_npy(folders, NODE_KEYS, KEY_DTYPE)
    n0 = parts[0].num_rows  # the base's keys as a delete in place left them (tombstones: scrubbed_keys.npy)
    cols["key"] = np.concatenate([tombstoned_keys(root, keys[:n0]), keys[n0:]]).tolist()
    if len(cols["key"]) != tab.num_rows:
        raise ValueError(f"{root / NODE_KEYS}: {len(cols['key'])} keys for {tab.num_rows} nodes")
    table = NodeTable(types=cols["type"], keys=cols["key"], names=cols["name"], texts=cols["text"],
                      doc_ids=cols["doc_id"], chunk_ids=cols["chunk_id"], source_ids=cols["source_id"],
                      active=cols["active"])
    table.index = {k: i for i, k in enumerate(table.keys)}
    dtab = concat_parquet(folders, DOCUMENTS).to_pylist()
    traces = [t for f in folders for t in read_decompositions(f / DECOMPOSITIONS)]
    return table, dtab, traces


def load_base(root: Path, manifest: dict | None = None) -> EdgeList:
    """The decomposed T/S/N/R edges of the generation folder ``root`` (its graph minus the name links, every segment)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..store.segments import deltas_of, generation_graph, has_scrubbed

    manifest = manifest if manifest is not None else read_manifest(root) or {}
    deltas = deltas_of(manifest, root)
    scrubbed = has_scrubbed(manifest)
    graph = generation_graph(root, manifest)
    from ..store.segments import segment_folders

    ltab = pa.concat_tables([pq.read_table(f / LINKED) for f in segment_folders(root, manifest)])
    if deltas and scrubbed:  # a delta's name links to nodes a scrubbing delete made inactive are not in the graph
        from ..store.segments import without_scrubbed

        n0 = deltas[0].first_node
        ltab = ltab.filter(pa.array(without_scrubbed(root, np.asarray(graph.types)[:n0],
                                                     ltab.column("src").to_numpy(), ltab.column("dst").to_numpy())))
    base = EdgeList()
    base.add(*derive_base(graph, ltab.column("src").to_numpy(), ltab.column("dst").to_numpy(),
                          ltab.column("w").to_numpy()))
    return base


def derive_base(graph, link_src: np.ndarray, link_dst: np.ndarray,
                link_w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The decomposed T/S/N/R edges (src, dst, w) of a saved graph: its T/S/N/R structural edges minus the name links.

    Every structural edge between two T/S/N/R nodes is a decomposed edge or a
    name link (A/H/O edges always touch an A, H or O node), summed. Each edge is
    returned once, the lower type code first (S->N, N->R, T->S), pairs summed.
    """
    c = graph.structural
    types = np.asarray(graph.types)
    indptr = np.asarray(c.indptr)
    rows = np.repeat(np.arange(c.n, dtype=np.int64), np.diff(indptr))
    cols = np.asarray(c.indices, dtype=np.int64)
    w = np.asarray(c.weights, dtype=np.float32)
    m = (rows < cols) & (types[rows] <= R) & (types[cols] <= R)
    rows, cols, w = rows[m], cols[m], w[m].copy()
    ls = np.asarray(link_src, dtype=np.int64)
    ld = np.asarray(link_dst, dtype=np.int64)
    if ls.size:
        code = rows * (1 << 31) + cols
        if code.size > 1 and not np.all(code[1:] > code[:-1]):  # columns unsorted within a row
            o = np.argsort(code, kind="stable")
            rows, cols, w, code = rows[o], cols[o], w[o], code[o]
        lcode = np.minimum(ls, ld) * (1 << 31) + np.maximum(ls, ld)
        pos = np.searchsorted(code, lcode)
        ok = (pos < code.size) & (code[np.minimum(pos, code.size - 1)] == lcode)
        if not ok.all():
            raise ValueError(f"{LINKED}: a name link is not an edge of the structural layer (corrupt index)")
        np.subtract.at(w, pos, np.asarray(link_w, dtype=np.float32))
        keep = w > 0
        rows, cols, w = rows[keep], cols[keep], w[keep]
    swap = types[rows] > types[cols]
    src = np.where(swap, cols, rows).astype(np.int32)
    dst = np.where(swap, rows, cols).astype(np.int32)
    return src, dst, w
