"""A batch's per-question work in forked worker processes.

The ranking of a retrieval is Python and holds the GIL, so threads do not spread a batch over the cores.
:func:`run_forked` splits the questions into contiguous slices, forks a child per slice but the first (it
inherits the opened, memory-mapped index and every cache: nothing is reopened), runs the first slice itself and
rebuilds each child's results from a JSON payload read back through a pipe (no pickle): the same objects, in
question order, as one process makes. :func:`batch_workers` says how many processes a batch gets: one (no child)
where forking is unsafe or does not pay.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import traceback
from functools import partial
from typing import Any, Callable

import numpy as np

from ..graph.types import N_TYPES, NodeType
from .query_index import _fork_is_safe
from .result import Passage, RetrievalResult, RetrievedNode, _title

__all__ = ["MIN_PER_WORKER", "batch_workers", "run_forked", "result_payload", "result_from_payload"]

#: Questions each process needs before a batch forks. A child's fixed cost at 10^5 passages: ~15 ms to fork and reap,
#: ~1.3 ms a result sent back, and the copy-on-write faults of the pages both processes write after the fork (~45,000
#: a process for a 200-question batch, ~0.15 s of system time each), against ~3.7 ms a question: below ~64 a process
#: the copies cost more than the second core saves.
MIN_PER_WORKER = 64
_NODE_TYPES = tuple(NodeType(t) for t in range(N_TYPES))


def available_cores() -> int:
    """The cores this process may run on that other work leaves idle: those of its affinity less the 1-minute load
    average of the rest of the machine (this process counts one), as ``make -l`` reads the load. Two processes
    on a core other work holds take turns on it and evict each other's caches: a forked batch ran at 0.56x one
    process's rate at 10^5 passages where another job held a core of two (benchmarks/bench_search_cost.py)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        others = max(os.getloadavg()[0] - 1.0, 0.0)
    except OSError:  # no load average on this system
        others = 0.0
    return max(1, min(cores, int(cores - others + 0.5)))


