"""Closing an ``Index`` lets go of its generation: no memory map and no open file of it is left in the process,
so a long-lived process that reopens an index after each write holds no superseded (or deleted) generation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import noderag
from conftest import build_passages

ROWS = [(f"p{i}", f"Harbour {i}", f"The harbour of Port {i} was built by the guild of Emmerich in {1800 + i}.")
        for i in range(12)]

pytestmark = pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="reads /proc/self (Linux)")


def _held(root: Path) -> set[str]:
    """Files under ``root`` this process maps or holds open."""
    prefix = str(root.resolve())
    held = {line.split(maxsplit=5)[5].strip() for line in Path("/proc/self/maps").read_text().splitlines()
            if len(line.split(maxsplit=5)) == 6}
    for fd in os.listdir("/proc/self/fd"):
        try:
            held.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # closed between the listing and the read
            continue
    return {h.removesuffix(" (deleted)") for h in held if h.startswith(prefix)}


def test_a_closed_index_holds_no_map_or_file_of_its_generation(tmp_path):
    build_passages(tmp_path, ROWS).close()
    index = noderag.Index.open(tmp_path / "index")
    assert index.retrieve("Who built the harbour of Port 3?").passages[0] == "p3"
    assert _held(tmp_path / "index"), "an open index maps its arrays"
    index.close()
    assert _held(tmp_path / "index") == set()
