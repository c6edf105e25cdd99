"""A batch's retrievals in forked worker processes (:mod:`noderag.search.forked`): the same results, in question
order, as one process; the children kept from batch to batch and ended with their searcher or their parent; a
child that fails or dies fails the batch naming its questions; and the batch forks only where it is safe and
pays."""

from __future__ import annotations

import dataclasses
import gc
import os
import signal
import subprocess
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

TESTS = os.path.dirname(os.path.abspath(__file__))

PER_WORKER = 16  # the tests' threshold: the slice of test questions is small
N_QUESTIONS = 3 * PER_WORKER  # three processes' worth


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("forked")
    corpus = root / "corpus.jsonl"
    with open(MUSIQUE / "corpus.jsonl", encoding="utf-8") as fh:
        corpus.write_text("".join(line for _, line in zip(range(150), fh)), encoding="utf-8")
    noderag.build([str(corpus)], str(root / "index"), embed="hash:64", progress=False)
    return root / "index"


@pytest.fixture(scope="module")
def index(index_dir):
    return noderag.Index.open(index_dir)


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
    """The pid of every child forked, as the parent saw them."""
    seen: list[int] = []
    real = forked.WorkerPool._fork

    def spy(self, work, encode):
        got = real(self, work, encode)
        seen.append(got.pid)
        return got

    monkeypatch.setattr(forked.WorkerPool, "_fork", spy)
    return seen


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def _alive(pid: int) -> bool:
    return os.waitpid(pid, os.WNOHANG) == (0, 0)


def _same(got: list[RetrievalResult], want: list[RetrievalResult]) -> None:
    assert [r.to_dict() for r in got] == [r.to_dict() for r in want]
    for g, w in zip(got, want):
        assert type(g) is RetrievalResult and all(type(n) is RetrievedNode and type(n.type) is NodeType
                                                  for n in g.nodes)
        assert all(type(p) is Passage for p in g.passages)
        assert [(p.title, p.text, p.score, p.node_id) for p in g.passages] == [
            (p.title, p.text, p.score, p.node_id) for p in w.passages]
        assert dataclasses.astuple(g) == dataclasses.astuple(w)  # every field, exact floats included


@pytest.mark.parametrize("cores", [2, 3])
def test_forked_results_equal_the_sequential_path(index, questions, forking, forks, cores):
    want = Searcher(index, SearchConfig(n_threads=1)).retrieve_many(questions)
    assert forks == []  # one core: no child
    searcher = Searcher(index, SearchConfig(n_threads=cores))
    got = searcher.retrieve_many(questions)
    assert len(forks) == cores - 1 and all(_alive(pid) for pid in forks)  # kept for the next batch
    assert [r.query for r in got] == questions  # question order
    _same(got, want)
    searcher.close()
    assert all(_reaped(pid) for pid in forks) and searcher._pool is None


def test_the_children_are_kept_from_batch_to_batch(index, questions, forking, forks):
    """The second batch forks nothing; a larger batch sends the kept children larger slices; a configuration
    changed between batches forks children that hold the new one."""
    searcher = Searcher(index, SearchConfig(n_threads=2))
    first = searcher.retrieve_many(questions)
    again = searcher.retrieve_many(questions[::-1] + questions)
    assert len(forks) == 1 and _alive(forks[0])
    _same(again[len(questions):], first)
    _same(again[:len(questions)], first[::-1])
    searcher.config = searcher.config.replace(context_tokens=300)
    changed = searcher.retrieve_many(questions)
    assert len(forks) == 2 and _reaped(forks[0]) and _alive(forks[1])
    _same(changed, Searcher(index, SearchConfig(n_threads=1, context_tokens=300)).retrieve_many(questions))
    assert changed[0].context_tokens <= 300 < first[0].context_tokens
    searcher.close()


def test_a_collected_searcher_ends_its_children(index, questions, forking, forks):
    searcher = Searcher(index, SearchConfig(n_threads=2))
    searcher.retrieve_many(questions)
    assert len(forks) == 1 and _alive(forks[0])
    del searcher
    gc.collect()
    assert _reaped(forks[0])


def test_closing_the_index_ends_its_searchers_children(index_dir, questions, forking, forks):
    """The children hold the index's memory maps: closing the index (a server moving to a new generation) ends
    them with the rest."""
    opened = noderag.Index.open(index_dir)
    opened.retrieve_many(questions, config=SearchConfig(n_threads=2))
    assert len(forks) == 1 and _alive(forks[0])
    opened.close()
    assert _reaped(forks[0])


