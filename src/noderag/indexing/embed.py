"""The embed stage: vectors of every T/S node, new ones embedded on the executor, old ones reused."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..graph.types import NodeType
from .assemble import NodeTable
from .embedding import embed_late_resumable, embed_texts_resumable, load_vectors
from .node_vectors import NodeVectors

__all__ = ["embed_stage"]

T, S = int(NodeType.T), int(NodeType.S)


def embed_stage(table: NodeTable, old_n: int, emb, executor, config, stages: Path, bars, doc_of,
                embedder_given: bool, old_vectors: tuple[list[Path], np.ndarray] | None = None,
                vectors_file: Path | None = None) -> NodeVectors:
    """Vectors of every T/S node: the new ones embedded (resumable shards), the old ones read from
    ``old_vectors`` = (the previous generation's vectors.usearch of each segment, old id of each node).

    ``vectors_file``: keep them in this ``.npy`` file (room for the A and H vectors included), which
    the vector index worker maps too; the build then holds only the rows it is using in memory."""
    from .decompose.nlp import unit_prefix
    from .executor.sharded import embed_sharded

    dim = int(emb.dim)
    n_ts = len(table)
    types = table.types_array()
    # rows for the embedded nodes only; float16 unless the index keeps float32 vectors
    vec = NodeVectors(dim, np.float32 if config.embed.vector_dtype == "f32" else np.float16)
    n_vec = int(np.isin(types, (T, S)).sum())
    vec.reserve(n_vec + 1024 + n_vec // 20)  # untouched pages until written; room for the A and H vectors
    if vectors_file is not None:
        vectors_file.parent.mkdir(parents=True, exist_ok=True)
        vec.share_file(vectors_file)
    if old_vectors is not None:
        path, vec_src = old_vectors
        old_ids = np.flatnonzero(np.isin(types[:old_n], (T, S)))
        old_ids = old_ids[vec_src[old_ids] >= 0]  # a delete's untouched segments need no vectors here
        vec[old_ids] = load_vectors(path, vec_src[old_ids], dim)
    new_ids = np.flatnonzero(np.isin(types, (T, S)) & (np.arange(n_ts) >= old_n))
    with bars.bar(int(new_ids.size), "embed T/S") as bar:
        if config.embed.late_units and callable(getattr(emb, "embed_with_spans", None)):
            new_t = new_ids[types[new_ids] == T]
            new_s = new_ids[types[new_ids] == S]
            pos_of_t = {int(t): k for k, t in enumerate(new_t.tolist())}
            in_new_chunk = np.array([table.chunk_ids[s] in pos_of_t for s in new_s.tolist()], dtype=bool)
            if not in_new_chunk.all():  # a new unit of an existing chunk: no forward pass of its chunk to reuse
                rest = new_s[~in_new_chunk]
                vec[rest] = embed_texts_resumable(emb, [table.texts[i] for i in rest.tolist()], stages / "emb_s",
                                                  batch_size=config.embed.batch_size, progress=bar)
                new_s = new_s[in_new_chunk]
            unit_chunk = np.array([pos_of_t[table.chunk_ids[s]] for s in new_s.tolist()], dtype=np.int64)
            titles = [getattr(doc_of.get(table.doc_ids[t]), "title", None) for t in new_t.tolist()]
            vec[new_t], vec[new_s], _ = embed_late_resumable(
                emb, [table.texts[i] for i in new_t.tolist()], [table.texts[i] for i in new_s.tolist()],
                unit_chunk, [unit_prefix(t) if t else None for t in titles], stages / "emb_ts",
                batch_size=config.embed.batch_size, progress=bar)
        else:
            embed_sharded(executor, config, emb, embedder_given, table.texts.take(new_ids),
                          stages / "emb_ts", bar, out=vec.slots(new_ids))
    return vec
