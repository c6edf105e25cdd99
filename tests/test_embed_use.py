"""The multilingual embedder and ``embed.spec = "auto"``: vectors, int8 storage, late-units fallback,
the choice per corpus recorded in the manifest and used by queries, English builds unchanged."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from noderag.store.generations import current_path
from noderag.config import NodeRAGConfig
from noderag.embed import make_embedder, parse_embed_spec, resolve_auto_spec
from noderag.embed.use import USE_NAME, USEEmbedder
from noderag.graph.types import NodeType
from noderag.indexing.driver import build_index
from noderag.store.tables import IndexStore
from noderag.search import Searcher

T, S, N = int(NodeType.T), int(NodeType.S), int(NodeType.N)

ZH_DOCS = [
    {"id": "cao", "title": "曹雪芹", "text": "曹雪芹是清代小說家，生於南京。他在北京西山寫成了《紅樓夢》。《紅樓夢》描寫了賈寶玉和林黛玉的故事。"},
    {"id": "lu", "title": "魯迅", "text": "魯迅原名周樹人，出生於浙江紹興。一九一八年，魯迅在上海發表了《狂人日記》。魯迅後來在廈門大學任教。"},
    {"id": "tp", "title": "臺北", "text": "臺北市是臺灣的政治中心。國立臺灣大學位於臺北市大安區。故宮博物院收藏了大量來自北京的文物。"},
    {"id": "li", "title": "李白", "text": "李白是唐代詩人，出生於碎葉城。李白與杜甫是好友，兩人曾同遊洛陽。李白的《靜夜思》流傳很廣。"},
]
EN_DOCS = [
    {"id": "p1", "title": "Hank Snow", "text": "Hank Snow was a Canadian country music artist. He recorded Hello Love in 1974."},
    {"id": "p2", "title": "Hawaii", "text": "Hawaii is a state of the United States. Pineapples grow on Oahu."},
]


@pytest.fixture(scope="module")
def use():
    return USEEmbedder(n_threads=2)


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_use_vectors_normalised_deterministic_multilingual(use):
    texts = ["台灣", "臺灣", "Taiwan", "the cat sat on the mat", "貓坐在墊子上"]
    v = use.embed(texts)
    assert v.shape == (5, 512) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(v, use.embed(texts))  # deterministic for one configuration
    # another split of the batch (threads, batch size) changes only float rounding
    np.testing.assert_allclose(v, USEEmbedder(n_threads=1).embed(texts), atol=1e-6)
    np.testing.assert_allclose(v[1:3], use.embed(texts[1:3], batch_size=1), atol=1e-6)
    sim = v @ v.T
    assert sim[0, 1] > sim[0, 3] and sim[0, 2] > sim[0, 3]  # either script and English near, a cat far
    assert sim[3, 4] > sim[3, 1]  # the cat in English and in Chinese
    assert use.embed([]).shape == (0, 512)
    assert not hasattr(use, "embed_with_spans")  # no token states: late units fall back (see below)


def test_specs_use_and_auto():
    assert parse_embed_spec("use") == ("use", None, None)
    assert parse_embed_spec(" AUTO ") == ("auto", None, None)
    with pytest.raises(ValueError, match="'use' takes no argument"):
        parse_embed_spec("use:large")
    with pytest.raises(ValueError, match="chosen per corpus"):
        make_embedder("auto")
    assert NodeRAGConfig().embed.spec == "auto"
    spec, info = resolve_auto_spec([d["text"] for d in EN_DOCS])
    assert spec == "default" and info["chinese_documents"] == 0
    spec, info = resolve_auto_spec([d["text"] for d in ZH_DOCS + EN_DOCS])
    assert spec == "use" and (info["documents"], info["chinese_documents"]) == (6, 4)


@pytest.mark.slow  # over 25 s in a loaded full run; .ci/run runs it (-m "")
def test_chinese_build_chooses_use_records_it_and_queries_use_it(tmp_path, use):
    corpus = _jsonl(tmp_path / "zh.jsonl", ZH_DOCS)
    out = tmp_path / "idx"
    cfg = NodeRAGConfig().with_overrides({"embed.late_units": True, "embed.vector_dtype": "i8",
                                          "semantic.enabled": True})
    build_index([corpus], out, cfg, progress=False)
    m = json.loads((current_path(out) / "manifest.json").read_text("utf-8"))
    assert m["config"]["embed"]["spec"] == "use"
    assert m["embedder"] == {"name": USE_NAME, "dim": 512, "auto": {
        "spec": "auto", "resolved": "use", "documents": 4, "chinese_documents": 4, "zh_share": 1.0}}
    store = IndexStore.open(out)
    assert isinstance(store.embedder(), USEEmbedder)
    vecs = store.vectors
    assert vecs.dtype == "i8" and vecs.ndim == 512
    # int8 storage keeps each stored vector nearest to its own text; S vectors come from one model call
    # per unit (late units need token states, which USE has not)
    nodes = store.nodes.to_pydict()
    ts = [i for i, t in enumerate(nodes["type"]) if t in (T, S)]
    direct = use.embed([nodes["text"][i] for i in ts])
    stored = vecs.get(ts)
    stored /= np.linalg.norm(stored, axis=1, keepdims=True)  # int8 rows come back unscaled
    np.testing.assert_allclose(np.sum(stored * direct, axis=1), 1.0, atol=0.02)
    assert (np.argmax(direct @ stored.T, axis=1) == np.arange(len(ts))).all()
    # names as written; a Simplified query finds the Traditional passage
    names = {nodes["name"][i] for i, t in enumerate(nodes["type"]) if t == N}
    assert {"曹雪芹", "紅樓夢", "臺灣大學", "周樹人"} <= names
    r = Searcher(store).retrieve("周树人的出生地是哪里？")
    assert r.passages[0] == "lu"
    assert Searcher(store).retrieve("国立台湾大学位于哪个区？").passages[0] == "tp"
    # inserting with an "auto" config keeps the index's embedder
    more = _jsonl(tmp_path / "more.jsonl", [{"id": "du", "title": "杜甫", "text": "杜甫是唐代詩人，被稱為詩聖。杜甫曾住在成都草堂。"}])
    build_index([more], out, cfg, progress=False)  # cfg still says "auto"
    m2 = json.loads((current_path(out) / "manifest.json").read_text("utf-8"))
    assert m2["config"]["embed"]["spec"] == "use" and m2["embedder"]["auto"]["documents"] == 4
    assert m2["counts"]["documents"] == 5


def _snapshot(path):
    path = current_path(path)
    snap = {rel: np.load(path / rel, allow_pickle=False).tobytes()
            for rel in ("node_types.npy", "node_keys.npy", "graph/indptr.npy", "graph/indices.npy",
                        "graph/weights.npy")}
    snap["nodes"] = pq.read_table(path / "nodes.parquet").to_pydict()
    snap["vectors"] = (path / "vectors.usearch").read_bytes()
    return snap


@pytest.mark.slow
def test_english_auto_build_equals_the_default_build(tmp_path):
    corpus = _jsonl(tmp_path / "en.jsonl", EN_DOCS)
    build_index([corpus], tmp_path / "auto", NodeRAGConfig(), progress=False)
    build_index([corpus], tmp_path / "dflt", NodeRAGConfig().with_overrides({"embed.spec": "default"}), progress=False)
    a = json.loads((current_path(tmp_path / "auto") / "manifest.json").read_text("utf-8"))
    d = json.loads((current_path(tmp_path / "dflt") / "manifest.json").read_text("utf-8"))
    assert a["config"] == d["config"] and a["config"]["embed"]["spec"] == "default"
    assert a["embedder"]["auto"]["resolved"] == "default" and "auto" not in d["embedder"]
    assert _snapshot(tmp_path / "auto") == _snapshot(tmp_path / "dflt")
