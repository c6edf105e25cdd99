"""The evaluation's SVG figure: one bar per method and metric, whiskers never clipped, the legend beside
the bars; and the dense baseline reads the vectors the index stores instead of embedding the corpus."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import noderag
from noderag.eval.batches import Baselines, stored_passage_vectors
from noderag.eval.figure import recall_svg
from noderag.graph.types import NodeType

SVG = "{http://www.w3.org/2000/svg}"


def _res(methods=("noderag", "dense", "bm25"), high=1.0):
    metrics = {k: {"mean": 0.97, "low": 0.93, "high": high} for k in ("recall@2", "recall@5", "all_gold@8")}
    metrics["mrr"] = {"mean": 0.9, "low": 0.8, "high": 1.0}
    return {"methods": {m: {"metrics": dict(metrics)} for m in methods}, "config": {"level": 0.95},
            "dataset": {"name": "sample <a&b>", "n_questions": 200}}


def test_one_bar_per_method_and_recall_metric_and_the_legend_covers_none():
    root = ET.fromstring(recall_svg(_res()))
    bars = root.findall(f".//{SVG}rect[@class='bar']")
    assert sorted((b.get("data-method"), b.get("data-metric")) for b in bars) == sorted(
        (m, k) for m in ("noderag", "dense", "bm25") for k in ("recall@2", "recall@5", "all_gold@8"))
    legend_x = float(root.find(f".//{SVG}g[@class='legend']").get("data-x"))
    assert max(float(b.get("x")) + float(b.get("width")) for b in bars) < legend_x
    assert "sample &lt;a&amp;b&gt;" in recall_svg(_res())  # text is escaped


@pytest.mark.parametrize("high", [1.0, 0.995, 0.6])
def test_whiskers_stay_inside_the_plot(high):
    root = ET.fromstring(recall_svg(_res(high=high)))
    plot = root.find(f".//{SVG}g[@class='plot']")
    top = float(plot.get("data-y"))
    y_max = float(plot.get("data-ymax"))
    assert y_max >= high and (y_max > 1.0 or high < 1.0)
    for w in root.findall(f".//{SVG}path[@class='whisker']"):
        ys = [float(a or b) for a, b in re.findall(r",([\d.]+)|V([\d.]+)", w.get("d"))]
        assert len(ys) == 4 and min(ys) > top, (w.get("d"), top)  # the whisker's top is below the plot's top edge: not clipped


def test_the_dense_baseline_reads_the_stored_vectors(tmp_path):
    import json

    rows = [{"id": f"p{i}", "title": f"T{i}", "text": f"Passage {i} tells of the harbour number {i}."}
            for i in range(6)]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    index = noderag.build([str(corpus)], str(tmp_path / "ix"), embed="hash:64", progress=False)
    s = index.searcher()
    ids = [r["id"] for r in rows] + ["not-in-index"]
    vec, missing = stored_passage_vectors(s, ids)
    assert missing == [6]
    for j, pid in enumerate(ids[:6]):
        t = next(n for n in range(len(index)) if s.tables.label(n) == pid and s.types[n] == NodeType.T)
        want = np.asarray(index.vectors.get(np.array([t])), dtype=np.float32)[0]
        np.testing.assert_allclose(vec[j], want / np.linalg.norm(want), rtol=1e-5, atol=1e-6)

    class Counting:
        calls: list = []

        def __init__(self, inner):
            self.inner = inner

        def embed(self, texts):
            Counting.calls.append(len(texts))
            return self.inner.embed(texts)

    class View:  # the searcher with a counting embedder: only the passage it has no vector of is embedded
        def __init__(self, inner):
            self.__dict__.update(types=inner.types, tables=inner.tables, store=inner.store,
                                 embedder=Counting(inner.embedder))

    base = Baselines(ids, [f"{r['title']}\n{r['text']}" for r in rows] + ["a passage of another corpus"])
    base.build(["dense"], View(s), progress=False, log=None)
    assert Counting.calls == [1]
    ranked = base.retrievers["dense"].search(s.embed(["Passage 3 tells of the harbour number 3."]), 1)
    assert ranked == [["p3"]]
