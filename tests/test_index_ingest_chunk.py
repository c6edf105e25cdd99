"""Ingest, chunking and sentence splitting."""

from __future__ import annotations

import json

import pytest

from noderag.indexing.chunk import chunk_text
from noderag.indexing.ingest import IngestError, ingest
from noderag.lang.sentences import split_sentences
from noderag.tokenize import count_tokens


def test_ingest_files_folders_jsonl_and_dedupe(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("Alpha text about Paris.\n", encoding="utf-8")
    (tmp_path / "d" / "b.md").write_text("# Bravo\n\nBravo body.\n", encoding="utf-8")
    (tmp_path / "d" / "ignored.bin").write_bytes(b"\x00\x01")
    (tmp_path / "d" / ".hidden.txt").write_text("hidden", encoding="utf-8")
    rows = [{"id": "p1", "title": "T1", "text": "One."}, {"text": "Two."}, {"id": 7, "title": "T1", "text": "One."}]
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    docs, dupes = ingest([tmp_path / "d", tmp_path / "c.jsonl", tmp_path / "d" / "a.txt"])
    assert [d.source for d in docs] == [str(tmp_path / "d" / "a.txt"), str(tmp_path / "d" / "b.md"), "p1",
                                        f"{tmp_path / 'c.jsonl'}:2"]
    assert docs[1].title == "Bravo" and docs[2].title == "T1" and docs[0].title is None
    assert dupes == 2  # the repeated jsonl passage and a.txt given twice
    again, d2 = ingest([tmp_path / "c.jsonl"], known_hashes=[d.content_hash for d in docs])
    assert again == [] and d2 == 3


@pytest.mark.parametrize("content, match", [
    (b'{"id": "a", "text": "ok"}\n{"id": "b", "text": \n', r"c\.jsonl:2: malformed JSON"),
    (b'{"id": "a", "text": "ok"}\n[1, 2]\n', r"c\.jsonl:2: expected a JSON object"),
    (b'{"id": "a"}\n', r"c\.jsonl:1: missing string field 'text'"),
    (b'{"id": "a", "text": "ok", "title": 3}\n', r"c\.jsonl:1: field 'title'"),
])
def test_ingest_bad_jsonl_names_file_and_line(tmp_path, content, match):
    p = tmp_path / "c.jsonl"
    p.write_bytes(content)
    with pytest.raises(IngestError, match=match):
        ingest([p])


def test_ingest_bad_inputs(tmp_path):
    with pytest.raises(IngestError, match="no such file"):
        ingest([tmp_path / "missing.txt"])
    with pytest.raises(IngestError, match="no input paths"):
        ingest([])
    b = tmp_path / "bin.txt"
    b.write_bytes(b"abc\x00def")
    with pytest.raises(IngestError, match=r"bin\.txt:1: NUL character at column 4: looks like a binary file"):
        ingest([b])
    u = tmp_path / "latin.txt"
    u.write_bytes("caf\u00e9\nna\u00efve".encode("latin-1"))
    with pytest.raises(IngestError, match=r"latin\.txt: not valid UTF-8 \(line 1"):
        ingest([u])
    o = tmp_path / "x.pdf"
    o.write_bytes(b"%PDF")
    with pytest.raises(IngestError, match="unsupported file type"):
        ingest([o])
    e = tmp_path / "empty"
    e.mkdir()
    assert ingest([e]) == ([], 0)


def test_sentences_abbreviations_initials_cjk():
    s = split_sentences("Dr. Smith met J. R. R. Tolkien in the U.S. in 1950. He left! 他来了。我们走吧！Done")
    assert s == ["Dr. Smith met J. R. R. Tolkien in the U.S. in 1950.", "He left!", "他来了。", "我们走吧！", "Done"]
    assert split_sentences("e.g. this one. And that.") == ["e.g. this one.", "And that."]


def test_short_passage_is_one_chunk():
    text = "A short passage. It stays whole."
    assert chunk_text(text, max_tokens=64) == [text]


def test_long_text_splits_at_boundaries_within_limit():
    para = " ".join(f"Sentence number {i} talks about the Vellmar Archipelago." for i in range(12))
    text = "\n\n".join([para] * 6)
    chunks = chunk_text(text, max_tokens=160, min_tokens=20)
    assert len(chunks) > 1
    assert all(count_tokens(c) <= 160 for c in chunks)
    assert all(c.endswith(".") for c in chunks)  # cut at sentence ends or paragraphs, never mid-sentence
    assert "".join(c.replace(" ", "").replace("\n", "") for c in chunks) == text.replace(" ", "").replace("\n", "")


def test_cjk_text_is_chunked_at_cjk_punctuation():
    text = "这是一个关于群岛的句子。" * 80
    chunks = chunk_text(text, max_tokens=64, min_tokens=8)
    assert len(chunks) > 1 and all(count_tokens(c) <= 64 for c in chunks)
    assert all(c.endswith("。") for c in chunks)


def test_unbreakable_word_is_hard_cut():
    text = "x" * 5000
    chunks = chunk_text(text, max_tokens=50, min_tokens=0)
    assert all(count_tokens(c) <= 50 for c in chunks) and "".join(chunks) == text
