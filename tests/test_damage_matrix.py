"""The damage matrix: five faults in every file of a generation, in ``CURRENT`` and in the writer lock, each
followed by ``noderag query``; no case may end as "internal error", and every case that fails names the file
that is actually damaged (an ``IndexDamagedError`` or the pointer's own one-line message)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from noderag.cli import main
from noderag.config import NodeRAGConfig
from noderag.store.generations import CURRENT
from noderag.store.lock import LOCK_FILE
from noderag.indexing.driver import build_index

FAULTS = ("missing", "truncated", "first byte", "middle byte", "last byte")


def _rows(n: int) -> list[dict]:
    return [{"id": f"d{i}", "title": f"Harbour {i}",
             "text": f"Harbour {i} was built by Engineer Smith{i} in {1800 + i}. Ships from Harbour {i} sail to "
                     f"the island Quell{i}. The island Quell{i} trades salt with Harbour {(i + 1) % n}."}
            for i in range(n)]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("matrix")
    src = d / "docs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in _rows(16)), encoding="utf-8")
    root = d / "idx"
    cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:32", "semantic.enabled": True})
    build_index([src], root, cfg, progress=False)
    return root


def _damage(path: Path, fault: str) -> bool:
    """Apply ``fault`` to the file at ``path``; False when it cannot apply (no byte to flip)."""
    if fault == "missing":
        path.unlink()
        return True
    data = bytearray(path.read_bytes())
    if not data:
        return False
    if fault == "truncated":
        path.write_bytes(bytes(data[: len(data) // 2]))
        return True
    pos = {"first byte": 0, "middle byte": len(data) // 2, "last byte": len(data) - 1}[fault]
    data[pos] ^= 0xFF
    path.write_bytes(bytes(data))
    return True


def _targets(root: Path) -> list[str]:
    """Every file of the current generation (relative to the index folder), then CURRENT and the lock."""
    gen = root / "generations" / (root / CURRENT).read_text().strip()
    files = sorted(p.relative_to(root).as_posix() for p in gen.rglob("*") if p.is_file())
    return files + [CURRENT, LOCK_FILE]


def test_damage_matrix(pristine, tmp_path, capsys):
    targets = _targets(pristine)
    assert len(targets) >= 40, targets
    failures, named, cases = [], 0, 0
    for rel in targets:
        for fault in FAULTS:
            root = tmp_path / "case"
            if root.exists():
                shutil.rmtree(root)
            shutil.copytree(pristine, root)
            if not _damage(root / rel, fault):
                continue
            cases += 1
            rc = main(["query", str(root), "Who built Harbour 3?", "--json"])
            err = capsys.readouterr().err
            short = rel.split("/", 2)[2] if rel.startswith("generations/") else rel
            if "internal error" in err or "Traceback" in err:
                failures.append(f"{rel} {fault}: {err.strip()}")
            elif rc != 0:
                if err.count("\n") != 1 or short not in err:
                    failures.append(f"{rel} {fault}: rc {rc}, wrong file or not one line: {err.strip()}")
                else:
                    named += 1
            elif (rel == CURRENT and fault != "truncated") or (fault == "missing" and rel != LOCK_FILE):
                failures.append(f"{rel} {fault}: not detected (rc 0)")
    assert not failures, f"{len(failures)} of {cases} cases:\n" + "\n".join(failures)
    # every fault applies except byte faults in the two empty files (.readers, the released lock)
    assert cases >= 5 * (len(targets) - 2), cases
    assert named >= 2 * len(targets), (named, cases)
