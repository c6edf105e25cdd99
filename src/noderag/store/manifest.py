"""The manifest of a generation: reading it, and the byte counts it records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .layout import MANIFEST, READERS
from ..graph.storage import FORMAT_VERSION, dir_bytes, read_json

__all__ = ["MANIFEST", "read_manifest", "dir_sizes", "bytes_by_component", "index_manifest"]



def read_manifest(root: Path) -> dict[str, Any] | None:
    """The manifest of the index in ``root`` (its current generation), or of the generation folder ``root``.

    None when there is none. A reader that needs the files of that generation too should
    use :class:`~noderag.store.tables.IndexStore`, which pins it.
    """
    from .generations import current_generation, generation_path

    root = Path(root)
    gen = current_generation(root)
    path = (generation_path(root, gen) if gen is not None else root) / MANIFEST
    if not path.is_file():
        return None
    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


def dir_sizes(root: Path) -> dict[str, int]:
    """Bytes per file (relative POSIX paths, sorted) under ``root``, without the readers' lock file."""
    return {name: size for name, size in dir_bytes(root).items() if name != READERS}


def bytes_by_component(sizes: dict[str, int], node_arrays: str = "node arrays") -> dict[str, int]:
    """Bytes per top-level file or folder of a manifest's ``bytes`` map, largest first.

    The ``node_*.npy`` arrays are summed under the label ``node_arrays``.
    """
    out: dict[str, int] = {}
    for path, size in sizes.items():
        top = path.split("/", 1)[0]
        if top.startswith("node_"):
            top = node_arrays
        out[top] = out.get(top, 0) + int(size)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def add_tokens(prev: dict, cur: dict) -> dict:
    """Token counts per stage of two runs, summed (the manifest's ``tokens_total``)."""
    out: dict[str, Any] = {}
    for src in (prev, cur):
        for stage, st in (src or {}).items():
            if not isinstance(st, dict):
                continue
            o = out.setdefault(stage, {})
            for k, v in st.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    o[k] = o.get(k, 0) + v
    return out


def index_manifest(*, config: dict, embedder: dict, counts: dict, stages: dict, tokens: dict, failures: dict,
                   sizes: dict[str, int], run: dict, run_id: str, previous: dict | None) -> dict[str, Any]:
    """The manifest of a finished generation (without its checksums, which cover every entry here).

    ``previous``: the manifest of the generation the run built on (its token totals and run list
    carry over), None for a new index.
    """
    previous = previous or {}
    return {
        "format_version": FORMAT_VERSION,
        "state": "complete",
        "config": config,
        "embedder": embedder,
        "counts": counts,
        "stages": stages,
        "tokens": tokens,
        "tokens_total": add_tokens(previous.get("tokens_total", {}), tokens),
        "failures": failures,
        "bytes": sizes,
        "bytes_total": int(sum(sizes.values())),
        "runs": list(previous.get("runs", [])) + [run],
        "run_id": run_id,
    }
