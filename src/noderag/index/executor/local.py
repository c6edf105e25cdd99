"""The default executor: every shard in this process, one after another (no extra dependencies)."""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["LocalExecutor"]


class LocalExecutor:
    """Run a stage's batch function in-process over the shards, handing each result to ``sink`` at once."""

    name = "local"
    remote = False

    def run_stage(self, stage, shards: dict[int, Any], sink: Callable[[int, Any, dict], None]) -> None:
        """``shards``: shard index -> input table; ``sink(i, table, meta)`` persists shard ``i``."""
        if not shards:
            return
        fn = stage.open()
        for i in sorted(shards):
            out, meta = fn(shards[i])
            sink(i, out, meta)

    def close(self) -> None:
        pass
