"""Write ``vectors.keys.npy`` beside a vector index saved before keys files existed, where its rows prove it.

Usage::

    python benchmarks/vector_keys_from_rows.py FOLDER

``FOLDER`` holds ``vectors.usearch`` and its shards ``vectors.J.usearch`` (e.g. a hard-linked copy of an
older generation's files: the script writes only the new file, never into the index's own folder unless
given it). For benchmarks of direct reads on indexes built before the change.

The slot order of a saved shard is not recorded in it, so it is not guessed: the candidate is each shard's
keys in ascending order (what a build that adds ascending ids gives), and it is written only when it is
proven for every row: the shard sizes are those of vector ``i`` going to shard ``i % P``, and row ``s`` of
shard ``j``'s matrix, converted as usearch converts it, equals bit for bit what usearch's ``get_many``
returns for the ``s``-th smallest key of shard ``j``. Direct reads then return exactly what usearch returns
for every key. Otherwise nothing is written and the first disagreement is printed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from noderag.graph.storage import atomic_save_npy
from noderag.graph.vector_slots import _KINDS, _matrix, _round_robin_sizes, keys_path
from noderag.graph.vectors import VectorIndex, _rows, shard_path

BLOCK = 65536


def derive(folder: Path) -> str | None:
    """Write the keys file of the index in ``folder`` if every row proves it; else return why not."""
    path = folder / "vectors.usearch"
    index = VectorIndex.load(path, view=True, direct=False)
    shards = index._shards
    p = len(shards)
    sorted_keys = [np.sort(np.asarray(x.keys, dtype=np.int64)) for x in shards]
    n = sum(k.size for k in sorted_keys)
    if [k.size for k in sorted_keys] != _round_robin_sizes(n, p):
        return f"shard sizes {[k.size for k in sorted_keys]} are not those of {n} vectors sent round robin"
    convert = _KINDS[index.dtype][1]
    for j, (x, keys) in enumerate(zip(shards, sorted_keys)):
        rows = _matrix(shard_path(path, j), x)
        for b in range(0, keys.size, BLOCK):
            want = _rows(x, keys[b:b + BLOCK].astype(np.uint64), index.ndim)
            differ = ~np.all(convert(rows[b:b + BLOCK]) == want, axis=1)
            if differ.any():
                s = b + int(np.flatnonzero(differ)[0])
                return f"row {s} of shard {j} is not the vector of key {int(keys[s])}"
    order = np.empty(n, np.int64)
    for j, keys in enumerate(sorted_keys):
        order[j::p] = keys
    atomic_save_npy(keys_path(path), order)
    return None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    why = derive(Path(argv[0]))
    if why is not None:
        print(f"not written: {why}", file=sys.stderr)
        return 1
    print(f"wrote {keys_path(Path(argv[0]) / 'vectors.usearch')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
