"""Serve new index generations without a restart: watch ``INDEX/CURRENT``, swap in what a writer commits, and
let go of the old generation as soon as nothing uses it.

Every build, insert or delete commits a new generation and switches the ``CURRENT`` pointer
(:mod:`noderag.store.generations`). A watcher thread reads the pointer every ``interval_s``; when it
moved, it opens the new generation (which pins it), prepares a searcher (reusing the loaded embedding
model) and its views off the request path, then swaps them in. Each generation counts the requests
using it (:meth:`Generation.acquire` / :meth:`Generation.release`): requests already in a batch finish
on the generation they started on, and when the last of them is done the superseded generation is
closed (its pin released) and its searcher and views dropped, so the next writer or ``noderag gc``
removes its folder: a deleted document's text does not outlive the switch on disk.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from typing import Any, Callable

__all__ = ["Generation", "GenerationReleased", "GenerationWatcher", "LiveGeneration", "collect_released"]

log = logging.getLogger("noderag.serve")


class GenerationReleased(RuntimeError):
    """A request reached a generation the server had already released (a bug: requests hold a reference)."""


class Generation:
    """One opened index generation with what the server prepared for it, and a count of the requests using it.

    ``retire()`` marks it superseded; it is closed (the store's pin released, searcher and views dropped)
    when it is retired and no request holds it.
    """

    def __init__(self, store: Any, searcher: Any, view: Any) -> None:
        self.store = store
        self.searcher = searcher
        self.view = view
        self.number: int | None = getattr(store, "generation", None)
        self._lock = threading.Lock()
        self._refs = 0
        self._retired = False
        self.closed = False

    def acquire(self, n: int = 1) -> bool:
        """Hold the generation for ``n`` more requests; False (nothing held) when it is already closed."""
        with self._lock:
            if self.closed:
                return False
            self._refs += n
            return True

    def release(self, n: int = 1) -> None:
        """Drop ``n`` holds; the last one of a retired generation closes it."""
        with self._lock:
            self._refs -= n
            if self._refs < 0:
                raise RuntimeError(f"generation {self.number}: released more often than acquired")
            done = self._retired and self._refs == 0 and not self.closed
            if done:
                self.closed = True
        if done:
            self._close()

    def retire(self) -> None:
        """Mark superseded: closed now when idle, else by the last :meth:`release`."""
        with self._lock:
            self._retired = True
            done = self._refs == 0 and not self.closed
            if done:
                self.closed = True
        if done:
            self._close()

    @property
    def refs(self) -> int:
        return self._refs

    def _close(self) -> None:
        close = getattr(self.store, "close", None)
        if close is not None:
            close()
        self.store = self.searcher = self.view = None  # the memory maps go with the last reference
        RELEASED.set()  # the watcher collects what reference cycles still hold (collect_released)
        log.info("released index generation %s", self.number)


#: Set when a generation was released; :func:`collect_released` clears it.
RELEASED = threading.Event()


def collect_released() -> bool:
    """Free what a released generation's objects still hold through reference cycles (memory maps, file handles,
    usearch views), when one was released since the last call; True when it collected.

    The searcher and its tables hold each other in cycles, which only the cyclic collector frees, and its
    oldest generation runs rarely in a server that allocates little: without this, a superseded
    generation's files stayed open (and a deleted document's text readable through them) for minutes to hours.
    Called off the request path (the watcher's thread).
    """
    if not RELEASED.is_set():
        return False
    RELEASED.clear()
    gc.collect()
    return True


class LiveGeneration:
    """The generation being served, swapped whole; :meth:`acquire` holds it for one request."""

    def __init__(self, gen: Generation) -> None:
        self._gen = gen
        self._lock = threading.Lock()

    @property
    def current(self) -> Generation:
        return self._gen

    def acquire(self) -> Generation:
        """The current generation, held for the caller (who must :meth:`Generation.release` it)."""
        with self._lock:  # a swap cannot retire it between the read and the hold
            gen = self._gen
            if not gen.acquire():
                raise GenerationReleased(f"generation {gen.number} is closed but still current")
            return gen

    def swap(self, gen: Generation, between: Callable[[], None] | None = None) -> Generation:
        """Serve ``gen`` from now on; ``between`` runs after the switch and before the old one is retired.
        Returns the old generation."""
        with self._lock:
            old, self._gen = self._gen, gen
        if between is not None:
            between()
        old.retire()
        return old


class GenerationWatcher:
    """Poll the index's ``CURRENT`` pointer and call ``on_new(Generation)`` for each newly committed one.

    Parameters
    ----------
    root : path
        The index directory.
    current : callable
        Returns the generation being served (compared with the pointer).
    prepare : callable
        ``store -> Generation``: builds the searcher and views of a freshly opened store.
    on_new : callable
        Receives the prepared generation (swaps it in).
    interval_s : float, default=1.0
    opener : callable, optional
        ``root -> store`` (default ``IndexStore.open``; the MCP server opens ``noderag.Index``).
    """

    def __init__(self, root: Any, current: Callable[[], Generation], prepare: Callable[[Any], Generation],
                 on_new: Callable[[Generation], None], *, interval_s: float = 1.0,
                 opener: Callable[[Any], Any] | None = None) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.root = root
        self.current = current
        self.prepare = prepare
        self.on_new = on_new
        self.interval_s = float(interval_s)
        self.opener = opener
        self.reloads = 0
        self.failures = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="noderag-serve-generations", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def check(self) -> bool:
        """Swap in the committed generation if it is newer than the served one; True when it did."""
        from ..store.generations import current_generation
        from ..store.tables import IndexStore

        try:
            committed = current_generation(self.root)
        except (OSError, ValueError) as exc:
            self.last_error = f"{type(exc).__name__}"
            return False
        if committed is None or committed == self.current().number:
            return False
        t0 = time.perf_counter()
        try:
            store = (self.opener or IndexStore.open)(self.root)
            if store.generation == self.current().number:
                store.close()
                return False
            gen = self.prepare(store)
        except Exception as exc:  # noqa: BLE001 - keep serving the old generation, try again later
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("could not open index generation %s; still serving %s", committed, self.current().number)
            return False
        self.on_new(gen)
        self.reloads += 1
        log.warning("now serving index generation %s (prepared in %.2f s)", gen.number, time.perf_counter() - t0)
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.check()
            collect_released()