def test_the_children_die_with_their_parent(index_dir, questions, tmp_path):
    """A parent killed outright (no exit handler runs) takes its children with it: none is left holding the
    index's files."""
    script = tmp_path / "parent.py"
    script.write_text(f"""
import os, signal, sys
sys.path.insert(0, {str(TESTS)!r})
import noderag, noderag.search.forked as forked
from noderag.search import SearchConfig, Searcher
forked._fork_is_safe = lambda: True
forked.available_cores = lambda: 2
forked.MIN_PER_WORKER = 4
searcher = Searcher(noderag.Index.open({str(index_dir)!r}), SearchConfig(n_threads=2))
searcher.retrieve_many({questions[:8]!r})
print(*[c.pid for c in searcher._pool._children], flush=True)
os.kill(os.getpid(), signal.SIGKILL)
""", encoding="utf-8")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == -signal.SIGKILL, out.stderr
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 1
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _running(pids[0]):
        time.sleep(0.05)
    assert not _running(pids[0])


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not reaped by its new parent yet, does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_question_repeated_across_shares_keeps_its_place(index, questions, forking, forks):
    half = questions[:forked.MIN_PER_WORKER + 1]
    batch = half + half  # each question in the parent's share and in the child's (an odd count)
    got = Searcher(index, SearchConfig(n_threads=2)).retrieve_many(batch)
    assert len(forks) == 1
    assert [r.query for r in got] == batch
    assert [r.to_dict() for r in got[:len(half)]] == [r.to_dict() for r in got[len(half):]]


def test_the_payload_carries_every_field_of_a_result(index, questions):
    searcher = Searcher(index, SearchConfig(n_threads=1))
    results = searcher.retrieve_many(questions[:3])
    back = forked.decode_results(forked.encode_results(results, searcher._doc), index)
    _same(back, results)
    assert back[0].passages[0].title == results[0].passages[0].title


def test_the_payload_keeps_odd_strings_and_absent_values():
    """Strings with NUL, a lone surrogate and characters outside the BMP; no best similarity, no generation,
    nothing retrieved."""
    node = RetrievedNode(7, NodeType.N, 0.1 + 0.2, "a\x00b \ud800 \U0001f600", "name")
    full = RetrievalResult("q\x00?", [node], [Passage("p\u00e9", text="t\ud83d", score=1 / 3, node_id=7)], [1 / 3], [7],
                           ["d"], "ctx", 5, [7], ["\u00e9"], [7], generation=None, best_similarity=None,
                           min_similarity=0.3, matched=True)
    empty = RetrievalResult("", [], [], [], [], [], "", 0, [], [], [], generation=4, best_similarity=0.25,
                            min_similarity=0.3, matched=False)
    back = forked.decode_results(forked.encode_results([full, empty]), None)
    assert [dataclasses.astuple(r) for r in back] == [dataclasses.astuple(full), dataclasses.astuple(empty)]
    assert back[0].passages[0].title is None and back[0].passages[0].text == "t\ud83d"
    assert back[0].generation is None and back[0].best_similarity is None and back[1].generation == 4


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
    real = Searcher._finish
    monkeypatch.setattr(Searcher, "_finish", _fail_in_child(os.getpid(), questions[-1], "raise"))
    searcher = Searcher(index, SearchConfig(n_threads=2))
    with pytest.raises(RuntimeError, match=rf"(?s)questions 2, 4, \.\.\. \(one in 2 of {N_QUESTIONS}\) failed: "
                                           r"Traceback.*ValueError: no ranking for"):
        searcher.retrieve_many(questions)
    assert len(forks) == 1 and _reaped(forks[0]) and searcher._pool.size == 0
    monkeypatch.setattr(Searcher, "_finish", real)
    got = searcher.retrieve_many(questions)  # a new child, forked without the failure
    assert len(forks) == 2 and _alive(forks[1]) and [r.query for r in got] == questions
    searcher.close()


def test_a_killed_child_names_its_questions(index, questions, forking, forks, monkeypatch):
    monkeypatch.setattr(Searcher, "_finish", _fail_in_child(os.getpid(), questions[1], "kill"))
    with pytest.raises(RuntimeError, match=rf"questions 2, 4, \.\.\. \(one in 2 of {N_QUESTIONS}\) was killed by "
                                           "signal 9"):
        Searcher(index, SearchConfig(n_threads=2)).retrieve_many(questions)
    assert len(forks) == 1 and _reaped(forks[0])


def test_an_interrupt_in_the_parent_kills_the_children(index, questions, forking, forks, monkeypatch):
    parent = os.getpid()
    real = Searcher._finish

    def finish(self, ctx, ppr):
        if os.getpid() != parent:
            time.sleep(600)  # a child that would outlive the batch
        if ctx.query == questions[6]:  # in this process's share (every third question from the first)
            raise KeyboardInterrupt
        return real(self, ctx, ppr)

    monkeypatch.setattr(Searcher, "_finish", finish)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        Searcher(index, SearchConfig(n_threads=3)).retrieve_many(questions)
    assert time.monotonic() - t0 < 60
    assert len(forks) == 2 and all(_reaped(pid) for pid in forks)


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
    monkeypatch.setattr(forked, "_running_tasks", lambda: 64)  # busy now: the load average decides
    assert forked.available_cores() == idle


@pytest.mark.parametrize(("load", "running", "idle"), [(1.9, 1, 2), (1.9, 2, 1), (1.9, 3, 1), (0.5, 3, 2), (3.0, None, 1)])
def test_a_job_that_has_just_ended_holds_no_core(monkeypatch, load, running, idle):
    """The load average still counts a job that ended in the last minute; the tasks runnable now do not: the other
    work is the smaller of the two (the load alone where the running count is unknown)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(forked, "_running_tasks", lambda: running)
    assert forked.available_cores() == idle


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/loadavg is Linux's")
def test_the_running_tasks_count_this_one():
    assert forked._running_tasks() >= 1
