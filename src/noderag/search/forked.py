"""A batch's per-question work in forked worker processes kept from batch to batch.

The ranking of a retrieval is Python and holds the GIL, so threads do not spread a batch over the cores. A
:class:`WorkerPool` forks its children once (each inherits the opened, memory-mapped index and every cache:
nothing is reopened) and keeps them: a batch is split into contiguous slices, the children get theirs through a
pipe, this process runs the first, and each child's results come back in a compact binary form
(:func:`encode_results`; no pickle) as the same objects, in question order, as one process makes. Kept children
pay the fork and the copy-on-write faults of the pages both processes write once, not at every batch (at 10^5
passages ~45,000 faults a process, 0.15 s of system time, against ~0.4 s of work in a 200-question batch).
:func:`batch_workers` says how many processes a batch gets: one (no child) where forking is unsafe or does not pay.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import signal
import struct
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..graph.types import N_TYPES, NodeType
from .query_index import _fork_is_safe
from .result import Passage, RetrievalResult, RetrievedNode, _title

__all__ = ["MIN_PER_WORKER", "WorkerPool", "available_cores", "batch_workers", "collection_paused", "encode_results",
           "decode_results"]

#: Questions each process needs before a batch forks: below ~64 a process, the first batch's fork and copy-on-write
#: faults (~15 ms and ~0.15 s of system time a child at 10^5 passages) cost more than the second core saves
#: (~3.7 ms a question).
MIN_PER_WORKER = 64
_NODE_TYPES = tuple(NodeType(t) for t in range(N_TYPES))
_FRAME = struct.Struct("<Q")  # a message's length, before it
_PR_SET_PDEATHSIG = 1


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


@contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (it resumes after; a cycle the block left goes then): a
    batch's retrievals make and free thousands of short-lived objects a question, freed by their reference counts,
    whose allocations would otherwise start a collection every few hundred (~9% of a batch's time at 10^5
    passages, benchmarks/bench_search_cost.py)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@dataclass
class _Child:
    pid: int
    requests: int  # the pipe end this process writes a slice to
    replies: int  # the pipe end it reads the child's results from


class WorkerPool:
    """``size`` forked children that run ``work(questions, vectors)`` (a list of results) on the slices of a batch
    they are sent and answer with ``encode(results)``, until :meth:`close`. ``stamp``: what the children were forked with (the searcher's
    configuration); a batch under another stamp needs a new pool. A failed batch closes the pool (a child may be
    dead, or mid-slice), and the next one forks anew."""

    def __init__(self, work: Callable[[list[str], np.ndarray], list[Any]], encode: Callable[[list[Any]], bytes],
                 size: int, stamp: Any = None) -> None:
        self.stamp = stamp
        self._children: list[_Child] = []
        gc.freeze()  # no collection in a child writes to the pages it shares with this process (copy-on-write)
        try:
            for _ in range(size):
                self._children.append(self._fork(work, encode))
        except BaseException:
            self.close()
            raise
        finally:
            gc.unfreeze()

    @property
    def size(self) -> int:
        """Children alive (0 once closed)."""
        return len(self._children)

    def _fork(self, work: Callable[[list[str], np.ndarray], list[Any]], encode: Callable[[list[Any]], bytes]
              ) -> _Child:
        from_parent, to_child = os.pipe()  # (read end, write end)
        from_child, to_parent = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            for fd in (to_child, from_parent, from_child, to_parent):
                os.close(fd)
            raise
        if pid == 0:  # the child: never returns
            inherited = [fd for c in self._children for fd in (c.requests, c.replies)] + [to_child, from_child]
            _serve(from_parent, to_parent, work, encode, inherited)
        os.close(from_parent)
        os.close(to_parent)
        return _Child(pid, to_child, from_child)

    def run(self, queries: Sequence[str], vectors: np.ndarray, workers: int,
            here: Callable[[list[str], np.ndarray], list[Any]], decode: Callable[[bytes], list[Any]]) -> list[Any]:
        """The results of ``queries`` over ``workers`` processes (at most ``size + 1``): contiguous slices, the
        first run here by ``here``, each other sent to a child and rebuilt by ``decode``. A child that fails or
        dies raises ``RuntimeError`` naming its questions (1-based) and its error; any exception here
        (KeyboardInterrupt included) closes the pool, its children killed and reaped."""
        n = len(queries)
        workers = min(int(workers), self.size + 1)
        bounds = [n * w // workers for w in range(workers + 1)]
        sent = list(zip(self._children, bounds[1:-1], bounds[2:]))
        try:
            for child, lo, hi in sent:
                _write_frame(child.requests, _encode_request(queries[lo:hi], vectors[lo:hi]))
            out = list(here(list(queries[:bounds[1]]), vectors[:bounds[1]]))
            for child, lo, hi in sent:
                out.extend(self._collect(child, f"the forked worker of questions {lo + 1}-{hi} of {n}", decode))
            return out
        except BaseException:
            self.close()
            raise

    def _collect(self, child: _Child, where: str, decode: Callable[[bytes], list[Any]]) -> list[Any]:
        """A child's results, or ``RuntimeError`` with what it sent, or how it ended."""
        data = _read_frame(child.replies)
        if data is not None and data.startswith(b"ok\n"):
            return decode(data[3:])
        if data is not None and data.startswith(b"error\n"):
            raise RuntimeError(f"{where} failed: {data[6:].decode('utf-8', 'replace').rstrip()}")
        _, status = os.waitpid(child.pid, 0)
        self._children.remove(child)
        for fd in (child.requests, child.replies):
            os.close(fd)
        code = os.waitstatus_to_exitcode(status)
        if code < 0:
            raise RuntimeError(f"{where} was killed by signal {-code}")
        raise RuntimeError(f"{where} ended with status {code} before sending its results")

    def close(self) -> None:
        """Kill and reap every child (they hold nothing to flush: they only read the index)."""
        children, self._children = self._children, []
        for child in children:
            try:
                os.kill(child.pid, signal.SIGKILL)
            except ProcessLookupError:  # exited already (a zombie until reaped)
                pass
            for fd in (child.requests, child.replies):
                os.close(fd)
            try:
                os.waitpid(child.pid, 0)
            except ChildProcessError:  # reaped elsewhere
                pass


