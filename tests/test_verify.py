"""Checksummed index files and ``noderag verify``: fault injection over every file of a built demo index."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

from noderag.api import Index
from noderag.cli import main
from noderag.data import demo_dir
from noderag.indexing.driver import build_index
from noderag.store.tables import IndexStore
from noderag.store.verify import CHECKSUMS, IndexDamagedError, verify_index
from noderag.config import NodeRAGConfig

FAULTS = ("flip first byte", "flip middle byte", "flip last byte", "truncate 1 byte", "truncate to half")


@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    idx = tmp_path_factory.mktemp("verify") / "idx"
    build_index([demo_dir()], idx, NodeRAGConfig().with_overrides({"embed.spec": "hash:32"}), progress=False)
    return idx


@pytest.fixture()
def index_copy(small_index, tmp_path):
    out = tmp_path / "idx"
    shutil.copytree(small_index, out)
    return out


def _gen(root):
    """The current generation folder of the index in ``root`` (where its files live)."""
    from noderag.store.generations import current_path

    return current_path(root)


def _files(root) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and p.name not in (".writer.lock", ".readers"))


def _damage(path, fault: str) -> None:
    b = bytearray(path.read_bytes())
    if fault.startswith("flip"):
        b[{"first": 0, "middle": len(b) // 2, "last": len(b) - 1}[fault.split()[1]]] ^= 0xFF
    else:
        b = b[:-1] if fault == "truncate 1 byte" else b[: len(b) // 2]
    path.write_bytes(bytes(b))


def test_manifest_records_a_checksum_of_every_file(small_index):
    m = json.loads((_gen(small_index) / "manifest.json").read_text(encoding="utf-8"))
    files = set(_files(_gen(small_index))) - {"manifest.json"}
    assert set(m[CHECKSUMS]["files"]) == files and len(files) >= 13
    assert all(len(h) == 32 for h in m[CHECKSUMS]["files"].values())
    report = verify_index(small_index, "full")
    assert report.files == len(files) and not report.warnings


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_fault_injection_full_check_catches_every_fault_naming_the_file(index_copy):
    root = _gen(index_copy)
    caught_full = caught_cheap = total = 0
    missed_cheap = []
    for rel in _files(root):
        original = (root / rel).read_bytes()
        for fault in FAULTS:
            _damage(root / rel, fault)
            total += 1
            with pytest.raises(IndexDamagedError) as err:
                verify_index(root, "full")
            assert err.value.file == rel, (rel, fault, str(err.value))
            assert str(err.value).count("\n") == 0 and rel in str(err.value)
            caught_full += 1
            try:
                verify_index(root, "cheap")
                missed_cheap.append((rel, fault))
            except IndexDamagedError as exc:
                assert exc.file == rel
                caught_cheap += 1
            (root / rel).write_bytes(original)
    verify_index(root, "full")  # restored
    assert caught_full == total == 5 * len(_files(root))
    # the cheap check reads sizes and headers: it catches every truncation (but the manifest's final
    # newline, which changes nothing) and every damaged magic number, not a flipped data byte (the text pages,
    # text/*.bin, are raw bytes: no magic number)
    assert all(fault.startswith("flip") and (fault != "flip first byte" or rel.endswith(".bin"))
               or rel == "manifest.json" for rel, fault in missed_cheap), missed_cheap
    assert caught_cheap >= total * 0.65, (caught_cheap, total)  # 195/285 with the node-text pages
    print(f"fault injection: full {caught_full}/{total}, cheap {caught_cheap}/{total}")


@pytest.mark.parametrize("rel, problem", [
    ("graph/indices.npy", "damaged header in graph/indices.npy"),
    ("vectors.usearch", "wrong size in vectors.usearch"),
    ("nodes.parquet", "wrong size in nodes.parquet"),
])
def test_open_does_the_cheap_check(index_copy, rel, problem):
    path = _gen(index_copy) / rel
    if rel.endswith(".npy"):  # a header that numpy's parser chokes on (it raised tokenize.TokenError)
        b = bytearray(path.read_bytes())
        b[12:20] = b"{'descr("
        path.write_bytes(bytes(b))
    else:
        path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(IndexDamagedError, match=problem):
        Index.open(index_copy)


def test_full_check_on_request_catches_a_flipped_vector(index_copy):
    path = _gen(index_copy) / "vectors.usearch"
    b = bytearray(path.read_bytes())
    b[20] ^= 0x01  # inside a stored vector: in range, silently changes rankings
    path.write_bytes(bytes(b))
    assert Index.open(index_copy).manifest["state"] == "complete"  # the cheap check cannot see it
    with pytest.raises(IndexDamagedError, match="checksum mismatch in vectors.usearch"):
        Index.open(index_copy, verify="full")


def test_structural_invariants_without_checksums(index_copy):
    # an index of an older noderag (no checksums): the structure is still checked, with a warning
    m = json.loads((_gen(index_copy) / "manifest.json").read_text(encoding="utf-8"))
    del m[CHECKSUMS]
    (_gen(index_copy) / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    assert verify_index(index_copy, "full").warnings[0].startswith("no checksums recorded")
    from numpy.lib import format as npformat

    path = _gen(index_copy) / "graph" / "indices.npy"
    arr = np.load(path)
    bad = arr.copy()
    bad[len(bad) // 2] = 10**6  # a node id out of range, same size
    with open(path, "wb") as fh:
        npformat.write_array(fh, bad)
    with pytest.raises(IndexDamagedError, match=r"node id out of range in graph/indices\.npy"):
        verify_index(index_copy, "full")
    np.save(path, arr)
    indptr = np.load(_gen(index_copy) / "graph" / "indptr.npy")
    swapped = indptr.copy()
    swapped[[3, 4]] = swapped[[4, 3]] if swapped[3] != swapped[4] else (swapped[3] + 1, swapped[4])
    np.save(_gen(index_copy) / "graph" / "indptr.npy", swapped)
    with pytest.raises(IndexDamagedError, match=r"invalid CSR offsets in graph/indptr\.npy"):
        verify_index(index_copy, "full")


def test_reads_of_a_damaged_file_name_it(index_copy):
    path = _gen(index_copy) / "nodes.parquet"
    b = bytearray(path.read_bytes())
    footer = int.from_bytes(b[-8:-4], "little") + 8
    for i in range(8, len(b) - footer, 7):  # data pages scrambled, footer intact
        b[i] ^= 0x5A
    path.write_bytes(bytes(b))
    store = IndexStore.open(index_copy)  # sizes and footer are fine
    with pytest.raises(IndexDamagedError, match="in nodes.parquet"):
        store.nodes


def test_cli_verify_and_stats(index_copy, capsys):
    assert main(["verify", str(index_copy)]) == 0
    assert "ok (full check of" in capsys.readouterr().out
    path = _gen(index_copy) / "graph" / "weights.npy"
    b = bytearray(path.read_bytes())
    b[-1] ^= 0x10
    path.write_bytes(bytes(b))
    assert main(["verify", str(index_copy), "--cheap"]) == 0
    capsys.readouterr()
    assert main(["verify", str(index_copy)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("noderag verify: error: ") and "checksum mismatch in graph/weights.npy" in err
    assert len(err.strip().splitlines()) == 1
    (_gen(index_copy) / "graph" / "indptr.npy").write_bytes((_gen(index_copy) / "graph" / "indptr.npy").read_bytes()[:50])
    assert main(["stats", str(index_copy)]) == 1
    err = capsys.readouterr().err
    assert "graph/indptr.npy" in err and len(err.strip().splitlines()) == 1


def _flip_one_bit(path):
    b = bytearray(path.read_bytes())
    b[-2] ^= 0x01  # one value changed slightly: only the checksum sees it
    path.write_bytes(bytes(b))
    return bytes(b)


def _one_new_document(tmp_path):
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps({"id": "n1", "text": "Kessel Harbour was rebuilt in 1902."}) + "\n", encoding="utf-8")
    return new


def test_insert_refuses_a_damaged_index(index_copy, tmp_path):
    """An insert that recomputes the index reads every file: any damage stops it."""
    path = _gen(index_copy) / "graph" / "weights.npy"
    before = _flip_one_bit(path)
    whole = NodeRAGConfig().with_overrides({"update.segments": False})
    with pytest.raises(IndexDamagedError, match=r"checksum mismatch in graph/weights\.npy"):
        build_index([_one_new_document(tmp_path)], index_copy, whole, progress=False)
    assert path.read_bytes() == before and (_gen(index_copy) / "manifest.json").is_file()


@pytest.mark.parametrize("rel", ["node_keys.npy", "query/active.npy"])
def test_a_delta_insert_refuses_damage_in_what_it_reads_whole(index_copy, tmp_path, rel):
    path = _gen(index_copy) / rel
    before = _flip_one_bit(path)
    with pytest.raises(IndexDamagedError, match=rf"checksum mismatch in {re.escape(rel)}"):
        build_index([_one_new_document(tmp_path)], index_copy, progress=False)
    assert path.read_bytes() == before


@pytest.mark.parametrize("rel", ["graph/weights.npy", "text/000000.bin"])
def test_a_delta_insert_never_launders_damage_in_what_it_shares(index_copy, tmp_path, rel):
    """A file a delta only shares (graph/weights.npy) or reads a few rows of (the text blob) keeps its recorded
    checksum in the new generation: the insert goes on and the damage stays visible to verify."""
    _flip_one_bit(_gen(index_copy) / rel)
    report = build_index([_one_new_document(tmp_path)], index_copy, progress=False)
    assert report.manifest["deltas"] and report.added_documents == 1
    with pytest.raises(IndexDamagedError, match=rf"checksum mismatch in {re.escape(rel)}"):
        verify_index(index_copy, "full")


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_a_sharded_vector_index_verifies_and_a_missing_shard_is_named(tmp_path):
    idx = tmp_path / "idx"
    cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:32", "embed.vector_shards": 3})
    build_index([demo_dir()], idx, cfg, progress=False)
    root = _gen(idx)
    assert {"vectors.usearch", "vectors.1.usearch", "vectors.2.usearch"} <= set(_files(root))
    verify_index(idx, "full")
    with Index.open(idx) as index:
        assert index.retrieve("Who founded the company?").passages
    (root / "vectors.2.usearch").unlink()
    with pytest.raises(IndexDamagedError, match=r"vectors\.2\.usearch"):
        verify_index(idx, "cheap")
