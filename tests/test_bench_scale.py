"""Scale benchmark: the corpus generator's properties, the child-process guards, and a tiny end-to-end run."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_scale  # noqa: E402
import scale_corpus  # noqa: E402
from scale_corpus import copy_suffix, generate, rewrite  # noqa: E402

from conftest import DATA  # noqa: E402  (the MuSiQue and HotpotQA slices: scale_corpus.DEFAULT_SOURCES)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def test_copy_suffix_is_bijective_and_marked():
    suffixes = [copy_suffix(k) for k in range(2000)]
    assert suffixes[:3] == ["", "qa", "qb"] and copy_suffix(25) == "qz" and copy_suffix(26) == "qaa"
    assert len(set(suffixes)) == 2000
    assert all("q" not in s[1:] for s in suffixes)  # only the marker: the rewrite is invertible


def test_rewrite_suffixes_capitalised_words_only():
    text = "The Journal of O'Brien met 3M in 1960 at Überlingen. Who saw USA?"
    assert rewrite(text, 0) == text
    assert rewrite(text, 2) == "The Journalqb of Oqb'Brienqb met 3M in 1960 at Überlingenqb. Who saw USAqb?"


def test_generator_is_deterministic_exact_and_keeps_copies_apart(tmp_path):
    pool = sum(len((DATA / s / "corpus.jsonl").read_text("utf-8").splitlines()) for s in scale_corpus.DEFAULT_SOURCES)
    n = 2 * pool + 17
    a = generate(n, tmp_path / "a", data=DATA)
    b = generate(n, tmp_path / "b", data=DATA)
    assert a.corpus.read_bytes() == b.corpus.read_bytes()
    assert a.questions.read_bytes() == b.questions.read_bytes()
    rows = _rows(a.corpus)
    assert len(rows) == n and len({r["id"] for r in rows}) == n
    assert rows[0]["id"].endswith(".c0") and rows[-1]["id"].endswith(".c2")
    # the same pool passage in copies 0 and 1: identical apart from suffixes, no capitalised word shared
    p0, p1 = rows[0], rows[pool]
    assert p1["id"] == p0["id"][:-1] + "1"
    caps = re.compile(r"(?<!\w)[A-Z]\w*")
    words0 = {w for w in caps.findall(p0["title"] + " " + p0["text"]) if w.lower() not in scale_corpus.FUNCTION_WORDS}
    words1 = {w for w in caps.findall(p1["title"] + " " + p1["text"]) if w.lower() not in scale_corpus.FUNCTION_WORDS}
    assert words0 and not words0 & words1
    assert words1 == {w + "qa" for w in words0}
    # questions: rewritten for one complete copy, gold passages present in the corpus
    ids = {r["id"] for r in rows}
    qs = _rows(a.questions)
    assert qs and a.question_copy in (0, 1)
    assert all(g in ids and g.endswith(f".c{a.question_copy}") for q in qs for g in q["supporting_ids"])
    # reuse: same parameters -> same files, not rewritten
    mtime = a.corpus.stat().st_mtime_ns
    again = generate(n, tmp_path / "a", data=DATA)
    assert again.reused and a.corpus.stat().st_mtime_ns == mtime
    # a different seed is a different generation, not a reuse
    assert not generate(n, tmp_path / "a", data=DATA, seed=5).reused


def test_run_child_records_guard_and_failures(tmp_path):
    slow = bench_scale.run_child([sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "slow.log",
                                 max_seconds=0.5, max_rss_bytes=None)
    assert not slow["ok"] and "--max-seconds" in slow["reason"] and slow["signal"] == "SIGKILL"
    assert slow["wall_s"] < 10
    bad = bench_scale.run_child([sys.executable, "-c", "import sys; print('x', file=sys.stderr); sys.exit(3)"],
                                tmp_path / "bad.log", None, None)
    assert not bad["ok"] and bad["reason"] == "exit code 3" and bad["exit_code"] == 3 and bad["stderr_tail"] == ["x"]
    big = bench_scale.run_child([sys.executable, "-c", "b = bytearray(400_000_000); import time; time.sleep(30)"],
                                tmp_path / "big.log", None, 200_000_000)
    assert not big["ok"] and "--max-rss-gb" in big["reason"] and big["peak_rss_bytes"] > 200_000_000


def test_loglog_slope():
    assert bench_scale.loglog_slope([10, 100, 1000], [3.0, 30.0, 300.0]) == pytest.approx(1.0)
    assert bench_scale.loglog_slope([10, 100], [5.0, 500.0]) == pytest.approx(2.0)
    assert bench_scale.loglog_slope([10], [1.0]) is None


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_tiny_end_to_end_run(tmp_path):
    out = tmp_path / "out"
    rc = bench_scale.main(["--data", str(DATA), "--passages", "200,400", "--embed", "hash:64", "--work", str(tmp_path / "work"),
                           "--out", str(out), "--embed-sample", "40", "--repeats", "1", "--paired", "200,400", "--warmup", "100",
                           "--build-repeats", "2", "--repeat-up-to", "200"])
    assert rc == 0
    res = json.loads((out / "scale.json").read_text("utf-8"))
    assert res["warmup"]["ok"] and res["warmup"]["passages"] == 100
    assert not (tmp_path / "work" / "index-warmup").exists()
    assert [s["passages"] for s in res["sizes"]] == [200, 400]
    for s in res["sizes"]:
        assert s["ok"] and s["nodes"] > s["passages"] and s["edges"] > 0
        assert len(Path(s["corpus"]).read_text("utf-8").splitlines()) == s["passages"]
        assert s["nodes_by_type"]["text"] == s["passages"]  # one chunk per (short) passage
        assert s["build"]["peak_rss_bytes"] > 50e6 and s["build"]["cpu_s"] > 0
        b = s["build"]  # the memory polling stays within its share of one core
        assert b["memory_polls"] >= 1 and b["memory_poll_cpu_s"] <= 0.02 * b["wall_s"] + 0.05
        assert set(s["stages"]) >= {"decompose", "assemble", "embed", "finalize"}
        assert all(v["wall_s"] is not None and v["wall_s"] >= 0 for v in s["stages"].values())
        q = s["query"]
        assert q["ok"] and q["n_questions"] == s["n_questions"] > 0
        assert 0 < q["p50_ms"] <= q["p95_ms"] and q["batch_qps"] > 0 and q["peak_rss_bytes"] > 50e6
        assert q["open_plus_first_retrieve_s"] == pytest.approx(q["open_s"] + q["first_retrieve_s"], abs=1e-3)
        assert q["end_rss_anon_bytes"] > 20e6 and q["end_rss_file_bytes"] > 0  # Linux: /proc/self/status
        assert q["end_rss_anon_bytes"] + q["end_rss_file_bytes"] <= q["peak_rss_bytes"] * 1.05
        assert not (tmp_path / "work" / f"index-{s['passages']}").exists()
    pq = res["paired_query"]  # both indexes timed interleaved in one process, then removed
    assert pq["ok"] and pq["passages"] == [200, 400] and pq["n_questions"] == [s["n_questions"] for s in res["sizes"]]
    assert all(x > 0 for x in pq["p50_ms"] + pq["p50_cpu_ms"]) and pq["p50_ratio"][0] == 1.0
    assert pq["p50_ratio"][1] == pytest.approx(pq["p50_ms"][1] / pq["p50_ms"][0], rel=1e-2)
    assert "## Query p50 side by side" in (out / "scale.md").read_text("utf-8")
    assert isinstance(res["fits"]["build_wall_slope"], float) and isinstance(res["fits"]["build_peak_rss_slope"], float)
    small, large = res["sizes"]  # a second build of the size up to --repeat-up-to; the fits take the median
    assert len(small["build_repeats"]) == 1 and small["build_repeats"][0]["ok"]
    walls = [small["build"]["wall_s"], small["build_repeats"][0]["wall_s"]]
    assert small["build_wall_median_s"] == pytest.approx(sum(walls) / 2, abs=1e-3)
    assert not (tmp_path / "work" / "index-200-repeat").exists()
    assert "build_repeats" not in large and "build_wall_median_s" not in large
    assert res["fits"]["build_wall_slope"] == bench_scale.loglog_slope(
        [200, 400], [small["build_wall_median_s"], large["build"]["wall_s"]])
    assert "Each size up to 200 passages was built 2 times" in (out / "scale.md").read_text("utf-8")
    assert "| build wall, every build (s; median) |" in (out / "scale.md").read_text("utf-8")
    assert res["embedder"]["sample_passages"] == 40 and res["embedder"]["texts_per_s"] > 0
    assert {t["status"] for t in res["targets"]} == {"not measured"}
    md = (out / "scale.md").read_text("utf-8")
    assert "| build wall (s) |" in md and "## Targets of issue 9" in md
    try:
        import matplotlib  # noqa: F401  (the bench extra; the plot is optional)
    except ImportError:
        assert not (out / "scale.png").exists()
    else:
        assert (out / "scale.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_projected_peak_rss_is_a_linear_fit_of_the_sizes_that_built():
    sizes = [{"passages": 10, "ok": True, "build": {"peak_rss_bytes": 1000 + 10 * 50}},
             {"passages": 100, "ok": True, "build": {"peak_rss_bytes": 1000 + 100 * 50}},
             {"passages": 1000, "ok": False, "build": {"peak_rss_bytes": 10**9}}]
    assert abs(bench_scale.projected_peak_rss(sizes, 10_000) - (1000 + 10_000 * 50)) < 1e-3
    assert bench_scale.projected_peak_rss(sizes[:1], 10_000) is None
