"""One error path in the CLI: every expected failure is one line naming the file, field or line, exit 1
(usage errors 2); a traceback only with --debug."""

from __future__ import annotations

import codecs
import json
import re
import subprocess
import sys

import pytest

import noderag.cli as cli
from noderag.cli import main
from noderag.store.lock import WriterLock
from noderag.llm.types import LLMError


def _gen(idx):
    """The current generation folder of the index in ``idx`` (where its files live)."""
    from noderag.store.generations import current_path

    return current_path(idx)


def _run(capsys, *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    err = capsys.readouterr().err
    return rc, err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert re.match(r"noderag [a-z-]+: ", lines[0]) and "Traceback" not in err
    return lines[0]


def _build(tmp_path, capsys, path) -> tuple[int, str]:
    return _run(capsys, "build", str(path), "--index", str(tmp_path / "idx"), "--embed", "hash:32", "--no-progress")


@pytest.mark.parametrize("name, content, message", [
    ("nul.txt", b"line one\nline two\nbad \x00 here\n", r"nul.txt:3: NUL character at column 5"),
    ("wide.txt", "text in UTF-16 without a mark\n".encode("utf-16-le"),
     "wide.txt: looks like UTF-16 without a byte-order mark"),
    ("latin.txt", "caf\u00e9\n".encode("latin-1"), "latin.txt: not valid UTF-8 (line 1, byte 3)"),
    ("c.jsonl", b'{"id": "a", "text": "ok"}\n{"id": "b", "text": "x \\u0000 y"}\n',
     "c.jsonl:2: field 'text' contains a NUL character"),
    ("s.jsonl", b'{"id": "a", "text": "half \\udc00 surrogate"}\n',
     "s.jsonl:1: field 'text' contains an unpaired surrogate"),
    ("m.jsonl", b'{"id": "a", "text": "ok"}\n{"id": "b", "title": 5, "text": "t"}\n',
     "m.jsonl:2: field 'title' must be a string"),
    ("x.pdf", b"%PDF-1.4", "x.pdf: unsupported file type '.pdf'"),
])
def test_bad_input_is_one_line_exit_1(tmp_path, capsys, name, content, message):
    p = tmp_path / name
    p.write_bytes(content)
    rc, err = _build(tmp_path, capsys, p)
    assert rc == 1
    line = _one_line(err)
    assert line.startswith("noderag build: error: ") and message in line
    assert not (tmp_path / "idx").exists()  # a failed first build leaves nothing behind


def test_duplicate_id_and_missing_file(tmp_path, capsys):
    a = tmp_path / "a.jsonl"
    a.write_text(json.dumps({"id": "doc-1", "text": "first"}) + "\n", encoding="utf-8")
    b = tmp_path / "b.jsonl"
    b.write_text(json.dumps({"id": "doc-1", "text": "second"}) + "\n", encoding="utf-8")
    rc, err = _run(capsys, "build", str(a), str(b), "--index", str(tmp_path / "idx"), "--no-progress")
    assert rc == 1
    assert f"{b}:1: document id 'doc-1' was already read from {a}:1 with different content" in _one_line(err)
    rc, err = _run(capsys, "build", str(tmp_path / "nope.txt"), "--index", str(tmp_path / "idx"))
    assert rc == 1 and "nope.txt: no such file or directory" in _one_line(err)


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_utf16_with_bom_builds(tmp_path, capsys):
    p = tmp_path / "wide.txt"
    p.write_bytes(codecs.BOM_UTF16_LE + "Harbour of Kessel was built in 1801 by Ann Lee.\n".encode("utf-16-le"))
    rc, _ = _build(tmp_path, capsys, p)
    assert rc == 0


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_index_errors_are_one_line(tmp_path, capsys):
    docs = tmp_path / "d.jsonl"
    docs.write_text(json.dumps({"id": "a", "text": "Kessel Harbour was built in 1801 by Ann Lee."}) + "\n",
                    encoding="utf-8")
    idx = tmp_path / "idx"
    assert _build(tmp_path, capsys, docs)[0] == 0
    capsys.readouterr()
    # lock held by another writer
    with WriterLock(idx):
        rc, err = _build(tmp_path, capsys, docs)
    assert rc == 1 and "the index is being written by pid" in _one_line(err)
    # missing index
    rc, err = _run(capsys, "stats", str(tmp_path / "none"))
    assert rc == 1 and "not an index directory" in _one_line(err)
    # damaged file
    b = bytearray((_gen(idx) / "node_types.npy").read_bytes())
    b[12:20] = b"{'descr("  # numpy's header parser raised tokenize.TokenError on this
    (_gen(idx) / "node_types.npy").write_bytes(bytes(b))
    rc, err = _run(capsys, "stats", str(idx))
    assert rc == 1 and "damaged header in node_types.npy" in _one_line(err)
    rc, err = _run(capsys, "query", str(idx), "where is Kessel?")
    assert rc == 1 and "node_types.npy" in _one_line(err)
    # format version mismatch
    m = json.loads((_gen(idx) / "manifest.json").read_text(encoding="utf-8"))
    m["format_version"] = 99
    (_gen(idx) / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    rc, err = _run(capsys, "verify", str(idx))
    assert rc == 1 and "format version 99 is not supported" in _one_line(err)


def test_llm_error_is_one_line(tmp_path, capsys, monkeypatch):
    docs = tmp_path / "d.jsonl"
    docs.write_text(json.dumps({"id": "a", "text": "Kessel Harbour was built in 1801."}) + "\n", encoding="utf-8")
    monkeypatch.delenv("NODERAG_TEST_UNSET_KEY", raising=False)
    rc, err = _run(capsys, "build", str(docs), "--index", str(tmp_path / "idx"), "--embed", "hash:32",
                   "--no-progress", "--llm", "openai:m@http://127.0.0.1:9/v1",
                   "--llm-option", "api_key_env=NODERAG_TEST_UNSET_KEY")
    assert rc == 1 and "api_key_env names 'NODERAG_TEST_UNSET_KEY'" in _one_line(err)
    assert not (tmp_path / "idx").exists()

    def fail(args):
        raise LLMError("server answered 500:\nline two of the body")

    monkeypatch.setattr(cli, "_cmd_stats", fail)
    rc, err = _run(capsys, "stats", str(tmp_path))
    assert rc == 1 and _one_line(err) == "noderag stats: error: server answered 500: line two of the body"


def test_usage_errors_exit_2_and_debug_shows_the_traceback(tmp_path, capsys, monkeypatch):
    rc, err = _run(capsys, "build", str(tmp_path))
    assert rc == 2 and "the following arguments are required: --index" in err
    rc, err = _run(capsys, "verify", "--nope", str(tmp_path))
    assert rc == 2 and "unrecognized arguments: --nope" in err

    def bug(args):
        raise TypeError("unexpected None")

    monkeypatch.setattr(cli, "_cmd_stats", bug)
    rc, err = _run(capsys, "stats", str(tmp_path))
    assert rc == 1
    assert _one_line(err) == "noderag stats: internal error: TypeError: unexpected None (rerun with --debug for the traceback)"
    rc, err = _run(capsys, "--debug", "stats", str(tmp_path))
    assert rc == 1 and "Traceback (most recent call last)" in err and "TypeError: unexpected None" in err


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_subprocess_damaged_index_no_traceback(tmp_path):
    docs = tmp_path / "d.jsonl"
    docs.write_text(json.dumps({"id": "a", "text": "Kessel Harbour was built in 1801 by Ann Lee."}) + "\n",
                    encoding="utf-8")
    idx = tmp_path / "idx"
    r = subprocess.run([sys.executable, "-m", "noderag.cli", "build", str(docs), "--index", str(idx),
                        "--embed", "hash:32", "--no-progress"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (_gen(idx) / "vectors.usearch").write_bytes((_gen(idx) / "vectors.usearch").read_bytes()[:-7])
    r = subprocess.run([sys.executable, "-m", "noderag.cli", "stats", str(idx)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "wrong size in vectors.usearch" in _one_line(r.stderr)
