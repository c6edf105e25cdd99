"""``noderag eval`` / ``noderag.eval.evaluate`` on the small fixtures of every format (tests/data/eval/).

Every fixture holds the same ten passages and four questions in its own format (raw files name
their passages ``tiny-NNNNN`` in order of first appearance, which the hand-written ``noderag``
layout uses too), so one index serves them all and every format must give the figures of the
package's own layout exactly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from noderag.cli import main
from noderag.config import NodeRAGConfig
from noderag.eval import DatasetError, EvalMismatchError, evaluate, load_dataset
from noderag.llm.testing import ScriptedLLM

DATA = Path(__file__).parent / "data" / "eval"
FORMATS = {"beir": "beir", "hipporag": "hipporag", "hipporag_titles": "hipporag", "musique/tiny.jsonl": "musique",
           "hotpotqa/tiny.json": "hotpotqa", "2wiki/tiny.json": "2wiki"}
FAST = dict(latency=False, n_resamples=200, progress=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The fixture corpus's index (hash embedder), built by evaluate itself, and the own layout's results."""
    root = tmp_path_factory.mktemp("eval")
    cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:64"})
    res = evaluate(DATA / "noderag", root / "ix", out=root / "own", build_config=cfg, per_question=True, **FAST)
    return root, res


def _figures(res: dict) -> dict:
    return {m: row["metrics"] for m, row in res["methods"].items()}


