"""Serve new index generations without a restart: watch ``INDEX/CURRENT`` and swap in what a writer commits.

Every build, insert or delete commits a new generation and switches the ``CURRENT`` pointer
(:mod:`noderag.index.generations`). A watcher thread reads the pointer every ``interval_s``; when it
moved, it opens the new generation (which pins it), prepares a searcher (reusing the loaded embedding
model) and its views off the request path, then swaps them into the retrieval worker between two
batches. Requests already in a batch finish on the generation they started on; the old generation's
pin is released when its last batch drops it, so a writer can then remove it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["Generation", "GenerationWatcher"]

log = logging.getLogger("noderag.serve")


@dataclass(frozen=True)
class Generation:
    """One opened index generation with what the server prepared for it."""

    store: Any
    searcher: Any
    view: Any

    @property
    def number(self) -> int | None:
        return getattr(self.store, "generation", None)


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
    """

    def __init__(self, root: Any, current: Callable[[], Generation], prepare: Callable[[Any], Generation],
                 on_new: Callable[[Generation], None], *, interval_s: float = 1.0) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.root = root
        self.current = current
        self.prepare = prepare
        self.on_new = on_new
        self.interval_s = float(interval_s)
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
        from ..index.generations import current_generation
        from ..index.store import IndexStore

        try:
            committed = current_generation(self.root)
        except (OSError, ValueError) as exc:
            self.last_error = f"{type(exc).__name__}"
            return False
        if committed is None or committed == self.current().number:
            return False
        t0 = time.perf_counter()
        try:
            store = IndexStore.open(self.root)
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
