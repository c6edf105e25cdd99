"""``noderag serve`` lets go of superseded generations: after a delete, once the server has switched and the
requests still running on the old generation are done, ``gc`` removes it and the deleted document's text is
in no file of the index folder; no request is answered from a released generation."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from noderag.config import NodeRAGConfig  # noqa: E402
from noderag.indexing.update.delete import delete_documents  # noqa: E402
from noderag.store.generations import current_generation, remove_old_generations  # noqa: E402
from noderag.indexing.driver import build_index  # noqa: E402
from noderag.serve.app import ServeSettings, create_app  # noqa: E402
from noderag.serve.reload import Generation, LiveGeneration  # noqa: E402

SECRET = "Zebulon Quartzfeather"


def _corpus(path: Path) -> Path:
    rows = [{"id": f"mill-{i}", "title": f"Mill {i}",
             "text": f"Mill {i} on the river Wend was built by Miller Arno{i} in {1700 + i}. It ground rye for "
                     f"the town of Harl{i}."} for i in range(10)]
    rows.append({"id": "secret", "title": "The ledger",
                 "text": f"The ledger of Mill 3 was kept by {SECRET}, who hid it under the millstone."})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _files_with(root: Path, needle: bytes) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and needle in p.read_bytes())


def test_deleted_text_is_gone_after_the_server_switched_and_gc_ran(tmp_path):
    root = tmp_path / "idx"
    build_index([_corpus(tmp_path / "c.jsonl")], root, NodeRAGConfig().with_overrides({"embed.spec": "hash:32"}),
                progress=False)
    gen0 = current_generation(root)
    assert _files_with(root, SECRET.encode())  # the text is on disk (text/ holds it uncompressed)
    app = create_app(root, settings=ServeSettings(reload_s=0.1))
    statuses: list[int] = []
    stop = threading.Event()
    with TestClient(app) as client:
        def load() -> None:
            while not stop.is_set():
                statuses.append(client.post("/retrieve", json={"question": "Who kept the ledger of Mill 3?"})
                                .status_code)

        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            time.sleep(0.5)
            delete_documents(root, ["secret"])  # the writer cannot remove generation gen0: the server holds it
            assert (root / "generations" / str(gen0)).is_dir()
            deadline = time.monotonic() + 60
            while client.get("/health").json()["generation"] == gen0:
                assert time.monotonic() < deadline, "the server did not switch within 60 s"
                time.sleep(0.05)
            removed: list[int] = []
            while True:  # the old generation goes once its last running request is done
                done, left = remove_old_generations(root)
                removed += done
                if gen0 in removed:
                    break
                assert time.monotonic() < deadline, f"generation {gen0} still held: {left}"
                time.sleep(0.05)
            time.sleep(0.3)  # the new generation keeps serving
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        stats = client.get("/stats").json()
    assert statuses and set(statuses) == {200}, sorted(set(statuses))
    assert stats["server"]["generation_reloads"] == 1 and stats["server"]["errors"] == 0
    assert sorted(p.name for p in (root / "generations").iterdir()) == [str(current_generation(root))]
    assert _files_with(root, SECRET.encode()) == []
    assert _files_with(root, b"Quartzfeather") == []


class _Store:
    def __init__(self) -> None:
        self.closed = 0
        self.generation = 7

    def close(self) -> None:
        self.closed += 1


def test_generation_reference_counts():
    old, new = _Store(), _Store()
    gen = Generation(old, object(), object())
    live = LiveGeneration(gen)
    held = live.acquire()
    assert held is gen and gen.refs == 1
    replaced = live.swap(Generation(new, object(), object()))
    assert replaced is gen and not gen.closed and old.closed == 0  # a request still runs on it
    assert gen.acquire() is True  # a job embedded before the swap may still join its batch
    gen.release()
    held.release()
    assert gen.closed and old.closed == 1 and gen.store is None and gen.searcher is None
    assert gen.acquire() is False  # released: no request can take it any more
    with pytest.raises(RuntimeError, match="released more often than acquired"):
        gen.release()
    assert live.acquire().store is new and new.closed == 0
