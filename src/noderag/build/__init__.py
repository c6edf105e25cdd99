"""The build: a driver (:mod:`.driver`) and one module per stage in pipeline order.

ingest -> chunk -> decompose -> assemble -> attributes -> communities -> embed -> finalize, run
locally or on a Ray cluster (:mod:`.executor`); :mod:`.insert` and :mod:`.delete` write new
generations of a finished index.

The package is also the public ``noderag.build(inputs, index_dir, ...)`` function
(:func:`noderag.api.build`): calling it builds and opens an index, so ``noderag.build(...)``
means the same whether or not this package has been imported.
"""

from __future__ import annotations

import sys
import types


class _CallableBuildPackage(types.ModuleType):
    """``noderag.build(...)``: the package, when called, is :func:`noderag.api.build`."""

    def __call__(self, *args, **kwargs):
        from ..api import build

        return build(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableBuildPackage
