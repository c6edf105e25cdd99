"""Former home of the build and of the on-disk store, kept so that old imports keep working.

The build moved to :mod:`noderag.build`, the on-disk index to :mod:`noderag.store`, the prepared
query tables to :mod:`noderag.search.query_index` and sentence splitting to :mod:`noderag.lang`.
``import noderag.index.X`` gives the module's new home (the same module object, not a copy) with a
``DeprecationWarning`` that names it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: old module under ``noderag.index`` -> its new dotted path
MOVED = {
    "pipeline": "noderag.build.driver",
    "ingest": "noderag.build.ingest",
    "chunk": "noderag.build.chunk",
    "sentences": "noderag.lang.sentences",
    "decompose": "noderag.build.decompose",
    "assemble": "noderag.build.assemble",
    "assembly_plan": "noderag.build.assembly_plan",
    "augment": "noderag.build.augment",
    "enrich": "noderag.build.embedding",
    "executor": "noderag.build.executor",
    "insert": "noderag.build.insert",
    "delete": "noderag.build.delete",
    "estimate": "noderag.build.estimate",
    "cleanup": "noderag.build.cleanup",
    "heap": "noderag.build.heap",
    "node_vectors": "noderag.build.node_vectors",
    "vector_process": "noderag.build.vector_process",
    "vector_worker": "noderag.build.vector_worker",
    "decompositions": "noderag.store.decompositions",
    "generations": "noderag.store.generations",
    "lock": "noderag.store.lock",
    "manifest": "noderag.store.manifest",
    "verify": "noderag.store.verify",
    "store": "noderag.store.tables",
    "text_column": "noderag.store.text_column",
    "query_index": "noderag.search.query_index",
}


#: old modules whose contents went to several new ones: importing them is an error naming those
SPLIT = {
    "build_stages": "one module per stage: noderag.build.chunk, noderag.build.decompose.stage, "
                    "noderag.build.assemble, noderag.build.embed, noderag.build.attributes, "
                    "noderag.build.communities and noderag.build.finalize",
}


def new_name(old: str) -> str | None:
    """The new dotted path of ``noderag.index.<old>...``, or None when it is not a moved module."""
    head, _, rest = old.removeprefix(__name__ + ".").partition(".")
    target = MOVED.get(head)
    return None if target is None else target + ("." + rest if rest else "")


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves ``noderag.index.X`` to the module at its new home (one module object under both names)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + ".") and (new_name(fullname) is not None
                                                    or fullname.removeprefix(__name__ + ".") in SPLIT):
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def exec_module(self, module) -> None:
        split = SPLIT.get(module.__name__.removeprefix(__name__ + "."))
        if split is not None:
            raise ModuleNotFoundError(f"{module.__name__} was split into {split}", name=module.__name__)
        target = new_name(module.__name__)
        warnings.warn(f"{module.__name__} moved to {target}; import it from there", DeprecationWarning, stacklevel=2)
        sys.modules[module.__name__] = importlib.import_module(target)


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())
