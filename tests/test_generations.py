"""Generations: readers pin one generation and never write; writers remove only unpinned old generations and
orphans; a reader process looping open + retrieve while another process inserts and deletes 20 times sees no
error and every result comes wholly from one generation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from noderag.config import NodeRAGConfig
from noderag.store.generations import (CURRENT, collect_garbage, commit_generation, current_generation,
                                       generation_path, pin)
from noderag.indexing.driver import build_index
from noderag.store.tables import IndexNotFoundError, IndexStore


def _rows(prefix: str, n: int, start: int = 0) -> list[dict]:
    return [{"id": f"{prefix}-{i}", "title": f"{prefix.title()} {i}",
             "text": f"{prefix.title()} Harbour {i} was built by Engineer {prefix.title()}{i} in {1800 + i}. "
                     f"Ships from {prefix.title()} Harbour {i} sail to the island Quell{prefix}{i}."}
            for i in range(start, start + n)]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _cfg() -> NodeRAGConfig:
    # no background compaction: these tests count and pin the generations their own writes commit
    return NodeRAGConfig().with_overrides({"embed.spec": "hash:32", "update.compaction": "off"})


def _folder(tmp_path: Path, name: str) -> Path:
    p = tmp_path / name
    p.mkdir()
    (p / "manifest.json").write_text("{}")
    return p


def test_commit_pin_and_garbage_collection(tmp_path):
    root = tmp_path / "idx"
    root.mkdir()
    assert current_generation(root) is None and pin(root) is None
    g1 = commit_generation(root, _folder(tmp_path, "a"))
    assert g1 == 1 and current_generation(root) == 1 and (root / CURRENT).read_text() == "1\n"
    reader = pin(root)
    assert reader.generation == 1 and reader.path == generation_path(root, 1)
    g2 = commit_generation(root, _folder(tmp_path, "b"))
    assert g2 == 2
    assert collect_garbage(root) == []  # generation 1 is pinned
    assert (generation_path(root, 1) / "manifest.json").is_file()
    reader.close()
    assert collect_garbage(root) == [1]
    assert sorted(p.name for p in (root / "generations").iterdir()) == ["2"]
    # an orphan (renamed into place, pointer never switched) and leftover trash are removed
    orphan = _folder(tmp_path, "c")
    os.replace(orphan, root / "generations" / "3")
    (root / "generations" / ".trash-9").mkdir()
    assert collect_garbage(root) == [3]
    assert sorted(p.name for p in (root / "generations").iterdir()) == ["2"]
    assert commit_generation(root, _folder(tmp_path, "d")) == 3
    (root / CURRENT).write_text("garbage")
    with pytest.raises(ValueError, match="CURRENT: expected a generation number"):
        current_generation(root)


_PIN = """
import sys, time
from noderag.store.tables import IndexStore
s = IndexStore.open(sys.argv[1])
print(s.generation, flush=True)
time.sleep(600)
"""


def test_killed_reader_releases_its_generation(tmp_path):
    idx = tmp_path / "idx"
    build_index([_jsonl(tmp_path / "a.jsonl", _rows("alpha", 4))], idx, _cfg(), progress=False)
    with subprocess.Popen([sys.executable, "-c", _PIN, str(idx)], stdout=subprocess.PIPE, text=True) as p:
        try:
            assert p.stdout.readline().strip() == "1"
            build_index([_jsonl(tmp_path / "b.jsonl", _rows("bravo", 2))], idx, _cfg(), progress=False)
            assert sorted(q.name for q in (idx / "generations").iterdir()) == ["1", "2"]  # pinned by the reader
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=30)
    assert collect_garbage(idx) == [1]


def test_cli_gc_removes_released_generations(tmp_path, capsys):
    from noderag.cli import main

    idx = tmp_path / "idx"
    build_index([_jsonl(tmp_path / "a.jsonl", _rows("alpha", 4))], idx, _cfg(), progress=False)
    reader = IndexStore.open(idx)
    build_index([_jsonl(tmp_path / "b.jsonl", _rows("bravo", 2))], idx, _cfg(), progress=False)
    assert main(["gc", str(idx)]) == 0
    assert "removed 0 old generation(s); 1 still open by a reader: 1" in capsys.readouterr().out
    reader.close()
    assert main(["gc", str(idx)]) == 0
    assert "removed 1 old generation(s)\n" in capsys.readouterr().out
    assert sorted(q.name for q in (idx / "generations").iterdir()) == ["2"]


def test_open_never_writes(tmp_path):
    idx = tmp_path / "idx"
    build_index([_jsonl(tmp_path / "a.jsonl", _rows("alpha", 4))], idx, _cfg(), progress=False)
    (idx / "stages").mkdir()  # as a killed writer leaves it
    before = {p.relative_to(idx).as_posix(): (p.stat().st_mtime_ns, p.stat().st_size) for p in idx.rglob("*")}
    with IndexStore.open(idx) as st:
        st.graph, st.nodes, st.vectors, st.documents  # noqa: B018 (lazy loads)
    assert {p.relative_to(idx).as_posix(): (p.stat().st_mtime_ns, p.stat().st_size) for p in idx.rglob("*")} == before
    with pytest.raises(IndexNotFoundError, match="a generation folder; open the index directory"):
        IndexStore.open(generation_path(idx, 1))


_READER = """
import json, sys, time
from pathlib import Path
from noderag.api import Index
root, stop, out = Path(sys.argv[1]), Path(sys.argv[2]), open(sys.argv[3], "w")
queries = ["Who built Alpha Harbour 3?", "Which island do ships from Bravo Harbour 1 sail to?",
           "Engineer Charlie2 built which harbour?"]
