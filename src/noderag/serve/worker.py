"""One retrieval worker thread with a queue: requests that arrive while a batch runs form the next batch.

Why: retrieval is CPU-bound (embedding, PPR, selection). Run from many request threads at once it
contends for the GIL and the cores, and every request gets slow together (the earlier p99 of 1.3 s).
One worker taking everything queued as one ``retrieve_many`` batch keeps throughput close to batch
throughput while each request's queue wait and its batch's service time are measured separately.
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
        Waiting for the worker (earlier batches running).
    embed_s : float
        The query-embedding call of its batch.
    retrieve_s : float
        Retrieval of its batch after the embedding (entry points, PPR, selection, passages, context).
    finish_s : float
        Its own post-processing on the worker (``finish`` callback: subgraph, JSON encoding).
    batch_size : int
        Queries in its batch.
    """

    queue_s: float = 0.0
    embed_s: float = 0.0
    retrieve_s: float = 0.0
    finish_s: float = 0.0
    batch_size: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Milliseconds, rounded, for a response header or a log line."""
        return {"queue_ms": round(self.queue_s * 1e3, 3), "embed_ms": round(self.embed_s * 1e3, 3),
                "retrieve_ms": round(self.retrieve_s * 1e3, 3), "finish_ms": round(self.finish_s * 1e3, 3),
                "batch_size": self.batch_size}


@dataclass
class _Job:
    query: str
    finish: Callable[[Any], Any] | None
    future: Future
    t_enqueued: float = field(default_factory=time.perf_counter)


class RetrievalWorker:
    """Run ``searcher.retrieve_many`` on one thread over batches of queued queries.

    Parameters
    ----------
    searcher : Searcher
        The prepared searcher (used by this thread only, so it needs no locking).
    max_batch : int, default=32
        Most queries per batch.
    """

    def __init__(self, searcher: Any, *, max_batch: int = 32) -> None:
        if not (isinstance(max_batch, int) and max_batch >= 1):
            raise ValueError(f"max_batch must be an int >= 1, got {max_batch!r}")
        self.searcher = searcher
        self.max_batch = max_batch
        self._q: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._closed = False
        self.batches = 0
        self.queries = 0
        self._thread = threading.Thread(target=self._loop, name="noderag-serve-retrieval", daemon=True)
        self._thread.start()

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
            self._thread.join(timeout)

    # ------------------------------------------------------------------ thread
    def _loop(self) -> None:
        while True:
            job = self._q.get()
            if job is None:
                return
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
            self._run(batch)
            if stop:
                return

    def _run(self, batch: list[_Job]) -> None:
        start = time.perf_counter()
        live = [j for j in batch if j.future.set_running_or_notify_cancel()]
        if not live:
            return
        queries = [j.query for j in live]
        try:
            t0 = time.perf_counter()
            vecs = self.searcher.embed(queries)
            t1 = time.perf_counter()
            results = self.searcher.retrieve_many(queries, query_vectors=vecs)
            t2 = time.perf_counter()
        except Exception as exc:  # noqa: BLE001 - delivered to every waiting request, the worker lives on
            for j in live:
                j.future.set_exception(exc)
            return
        self.batches += 1
        self.queries += len(live)
        for j, res in zip(live, results):
            timing = Timing(queue_s=start - j.t_enqueued, embed_s=t1 - t0, retrieve_s=t2 - t1,
                            batch_size=len(live))
            try:
                f0 = time.perf_counter()
                out = j.finish(res) if j.finish is not None else res
                timing.finish_s = time.perf_counter() - f0
            except Exception as exc:  # noqa: BLE001
                j.future.set_exception(exc)
                continue
            j.future.set_result((out, timing))
