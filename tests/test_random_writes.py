"""Random sequences of build, insert (and replace), delete, compact, compact --full, gc and killed writers,
checked after every step against a model of the document set (issue 44).

After each step: ``verify`` (full) passes; the index holds exactly the model's documents; each document's
exact text retrieves its own passage; no node text and no retrieved passage of the index holds a deleted
document's text. A killed writer (a subprocess SIGKILLed at a checkpoint) leaves the state before it, or after
it once it got past the pointer switch. Seeded (``derandomize``) and bounded for CI: ``NODERAG_RANDOM_WRITES``
sets the examples and steps (``EXAMPLES:STEPS``); ``benchmarks/bench_random_writes.py`` runs it longer.
"""

from __future__ import annotations

import json
from collections import Counter
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from noderag.api import Index
from noderag.config import NodeRAGConfig
from noderag.indexing.driver import build_index
from noderag.indexing.update.compact import compact_index
from noderag.indexing.update.delete import delete_documents
from noderag.store.generations import remove_old_generations
from noderag.store.verify import verify_index

pytestmark = pytest.mark.slow  # whole builds, inserts, compactions and killed writers, step after step

EXAMPLES, STEPS = (int(x) for x in os.environ.get("NODERAG_RANDOM_WRITES", "2:5").split(":"))
#: checkpoints a killed writer stops at (noderag.indexing.journal.checkpoint); past "switch" the write is committed
KILL_POINTS = ("embed", "commit", "switch", "committed")
#: steps run so far, by rule (the benchmark reports them)
STEP_COUNTS: Counter = Counter()
_WORDS = ("harbour", "lighthouse", "orchard", "quarry", "foundry", "abbey", "mill", "bridge")


def _doc(n: int, version: int = 0) -> tuple[str, str]:
    """(source id, text) of document ``n``; its marker token (``zq<n>v<version>x``) appears in no other."""
    w = _WORDS[n % len(_WORDS)]
    return f"doc-{n}", (f"The {w} of Vel{n}ton, marked zq{n}v{version}x, was founded by Oran{n} Castell{version} "
                        f"in {1700 + n}. Merchants of Vel{n}ton traded salt with Brem{n}ford across the river.")


def _cfg() -> NodeRAGConfig:
    return NodeRAGConfig().with_overrides({"embed.spec": "hash:32", "update.compaction": "off",
                                           "update.max_delta_share": 0.5})


def _jsonl(folder: Path, docs: dict[str, str], tag: str) -> Path:
    path = folder / f"{tag}.jsonl"
    path.write_text("".join(json.dumps({"id": k, "title": k, "text": v}) + "\n" for k, v in docs.items()),
                    encoding="utf-8")
    return path


def _killed_write(root: Path, argv: list[str], point: str) -> int:
    """Run ``noderag ARGV`` in a subprocess SIGKILLed at ``point``; its return code."""
    env = {**os.environ, "NODERAG_TEST_KILL_AT": point}
    r = subprocess.run([sys.executable, "-m", "noderag.cli", *argv, "--no-progress"], capture_output=True, text=True,
                       env=env, timeout=600)
    return r.returncode


