"""A batch's retrievals in forked worker processes (:mod:`noderag.search.forked`): the same results, in question
order, as one process; a child that fails or dies fails the batch naming its questions; no child outlives it; and
the batch forks only where it is safe and pays."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
import time
import types

import pytest

import noderag
import noderag.search.forked as forked
from noderag.graph.types import NodeType
from noderag.search import SearchConfig, Searcher
from noderag.search.result import Passage, RetrievalResult, RetrievedNode
from conftest import MUSIQUE, musique_queries

PER_WORKER = 16  # the tests' threshold: the slice of test questions is small
N_QUESTIONS = 3 * PER_WORKER  # three processes' worth


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("forked")
    corpus = root / "corpus.jsonl"
    with open(MUSIQUE / "corpus.jsonl", encoding="utf-8") as fh:
        corpus.write_text("".join(line for _, line in zip(range(150), fh)), encoding="utf-8")
    noderag.build([str(corpus)], str(root / "index"), embed="hash:64", progress=False)
    return noderag.Index.open(root / "index")


@pytest.fixture(scope="module")
def questions():
    return musique_queries(N_QUESTIONS)


@pytest.fixture
def forking(monkeypatch):
    """Let the batch fork in this test process: a long pytest run may have imported Ray or left idle pool threads
    from other tests, which the check (rightly) refuses to fork beside; the refusals are pinned by their own tests.
    Four cores, whatever the machine has."""
    monkeypatch.setattr(forked, "_fork_is_safe", lambda: True)
    monkeypatch.setattr(forked, "available_cores", lambda: 4)
    monkeypatch.setattr(forked, "MIN_PER_WORKER", PER_WORKER)


@pytest.fixture
def forks(monkeypatch):
    """The (pid, first question, end) of every child forked, as the parent saw them."""
    seen: list[tuple[int, int, int]] = []
    real = forked._fork

    def spy(work, lo, hi, encode):
        got = real(work, lo, hi, encode)
        seen.append((got[0], lo, hi))
        return got

    monkeypatch.setattr(forked, "_fork", spy)
    return seen


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


@pytest.mark.parametrize("cores", [2, 3])
def test_forked_results_equal_the_sequential_path(index, questions, forking, forks, cores):
    want = Searcher(index, SearchConfig(n_threads=1)).retrieve_many(questions)
    assert forks == []  # one core: no child
    got = Searcher(index, SearchConfig(n_threads=cores)).retrieve_many(questions)
    bounds = [N_QUESTIONS * w // cores for w in range(cores + 1)]
    assert [(lo, hi) for _, lo, hi in forks] == list(zip(bounds[1:-1], bounds[2:]))
    assert all(_reaped(pid) for pid, _, _ in forks)
    assert [r.query for r in got] == questions  # question order
    assert [r.to_dict() for r in got] == [r.to_dict() for r in want]
    for g, w in zip(got, want):
        assert type(g) is RetrievalResult and all(type(n) is RetrievedNode and type(n.type) is NodeType
                                                  for n in g.nodes)
        assert all(type(p) is Passage for p in g.passages)
        assert [(p.title, p.text, p.score, p.node_id) for p in g.passages] == [
            (p.title, p.text, p.score, p.node_id) for p in w.passages]
        assert dataclasses.astuple(g) == dataclasses.astuple(w)  # every field, exact floats included


def test_a_question_repeated_across_slices_keeps_its_place(index, questions, forking, forks):
    half = questions[:forked.MIN_PER_WORKER]
    batch = half + half  # the same questions in the parent's slice and in the child's
    got = Searcher(index, SearchConfig(n_threads=2)).retrieve_many(batch)
    assert len(forks) == 1
    assert [r.query for r in got] == batch
    assert [r.to_dict() for r in got[:len(half)]] == [r.to_dict() for r in got[len(half):]]


def test_the_payload_carries_every_field_of_a_result(index, questions):
    searcher = Searcher(index, SearchConfig(n_threads=1))
    res = searcher.retrieve(questions[0])
    payload = forked.result_payload(res, searcher._doc)
    assert set(payload) == {f.name for f in dataclasses.fields(RetrievalResult)}
    back = forked.result_from_payload(forked._results(b"ok\n" + json.dumps([payload]).encode(), 1)[0], index)
    assert back.to_dict() == res.to_dict() and back.passages[0].title == res.passages[0].title


def _fail_in_child(parent: int, question: str, how: str):
    real = Searcher._finish

    def finish(self, ctx, ppr):
        if os.getpid() != parent and ctx.query == question:
            if how == "raise":
                raise ValueError(f"no ranking for {question!r}")
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, ctx, ppr)
    return finish


def test_a_failing_child_names_its_questions_and_its_error(index, questions, forking, forks, monkeypatch):
    half = N_QUESTIONS // 2
    monkeypatch.setattr(Searcher, "_finish", _fail_in_child(os.getpid(), questions[-1], "raise"))
    with pytest.raises(RuntimeError, match=rf"(?s)questions {half + 1}-{N_QUESTIONS} of {N_QUESTIONS} failed: "
                                           r"Traceback.*ValueError: no ranking for"):
        Searcher(index, SearchConfig(n_threads=2)).retrieve_many(questions)
    assert len(forks) == 1 and _reaped(forks[0][0])


def test_a_killed_child_names_its_questions(index, questions, forking, forks, monkeypatch):
    half = N_QUESTIONS // 2
    monkeypatch.setattr(Searcher, "_finish", _fail_in_child(os.getpid(), questions[half], "kill"))
    with pytest.raises(RuntimeError, match=rf"questions {half + 1}-{N_QUESTIONS} of {N_QUESTIONS} was killed by "
                                           "signal 9"):
        Searcher(index, SearchConfig(n_threads=2)).retrieve_many(questions)
    assert len(forks) == 1 and _reaped(forks[0][0])


def test_an_interrupt_in_the_parent_kills_the_children(index, questions, forking, forks, monkeypatch):
    parent = os.getpid()
    real = Searcher._finish

    def finish(self, ctx, ppr):
        if os.getpid() != parent:
            time.sleep(600)  # a child that would outlive the batch
        if ctx.query == questions[5]:
            raise KeyboardInterrupt
        return real(self, ctx, ppr)

    monkeypatch.setattr(Searcher, "_finish", finish)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        Searcher(index, SearchConfig(n_threads=3)).retrieve_many(questions)
    assert time.monotonic() - t0 < 60
    assert len(forks) == 2 and all(_reaped(pid) for pid, _, _ in forks)


# ------------------------------------------------------------------ when a batch forks
def test_a_batch_forks_only_with_enough_questions_and_cores(forking):
    need = forked.MIN_PER_WORKER
    assert forked.batch_workers(2 * need, 2) == 2
    assert forked.batch_workers(2 * need - 1, 2) == 1  # too few questions for two processes
    assert forked.batch_workers(3 * need - 1, None) == 2
    assert forked.batch_workers(100 * need, None) == 4  # every core (four here)
    assert forked.batch_workers(100 * need, 1) == 1  # n_threads = 1: one core
    assert forked.batch_workers(100 * need, 16) == 4  # no more processes than cores
    assert forked.batch_workers(100 * need, 2, rerank=True) == 1  # a cross-encoder's native threads
    assert forked.batch_workers(100 * need, 2, llm=True) == 1  # an LLM's connections


def test_no_fork_beside_a_live_thread(monkeypatch):
    monkeypatch.setattr(forked, "available_cores", lambda: 4)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert forked.batch_workers(100 * forked.MIN_PER_WORKER, None) == 1
    finally:
        stop.set()
        t.join()


def test_no_fork_with_ray_imported(monkeypatch):
    monkeypatch.setattr(forked, "available_cores", lambda: 4)
    monkeypatch.setitem(sys.modules, "ray", types.ModuleType("ray"))
    assert forked.batch_workers(100 * forked.MIN_PER_WORKER, None) == 1


def test_a_small_batch_does_not_fork(index, questions, forking, forks):
    got = Searcher(index, SearchConfig(n_threads=2)).retrieve_many(questions[:forked.MIN_PER_WORKER])
    assert forks == [] and [r.query for r in got] == questions[:forked.MIN_PER_WORKER]



@pytest.mark.parametrize(("load", "cores", "idle"), [(0.2, 2, 2), (1.0, 2, 2), (1.4, 2, 2), (1.8, 2, 1), (3.0, 2, 1),
                                                     (2.5, 8, 7), (0.0, 1, 1)])
def test_a_batch_counts_only_the_cores_other_work_leaves_idle(monkeypatch, load, cores, idle):
    """The 1-minute load average less this process is other work; the cores it holds get no worker (two
    processes taking turns on one core run slower than one)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    assert forked.available_cores() == idle
