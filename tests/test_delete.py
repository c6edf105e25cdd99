"""Delete and replace documents: build(A ∪ B) then delete(B) equals build(A) on T/S/N/R by key (demo corpus and a
300-passage MuSiQue slice), nothing of a deleted document's text stays in the index, unknown ids change nothing,
the CLI, and SIGKILL at four points of a delete."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from noderag.api import Index
from noderag.cli import main
from noderag.config import NodeRAGConfig
from noderag.data import demo_dir
from noderag.graph.types import NodeType
from noderag.indexing.update.delete import UnknownDocumentError, delete_documents
from noderag.store.generations import current_generation, generation_path
from noderag.indexing.driver import build_index
from noderag.store.tables import IndexStore
from conftest import MUSIQUE

T, S, N, R, A, H, O = (int(t) for t in NodeType)


def _config(**over) -> NodeRAGConfig:
    base = {"embed.spec": "hash:64", "decompose.batch_size": 3, "semantic.enabled": True}
    base.update(over)
    return NodeRAGConfig().with_overrides(base)


def _build(inputs, out, **kw):
    return build_index(inputs, out, kw.pop("config", _config()), progress=False, **kw)


def _key_view(path: Path):
    """T/S/N/R nodes (type, key, text, name, source, the key of an S node's chunk), the structural edges among
    them and N mention counts, all by key (ids may differ)."""
    with IndexStore.open(path) as store:
        types, keys = store.types, store.keys
        keep = np.isin(types, (T, S, N, R))
        nodes = {(int(types[i]), int(keys[i]), store.texts[i], store.names[i], store.source_ids[i],
                  int(keys[store.chunk_ids[i]]) if store.chunk_ids[i] >= 0 else None)
                 for i in np.flatnonzero(keep)}
        g = store.graph.structural
        rows = np.repeat(np.arange(g.n), np.diff(g.indptr))
        m = keep[rows] & keep[g.indices]
        edges = sorted(zip(keys[rows[m]].tolist(), keys[g.indices[m]].tolist(), g.weights[m].tolist()))
        mentions = {int(keys[i]): int(store.mentions[i]) for i in np.flatnonzero(types == N)}
        docs = store.documents.select(["source", "title", "content_hash"]).to_pylist()
        return nodes, edges, mentions, docs


def _check_consistent(path: Path) -> None:
    """A/H/O recomputed: active ones have edges, there are no retired ones left, one vector per active T/S/A/H."""
    with Index.open(path) as idx:
        deg = np.diff(idx.graph.structural.indptr)
        aho = np.isin(idx.types, (A, H, O))
        assert idx.active.all() and np.all(deg[aho] > 0)
        assert len(idx.vectors) == int(np.isin(idx.types, (T, S, A, H)).sum())
        docs = idx.documents.to_pydict()
        assert docs["doc_id"] == list(range(len(docs["doc_id"])))
        assert all(idx.types[c] == T and idx.doc_ids[c] == d for d, cs in zip(docs["doc_id"], docs["chunk_ids"])
                   for c in cs)


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_delete_invariant_on_demo(tmp_path):
    files = sorted(demo_dir().iterdir())
    keep, drop = files[1::2], files[0::2]  # interleaved: dropped documents come first, so first-seen names change
    ref = tmp_path / "ref"
    _build(keep, ref)  # the same paths (source ids) as the full build saw
    full = tmp_path / "full"
    _build([demo_dir()], full)
    assert _key_view(full) != _key_view(ref)
    idx = Index.open(full)
    g0 = idx.generation
    new = idx.delete([str(f) for f in drop])
    assert new.generation == g0 + 1 and idx.generation == g0  # the old object still reads its own generation
    assert len(idx.documents) == 12 and len(new.documents) == 6
    assert _key_view(full) == _key_view(ref)
    _check_consistent(full)
    idx.close()
    assert current_generation(full) == g0 + 1
    # a writer removes the generations no reader pins: g0 (closed), not g0 + 1 (``new`` is open)
    delete_documents(full, [str(keep[0])])
    assert sorted(p.name for p in (full / "generations").iterdir()) == [str(g0 + 1), str(g0 + 2)]
    assert len(new.texts) == len(new) and new.vectors is not None  # its lazy loads still read g0 + 1
    new.close()
    delete_documents(full, [str(keep[1])])
    assert sorted(p.name for p in (full / "generations").iterdir()) == [str(g0 + 3)]


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_delete_after_inserts(tmp_path):
    # ids of traces stay valid across inserts (ids stable) and deletes (renumbered): A, +B, +C, -B == A + C
    files = sorted(demo_dir().iterdir())
    a, b, c = files[:4], files[4:8], files[8:]
    idx = tmp_path / "idx"
    _build(a, idx)
    _build(b, idx)
    _build(c, idx)
    delete_documents(idx, [str(f) for f in b])
    ref = tmp_path / "ref"
    _build(a + c, ref)
    assert _key_view(idx) == _key_view(ref)
    _check_consistent(idx)
    _build(b[:2], idx)  # and an insert after the delete
    _build(b[:2], ref)
    assert _key_view(idx) == _key_view(ref)


def _slice(path: Path, n: int) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            rows.append(json.loads(line))
            if len(rows) == n:
                break
    return rows


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_delete_invariant_on_musique_slice(tmp_path):
    rows = _slice(MUSIQUE / "corpus.jsonl", 300)
    a_rows = [r for i, r in enumerate(rows) if i % 3 != 0]
    b_ids = [r["id"] for i, r in enumerate(rows) if i % 3 == 0]
    cfg = _config(**{"embed.spec": "hash:32"})
    full = tmp_path / "full"
    _build([_write_jsonl(tmp_path / "all.jsonl", rows)], full, config=cfg)
    ref = tmp_path / "ref"
    _build([_write_jsonl(tmp_path / "a.jsonl", a_rows)], ref, config=cfg)
    before = _key_view(full)
    rep = delete_documents(full, b_ids)
    assert rep.deleted_documents == 100 and rep.manifest["counts"]["documents"] == 200
    after = _key_view(full)
    assert after == _key_view(ref)
    assert len(after[0]) < len(before[0])
    _check_consistent(full)


def test_unknown_ids_change_nothing(tmp_path, capsys):
    idx = tmp_path / "idx"
    _build([demo_dir()], idx)
    gen = current_generation(idx)
    files = {p.relative_to(idx).as_posix(): p.read_bytes() for p in idx.rglob("*") if p.is_file()}
    known = str(sorted(demo_dir().iterdir())[0])
    with pytest.raises(UnknownDocumentError, match=r"2 document\(s\) to delete are not in the index: 'nope', "
                                                   r"'also-nope'; nothing was deleted"):
        delete_documents(idx, ["nope", known, "also-nope"])
    assert current_generation(idx) == gen
    assert {p.relative_to(idx).as_posix(): p.read_bytes() for p in idx.rglob("*") if p.is_file()} == files
    assert main(["delete", str(idx), "nope"]) == 1
    assert "not in the index: 'nope'" in capsys.readouterr().err
    assert main(["delete", str(idx)]) == 1
    assert "nothing to delete" in capsys.readouterr().err
    assert main(["delete", str(tmp_path / "none"), "x"]) == 1
    assert "no finished index" in capsys.readouterr().err


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_cli_delete_by_id_and_all_from(tmp_path, capsys):
    a = _write_jsonl(tmp_path / "a.jsonl", [{"id": f"a{i}", "title": f"Alpha {i}", "text": f"Alpha Town {i} lies on "
                                             f"the river Wend{i}. Mayor Hollis{i} built its bridge."} for i in range(5)])
    b = _write_jsonl(tmp_path / "b.jsonl", [{"id": f"b{i}", "title": f"Bravo {i}", "text": f"Bravo Port {i} trades "
                                             f"with Alpha Town {i}. Captain Rook{i} sails there."} for i in range(4)])
    idx = tmp_path / "idx"
    assert main(["build", str(a), str(b), "--index", str(idx), "--embed", "hash:32", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["delete", str(idx), "a0", "a1", "--no-progress"]) == 0
    assert "2 document(s) deleted, generation 2" in capsys.readouterr().out
    assert main(["delete", str(idx), "--all-from", str(b), "--no-progress"]) == 0
    assert "4 document(s) deleted, generation 3" in capsys.readouterr().out
    with IndexStore.open(idx) as st:  # deleted in place (noderag.indexing.update.scrub): tombstone rows keep the ids
        assert st.documents.column("source").to_pylist() == [None, None, "a2", "a3", "a4", None, None, None, None]
    ref = tmp_path / "ref"
    assert main(["build", str(_write_jsonl(tmp_path / "r.jsonl", [json.loads(x) for x in
                                                                 a.read_text().splitlines()[2:]])),
                 "--index", str(ref), "--embed", "hash:32", "--no-progress"]) == 0
    assert main(["compact", str(idx), "--full", "--no-progress"]) == 0
    with IndexStore.open(idx) as st:
        assert st.documents.column("source").to_pylist() == ["a2", "a3", "a4"]
    assert _key_view(idx) == _key_view(ref)


@pytest.mark.slow
def test_replace_document_with_same_id(tmp_path):
    rows = [{"id": f"d{i}", "title": f"Doc {i}", "text": f"Harbour {i} was built by Engineer Vance{i}. "
                                                         f"It faces the Cold Sea."} for i in range(6)]
    idx = tmp_path / "idx"
    _build([_write_jsonl(tmp_path / "v1.jsonl", rows)], idx)
    changed = dict(rows[2], text="Harbour 2 was rebuilt by Architect Morrow in 1901. It faces the Warm Sea.")
    rep = _build([_write_jsonl(tmp_path / "v2.jsonl", [changed, rows[3]])], idx)
    assert rep.added_documents == 1 and rep.duplicates == 1 and rep.deleted_documents == 1
    with IndexStore.open(idx) as st:
        assert st.documents.column("source").to_pylist() == ["d0", "d1", "d3", "d4", "d5", "d2"]
        texts = "\n".join(t for t in st.texts if t)
        assert "Engineer Vance2" not in texts and "Architect Morrow" in texts
    ref = tmp_path / "ref"
    _build([_write_jsonl(tmp_path / "r.jsonl", [r for r in rows if r["id"] != "d2"] + [changed])], ref)
    assert _key_view(idx) == _key_view(ref)


MARKER = "Quorvath Zellimund"


def _texts_of(path: Path) -> str:
    """Decoded text content of one file: Parquet cells, SQLite rows, else the raw bytes as latin-1."""
    if path.suffix == ".parquet":
        return json.dumps(pq.read_table(path).to_pylist(), ensure_ascii=False, default=str)
    if path.suffix == ".sqlite":
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return json.dumps(list(conn.execute("SELECT * FROM responses")), ensure_ascii=False)
        finally:
            conn.close()
    return path.read_bytes().decode("latin-1")


def _files_with(root: Path, needle: str) -> list[str]:
    """Files under ``root`` that hold ``needle``: in their raw bytes (UTF-8) or in their decoded cells/rows."""
    raw = needle.encode("utf-8")
    hits = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and (raw in p.read_bytes() or needle in _texts_of(p)):
            hits.append(p.relative_to(root).as_posix())
    return hits


def test_no_text_of_a_deleted_document_stays(tmp_path):
    from noderag.llm.testing import ScriptedLLM, rule_based_respond

    corpus = tmp_path / "c"
    corpus.mkdir()
    for f in sorted(demo_dir().iterdir())[:6]:
        shutil.copy(f, corpus / f.name)
    secret = corpus / "zz_secret.txt"
    secret.write_text(f"{MARKER} founded the Vellmar Archipelago ferry company in 1871. The company of "
                      f"{MARKER} ran the Grey Heron Line from Port Emmerich.", encoding="utf-8")
    idx = tmp_path / "idx"
    cfg = _config(**{"semantic.enabled": True})
    llm = ScriptedLLM(rule_based_respond)
    _build([corpus], idx, config=cfg, llm=llm)
    hits = _files_with(idx, MARKER)
    live = generation_path(idx, current_generation(idx)).relative_to(idx).as_posix()
    # the search can find it: the node texts, decompositions and the LLM cache hold the marker before the delete
    assert {f"{live}/text/000000.bin", f"{live}/decompositions/000000.parquet", "llm_cache.sqlite"} <= set(hits), hits
    delete_documents(idx, [str(secret)], llm=ScriptedLLM(rule_based_respond))
    assert _files_with(idx, MARKER) == []
    assert _files_with(idx, "Zellimund") == []
    with IndexStore.open(idx) as st:
        assert len(st.documents) == 6 and st.manifest["counts"]["nodes"]["attribute"] > 0
    # the cache kept what the new generation used: a rerun of its summaries needs no new call
    conn = sqlite3.connect(idx / "llm_cache.sqlite")
    assert conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0] > 0
    conn.close()


_DEL = """
import sys
from noderag.indexing.update.delete import delete_documents
delete_documents(sys.argv[1], sys.argv[2:])
"""


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_delete_resumes_after_sigkill_and_leaves_previous_generation(tmp_path):
    idx = tmp_path / "idx"
    _build([demo_dir()], idx)
    files = sorted(demo_dir().iterdir())
    victims = [str(files[3]), str(files[8])]
    gen = current_generation(idx)
    before = _key_view(idx)
    live = generation_path(idx, gen)
    snapshot = {p.relative_to(live).as_posix(): p.read_bytes() for p in live.rglob("*") if p.is_file()}
    for point in ("assemble", "embed", "finalize-files", "commit", "switch"):
        r = subprocess.run([sys.executable, "-c", _DEL, str(idx), *victims], capture_output=True, text=True,
                           timeout=300, env=dict(os.environ, NODERAG_TEST_KILL_AT=point))
        assert r.returncode == -9, (point, r.returncode, r.stderr)
        assert current_generation(idx) == gen
        assert {p.relative_to(live).as_posix(): p.read_bytes() for p in live.rglob("*") if p.is_file()} == snapshot
        assert _key_view(idx) == before
    r = subprocess.run([sys.executable, "-c", _DEL, str(idx), *victims], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert not (idx / "stages").exists()
    assert sorted(p.name for p in (idx / "generations").iterdir()) == [str(current_generation(idx))]
    ref = tmp_path / "ref"
    _build([f for f in files if str(f) not in victims], ref)
    assert _key_view(idx) == _key_view(ref)
    # killed after the switch: the delete is done; the next writer removes the leftovers
    r = subprocess.run([sys.executable, "-c", _DEL, str(idx), str(files[0])], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, NODERAG_TEST_KILL_AT="committed"))
    assert r.returncode == -9
    assert (idx / "stages").is_dir()
    with IndexStore.open(idx) as st:
        assert str(files[0]) not in st.documents.column("source").to_pylist()
    with pytest.raises(UnknownDocumentError):
        delete_documents(idx, [str(files[0])])
    assert not (idx / "stages").exists()  # the writer saw that the leftover run was committed
    rep = _build([files[0]], idx)  # re-adding the document works
    assert rep.added_documents == 1
    assert sorted(p.name for p in (idx / "generations").iterdir()) == [str(current_generation(idx))]
