"""Segment-parallel builds: the corpus split by document into parts, each built into a complete index on its own
(in this process one after another, or as Ray tasks on a cluster), committed as one generation of segments.

The generation is the layout inserts already write (:mod:`noderag.store.segments`): the first part is its base,
every other part a delta segment at the next id ranges (:mod:`.place`), so every reader of a segmented
generation reads it as one index. What a one-part build would share across parts is joined by content key: a
node whose key an earlier part holds is an alias of that node (:mod:`noderag.store.aliases`; PPR walks across
segments through the canonical node, name matching answers it), and every part's BM25 impacts count the
passages of all parts. Communities (and the A, H and O nodes made from them) stay per part.

Each part's build depends on its documents and the configuration only, and placing a part on its offsets and
the other parts' term tables only: the same corpus and seed give the same segment bytes with any number of
workers, local or on a cluster.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ...errors import BuildError
from ...store.layout import DELTAS, NODE_KEYS, STAGES
from .place import Background, Offsets, part_counts, place_base, place_segment

__all__ = ["SegmentedReport", "build_segmented", "split_documents", "build_part", "place_part"]

PARTS = "segment-parts"  # under stages/: each part's input and its own index


@dataclass
class SegmentedReport:
    """What a segmented build did: its generation, the parts' sizes and where the time went."""

    generation: int
    manifest: dict
    parts: list[dict] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def split_documents(inputs: Sequence, parts: int, out: Path) -> list[Path]:
    """The input documents (deduplicated by content, in input order) as ``parts`` JSONL files of contiguous
    documents, sizes differing by one at most; returns their paths."""
    from ..ingest import ingest

    docs, _ = ingest(list(inputs))
    if len(docs) < parts:
        raise BuildError(f"{len(docs)} documents cannot make {parts} segments: give at most {len(docs)}")
    out.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, len(docs), parts + 1).round().astype(int)
    paths = []
    for k in range(parts):
        path = out / f"{k:04d}.jsonl"
        with open(path, "w", encoding="utf-8") as fh:
            for d in docs[bounds[k]:bounds[k + 1]]:
                row = {"id": d.source, "text": d.text, **({"title": d.title} if d.title is not None else {})}
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        paths.append(path)
    return paths


