"""A build writes only into an index, an unfinished first build, an empty or a new folder; a folder input
says which of its files it skipped for their type."""

from __future__ import annotations

import pytest

import noderag
from noderag.cli import main
from noderag.indexing.ingest import ingest
from noderag.store.folder import NotAnIndexFolderError, check_index_folder

DOC = "# Grey Heron Line\n\nThe Grey Heron Line is a ferry company founded by Oda Lindqvist in 1921.\n"


@pytest.fixture()
def corpus(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "heron.md").write_text(DOC, encoding="utf-8")
    return folder


def test_a_folder_of_other_files_is_refused_in_one_line_and_left_alone(tmp_path, corpus, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes", encoding="utf-8")
    assert main(["build", str(corpus), "--index", str(mine), "--embed", "hash:32", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"noderag build: error: {mine}: not empty and not a noderag index (it holds notes.txt); "
                   "give a new or empty folder for the index"]
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]  # nothing written next to the user's file


def test_a_folder_inside_an_index_is_refused(tmp_path, corpus):
    index = noderag.build([str(corpus)], str(tmp_path / "ix"), embed="hash:32", progress=False)
    for inner in (index.root / "generations", index.root / "generations" / "new"):
        with pytest.raises(NotAnIndexFolderError, match=r"inside the index .*ix; give the index folder itself"):
            noderag.build([str(corpus)], str(inner), embed="hash:32", progress=False)
    check_index_folder(index.root)  # the index itself, an empty folder and a new one are fine
    (tmp_path / "empty").mkdir()
    check_index_folder(tmp_path / "empty")
    check_index_folder(tmp_path / "new")
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(NotAnIndexFolderError, match="not a folder"):
        check_index_folder(tmp_path / "file")


def test_a_folder_input_names_the_files_it_skipped(tmp_path, corpus, capsys):
    (corpus / "paper.pdf").write_bytes(b"%PDF-1.4")
    (corpus / "LICENSE").write_text("MIT", encoding="utf-8")
    (corpus / ".hidden.pdf").write_bytes(b"%PDF-1.4")  # hidden files are not the user's documents: not listed
    notes: list[str] = []
    docs, _ = ingest([str(corpus)], on_skip=notes.append)
    assert [d.title for d in docs] == ["Grey Heron Line"]
    assert notes == [f"{corpus}: skipped 2 files of unsupported type (LICENSE, paper.pdf); "
                     "read are .txt, .md, .markdown, .jsonl"]
    assert main(["build", str(corpus), "--index", str(tmp_path / "ix"), "--embed", "hash:32"]) == 0
    assert f"{corpus}: skipped 2 files of unsupported type (LICENSE, paper.pdf)" in capsys.readouterr().err
