"""Two-stage retrieval worker: one thread embeds queued questions, one thread retrieves the embedded ones.

Why: retrieval is CPU-bound (embedding, PPR, selection). Run from many request threads at once it
contends for the GIL and the cores, and every request gets slow together (an earlier p99 of 1.3 s).
Here the embedding stage takes what is queued (up to ``max_batch`` questions) as one embedding call,
and hands each embedded question to the search stage, which runs ``retrieve_many`` over what is waiting
(up to ``retrieve_batch``) and answers each request as soon as its part is done. The embedder pauses
while ``max_pending`` embedded questions already wait for the search stage (back-pressure), so under
overload requests queue in front of the embedder, and a question that has been embedded is searched
within about one part's time. The ONNX embedder and the PPR kernel release the GIL, so the two stages
overlap on two cores.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .reload import GenerationReleased

try:
    import resource

    _RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", None)
except ImportError:  # not on Windows
    resource = None
    _RUSAGE_THREAD = None

__all__ = ["Timing", "RetrievalWorker", "WorkerStopped"]


class WorkerStopped(RuntimeError):
    """The worker was closed before it could run the job."""


@dataclass
class Timing:
    """Where one request's time in the worker went (seconds), from the server's own clock.

    Attributes
    ----------
    queue_s : float
        From submission until its embedding call starts: waiting for the embedder (earlier questions being
        embedded, or the embedder paused because enough embedded questions wait for the search stage).
    embed_s : float
        Its batch's query-embedding call.
    handoff_s : float
        From its embedding's end until its search starts (earlier embedded questions being searched).
    search_s : float
        Its part's ``retrieve_many`` call (entry points, PPR, selection, passages, context).
    search_cpu_s : float
        CPU time of the search thread in that call (less than ``search_s`` by the time the thread did not
        run: waiting for a core, the GIL or kernels' helper threads, whose CPU time is not counted).
    search_preempted : int
        Times the OS took a core from the search thread during that call (involuntary context switches,
        Linux; -1 where not measured): the machine's other work, not the server's own waits.
    serialise_s : float
        Its own ``finish`` callback on the worker (subgraph, JSON encoding).
    batch_size : int
        Questions in its ``retrieve_many`` part.
    embed_batch_size : int
        Questions in its embedding call.
    """

    queue_s: float = 0.0
    embed_s: float = 0.0
    handoff_s: float = 0.0
    search_s: float = 0.0
    search_cpu_s: float = 0.0
    search_preempted: int = -1
    serialise_s: float = 0.0
    batch_size: int = 0
    embed_batch_size: int = 0


@dataclass
class _Job:
    query: str
    finish: Callable[[Any, Any], Any] | None
    future: Future
    t_enqueued: float = field(default_factory=time.perf_counter)
    timing: Timing = field(default_factory=Timing)
    current: tuple[Any, Any] | None = None  # (searcher, context) that embedded it; it is searched by the same
    vec: Any = None
    t_embedded: float = 0.0


def _involuntary_switches() -> int:
    """The calling thread's involuntary context switches so far (-1 where the OS does not count them)."""
    if _RUSAGE_THREAD is None:
        return -1
    return resource.getrusage(_RUSAGE_THREAD).ru_nivcsw


def _positive_int(name: str, v: Any) -> int:
    if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
        raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    return v


class RetrievalWorker:
    """Embed queued questions on one thread and ``retrieve_many`` them on another.

    Parameters
    ----------
    searcher : Searcher
        The prepared searcher (its ``embed`` runs on the embedding thread only, ``retrieve_many`` on the
        search thread only).
    max_batch : int, default=2
        Most questions per embedding call (the ONNX embedder runs one question per run, so larger calls
        save little and make the hand-off wait longer).
    retrieve_batch : int, default=2
        Most questions per ``retrieve_many`` call; each part is answered when it is done (small parts keep
        the time after the embedding short; larger ones retrieve more cheaply per question).
    max_pending : int or None, default=None
        The embedder waits while this many embedded questions wait for the search stage; ``None`` uses
        ``retrieve_batch``.
    context : Any
        Passed to ``finish`` with each result (e.g. the views of the same index generation).
    """

    def __init__(self, searcher: Any, *, max_batch: int = 2, retrieve_batch: int = 2,
                 max_pending: int | None = None, context: Any = None) -> None:
        self.max_batch = _positive_int("max_batch", max_batch)
        self.retrieve_batch = _positive_int("retrieve_batch", retrieve_batch)
        self.max_pending = _positive_int("max_pending", retrieve_batch if max_pending is None else max_pending)
        #: The searcher and the context passed to ``finish``; :meth:`swap` replaces both between batches.
        self._current: tuple[Any, Any] = (searcher, context)
        self._q: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._ready: deque[_Job | None] = deque()  # embedded, waiting for the search stage
        self._cond = threading.Condition()
        self._closed = False
        self.batches = 0  # retrieve_many calls
        self.embed_batches = 0
        self.queries = 0
        self._threads = [threading.Thread(target=self._embed_loop, name="noderag-serve-embed", daemon=True),
                         threading.Thread(target=self._search_loop, name="noderag-serve-search", daemon=True)]
        for t in self._threads:
            t.start()

    @property
    def searcher(self) -> Any:
        """The searcher the next batch will use."""
        return self._current[0]

    def swap(self, searcher: Any, context: Any = None) -> None:
        """Use ``searcher`` (and ``context``) from the next embedding call on; questions already embedded
        are searched by the searcher that embedded them."""
        self._current = (searcher, context)

    def submit(self, query: str, finish: Callable[[Any, Any], Any] | None = None) -> Future:
        """Queue one (validated) query; the future gets ``(finish(result, context) or result, Timing)``.

        ``finish`` runs on the search thread right after retrieval (e.g. JSON encoding), so the event loop
        only moves bytes; ``context`` is the one swapped in with the searcher that retrieved. Its
        exception becomes the future's exception.
        """
        fut: Future = Future()
        if self._closed:
            fut.set_exception(WorkerStopped("the retrieval worker is stopped"))
            return fut
        self._q.put(_Job(query, finish, fut))
        return fut

    def submit_many(self, queries: Sequence[str], finish: Callable[[Any, Any], Any] | None = None) -> list[Future]:
        """Queue several queries at once (they share embedding calls and search parts when there is room)."""
        return [self.submit(q, finish) for q in queries]

    def close(self, timeout: float = 10.0) -> None:
        """Stop after the queued jobs; later submissions fail with :class:`WorkerStopped`."""
        if not self._closed:
            self._closed = True
            self._q.put(None)
            for t in self._threads:
                t.join(timeout)

    # ------------------------------------------------------------------ embedding stage
    def _embed_loop(self) -> None:
        stop = False
        while not stop:
            job = self._q.get()
            if job is None:
                break
            with self._cond:  # back-pressure: the queue forms in front of the embedder, not the search
                while len(self._ready) >= self.max_pending:
                    self._cond.wait()
            batch = [job]
            while len(batch) < self.max_batch:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            self._embed(batch)
        with self._cond:
            self._ready.append(None)
            self._cond.notify_all()

    def _hold(self, n: int) -> tuple[Any, Any]:
        """The current (searcher, context), its context held for ``n`` jobs when it counts references
        (``acquire``/``release``, as a served generation does) until their search is done."""
        while True:
            current = self._current
            acquire = getattr(current[1], "acquire", None)
            if acquire is None or acquire(n):
                return current
            if self._current is current:  # closed but still current: the swap protocol was broken
                raise GenerationReleased("the retrieval worker's generation was released while still current")

    @staticmethod
    def _let_go(current: tuple[Any, Any], n: int) -> None:
        release = getattr(current[1], "release", None)
        if release is not None:
            release(n)

    def _embed(self, batch: list[_Job]) -> None:
        start = time.perf_counter()
        live = [j for j in batch if j.future.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            current = self._hold(len(live))  # one searcher (and context) for the whole batch
        except GenerationReleased as exc:  # delivered to the requests; the worker lives on
            for j in live:
                j.future.set_exception(exc)
            return
        try:
            vecs = current[0].embed([j.query for j in live])
        except Exception as exc:  # noqa: BLE001 - delivered to every waiting request, the worker lives on
            self._let_go(current, len(live))
            for j in live:
                j.future.set_exception(exc)
            return
        end = time.perf_counter()
        self.embed_batches += 1
        for j, v in zip(live, vecs):
            j.timing.queue_s = start - j.t_enqueued
            j.timing.embed_s = end - start
            j.timing.embed_batch_size = len(live)
            j.current, j.vec, j.t_embedded = current, v, end
        with self._cond:
            self._ready.extend(live)
            self._cond.notify_all()

    # ------------------------------------------------------------------ search stage
    def _search_loop(self) -> None:
        while True:
            with self._cond:
                while not self._ready:
                    self._cond.wait()
                if self._ready[0] is None:
                    return
                part = [self._ready.popleft()]
                while (len(part) < self.retrieve_batch and self._ready and self._ready[0] is not None
                       and self._ready[0].current is part[0].current):
                    part.append(self._ready.popleft())
                self._cond.notify_all()  # room for the embedder
            current = part[0].current
            try:
                self._search(part)
            finally:  # the generation may be released once its last job is answered
                for j in part:
                    j.current = j.vec = None
                self._let_go(current, len(part))
                del part, current

    def _search(self, part: list[_Job]) -> None:
        searcher, context = part[0].current
        if getattr(context, "closed", False):  # never answer from a released generation
            exc = GenerationReleased(f"generation {getattr(context, 'number', None)} was released with jobs "
                                     "pending")
            for j in part:
                j.future.set_exception(exc)
            return
        t1, c1, n1 = time.perf_counter(), time.thread_time(), _involuntary_switches()
        try:
            results = searcher.retrieve_many([j.query for j in part], query_vectors=np.stack([j.vec for j in part]))
        except Exception as exc:  # noqa: BLE001
            for j in part:
                j.future.set_exception(exc)
            return
        t2, c2, n2 = time.perf_counter(), time.thread_time(), _involuntary_switches()
        self.batches += 1
        self.queries += len(part)
        for j, res in zip(part, results):
            timing = j.timing
            timing.handoff_s, timing.search_s, timing.batch_size = t1 - j.t_embedded, t2 - t1, len(part)
            timing.search_cpu_s = c2 - c1
            timing.search_preempted = n2 - n1 if n1 >= 0 else -1
            try:
                f0 = time.perf_counter()
                out = j.finish(res, context) if j.finish is not None else res
                timing.serialise_s = time.perf_counter() - f0
            except Exception as exc:  # noqa: BLE001
                j.future.set_exception(exc)
                continue
            j.future.set_result((out, timing))
