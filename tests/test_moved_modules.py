"""Old import paths of the modules that left ``noderag.index`` resolve to the same module objects."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

import noderag
from noderag.index import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_path_is_the_new_module(old):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        mod = importlib.import_module(f"noderag.index.{old}")
    assert mod is importlib.import_module(MOVED[old])


def test_nested_old_path_is_not_loaded_twice():
    import noderag.build.decompose.nlp as new

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import noderag.index.decompose.nlp as old

    assert old is new


def test_from_import_of_a_moved_name_in_a_fresh_interpreter():
    code = ("import warnings; warnings.simplefilter('error')\n"
            "try:\n    from noderag.index.store import IndexStore\nexcept DeprecationWarning as e: print(e)\n"
            "warnings.simplefilter('ignore')\nfrom noderag.index.store import IndexStore\nprint(IndexStore.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "noderag.index.store moved to noderag.store.tables; import it from there"
    assert out[1] == "noderag.store.tables"


def test_unknown_old_module_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("noderag.index.no_such_module")


def test_build_is_callable_whether_or_not_the_build_package_was_imported(tmp_path):
    import noderag.build.driver  # noqa: F401  (binds the package as the attribute noderag.build)

    assert callable(noderag.build)
    (tmp_path / "a.txt").write_text("Ada Lovelace wrote the first program. Charles Babbage built the engine.\n")
    index = noderag.build([str(tmp_path / "a.txt")], str(tmp_path / "idx"), embed="hash:32", progress=False)
    assert isinstance(index, noderag.Index) and index.counts()["nodes"]
    index.close()


def test_split_module_fails_naming_its_new_homes():
    with pytest.raises(ModuleNotFoundError, match=r"split into .*noderag\.build\.attributes"):
        importlib.import_module("noderag.index.build_stages")


def test_layout_names_the_files_a_build_writes(tmp_path):
    from noderag.store.generations import current_generation
    from noderag.store.layout import IndexLayout

    (tmp_path / "a.txt").write_text("Ada Lovelace wrote the first program. Charles Babbage built the engine.\n")
    noderag.build([str(tmp_path / "a.txt")], str(tmp_path / "idx"), embed="hash:32", progress=False).close()
    layout = IndexLayout(tmp_path / "idx")
    gen = layout.generation(current_generation(layout.folder))
    assert layout.current.is_file() and layout.generations.is_dir() and layout.lock.exists()
    for path in (gen.manifest, gen.nodes, gen.documents, gen.linked, gen.vectors):
        assert path.is_file(), path
    assert gen.query.is_dir() and gen.decompositions.is_dir()