def batch_workers(n_questions: int, cores: int | None, *, rerank: bool = False, llm: bool = False) -> int:
    """Processes for a batch of ``n_questions``: up to ``cores`` (None: all) of the idle ones
    (:func:`available_cores`), at least :data:`MIN_PER_WORKER` questions each; 1 where forking is unsafe: no POSIX
    fork, another Python thread alive (a lock it holds would stay held in the child), Ray imported, or a
    cross-encoder (``rerank``) or LLM (``llm``) in use, whose native thread pools and connections a child would
    inherit dead."""
    idle = available_cores()
    want = min(idle if cores is None else int(cores), idle, n_questions // MIN_PER_WORKER)
    if want < 2 or rerank or llm or not hasattr(os, "fork"):
        return 1
    return want if _fork_is_safe() else 1


def run_forked(work: Callable[[int, int], list[Any]], n: int, workers: int,
               encode: Callable[[Any], Any], decode: Callable[[Any], Any]) -> list[Any]:
    """``work(lo, hi)`` (the results of items lo..hi-1) over ``n`` items in ``workers`` contiguous slices: the
    first here, each other in a forked child that sends ``encode(result)`` of its results back as JSON, rebuilt
    by ``decode``. A child that fails or dies raises ``RuntimeError`` naming its items (1-based) and its error;
    every child is reaped, and an exception here (KeyboardInterrupt included) kills them first."""
    bounds = [n * w // workers for w in range(workers + 1)]
    pending: list[tuple[int, int, int, int]] = []  # (pid, read end or -1, lo, hi) of the children not reaped yet
    gc.freeze()  # no collection in either process writes to the pages they share (copy-on-write)
    try:
        for w in range(1, workers):
            pending.append(_fork(work, bounds[w], bounds[w + 1], encode))
        out = list(work(bounds[0], bounds[1]))
        while pending:
            pid, fd, lo, hi = pending[0]
            with os.fdopen(fd, "rb") as pipe:
                pending[0] = (pid, -1, lo, hi)
                data = pipe.read()
            got = _results(data, hi - lo)
            got = None if got is None else [decode(item) for item in got]  # while the child exits (unmaps)
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            pending.pop(0)
            if got is None or code != 0:
                raise RuntimeError(_failure(f"the forked worker of questions {lo + 1}-{hi} of {n}", code, data))
            out.extend(got)
        return out
    finally:
        for pid, fd, _, _ in pending:  # after a failure here: no child outlives the batch, none is left a zombie
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:  # exited already (a zombie until reaped)
                pass
            if fd >= 0:
                os.close(fd)
            os.waitpid(pid, 0)
        gc.unfreeze()


def _fork(work: Callable[[int, int], list[Any]], lo: int, hi: int, encode: Callable[[Any], Any]
          ) -> tuple[int, int, int, int]:
    """A child computing ``work(lo, hi)``; it writes b"ok" and the JSON of its results, or b"error" and its
    traceback, and leaves with ``os._exit`` (none of the parent's exit handlers or buffered output)."""
    read, write = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        raise
    if pid == 0:
        code = 1
        try:
            os.close(read)
            try:
                body = b"ok\n" + json.dumps([encode(r) for r in work(lo, hi)]).encode("utf-8")
            except BaseException:
                body = b"error\n" + traceback.format_exc().encode("utf-8", "replace")
            with os.fdopen(write, "wb") as pipe:
                pipe.write(body)
            code = 0 if body.startswith(b"ok\n") else 1
        finally:
            os._exit(code)
    os.close(write)
    return pid, read, lo, hi


def _results(data: bytes, count: int) -> list[Any] | None:
    """The ``count`` encoded results a child sent, or None (it sent its error, or too little)."""
    if not data.startswith(b"ok\n"):
        return None
    try:
        got = json.loads(data[3:])
    except ValueError:
        return None
    return got if isinstance(got, list) and len(got) == count else None


def _failure(where: str, code: int, data: bytes) -> str:
    """What went wrong in a child: its traceback, the signal that killed it, or what it sent."""
    if data.startswith(b"error\n"):
        return f"{where} failed: {data[6:].decode('utf-8', 'replace').rstrip()}"
    if code < 0:
        return f"{where} was killed by signal {-code}"
    return f"{where} ended with status {code} after sending {len(data)} bytes (not its results)"


# ------------------------------------------------------------------ the results' payload
def result_payload(res: RetrievalResult, doc_of: np.ndarray) -> dict[str, Any]:
    """A retrieval's fields as plain JSON values (floats round-trip exactly); a passage carries the document id of
    its best chunk (``doc_of[node_id]``), from which the parent reads its title lazily, as the sequential path."""
    nodes = [[n.id, int(n.type), n.score, n.text, n.origin] for n in res.nodes]
    node_ids = [int(p.node_id) for p in res.passages]
    docs = np.asarray(doc_of)[np.asarray(node_ids, dtype=np.int64)].tolist() if node_ids else []
    passages = [[str(p), p.text, p.score, p.node_id, d] for p, d in zip(res.passages, docs)]
    return {"query": res.query, "nodes": nodes, "passages": passages, "passage_scores": list(res.passage_scores),
            "passage_node_ids": list(res.passage_node_ids), "documents": list(res.documents),
            "context": res.context, "context_tokens": res.context_tokens,
            "context_node_ids": list(res.context_node_ids), "query_entities": list(res.query_entities),
            "matched_names": list(res.matched_names), "generation": res.generation,
            "best_similarity": res.best_similarity, "min_similarity": res.min_similarity, "matched": res.matched}


def result_from_payload(d: dict[str, Any], store: Any) -> RetrievalResult:
    """The :class:`RetrievalResult` of :func:`result_payload`; passages read their titles from ``store``."""
    nodes = [RetrievedNode(i, _NODE_TYPES[t], s, text, origin) for i, t, s, text, origin in d["nodes"]]
    passages = [Passage(pid, text=text, score=s, node_id=nid, title_of=partial(_title, store, doc))
                for pid, text, s, nid, doc in d["passages"]]
    return RetrievalResult(d["query"], nodes, passages, d["passage_scores"], d["passage_node_ids"], d["documents"],
                           d["context"], d["context_tokens"], d["context_node_ids"], d["query_entities"],
                           d["matched_names"], generation=d["generation"], best_similarity=d["best_similarity"],
                           min_similarity=d["min_similarity"], matched=d["matched"])