class RandomWrites(RuleBasedStateMachine):
    """The index in a temporary folder and the model: source id -> text of every document it must hold."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="noderag-random-writes-"))
        self.root = self.dir / "idx"
        self.model: dict[str, str] = {}
        self.gone: set[str] = set()  # marker tokens of deleted or replaced versions
        self.next_doc = 0
        self.version: dict[str, int] = {}
        self.step = 0

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def _new_docs(self, k: int) -> dict[str, str]:
        out = {}
        for _ in range(k):
            sid, text = _doc(self.next_doc)
            self.version[sid] = 0
            self.next_doc += 1
            out[sid] = text
        return out

    def _file(self, docs: dict[str, str]) -> Path:
        self.step += 1
        return _jsonl(self.dir, docs, f"step-{self.step}")

    @initialize(k=st.integers(4, 7))
    def build(self, k: int) -> None:
        STEP_COUNTS["build"] += 1
        docs = self._new_docs(k)
        build_index([self._file(docs)], self.root, _cfg(), progress=False)
        self.model.update(docs)

    @rule(k=st.integers(1, 3))
    def insert(self, k: int) -> None:
        STEP_COUNTS["insert"] += 1
        docs = self._new_docs(k)
        build_index([self._file(docs)], self.root, _cfg(), progress=False)
        self.model.update(docs)

    @precondition(lambda self: len(self.model) >= 2)
    @rule(pick=st.integers(0, 10 ** 6))
    def replace(self, pick: int) -> None:
        STEP_COUNTS["replace"] += 1
        sid = sorted(self.model)[pick % len(self.model)]
        self.gone.add(f"zq{sid[4:]}v{self.version[sid]}x")
        self.version[sid] += 1
        _, text = _doc(int(sid[4:]), self.version[sid])
        build_index([self._file({sid: text})], self.root, _cfg(), progress=False)
        self.model[sid] = text

    @precondition(lambda self: len(self.model) >= 3)
    @rule(picks=st.lists(st.integers(0, 10 ** 6), min_size=1, max_size=2))
    def delete(self, picks: list[int]) -> None:
        STEP_COUNTS["delete"] += 1
        ids = sorted({sorted(self.model)[p % len(self.model)] for p in picks})
        delete_documents(self.root, ids, config=_cfg())
        for sid in ids:
            self.gone.add(f"zq{sid[4:]}v{self.version[sid]}x")
            del self.model[sid]

    @rule(full=st.booleans())
    def compact(self, full: bool) -> None:
        STEP_COUNTS["compact --full" if full else "compact"] += 1
        compact_index(self.root, full=full)

    @rule()
    def gc(self) -> None:
        STEP_COUNTS["gc"] += 1
        removed, left = remove_old_generations(self.root)
        assert left == []  # this test holds no reader open between steps

    @rule(point=st.sampled_from(KILL_POINTS), what=st.sampled_from(("insert", "delete", "compact")))
    def killed(self, point: str, what: str) -> None:
        STEP_COUNTS[f"killed {what} at {point}"] += 1
        if what == "delete" and len(self.model) < 3:
            what = "insert"
        if what == "insert":
            docs = self._new_docs(1)
            argv, after = ["insert", str(self.root), str(self._file(docs))], dict(self.model, **docs)
        elif what == "delete":
            sid = sorted(self.model)[0]
            argv, after = ["delete", str(self.root), sid], {k: v for k, v in self.model.items() if k != sid}
        else:
            argv, after = ["compact", str(self.root)], dict(self.model)
        rc = _killed_write(self.root, argv, point)
        assert rc in (0, -9), f"noderag {' '.join(argv)} exited with {rc}"
        # rc 0: the writer never reached the checkpoint (a delete in place embeds nothing, an empty compaction
        # commits nothing) and finished; killed after the switch ("committed"): the write happened too
        if rc == 0 or point == "committed":
            for sid in set(self.model) - set(after):
                self.gone.add(f"zq{sid[4:]}v{self.version[sid]}x")
            self.model = after

    @invariant()
    def index_matches_the_model(self) -> None:
        if not self.model:
            return
        verify_index(self.root, "full")
        with Index.open(self.root) as ix:
            sources = sorted(s for s in ix.documents.column("source").to_pylist() if s)
            assert sources == sorted(self.model)
            texts = "\n".join(t for t in ix.texts if t)
            for token in self.gone:
                assert token not in texts, f"deleted text {token} is still in the index"
            for sid in sorted(self.model)[:3]:
                res = ix.retrieve(self.model[sid])
                assert res.passages[:1] == [sid], (sid, res.passages[:3])
                assert ix.texts[res.passage_node_ids[0]] == self.model[sid]  # its exact text, this version
                shown = res.context + "".join(n.text or "" for n in res.nodes)
                assert not any(token in shown for token in self.gone)


def run_machine(examples: int, steps: int, seed: int = 0) -> None:
    """Run :class:`RandomWrites` for ``examples`` sequences of up to ``steps`` steps (seed 0: derandomized)."""
    from hypothesis import seed as hseed
    from hypothesis.stateful import run_state_machine_as_test

    machine = hseed(seed)(type("SeededRandomWrites", (RandomWrites,), {})) if seed else RandomWrites
    run_state_machine_as_test(machine, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, derandomize=seed == 0,
        suppress_health_check=list(HealthCheck), database=None, print_blob=True,
        phases=(Phase.explicit, Phase.generate)))  # no shrinking: bounded time


def test_random_write_sequences_keep_the_model():
    run_machine(EXAMPLES, STEPS)