def test_own_layout_builds_index_and_writes_outputs(built):
    root, res = built
    assert res["index"]["built"] is True and res["dataset"]["n_questions"] == 4
    assert set(res["methods"]) == {"noderag", "dense", "bm25"}
    for f in ("results.json", "results.md", "per_question.jsonl"):
        assert (root / "own" / f).is_file()
    on_disk = json.loads((root / "own" / "results.json").read_text())
    assert _figures(on_disk) == _figures(res)
    assert on_disk["config"]["search_config"]["context_tokens"] > 0 and on_disk["noderag_version"]
    rows = [json.loads(x) for x in (root / "own" / "per_question.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [q.id for q in load_dataset(DATA / "noderag").questions]
    # the per-question scores are those of the ranked ids written beside them
    for r in rows:
        for m, d in r["methods"].items():
            hits = [p in r["gold"] for p in d["ranked"][:2]]
            assert d["scores"]["recall@2"] == pytest.approx(sum(hits) / len(r["gold"]), abs=1e-4)
    for m, row in res["methods"].items():
        mean = sum(r["methods"][m]["scores"]["recall@5"] for r in rows) / len(rows)
        assert row["metrics"]["recall@5"]["mean"] == pytest.approx(mean, abs=1e-4)
        assert row["metrics"]["recall@5"]["low"] <= row["metrics"]["recall@5"]["mean"] <= row["metrics"]["recall@5"]["high"]
    assert set(res["breakdown"]) == {"hops", "level", "type"}
    assert res["breakdown"]["hops"]["noderag"]["3hop"]["n"] == 1
    assert set(res["paired"]) == {"noderag - dense", "noderag - bm25"}


@pytest.mark.parametrize("path,fmt", FORMATS.items())
def test_every_format_gives_the_own_layout_figures(built, path, fmt):
    root, ref = built
    out = root / f"out-{fmt}-{path.replace('/', '_')}"
    res = evaluate(DATA / path, root / "ix", out=out, **FAST)
    assert res["dataset"]["format"] == fmt
    assert res["index"]["built"] is False  # the same corpus: the index was checked and reused
    assert _figures(res) == _figures(ref)
    stats = res["dataset"]["stats"]
    if fmt == "2wiki":  # a fifth question whose supporting title is in no context: counted and skipped
        assert (stats["questions_read"], stats["questions_skipped"], stats["gold_unmapped"]) == (5, 1, 1)
    else:
        assert (stats["questions_skipped"], stats["gold_unmapped"]) == (0, 0)


def test_other_corpus_is_refused(built, tmp_path):
    root, _ = built
    lines = (DATA / "noderag" / "corpus.jsonl").read_text().splitlines()
    row = json.loads(lines[3])
    row["text"] += " Changed."
    lines[3] = json.dumps(row)
    (tmp_path / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "questions.jsonl").write_text((DATA / "noderag" / "questions.jsonl").read_text())
    with pytest.raises(EvalMismatchError, match="does not hold the dataset's corpus: 1 of its documents"):
        evaluate(tmp_path, root / "ix", **FAST)


def test_resume_after_torn_write_scores_only_the_rest(built, tmp_path):
    root, _ = built
    full = evaluate(DATA / "noderag", root / "ix", out=tmp_path / "a", batch_size=1, **FAST)
    records = tmp_path / "a" / "state" / "records.jsonl"
    lines = records.read_bytes().splitlines(keepends=True)
    assert len(lines) == 4
    records.write_bytes(b"".join(lines[:2]) + lines[2][:25])  # killed while writing the third batch
    again = evaluate(DATA / "noderag", root / "ix", out=tmp_path / "a", batch_size=1, **FAST)
    assert again["run"] == {**again["run"], "questions_resumed": 2, "questions_scored": 2}
    assert _figures(again) == _figures(full)
    assert len(records.read_bytes().splitlines()) == 4
    # other settings in the same folder: refused, naming the field
    with pytest.raises(EvalMismatchError, match="field 'ks' differs"):
        evaluate(DATA / "noderag", root / "ix", out=tmp_path / "a", batch_size=1, ks=(1, 3), **FAST)
    fresh = evaluate(DATA / "noderag", root / "ix", out=tmp_path / "a", batch_size=1, ks=(1, 3), restart=True, **FAST)
    assert "recall@1" in fresh["methods"]["noderag"]["metrics"]


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_sigkill_mid_run_resumes(built, tmp_path):
    """A real SIGKILL: 240 questions (the four, repeated under new ids) in batches of 2."""
    root, _ = built
    data = tmp_path / "many"
    data.mkdir()
    (data / "corpus.jsonl").write_text((DATA / "noderag" / "corpus.jsonl").read_text())
    qs = [json.loads(x) for x in (DATA / "noderag" / "questions.jsonl").read_text().splitlines()]
    with open(data / "questions.jsonl", "w") as fh:
        for i in range(60):
            for q in qs:
                fh.write(json.dumps({**q, "id": f"{q['id']}#{i}"}) + "\n")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "noderag.cli", "eval", str(data), "--index", str(root / "ix"), "--out", str(out),
           "--batch-size", "2", "--resamples", "100", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = out / "state" / "records.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if records.is_file() and records.read_bytes().count(b"\n") >= 5:
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    done = records.read_bytes().count(b"\n")
    assert 5 <= done < 120
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert f"resuming: {2 * done:,} of 240 questions" in res.stderr
    out_res = json.loads((out / "results.json").read_text())
    assert out_res["run"]["questions_resumed"] == 2 * done and out_res["dataset"]["n_questions"] == 240
    ids = [i for line in records.read_text().splitlines() for i in json.loads(line)["ids"]]
    assert len(ids) == len(set(ids)) == 240  # no question was scored twice


def test_answers_with_an_llm(built, tmp_path):
    root, _ = built
    gold = {q.question: q.answers[0] for q in load_dataset(DATA / "noderag").questions}

    def respond(req):
        user = req.messages[-1]["content"]
        q = next(k for k in gold if k in user)
        return {"answer": gold[q] if "Mercer" in q else "no idea", "citations": []}

    llm = ScriptedLLM(respond)
    res = evaluate(DATA / "noderag", root / "ix", out=tmp_path / "qa", llm=llm, methods=("noderag", "bm25"), **FAST)
    for m in ("noderag", "bm25"):
        a = res["methods"][m]["answers"]
        assert a["answered"] == 4 and a["failed"] == 0
        assert a["exact_match"]["mean"] == 0.5 and a["f1"]["mean"] == 0.5  # the two Mercer questions
    assert llm.calls == 8
    assert "exact_match" in res["paired"]["noderag - bm25"]


def _write(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_gold_ids_not_in_corpus_name_file_and_field(tmp_path):
    _write(tmp_path / "corpus.jsonl", [{"id": "a", "title": "A", "text": "Alpha."}])
    _write(tmp_path / "questions.jsonl", [{"id": "q1", "question": "What?", "supporting_ids": ["a"]},
                                          {"id": "q2", "question": "Who?", "supporting_ids": ["a", "zz"]}])
    with pytest.raises(DatasetError, match=r"questions\.jsonl:2: field 'supporting_ids': \['zz'\] not in corpus"):
        load_dataset(tmp_path)


def test_qrels_with_unknown_query_id(tmp_path):
    _write(tmp_path / "corpus.jsonl", [{"_id": "d1", "title": "", "text": "Alpha."}])
    _write(tmp_path / "queries.jsonl", [{"_id": "q1", "text": "What?"}])
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq9\td1\t1\n")
    with pytest.raises(DatasetError, match=r"qrels/test\.tsv:3: field 'query-id': 'q9' is not in queries\.jsonl"):
        load_dataset(tmp_path)


def test_undetectable_format_and_cli_one_line(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(DatasetError, match="cannot detect the dataset format"):
        load_dataset(tmp_path)
    (tmp_path / "x.json").write_text(json.dumps([{"question": "q", "gold": []}]))
    with pytest.raises(DatasetError, match=r"x\.json: cannot detect the dataset format: the first record"):
        load_dataset(tmp_path / "x.json")
    assert main(["eval", str(tmp_path), "--index", str(tmp_path / "ix"), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("noderag eval: error: ") and str(tmp_path) in err[0]
    assert not (tmp_path / "ix").exists()  # nothing was built for a dataset that could not be read


def test_musique_paragraph_without_flag_and_bad_field(tmp_path):
    p = tmp_path / "m.jsonl"
    _write(p, [{"id": "2hop__1_2", "question": "q", "paragraphs": [{"title": "t", "paragraph_text": "x"}]}])
    with pytest.raises(DatasetError, match=r"m\.jsonl:1: field 'paragraphs\[\]\.is_supporting' missing"):
        load_dataset(p)
    _write(p, [{"id": "2hop__1_2", "question": "q", "paragraphs": [{"title": "t", "is_supporting": True}]}])
    with pytest.raises(DatasetError, match=r"m\.jsonl:1: field 'paragraphs\[0\]\.paragraph_text'"):
        load_dataset(p)


def test_demo_dataset_on_an_index_of_the_demo_folder(tmp_path):
    """``noderag eval demo`` accepts an index built from the demo folder (ids: file paths, gold: file names)."""
    from noderag.data import demo_dir
    from noderag.indexing.driver import build_index

    cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:64"})
    build_index([str(demo_dir())], tmp_path / "ix", cfg, progress=False)
    ds = load_dataset("demo")
    assert ds.format == "demo" and len(ds.questions) == 5 and len(ds.corpus) == 12
    assert all(Path(g).parent == demo_dir() for q in ds.questions for g in q.gold)
    res = evaluate("demo", tmp_path / "ix", methods=("noderag", "bm25"), **FAST)
    assert res["index"]["built"] is False and res["dataset"]["stats"]["gold_unmapped"] == 0
    assert 0.0 < res["methods"]["bm25"]["metrics"]["recall@10"]["mean"] <= 1.0


def test_named_variants_rank_like_noderag_with_their_search_settings(built):
    from noderag.search import SearchConfig

    root, ref = built
    res = evaluate(DATA / "noderag", root / "ix", methods=("noderag", "no_ppr", "bm25"),
                   variants={"no_ppr": {"use_ppr": False}, "unused": {"iterations": 1}},
                   compare=[("no_ppr", "noderag"), ("noderag", "bm25")], **FAST)
    alone = evaluate(DATA / "noderag", root / "ix", methods=("noderag",),
                     search_config=SearchConfig().replace(use_ppr=False), **FAST)
    assert res["methods"]["no_ppr"]["metrics"] == alone["methods"]["noderag"]["metrics"]
    assert res["methods"]["noderag"]["metrics"] == ref["methods"]["noderag"]["metrics"]
    assert set(res["paired"]) == {"no_ppr - noderag", "noderag - bm25"}
    assert res["config"]["variants"] == {"no_ppr": {"use_ppr": False}}  # only the ranked ones are recorded


def test_bad_variants_and_comparisons_name_what_is_wrong(built):
    from noderag.errors import ConfigError

    root, _ = built
    with pytest.raises(DatasetError, match="variant 'bm25': the name of a built-in method"):
        evaluate(DATA / "noderag", root / "ix", methods=("noderag", "bm25"), variants={"bm25": {}}, **FAST)
    with pytest.raises(ConfigError, match="variant 'x': .*nope"):
        evaluate(DATA / "noderag", root / "ix", methods=("noderag", "x"), variants={"x": {"nope": 1}}, **FAST)
    with pytest.raises(DatasetError, match=r"unknown method\(s\) \['y'\]: choose from noderag, dense, bm25, "
                                           r"bm25_segmenter, x"):
        evaluate(DATA / "noderag", root / "ix", methods=("noderag", "y"), variants={"x": {}}, **FAST)
    with pytest.raises(DatasetError, match=r"comparison \('noderag', 'dense'\): expected two different methods"):
        evaluate(DATA / "noderag", root / "ix", methods=("noderag", "bm25"), compare=[("noderag", "dense")], **FAST)


@pytest.fixture(scope="module")
def two_seeds(built, tmp_path_factory):
    """A second build of the fixture corpus with another seed, beside the first."""
    root, _ = built
    cfg = NodeRAGConfig().with_overrides({"embed.spec": "hash:64", "seed": 7})
    from noderag.indexing.driver import build_index

    other = tmp_path_factory.mktemp("seed7") / "ix"
    build_index([str(DATA / "noderag" / "corpus.jsonl")], other, cfg, progress=False)
    return [root / "ix", other]


def test_several_indexes_average_noderag_and_report_each(two_seeds, tmp_path):
    import numpy as np

    res = evaluate(DATA / "noderag", two_seeds, out=tmp_path / "out", per_question=True, **FAST)
    alone = [evaluate(DATA / "noderag", ix, **FAST) for ix in two_seeds]
    assert len(res["per_index"]) == 2 and res["index"]["path"] == str(two_seeds[0])
    for one, single in zip(res["per_index"], alone):
        assert set(one["methods"]) == {"noderag"}  # the baselines rank once, on the first index
        assert one["methods"]["noderag"]["metrics"] == single["methods"]["noderag"]["metrics"]
        assert one["paired"] == single["paired"] and one["breakdown"]["hops"] == single["breakdown"]["hops"]
    for m in ("dense", "bm25"):
        assert res["methods"][m]["metrics"] == alone[0]["methods"][m]["metrics"]
    rows = [[json.loads(x) for x in (tmp_path / "out" / f"index-{i}" / "per_question.jsonl").read_text().splitlines()]
            for i in range(2)]
    mean = np.mean([[r["methods"]["noderag"]["scores"]["recall@5"] for r in rr] for rr in rows], axis=0).mean()
    assert res["methods"]["noderag"]["metrics"]["recall@5"]["mean"] == pytest.approx(mean, abs=1e-4)
    assert "## Per index" in (tmp_path / "out" / "results.md").read_text()
    again = evaluate(DATA / "noderag", two_seeds, out=tmp_path / "out", **FAST)  # every index resumes
    assert again["run"]["questions_resumed"] == 8 and again["methods"] == res["methods"]


def test_cli_several_indexes_and_one_line_errors(two_seeds, tmp_path, capsys):
    args = ["eval", str(DATA / "noderag"), "--index", str(two_seeds[0]), "--index", str(two_seeds[1]),
            "--no-progress", "--no-latency", "--resamples", "200"]
    assert main([*args, "--out", str(tmp_path / "o")]) == 0
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    assert [p["index"]["path"] for p in res["per_index"]] == [str(p) for p in two_seeds]
    capsys.readouterr()
    assert main([*args, "--out", str(tmp_path / "o2"), "--llm", "scripted"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["noderag eval: error: answers are evaluated on one index, 2 were given: leave out --llm/--judge or "
                   "give one --index"]