held, n, errors = None, 0, 0
while not stop.exists() or n < 5:
    try:
        idx = Index.open(root)
        r = idx.retrieve(queries[n % 3])
        rows = [r]
        if held is not None:  # opened one or more commits ago: its lazy loads must still read its generation
            rows.append(held.retrieve(queries[(n + 1) % 3]))
            held.close()
            held = None
        if n % 4 == 0:
            held = idx
        else:
            idx.close()
        for x in rows:
            out.write(json.dumps({"generation": x.generation, "passages": x.passages,
                                  "nodes": [[m.id, m.text] for m in x.nodes if m.type.name in ("T", "S")]}) + "\\n")
    except Exception as e:
        errors += 1
        out.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\\n")
    n += 1
out.close()
print(n, errors)
"""

_WRITER = """
import json, sys
from pathlib import Path
from noderag.indexing.driver import build_index
from noderag.indexing.update.delete import delete_documents
from noderag.config import NodeRAGConfig
from noderag.store.tables import IndexStore
root, tmp, log = Path(sys.argv[1]), Path(sys.argv[2]), open(sys.argv[3], "w")
cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:32", "update.compaction": "off"})

def record(gen):
    with IndexStore.open(root) as st:
        assert st.generation == gen
        ts = {i: st.texts[i] for i in range(len(st)) if st.types[i] in (0, 1)}
        log.write(json.dumps({"generation": gen, "sources": st.documents.column("source").to_pylist(),
                              "nodes": ts}) + "\\n")
        log.flush()

for k in range(10):
    rows = [{"id": f"charlie-{k}-{i}", "title": f"Charlie {i}",
             "text": f"Charlie Harbour {i} was built by Engineer Charlie{i} in round {k}. It faces Delta{k}."}
            for i in range(3)]
    path = tmp / f"w{k}.jsonl"
    path.write_text("".join(json.dumps(r) + "\\n" for r in rows))
    rep = build_index([path], root, cfg, progress=False, wait=60)
    record(rep.generation)
    rep = delete_documents(root, [r["id"] for r in rows] if k % 2 else [rows[0]["id"]], wait=60, config=cfg)
    record(rep.generation)
print("done")
"""


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_reader_during_inserts_and_deletes_sees_one_generation_per_result(tmp_path):
    idx = tmp_path / "idx"
    rep = build_index([_jsonl(tmp_path / "a.jsonl", _rows("alpha", 6) + _rows("bravo", 6))], idx, _cfg(),
                      progress=False)
    stop, rlog, wlog = tmp_path / "stop", tmp_path / "reader.jsonl", tmp_path / "writer.jsonl"
    with IndexStore.open(idx) as st:
        first = {"generation": st.generation, "sources": st.documents.column("source").to_pylist(),
                 "nodes": {str(i): st.texts[i] for i in range(len(st)) if st.types[i] in (0, 1)}}
    t0 = time.monotonic()
    reader = subprocess.Popen([sys.executable, "-c", _READER, str(idx), str(stop), str(rlog)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        w = subprocess.run([sys.executable, "-c", _WRITER, str(idx), str(tmp_path), str(wlog)],
                           capture_output=True, text=True, timeout=300)
    finally:
        stop.write_text("")
    out, err = reader.communicate(timeout=120)
    elapsed = time.monotonic() - t0
    assert w.returncode == 0, w.stderr
    assert reader.returncode == 0, err
    n, errors = map(int, out.split())
    gens = {first["generation"]: first}
    for line in wlog.read_text().splitlines():
        g = json.loads(line)
        gens[g["generation"]] = g
    assert len(gens) == 21 and rep.generation == 1
    results = [json.loads(line) for line in rlog.read_text().splitlines()]
    assert [r["error"] for r in results if "error" in r] == [] and errors == 0
    seen = set()
    for r in results:
        g = gens[r["generation"]]
        seen.add(r["generation"])
        assert set(r["passages"]) <= set(g["sources"]), r
        for nid, text in r["nodes"]:  # every T/S node of the result is that generation's node with that id
            assert g["nodes"].get(str(nid)) == text, (r["generation"], nid, text)
    assert len(seen) >= 3, (sorted(seen), n)  # the reader really ran across commits
    assert elapsed < 150  # ~20 s on 2 shared cores
    print(f"\n{n} reader iterations over {len(seen)} generations in {elapsed:.1f} s")