def _serve(requests: int, replies: int, work: Callable[[list[str], np.ndarray], list[Any]],
           encode: Callable[[list[Any]], bytes], inherited: list[int]) -> None:
    """A child's life: each slice read from ``requests`` answered on ``replies`` with b"ok\\n" and its encoded
    results, or b"error\\n" and the traceback; it ends with ``os._exit`` (none of the parent's exit handlers or
    buffered output) when the parent closes the pipe or dies. Ctrl-C reaches the parent only (it closes the pool)."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _die_with_parent()
        for fd in inherited:  # the other children's pipes: their ends must close when the parent's do
            os.close(fd)
        while (msg := _read_frame(requests)) is not None:
            try:
                body = b"ok\n" + encode(work(*_decode_request(msg)))
            except BaseException:
                body = b"error\n" + traceback.format_exc().encode("utf-8", "replace")
            _write_frame(replies, body)
        code = 0
    finally:
        os._exit(code)


def _die_with_parent() -> None:
    """Linux: this child is killed when its parent dies, however it dies (elsewhere it ends at the pipe's end)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _write_frame(fd: int, body: bytes) -> None:
    view = memoryview(_FRAME.pack(len(body)) + body)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int) -> bytes | None:
    """``n`` bytes, or None where the pipe ends first."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if k == 0:
            return None
        got += k
    return bytes(buf)


def _read_frame(fd: int) -> bytes | None:
    head = _read_exact(fd, _FRAME.size)
    return None if head is None else _read_exact(fd, _FRAME.unpack(head)[0])


def _encode_request(queries: Sequence[str], vectors: np.ndarray) -> bytes:
    """A slice: its questions as JSON, then the float32 rows of their vectors."""
    rows = np.ascontiguousarray(vectors, dtype=np.float32)
    head = json.dumps({"queries": list(queries), "dim": int(rows.shape[1])}).encode("utf-8")
    return _FRAME.pack(len(head)) + head + rows.tobytes()


def _decode_request(msg: bytes) -> tuple[list[str], np.ndarray]:
    n = _FRAME.unpack_from(msg)[0]
    head = json.loads(msg[_FRAME.size:_FRAME.size + n])
    rows = np.frombuffer(msg, dtype=np.float32, offset=_FRAME.size + n).reshape(-1, head["dim"])
    return head["queries"], rows.copy()


# ------------------------------------------------------------------ the results' payload
def encode_results(results: Sequence[RetrievalResult], doc_of: np.ndarray | None = None) -> bytes:
    """Retrievals as four blocks: int64 counts and ids, float64 scores (exact), the characters each string has, and
    every string in one UTF-8 text. A passage carries the document id of its best chunk (``doc_of[node_id]``, -1
    without ``doc_of``), from which the parent reads its title lazily, as the sequential path."""
    ints: list[int] = []
    floats: list[float] = []
    texts: list[str] = []
    for r in results:
        node_ids = [p.node_id for p in r.passages]
        docs = np.asarray(doc_of)[np.asarray(node_ids, dtype=np.int64)].tolist() if doc_of is not None and node_ids \
            else [-1] * len(node_ids)
        ints += [len(r.nodes), len(r.passages), len(r.passage_scores), len(r.passage_node_ids), len(r.documents),
                 len(r.context_node_ids), len(r.query_entities), len(r.matched_names), r.context_tokens,
                 -1 if r.generation is None else r.generation, int(r.matched), int(r.best_similarity is None)]
        ints += [n.id for n in r.nodes] + [int(n.type) for n in r.nodes] + node_ids + docs
        ints += list(r.passage_node_ids) + list(r.context_node_ids) + list(r.matched_names)
        floats += [0.0 if r.best_similarity is None else r.best_similarity, r.min_similarity]
        floats += [n.score for n in r.nodes] + [p.score for p in r.passages] + list(r.passage_scores)
        texts += [r.query, r.context, *(n.text for n in r.nodes), *(n.origin for n in r.nodes), *r.passages,
                  *(p.text for p in r.passages), *r.documents, *r.query_entities]
    blocks = [np.asarray(ints, dtype=np.int64).tobytes(), np.asarray(floats, dtype=np.float64).tobytes(),
              np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)).tobytes(),
              "".join(texts).encode("utf-8", "surrogatepass")]
    return struct.pack("<4Q", *map(len, blocks)) + b"".join(blocks)


class _Cursor:
    """Reads a decoded block in order."""

    def __init__(self, items: list) -> None:
        self.items, self.at = items, 0

    def take(self, n: int) -> list:
        self.at += n
        return self.items[self.at - n:self.at]


def decode_results(data: bytes, store: Any) -> list[RetrievalResult]:
    """The retrievals :func:`encode_results` wrote; passages read their titles from ``store``."""
    sizes = struct.unpack_from("<4Q", data)
    at = np.cumsum((struct.calcsize("<4Q"), *sizes)).tolist()
    ints = _Cursor(np.frombuffer(data, np.int64, sizes[0] // 8, at[0]).tolist())
    floats = _Cursor(np.frombuffer(data, np.float64, sizes[1] // 8, at[1]).tolist())
    ends = np.cumsum(np.frombuffer(data, np.int64, sizes[2] // 8, at[2])).tolist()
    text = data[at[3]:at[4]].decode("utf-8", "surrogatepass")
    texts = _Cursor([text[a:b] for a, b in zip([0, *ends[:-1]], ends)])
    out = []
    while ints.at < len(ints.items):
        out.append(_decode_one(ints, floats, texts, store))
    return out


def _decode_one(ints: _Cursor, floats: _Cursor, texts: _Cursor, store: Any) -> RetrievalResult:
    (n_nodes, n_passages, n_scores, n_pnodes, n_docs, n_ctx, n_ents, n_names, context_tokens, generation, matched,
     no_best) = ints.take(12)
    node_ids, types, pnode_ids, docs = ints.take(n_nodes), ints.take(n_nodes), ints.take(n_passages), \
        ints.take(n_passages)
    passage_node_ids, context_node_ids, matched_names = ints.take(n_pnodes), ints.take(n_ctx), ints.take(n_names)
    best, min_similarity = floats.take(2)
    node_scores, pscores, passage_scores = floats.take(n_nodes), floats.take(n_passages), floats.take(n_scores)
    query, context = texts.take(2)
    node_texts, origins, pids, ptexts = texts.take(n_nodes), texts.take(n_nodes), texts.take(n_passages), \
        texts.take(n_passages)
    documents, entities = texts.take(n_docs), texts.take(n_ents)
    nodes = [RetrievedNode(i, _NODE_TYPES[t], s, x, o) for i, t, s, x, o in zip(node_ids, types, node_scores,
                                                                                 node_texts, origins)]
    passages = [Passage(pid, text=x, score=s, node_id=nid, title_of=partial(_title, store, doc) if doc >= 0 else None)
                for pid, x, s, nid, doc in zip(pids, ptexts, pscores, pnode_ids, docs)]
    return RetrievalResult(query, nodes, passages, passage_scores, passage_node_ids, documents, context,
                           context_tokens, context_node_ids, entities, matched_names,
                           generation=None if generation < 0 else generation,
                           best_similarity=None if no_best else best, min_similarity=min_similarity,
                           matched=bool(matched))
