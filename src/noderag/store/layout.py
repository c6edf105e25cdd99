"""Every file name of the on-disk format, in one place, and the paths they make under an index.

An index directory holds ``CURRENT`` (the number of the current generation), ``generations/<n>/``
(each a complete, immutable index), the writer lock, the LLM cache, and ``stages/`` while a
build runs. A generation folder holds the files named here (and the graph's own arrays,
:mod:`noderag.graph.hetero`): its base segment at the top, and the delta segments that
inserts added since the last compaction under ``deltas/<k>/`` (:mod:`noderag.store.segments`).
"""

from __future__ import annotations

__all__ = ["CURRENT", "GENERATIONS", "READERS", "LOCK_FILE", "LLM_CACHE", "STAGES", "MANIFEST", "NODES", "DOCUMENTS",
           "DECOMPOSITIONS", "LINKED", "COMMUNITIES", "SCRUBBED", "SCRUBBED_KEYS", "VECTORS", "QUERY_DIR", "NODE_TEXT_OFF", "NODE_TEXT_PAGES", "NODE_TYPES", "NODE_KEYS", "NODE_KEY_ORDER", "NODE_KEYS_SORTED", "DELTAS", "DELTA_EDGES"]

# the index directory
CURRENT = "CURRENT"  # the current generation's number
GENERATIONS = "generations"  # one folder per generation
LOCK_FILE = ".writer.lock"  # one writer at a time (fcntl.flock)
LLM_CACHE = "llm_cache.sqlite"  # every LLM call of the index's builds and answers
STAGES = "stages"  # an unfinished build's resumable work

# a generation folder
READERS = ".readers"  # readers' shared locks pin a generation
MANIFEST = "manifest.json"  # configuration, counts, stage report, checksums
NODES = "nodes.parquet"  # the node table (names, ids, flags; the texts are in pages beside it)
NODE_TEXT_OFF = "text_off.npy"  # the node texts' int64 offsets (store.node_texts)
NODE_TEXT_PAGES = "text"  # the node texts' UTF-8 bytes in pages (store.paged_blob)
DOCUMENTS = "documents.parquet"  # one row per document
DECOMPOSITIONS = "decompositions"  # what each chunk contributed (an insert re-assembles from it), in Parquet parts
LINKED = "linked.parquet"  # the name-link S-N edges
COMMUNITIES = "communities.npy"  # each node's Leiden community (int32, -1: none): a merging compaction's warm start
SCRUBBED = "scrubbed.npy"  # the base's nodes deleted in place whose edges, labels and keys its shared files still hold
SCRUBBED_KEYS = "scrubbed_keys.npy"  # their tombstone keys, in the same order (uint64)
VECTORS = "vectors.usearch"  # the HNSW index (and its shards vectors.<k>.usearch)
QUERY_DIR = "query"  # the prepared query tables
NODE_TYPES = "node_types.npy"  # written by the graph
NODE_KEYS = "node_keys.npy"
NODE_KEY_ORDER = "node_key_order.npy"  # with the next one, written by the graph from graph.hetero.KEY_ORDER_FROM nodes on
NODE_KEYS_SORTED = "node_keys_sorted.npy"
DELTAS = "deltas"  # the delta segments of inserts (deltas/<k>/, each a small index of its new nodes)
DELTA_EDGES = "edges"  # a delta's new structural edges (src, dst, w .npy; global node ids, each edge once)

