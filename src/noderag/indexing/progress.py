"""Progress on stderr while a build runs: a bar where a stage counts items, a spinner where it cannot."""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager

__all__ = ["Progress", "NullBar"]

_SPIN = "|/-\\"  # the spinner's frames


class Progress:
    """tqdm bars on stderr (or nothing): a bar where a stage counts items, a spinner where it cannot."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def bar(self, total: int, desc: str):
        """A bar of ``total`` items (none when progress is off or there is nothing to count: no "chunk: 0it")."""
        if not self.enabled or total == 0:
            return NullBar()
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=f"{desc:<12}", unit="it", file=sys.stderr, leave=True, dynamic_ncols=True)

    @contextmanager
    def spinner(self, desc: str, interval_s: float = 0.2):
        """A named spinner with the elapsed time while the block runs (stages without an item count:
        attributes, communities, tables, vectors, finalize), so that no long stage is silent."""
        if not self.enabled:
            yield
            return
        from tqdm.auto import tqdm

        label = f"{desc:<12}:"
        bar = tqdm(total=None, desc=f"{label} |", file=sys.stderr, leave=True, dynamic_ncols=True,
                   bar_format="{desc} {elapsed}")
        stop = threading.Event()

        def spin() -> None:
            k = 0
            while not stop.wait(interval_s):
                k += 1
                bar.set_description_str(f"{label} {_SPIN[k % len(_SPIN)]}", refresh=True)

        thread = threading.Thread(target=spin, name=f"noderag-progress-{desc}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            bar.set_description_str(f"{label} done", refresh=False)
            bar.close()


class NullBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass
