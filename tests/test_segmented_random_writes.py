"""The random write sequences of ``test_random_writes`` (insert, replace, delete, compact, gc, killed writers, each
checked against a model of the document set) on an index first built as 2 or 3 segments (issue 46).

Every document of the sequences names ``Vellmar Harbour`` too, so the parts share an entity and the segmented
generation has aliases for the writes to keep right. Bounded like the original (``NODERAG_RANDOM_WRITES``).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, run_state_machine_as_test

import test_random_writes as rw
from noderag.indexing.segmented import build_segmented
from noderag.store.aliases import read_aliases
from noderag.store.generations import current_path

pytestmark = pytest.mark.slow


def _doc(n: int, version: int = 0) -> tuple[str, str]:
    sid, text = ORIGINAL_DOC(n, version)
    return sid, text + " Its ships called at Vellmar Harbour."


ORIGINAL_DOC = rw._doc


class SegmentedWrites(rw.RandomWrites):
    """:class:`RandomWrites` whose first build is a segmented one."""

    @initialize(k=st.integers(4, 7), parts=st.integers(2, 3))
    def build(self, k: int, parts: int) -> None:  # replaces the one-part build of the parent
        rw.STEP_COUNTS["segmented build"] += 1
        docs = self._new_docs(k)
        build_segmented([self._file(docs)], self.root, rw._cfg(), segments=parts)
        assert len(read_aliases(current_path(self.root))) >= 1  # Vellmar Harbour, in every part
        self.model.update(docs)


def test_random_write_sequences_on_a_segmented_index(monkeypatch):
    monkeypatch.setattr(rw, "_doc", _doc)
    run_state_machine_as_test(SegmentedWrites, settings=settings(
        max_examples=rw.EXAMPLES, stateful_step_count=rw.STEPS, deadline=None, derandomize=True,
        suppress_health_check=list(HealthCheck), database=None, print_blob=True,
        phases=(Phase.explicit, Phase.generate)))
