"""Segment-parallel builds on a real two-node Ray cluster on 127.0.0.1 equal the same build in one process.

The cluster is the one ``test_ray_executor`` starts (``ray start --head`` plus a second ``ray start
--address``, 1 CPU each), stopped afterwards with every process of it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import noderag
from noderag.config import ExecutorConfig, NodeRAGConfig
from noderag.data import demo_dir
from noderag.graph.storage import tree_files
from noderag.indexing.segmented import build_segmented
from noderag.store.generations import current_path
from noderag.store.tables import IndexStore
from test_ray_executor import cluster  # noqa: F401  (the module-scoped two-node cluster fixture)

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")]

CONFIG = {"decompose": {"batch_size": 2}, "embed": {"spec": "hash:64", "batch_size": 16}}


def _files(root: Path) -> dict[str, bytes]:
    """Every file of the current generation but its manifest (which records times) and readers' lock."""
    path = current_path(root)
    return {rel: (path / rel).read_bytes() for rel in tree_files(path) if rel not in ("manifest.json", ".readers")}


def test_four_segments_on_two_nodes_equal_the_one_worker_build(cluster, tmp_path):  # noqa: F811 (the fixture)
    cfg = NodeRAGConfig.from_dict(CONFIG)
    local = build_segmented([demo_dir()], tmp_path / "local", cfg, segments=4)
    logs: list[str] = []
    ray = build_segmented([demo_dir()], tmp_path / "ray", cfg, segments=4, log=logs.append,
                          executor=ExecutorConfig(kind="ray", address=cluster.address))
    assert any("ray: segments on 2 nodes, 2 CPUs" in m for m in logs), logs
    assert len(ray.manifest["deltas"]) == 3 and ray.manifest["counts"] == local.manifest["counts"]
    a, b = _files(tmp_path / "local"), _files(tmp_path / "ray")
    assert sorted(a) == sorted(b) and [k for k in a if a[k] != b[k]] == []
    with IndexStore.open(tmp_path / "ray", verify="full") as store:
        assert store.graph.n == sum(p["nodes"] for p in ray.parts)
        assert np.unique(np.asarray(store.keys)).shape[0] == store.graph.n - ray.manifest["segments"]["aliases"]
    idx = noderag.Index.open(tmp_path / "ray")
    try:
        got = idx.retrieve("Who named the Vellmar Archipelago?")
    finally:
        idx.close()
    assert str(got.passages[0]).endswith("01_vellmar_archipelago.md")
