"""``benchmarks/bench_retrieval.py`` is a thin caller of ``noderag.eval.evaluate``: its figures are the package's.

On the MuSiQue slice with the hash embedder (fast): the benchmark's per-seed row is exactly what ``noderag eval``
gives on an index that ``noderag build --seed S`` builds with the benchmark's settings, and its seed-averaged
rows (methods, paired differences, breakdown, ablations) exactly what ``evaluate`` gives on every seed's index.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from noderag.cli import main
from noderag.search.ranking import StagedConfig
from noderag.eval import evaluate

pytestmark = pytest.mark.slow  # builds an index per seed

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "musique"
METRICS = ("recall@2", "recall@5", "recall@10", "all_gold@8", "mrr", "ndcg@10")
ABLATIONS = {"no_ppr": {"use_ppr": False}, "t=1": {"iterations": 1}}


def _bench_module():
    path = REPO / "benchmarks" / "bench_retrieval.py"
    spec = importlib.util.spec_from_file_location("bench_retrieval_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """bench_retrieval over two build seeds with two of its ablation rows; (module, work folder, its JSON)."""
    br = _bench_module()
    br.ABLATIONS = dict(ABLATIONS)
    work = tmp_path_factory.mktemp("bench")
    out = work / "retrieval.json"
    assert br.main(["--data", str(DATA), "--build-seeds", "2", "--embed", "hash:384", "--work", str(work),
                    "--out", str(out)]) == 0
    return br, work, json.loads(out.read_text())


def _flat(metrics: dict) -> dict:
    """The package's metrics in the benchmark's shape (mean, and [low, high] under ``_ci``)."""
    return {k: v for m in METRICS for k, v in ((m, metrics[m]["mean"]), (m + "_ci", [metrics[m]["low"],
                                                                                   metrics[m]["high"]]))}


def _figures(row: dict) -> dict:
    return {k: row[k] for m in METRICS for k in (m, m + "_ci")}


def test_outputs_hold_per_seed_rows(bench):
    _, work, out = bench
    assert out["build_seeds"] == 2 and [r["seed"] for r in out["per_seed"]] == [0, 1]
    assert set(out["methods"]) == {"noderag", "graph_only", "dense", "bm25"}
    assert set(out["ablations"]) == set(ABLATIONS)
    assert out["per_seed"][0] != out["per_seed"][1]  # the seeds build different graphs
    for m in METRICS:  # the averaged row's mean is the mean of the seeds' (rounded to 4 places each)
        assert out["methods"]["noderag"][m] == pytest.approx(sum(r[m] for r in out["per_seed"]) / 2, abs=1e-4)
    md = (work / "retrieval.md").read_text()
    assert "## Per build seed" in md and "--seed S" in md
    assert (Path(out["eval_results"]) / "results.json").is_file()


def test_per_seed_row_is_noderag_eval_on_an_index_built_with_that_seed(bench, tmp_path, capsys):
    _, _, out = bench
    cfg = tmp_path / "bench.toml"
    cfg.write_text("[semantic]\nenabled = true\n")  # the benchmark's build settings
    ix = tmp_path / "ix"
    assert main(["build", str(DATA / "corpus.jsonl"), "--index", str(ix), "--seed", "1", "--embed", "hash:384",
                 "--config", str(cfg), "--no-progress"]) == 0
    assert main(["eval", str(DATA), "--index", str(ix), "--out", str(tmp_path / "eval"), "--no-progress",
                 "--no-latency"]) == 0
    res = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert _flat(res["methods"]["noderag"]["metrics"]) == _figures(out["per_seed"][1])
    assert res["methods"]["noderag"]["avg_context_tokens"] == out["per_seed"][1]["avg_context_tokens"]
    for m in ("dense", "bm25"):  # the baselines do not depend on the build
        assert _flat(res["methods"][m]["metrics"]) == _figures(out["methods"][m])


def test_averaged_rows_are_evaluate_on_every_seeds_index(bench):
    br, _, out = bench
    indexes = [r["index"] for r in out["per_seed"]]
    res = evaluate(DATA, indexes, methods=["noderag", "graph_only", "dense", "bm25", *ABLATIONS],
                   variants={"graph_only": br.GRAPH_ONLY, **ABLATIONS}, latency=False, progress=False,
                   search_config=StagedConfig(),
                   compare=[("noderag", "dense"), ("no_ppr", "noderag")])
    for m in ("noderag", "graph_only", "dense", "bm25"):
        assert _flat(res["methods"][m]["metrics"]) == _figures(out["methods"][m])
    for v in ABLATIONS:
        assert _flat(res["methods"][v]["metrics"]) == _figures(out["ablations"][v])
    assert {k: res["paired"]["noderag - dense"][k] for k in out["paired"]["noderag - dense"]} == \
        out["paired"]["noderag - dense"]
    assert {k: res["paired"]["no_ppr - noderag"][k] for k in br.PAIRED} == out["ablations"]["no_ppr"]["vs_default"]
    for hops, row in out["breakdown"].items():
        assert row["n"] == res["breakdown"]["hops"]["noderag"][hops]["n"]
        assert row["methods"]["noderag"]["recall@5"] == res["breakdown"]["hops"]["noderag"][hops]["recall@5"]
    for i, one in enumerate(res["per_index"]):
        assert _flat(one["methods"]["noderag"]["metrics"]) == _figures(out["per_seed"][i])