def build_part(source: str, index_dir: str, config_dict: dict, workers: int | None = None) -> dict:
    """Build one part's index (its stages local: ``workers`` processes for the CPU-bound ones, 1 in a Ray task
    that holds one CPU) and return its sizes, its CPU time (with its worker processes') and the process's peak
    resident memory (what a worker of a cluster needs)."""
    import resource

    from ...config import ExecutorConfig, NodeRAGConfig
    from ..driver import build_index
    from ...store.generations import current_path

    def cpu() -> float:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    t0, c0 = time.perf_counter(), cpu()
    build_index([source], index_dir, NodeRAGConfig.from_dict(config_dict), progress=False,
                executor=ExecutorConfig(workers=workers))
    nodes, documents = part_counts(current_path(index_dir))
    return {"index": index_dir, "nodes": nodes, "documents": documents, "build_s": time.perf_counter() - t0,
            "build_cpu_s": cpu() - c0, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def place_part(k: int, folders: list[str], out: str, at: tuple[int, int]) -> dict:
    """Place part ``k`` (its generation folder ``folders[k]``) into the generation at ``out`` (the base for the
    first part, else the delta segment ``deltas/<k>``); ``at``: its (first node, first document)."""
    import resource

    t0, c0 = time.perf_counter(), time.process_time()
    background = Background(tuple(f for j, f in enumerate(folders) if j != k))
    if k == 0:
        place_base(Path(folders[0]), Path(out), background)
    else:
        place_segment(Path(folders[k]), Path(out) / DELTAS / str(k), Offsets(*at), background)
    return {"place_s": time.perf_counter() - t0, "place_cpu_s": time.process_time() - c0,
            "place_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def build_segmented(inputs: Sequence, index_dir, config=None, *, segments: int, executor=None,
                    log: Callable[[str], None] | None = None) -> SegmentedReport:
    """Build a new index in ``index_dir`` from ``inputs`` as ``segments`` parts (see the module notes).

    ``executor``: an :class:`~noderag.config.ExecutorConfig`; ``kind="ray"`` builds and places the parts as
    Ray tasks (one CPU each) on its cluster, else they run here one after another.
    """
    from ...config import ExecutorConfig, NodeRAGConfig
    from ...store.folder import check_index_folder
    from ...store.generations import current_generation, current_path
    from ...store.lock import WriterLock

    say = log or (lambda msg: None)
    config = config or NodeRAGConfig()
    executor = executor or ExecutorConfig()
    if isinstance(segments, bool) or not isinstance(segments, int) or segments < 1:
        raise BuildError(f"segments must be a positive integer, got {segments!r}")
    root = Path(index_dir)
    check_index_folder(root)
    root.mkdir(parents=True, exist_ok=True)
    with WriterLock(root):
        if current_generation(root) is not None:
            raise BuildError(f"{root}: holds an index already; a segmented build makes a new index "
                             "(insert into this one, or give a new folder)")
        work = root / STAGES / PARTS
        shutil.rmtree(root / STAGES, ignore_errors=True)
        seconds: dict[str, float] = {}
        t0 = time.perf_counter()
        sources = split_documents(inputs, segments, work / "input")
        seconds["split"] = time.perf_counter() - t0
        run = _ray_runner(executor, say) if executor.kind == "ray" else _local_runner
        t0 = time.perf_counter()
        workers = 1 if executor.kind == "ray" else executor.workers  # a Ray task holds one CPU
        built = run(build_part, [(str(s), str(work / "index" / f"{k:04d}"), config.to_dict(), workers)
                                 for k, s in enumerate(sources)])
        seconds["build_parts"] = time.perf_counter() - t0
        say(f"segments: {segments} parts built ({seconds['build_parts']:.1f} s)")
        folders = [str(current_path(b["index"])) for b in built]
        offsets = np.cumsum([[0, 0]] + [[b["nodes"], b["documents"]] for b in built], axis=0)
        final = root / STAGES / "final"
        t0 = time.perf_counter()
        placed = run(place_part, [(k, folders, str(final), tuple(int(v) for v in offsets[k]))
                                  for k in range(segments)])
        seconds["place"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        gen, manifest = _commit(root, final, folders, built, offsets, config)
        seconds["commit"] = time.perf_counter() - t0
        shutil.rmtree(root / STAGES, ignore_errors=True)
    parts = [{**b, **p} for b, p in zip(built, placed)]
    say(f"segments: generation {gen} committed with {segments} segments, "
        f"{manifest['segments']['aliases']} aliased nodes")
    return SegmentedReport(gen, manifest, parts, seconds)


def _local_runner(fn, calls: list[tuple]) -> list:
    return [fn(*args) for args in calls]


def _ray_runner(executor, say):
    from ..executor.ray_segments import ray_runner

    return ray_runner(executor, say)


def _commit(root: Path, final: Path, folders: list[str], built: list[dict], offsets: np.ndarray, config):
    """The alias table, the manifest (the parts' counts summed, the segments listed) and the commit."""
    from ...graph.storage import atomic_write_json, load_npy
    from ...graph.keys import KEY_DTYPE
    from ...store.aliases import merge_keys, write_aliases
    from ...store.generations import collect_garbage, commit_generation
    from ...store.segments import Delta, delta_entry
    from ...store.verify import CHECKSUMS, file_checksums
    from ...store.manifest import MANIFEST

    keys = [(int(offsets[k][0]), np.asarray(load_npy(Path(f) / NODE_KEYS, True, dtype=KEY_DTYPE, ndim=1, shape=None)))
            for k, f in enumerate(folders)]
    aliases = merge_keys(keys)
    write_aliases(final, aliases)
    manifests = [json.loads((Path(f) / MANIFEST).read_text()) for f in folders]
    manifest = {k: v for k, v in manifests[0].items() if k != CHECKSUMS}
    manifest["counts"] = _summed([m.get("counts") or {} for m in manifests])
    manifest[DELTAS] = [delta_entry(Delta(str(k), int(offsets[k][0]), b["nodes"], int(offsets[k][1]), b["documents"]))
                        for k, b in enumerate(built) if k > 0]
    manifest["segments"] = {"parts": len(folders), "aliases": len(aliases),
                            "aliased_by_type": _by_type(final, folders, aliases, offsets)}
    manifest[CHECKSUMS] = file_checksums(final, manifest)
    atomic_write_json(final / MANIFEST, manifest)
    gen = commit_generation(root, final)
    collect_garbage(root)
    return gen, manifest


def _summed(counts: list[dict]) -> dict:
    """The parts' ``counts`` added up (nested dicts of numbers; a number in one part only is taken as it is)."""
    out: dict[str, Any] = {}
    for c in counts:
        for k, v in c.items():
            if isinstance(v, dict):
                out[k] = _summed([out.get(k) or {}, v])
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
            else:
                out.setdefault(k, v)
    return out


def _by_type(final: Path, folders: list[str], aliases, offsets: np.ndarray) -> dict[str, int]:
    """Aliased nodes per node type name."""
    from ...graph.storage import load_npy
    from ...graph.types import TYPE_NAMES, NodeType
    from ...store.layout import NODE_TYPES

    types = np.concatenate([np.asarray(load_npy(Path(f) / NODE_TYPES, True, dtype=np.uint8, ndim=1, shape=None))
                            for f in folders])
    got = np.bincount(types[aliases.dup], minlength=7) if len(aliases) else np.zeros(7, np.int64)
    return {TYPE_NAMES[NodeType(t)]: int(got[t]) for t in range(7) if got[t]}
