"""Indexing: the build pipeline, a driver (:mod:`.driver`) and one module per stage in pipeline order.

ingest -> chunk -> decompose -> assemble -> attributes -> communities -> embed -> finalize, run
locally or on a Ray cluster (:mod:`.executor`). The update lifecycle of a finished index (insert,
delete, delta segments, in-place scrub, compaction, background compaction) is :mod:`.update`.
The public entry point is :func:`noderag.build` (:func:`noderag.api.build`).
"""
