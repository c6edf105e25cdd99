"""A batch's per-question work in forked worker processes kept from batch to batch.

The ranking of a retrieval is Python and holds the GIL, so threads do not spread a batch over the cores. A
:class:`WorkerPool` forks its children once (each inherits the opened, memory-mapped index and every cache:
nothing is reopened) and keeps them: a batch's questions are dealt out in turn, the children get their shares
through a pipe, this process runs the first, and each child's results come back in a compact binary form
(:func:`encode_results`; no pickle) as the same objects, in question order, as one process makes. Kept children
pay the fork and the copy-on-write faults of the pages both processes write once, not at every batch (at 10^5
passages ~45,000 faults a process, 0.15 s of system time, against ~0.4 s of work in a 200-question batch).
:func:`batch_workers` says how many processes a batch gets: one (no child) where forking is unsafe or does not pay.
"""

from __future__ import annotations

import ctypes
import fcntl
import gc
import json
import os
import select
import signal
import struct
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterable, Iterator, Sequence

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
#: Results a child sends at a time: small enough that this process rebuilds most of them while its own share still
#: runs (at 10^5 passages ~44 KB a result; the pipe holds 1 MiB), large enough that a part's fixed costs vanish.
PART = 8
_PR_SET_PDEATHSIG = 1


def available_cores() -> int:
    """The cores this process may run on that other work leaves idle: those of its affinity less the other work,
    the smaller of the 1-minute load average less this process (as ``make -l`` reads the load) and the tasks
    runnable right now less this one (the load average still counts, for a minute, a job that has just ended).
    Two processes on a core other work holds take turns on it and evict each other's caches: a forked batch ran at
    0.56x one process's rate at 10^5 passages where another job held a core of two
    (benchmarks/bench_search_cost.py)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        others = max(os.getloadavg()[0] - 1.0, 0.0)
    except OSError:  # no load average on this system
        others = 0.0
    running = _running_tasks()
    if running is not None:
        others = min(others, max(running - 1, 0))
    return max(1, min(cores, int(cores - others + 0.5)))


def _running_tasks() -> int | None:
    """Tasks runnable on the machine now, this one included (Linux ``/proc/loadavg``), or None where unknown."""
    try:
        with open("/proc/loadavg", "rb") as fh:
            return int(fh.read().split()[3].split(b"/")[0])
    except (OSError, IndexError, ValueError):
        return None


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
    """``size`` forked children that run ``work(questions, vectors)`` (their results one by one) on the shares of a
    batch they are sent and answer with ``encode(results)``, a part at a time, until :meth:`close`. ``stamp``: what
    the children were forked with (the searcher's configuration); a batch under another stamp needs a new pool. A
    failed batch closes the pool (a child may be dead, or mid-share), and the next one forks anew."""

    def __init__(self, work: Callable[[list[str], np.ndarray], Iterable[Any]], encode: Callable[[list[Any]], bytes],
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

    def _fork(self, work: Callable[[list[str], np.ndarray], Iterable[Any]], encode: Callable[[list[Any]], bytes]
              ) -> _Child:
        from_parent, to_child = os.pipe()  # (read end, write end)
        from_child, to_parent = os.pipe()
        _widen(to_parent)
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
            here: Callable[[list[str], np.ndarray], Iterable[Any]], decode: Callable[[bytes], list[Any]]
            ) -> list[Any]:
        """The results of ``queries`` over ``workers`` processes (at most ``size + 1``), process ``w`` taking every
        ``workers``-th question from question ``w`` (a batch ordered by source or kind still splits evenly): the
        first share run here by ``here`` (its results one by one), each other sent to a child, whose results come
        back in parts (:data:`PART`) rebuilt by ``decode`` between this process's own questions (not all at the
        end, while the children's cores wait), put back in question order. A child that fails or dies raises
        ``RuntimeError`` naming its questions (1-based) and its error; any exception here (KeyboardInterrupt
        included) closes the pool, its children killed and reaped."""
        n = len(queries)
        workers = min(int(workers), self.size + 1)
        replies = [_Replies(c, f"the forked worker of questions {w + 1}, {w + 1 + workers}, ... (one in {workers} "
                               f"of {n})", decode) for c, w in zip(self._children, range(1, workers))]
        try:
            for w, r in enumerate(replies, 1):
                _write_frame(r.child.requests, _encode_request(queries[w::workers], vectors[w::workers]))
            out: list[Any] = [None] * n
            own = []
            for result in here(list(queries[0::workers]), np.ascontiguousarray(vectors[0::workers])):
                own.append(result)
                for r in replies:
                    r.pump(block=False)
            out[0::workers] = own
            for w, r in enumerate(replies, 1):
                while not r.done:
                    r.pump(block=True)
                out[w::workers] = r.results
            return out
        except _ChildGone as gone:
            self.close()
            raise RuntimeError(str(gone)) from None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Kill and reap every child (they hold nothing to flush: they only read the index)."""
        children, self._children = self._children, []
        for child in children:
            for fd in (child.requests, child.replies):
                os.close(fd)
            if child.pid < 0:  # reaped already
                continue
            try:
                os.kill(child.pid, signal.SIGKILL)
            except ProcessLookupError:  # exited already (a zombie until reaped)
                pass
            try:
                os.waitpid(child.pid, 0)
            except ChildProcessError:  # reaped elsewhere
                pass


def _serve(requests: int, replies: int, work: Callable[[list[str], np.ndarray], Iterable[Any]],
           encode: Callable[[list[Any]], bytes], inherited: list[int]) -> None:
    """A child's life: each share read from ``requests`` answered on ``replies`` with its results encoded in parts
    of :data:`PART` (b"part\n" each, the last b"ok\n"), or b"error\n" and the traceback; it ends with ``os._exit``
    (none of the parent's exit handlers or buffered output) when the parent closes the pipe or dies. Ctrl-C
    reaches the parent only (it closes the pool)."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _die_with_parent()
        for fd in inherited:  # the other children's pipes: their ends must close when the parent's do
            os.close(fd)
        while (msg := _read_frame(requests)) is not None:
            part: list[Any] = []
            try:
                with collection_paused():
                    for result in work(*_decode_request(msg)):
                        part.append(result)
                        if len(part) == PART:
                            _write_frame(replies, b"part\n" + encode(part))
                            part = []
                    body = b"ok\n" + encode(part)
            except BaseException:
                body = b"error\n" + traceback.format_exc().encode("utf-8", "replace")
            _write_frame(replies, body)
        code = 0
    finally:
        os._exit(code)


class _ChildGone(Exception):
    """A child failed or ended: the pool closes, and the batch raises ``RuntimeError`` with this message."""


class _Replies:
    """What one child sends for one share: its frames read as they come (``pump``), each part decoded at once."""

    def __init__(self, child: _Child, where: str, decode: Callable[[bytes], list[Any]]) -> None:
        self.child, self.where, self.decode = child, where, decode
        self.results: list[Any] = []
        self.done = False
        self._buf = bytearray()
        self._poll = select.poll()  # not select(): an index's open files put the pipe past its 1024 descriptors
        self._poll.register(child.replies, select.POLLIN)

    def pump(self, block: bool) -> None:
        """Read what the child has sent (waiting for something where ``block``) and handle every whole frame."""
        if self.done or not self._poll.poll(None if block else 0):
            return
        data = os.read(self.child.replies, 1 << 20)
        if not data:
            raise _ChildGone(self._ended())
        self._buf += data
        while len(self._buf) >= _FRAME.size:
            size = _FRAME.unpack_from(self._buf)[0]
            if len(self._buf) < _FRAME.size + size:
                break
            frame = bytes(self._buf[_FRAME.size:_FRAME.size + size])
            del self._buf[:_FRAME.size + size]
            self._handle(frame)

    def _handle(self, frame: bytes) -> None:
        if frame.startswith(b"part\n"):
            self.results += self.decode(frame[5:])
        elif frame.startswith(b"ok\n"):
            self.results += self.decode(frame[3:])
            self.done = True
        elif frame.startswith(b"error\n"):
            raise _ChildGone(f"{self.where} failed: {frame[6:].decode('utf-8', 'replace').rstrip()}")
        else:
            raise _ChildGone(f"{self.where} sent {len(frame)} bytes that are not its results")

    def _ended(self) -> str:
        """How the child ended (its pipe closed before its results): the signal or status, once reaped."""
        _, status = os.waitpid(self.child.pid, 0)
        self.child.pid = -1  # reaped
        code = os.waitstatus_to_exitcode(status)
        if code < 0:
            return f"{self.where} was killed by signal {-code}"
        return f"{self.where} ended with status {code} before sending its results"


def _widen(fd: int) -> None:
    """Linux: a pipe that holds a few parts (1 MiB), so a child seldom waits for this process to read."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)
    except (AttributeError, OSError):  # another system, or above the system's limit: the default size
        pass


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
