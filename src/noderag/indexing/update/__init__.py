"""The update lifecycle of a finished index: insert, delete, delta segments, in-place scrub and compaction.

Each writes a new generation through the same driver and stage functions as a build
(:mod:`noderag.indexing.driver`).
"""
