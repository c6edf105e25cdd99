"""One retrieval worker thread with a queue: requests that arrive while a batch runs form the next batch.

Why: retrieval is CPU-bound (embedding, PPR, selection). Run from many request threads at once it
contends for the GIL and the cores, and every request gets slow together (the earlier p99 of 1.3 s).
One worker taking everything queued as one ``retrieve_many`` batch keeps throughput close to batch
throughput while each request's queue wait and its batch's service time are measured separately.

With ``pipeline=True`` two threads form a pipeline: one embeds a batch of questions while
the other retrieves for the batch embedded before it (the ONNX embedder and the PPR kernel release the
GIL, so the stages overlap on two cores).
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

__all__ = ["Timing", "RetrievalWorker", "WorkerStopped"]


class WorkerStopped(RuntimeError):
    """The worker was closed before it could run the job."""


@dataclass
class Timing:
    """Where one request's server time went (seconds).

    Attributes
    ----------
    queue_s : float
        Waiting for the embedding stage (earlier batches being embedded).
    embed_s : float
        The query-embedding call of its batch.
    handoff_s : float
        Waiting between its batch's embedding and its retrieval (earlier parts of its batch, or with the
        pipeline the batch before it, still retrieving).
    retrieve_s : float
        Retrieval of its part of the batch after the embedding (entry points, PPR, selection, passages, context).
    finish_s : float
        Its own post-processing on the worker (``finish`` callback: subgraph, JSON encoding).
    batch_size : int
        Queries in its retrieval part (``retrieve_batch`` at most).
    """

    queue_s: float = 0.0
    embed_s: float = 0.0
    handoff_s: float = 0.0
    retrieve_s: float = 0.0
    finish_s: float = 0.0
    batch_size: int = 0


@dataclass
class _Job:
    query: str
    finish: Callable[[Any], Any] | None
    future: Future
    t_enqueued: float = field(default_factory=time.perf_counter)
    queue_s: float = 0.0


class RetrievalWorker:
    """Run ``searcher.retrieve_many`` on one thread over batches of queued queries.

    Parameters
    ----------
    searcher : Searcher
        The prepared searcher (used by this thread only, so it needs no locking).
    max_batch : int, default=32
        Most queries per batch.
    retrieve_batch : int, default=8
        Most queries per ``retrieve_many`` call: an embedded batch is retrieved in parts of this size and
        each part is answered when it is done, so a request does not wait for a whole 32-query batch.
    pipeline : bool, default=False
        Embed the next batch on a second thread while this one retrieves.
    """

    def __init__(self, searcher: Any, *, max_batch: int = 32, retrieve_batch: int = 8,
                 pipeline: bool = False) -> None:
        for name, v in (("max_batch", max_batch), ("retrieve_batch", retrieve_batch)):
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        self.searcher = searcher
        self.max_batch = max_batch
        self.retrieve_batch = retrieve_batch
        self.pipeline = bool(pipeline)
        self._q: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        # embedded batches waiting for retrieval: at most one, so the embedder runs at most one batch ahead
        self._embedded: queue.Queue[tuple[list[_Job], Any, float, float] | None] = queue.Queue(maxsize=1)
        self._closed = False
        self.batches = 0
        self.queries = 0
        self._threads = [threading.Thread(target=self._loop, name="noderag-serve-embed", daemon=True)]
        if self.pipeline:
            self._threads.append(threading.Thread(target=self._retrieve_loop, name="noderag-serve-retrieve",
                                                  daemon=True))
        for t in self._threads:
            t.start()

    def submit(self, query: str, finish: Callable[[Any], Any] | None = None) -> Future:
        """Queue one (validated) query; the future gets ``(finish(result) or result, Timing)``.

        ``finish`` runs on the worker right after retrieval (e.g. JSON encoding), so the event loop
        only moves bytes; its exception becomes the future's exception.
        """
        fut: Future = Future()
        if self._closed:
            fut.set_exception(WorkerStopped("the retrieval worker is stopped"))
            return fut
        self._q.put(_Job(query, finish, fut))
        return fut

    def submit_many(self, queries: Sequence[str], finish: Callable[[Any], Any] | None = None) -> list[Future]:
        """Queue several queries at once (they land in the same batch when it has room)."""
        return [self.submit(q, finish) for q in queries]

    def close(self, timeout: float = 10.0) -> None:
        """Stop after the queued jobs; later submissions fail with :class:`WorkerStopped`."""
        if not self._closed:
            self._closed = True
            self._q.put(None)
            for t in self._threads:
                t.join(timeout)

    # ------------------------------------------------------------------ thread
    def _loop(self) -> None:
        """Take everything queued (up to ``max_batch``) as one batch; embed it; retrieve it (or hand it on)."""
        while True:
            job = self._q.get()
            if job is None:
                break
            batch = [job]
            stop = False
            while len(batch) < self.max_batch:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            embedded = self._embed(batch)
            if embedded is not None:
                if self.pipeline:
                    self._embedded.put(embedded)
                else:
                    self._retrieve(*embedded)
            if stop:
                break
        if self.pipeline:
            self._embedded.put(None)

    def _retrieve_loop(self) -> None:
        while True:
            item = self._embedded.get()
            if item is None:
                return
            self._retrieve(*item)

    def _embed(self, batch: list[_Job]) -> tuple[list[_Job], Any, float, float] | None:
        start = time.perf_counter()
        live = [j for j in batch if j.future.set_running_or_notify_cancel()]
        if not live:
            return None
        for j in live:
            j.queue_s = start - j.t_enqueued
        try:
            vecs = self.searcher.embed([j.query for j in live])
        except Exception as exc:  # noqa: BLE001 - delivered to every waiting request, the worker lives on
            for j in live:
                j.future.set_exception(exc)
            return None
        return live, vecs, time.perf_counter() - start, time.perf_counter()

    def _retrieve(self, live: list[_Job], vecs: Any, embed_s: float, t_embedded: float) -> None:
        """Retrieve an embedded batch in sub-batches of ``retrieve_batch``, answering each as soon as it is done."""
        for at in range(0, len(live), self.retrieve_batch):
            self._retrieve_part(live[at:at + self.retrieve_batch], vecs[at:at + self.retrieve_batch], embed_s,
                                t_embedded)

    def _retrieve_part(self, live: list[_Job], vecs: Any, embed_s: float, t_embedded: float) -> None:
        t1 = time.perf_counter()
        try:
            results = self.searcher.retrieve_many([j.query for j in live], query_vectors=vecs)
        except Exception as exc:  # noqa: BLE001
            for j in live:
                j.future.set_exception(exc)
            return
        t2 = time.perf_counter()
        self.batches += 1
        self.queries += len(live)
        for j, res in zip(live, results):
            timing = Timing(queue_s=j.queue_s, embed_s=embed_s, handoff_s=t1 - t_embedded, retrieve_s=t2 - t1,
                            batch_size=len(live))
            try:
                f0 = time.perf_counter()
                out = j.finish(res) if j.finish is not None else res
                timing.finish_s = time.perf_counter() - f0
            except Exception as exc:  # noqa: BLE001
                j.future.set_exception(exc)
                continue
            j.future.set_result((out, timing))
