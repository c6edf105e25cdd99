"""noderag.search.rerank.CrossEncoderReranker on a real ONNX graph and a real BERT tokenizer.

No registry package ships trained cross-encoder weights (issue 26), so the model here is a small
ONNX graph written by the test itself: a "cross-encoder" whose logit is the number of tokens of
the second segment (the passage, type id 1) that also occur in the first (the question, type id
0), computed from ``input_ids``, ``attention_mask`` and ``token_type_ids`` exactly as a BERT
cross-encoder receives them. Its scores are known in closed form, so the tests check the pair
encoding, segment ids, padding, batching, ordering and threads against an independent count.
The tokenizer is the bert-base-uncased WordPiece that noderag ships for its default embedder,
the same vocabulary and pair template as the MS MARCO MiniLM cross-encoders.
"""

from __future__ import annotations

import gzip
import shutil
import struct

import numpy as np
import pytest
from tokenizers import Tokenizer

from noderag.embed.onnx import minilm_tokenizer_path
from noderag.search.rerank import CrossEncoderReranker

# ---------------------------------------------------------------- a minimal ONNX (protobuf) writer


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _f_int(num: int, v: int) -> bytes:
    return _varint(num << 3) + _varint(v)


def _f_bytes(num: int, b: bytes | str) -> bytes:
    b = b.encode() if isinstance(b, str) else b
    return _varint(num << 3 | 2) + _varint(len(b)) + b


def _tensor_int64(name: str, values: list[int], dims: list[int]) -> bytes:
    return (b"".join(_f_int(1, d) for d in dims) + _f_int(2, 7) + _f_bytes(8, name)
            + _f_bytes(9, struct.pack(f"<{len(values)}q", *values)))


def _node(op: str, inputs: list[str], outputs: list[str], **attrs) -> bytes:
    body = b"".join(_f_bytes(1, i) for i in inputs) + b"".join(_f_bytes(2, o) for o in outputs) + _f_bytes(4, op)
    for key, val in attrs.items():
        if isinstance(val, list):
            attr = _f_bytes(1, key) + b"".join(_f_int(8, v) for v in val) + _f_int(20, 7)  # INTS
        else:
            attr = _f_bytes(1, key) + _f_int(3, val) + _f_int(20, 2)  # INT
        body += _f_bytes(5, attr)
    return _f_bytes(1, body)


def _value_info(name: str, elem_type: int, dims: list[str | int]) -> bytes:
    shape = b"".join(_f_bytes(1, _f_bytes(2, d) if isinstance(d, str) else _f_int(1, d)) for d in dims)
    tensor_type = _f_int(1, elem_type) + _f_bytes(2, shape)
    return _f_bytes(1, name) + _f_bytes(2, _f_bytes(1, tensor_type))


def overlap_model(output_rank: int = 2, with_token_types: bool = True) -> bytes:
    """ONNX bytes: logit = #passage tokens (type 1, unmasked) whose id occurs among the question tokens."""
    tt = "token_type_ids" if with_token_types else "zeros"
    nodes = []
    if not with_token_types:  # no segment input: everything counts as question (scores 0)
        nodes.append(_node("Sub", ["input_ids", "input_ids"], ["zeros"]))
    nodes += [
        _node("Sub", ["one", tt], ["not_b"]),
        _node("Mul", ["attention_mask", "not_b"], ["qa"]),
        _node("Mul", ["attention_mask", tt], ["pb"]),
        _node("Cast", ["qa"], ["qa_f"], to=1),
        _node("Cast", ["pb"], ["pb_f"], to=1),
        _node("Unsqueeze", ["input_ids", "ax2"], ["ids_col"]),
        _node("Unsqueeze", ["input_ids", "ax1"], ["ids_row"]),
        _node("Equal", ["ids_col", "ids_row"], ["eq"]),
        _node("Cast", ["eq"], ["eq_f"], to=1),
        _node("Unsqueeze", ["pb_f", "ax2"], ["pb3"]),
        _node("Unsqueeze", ["qa_f", "ax1"], ["qa3"]),
        _node("Mul", ["eq_f", "pb3"], ["w1"]),
        _node("Mul", ["w1", "qa3"], ["w"]),
        _node("ReduceMax", ["w"], ["hit"], axes=[2], keepdims=0),
        _node("ReduceSum", ["hit", "ax1"], ["logits"], keepdims=1 if output_rank == 2 else 0),
    ]
    inits = [_tensor_int64("one", [1], []), _tensor_int64("ax1", [1], [1]), _tensor_int64("ax2", [2], [1])]
    inputs = [_value_info("input_ids", 7, ["batch", "seq"]), _value_info("attention_mask", 7, ["batch", "seq"])]
    if with_token_types:
        inputs.append(_value_info("token_type_ids", 7, ["batch", "seq"]))
    out_dims = ["batch", 1] if output_rank == 2 else ["batch", "seq"] if output_rank == 3 else ["batch"]
    if output_rank == 3:  # a bad head: per-token values instead of one score per pair
        nodes[-1] = _node("Identity", ["hit"], ["logits"])
    graph = (b"".join(nodes) + _f_bytes(2, "overlap") + b"".join(_f_bytes(5, t) for t in inits)
             + b"".join(_f_bytes(11, v) for v in inputs) + _f_bytes(12, _value_info("logits", 1, out_dims)))
    return _f_int(1, 8) + _f_bytes(2, "noderag-tests") + _f_bytes(7, graph) + _f_bytes(8, _f_bytes(1, "") + _f_int(2, 13))


# ---------------------------------------------------------------- fixtures and the reference count

PASSAGES = [
    "The Eiffel Tower was designed by the engineering company of Gustave Eiffel.",
    "Hank Snow was a Canadian country music artist.",
    "Pineapples grow on Oahu, an island of Hawaii.",
    "Gustave Eiffel also designed the internal frame of the Statue of Liberty, which stands in New York.",
    "",
    "tower " * 400,  # longer than max_length: truncated
]
QUERY = "Who designed the Eiffel Tower?"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("overlap-ce")
    (d / "model.onnx").write_bytes(overlap_model())
    shutil.copy(minilm_tokenizer_path(), d / "tokenizer.json.gz")
    return d


@pytest.fixture(scope="module")
def reranker(model_dir):
    return CrossEncoderReranker.from_spec(f"onnx:{model_dir}", max_length=64, n_threads=2, batch_size=2)


def reference_scores(query: str, passages: list[str], max_length: int) -> np.ndarray:
    tok = Tokenizer.from_str(gzip.decompress(minilm_tokenizer_path().read_bytes()).decode())
    tok.no_padding()
    tok.enable_truncation(max_length=max_length, strategy="longest_first")
    out = []
    for p in passages:
        e = tok.encode(query, p)
        q_ids = {i for i, t in zip(e.ids, e.type_ids) if t == 0}
        out.append(sum(1 for i, t in zip(e.ids, e.type_ids) if t == 1 and i in q_ids))
    return np.asarray(out, dtype=np.float32)


# ---------------------------------------------------------------- tests


def test_scores_match_the_pair_encoding(reranker):
    s = reranker.score(QUERY, PASSAGES)
    assert s.dtype == np.float32 and s.shape == (len(PASSAGES),)
    np.testing.assert_array_equal(s, reference_scores(QUERY, PASSAGES, 64))
    assert s[0] > s[3] > s[1]  # the relevant passage first, the unrelated one below
    assert s[1] == s[2] == s[4] == 1.0  # only the closing [SEP] of an unrelated passage matches
    assert list(reranker.rerank(QUERY, PASSAGES[:5])) == [0, 3, 1, 2, 4]  # ties keep the input order
    assert reranker.name == f"onnx:{reranker.model_path.parent.name}"


def test_deterministic_and_batch_equals_one_by_one(reranker, model_dir):
    s = reranker.score(QUERY, PASSAGES)
    np.testing.assert_array_equal(s, reranker.score(QUERY, PASSAGES))
    one_by_one = np.array([reranker.score(QUERY, [p])[0] for p in PASSAGES], dtype=np.float32)
    np.testing.assert_array_equal(s, one_by_one)
    for bs in (1, 3, 100):
        np.testing.assert_array_equal(s, reranker.score(QUERY, PASSAGES, batch_size=bs))
    serial = CrossEncoderReranker.from_spec(f"onnx:{model_dir}", max_length=64, n_threads=1)
    np.testing.assert_array_equal(s, serial.score(QUERY, PASSAGES))
    # input order is kept whatever the length sort inside
    perm = [5, 2, 0, 4, 1, 3]
    np.testing.assert_array_equal(s[perm], reranker.score(QUERY, [PASSAGES[i] for i in perm]))


def test_truncation_and_empty_input(model_dir):
    r = CrossEncoderReranker.from_spec(f"onnx:{model_dir}", max_length=16)
    s = r.score("tower tower", ["tower " * 400])
    assert s[0] == reference_scores("tower tower", ["tower " * 400], 16)[0] <= 16
    assert r.score(QUERY, []).shape == (0,)


def test_model_without_token_types_and_one_dimensional_output(tmp_path):
    (tmp_path / "model.onnx").write_bytes(overlap_model(output_rank=1, with_token_types=False))
    shutil.copy(minilm_tokenizer_path(), tmp_path / "tokenizer.json.gz")
    r = CrossEncoderReranker.from_spec(f"onnx:{tmp_path}")
    np.testing.assert_array_equal(r.score(QUERY, PASSAGES[:2]), [0.0, 0.0])


def test_spec_and_file_errors(tmp_path, model_dir):
    for bad in ("", "   ", "ms-marco-minilm", "onnx:", "st:cross-encoder/ms-marco-MiniLM-L-6-v2"):
        with pytest.raises(ValueError, match="onnx:"):
            CrossEncoderReranker.from_spec(bad)
    with pytest.raises(FileNotFoundError, match="not a directory"):
        CrossEncoderReranker.from_spec(f"onnx:{tmp_path / 'missing'}")
    with pytest.raises(FileNotFoundError, match="needs model.onnx and tokenizer.json"):
        CrossEncoderReranker.from_spec(f"onnx:{tmp_path}")
    with pytest.raises(ValueError, match="sha256"):
        CrossEncoderReranker(model_dir / "model.onnx", model_dir / "tokenizer.json.gz", model_sha256="0" * 64)
    with pytest.raises(ValueError, match="positive int"):
        CrossEncoderReranker(model_dir / "model.onnx", model_dir / "tokenizer.json.gz", batch_size=0)


def test_bad_models_and_tokenizers_are_refused_at_load(tmp_path, model_dir):
    bad_head = tmp_path / "bad_head.onnx"
    bad_head.write_bytes(overlap_model(output_rank=3))
    with pytest.raises(ValueError, match="cross-encoder returns"):
        CrossEncoderReranker(bad_head, model_dir / "tokenizer.json.gz")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="onnxruntime cannot load"):
        CrossEncoderReranker(garbage, model_dir / "tokenizer.json.gz")
    # a tokenizer without a pair template cannot mark the passage segment
    tok = Tokenizer.from_str(gzip.decompress(minilm_tokenizer_path().read_bytes()).decode())
    tok.post_processor = None
    single = tmp_path / "tokenizer.json"
    single.write_text(tok.to_str())
    with pytest.raises(ValueError, match="pair template"):
        CrossEncoderReranker(model_dir / "model.onnx", single)


def test_bad_arguments(reranker):
    with pytest.raises(TypeError, match="single string"):
        reranker.score(QUERY, "one passage")
    with pytest.raises(TypeError, match=r"passages\[1\]"):
        reranker.score(QUERY, ["ok", 3])
    with pytest.raises(TypeError, match="query"):
        reranker.score(None, ["ok"])
    with pytest.raises(ValueError, match="batch_size"):
        reranker.score(QUERY, ["ok"], batch_size=0)


def test_search_rerank_reorders_the_top_passages_by_the_cross_encoder(model_dir, tmp_path):
    from noderag.search import SearchConfig

    from conftest import build_passages

    rows = [(f"p{i}", f"Station {i}", f"Station {i} is a lighthouse station. " + "keeper " * i + "beacon")
            for i in range(6)]
    index = build_passages(tmp_path, rows)
    q = "keeper keeper keeper of the beacon"
    plain = index.searcher(SearchConfig()).retrieve(q)
    cfg = SearchConfig(rerank=f"onnx:{model_dir}", rerank_top=4)
    ranked = index.searcher(cfg).retrieve(q)
    assert len(ranked.passages) == len(plain.passages) == 6
    assert set(ranked.passages[:4]) == set(plain.passages[:4])  # only the top 4 are reordered
    assert ranked.passages[4:] == plain.passages[4:]
    s = index.searcher(cfg)
    texts = {label: t for label, t in zip(
        [s.tables.label(int(c)) for c in ranked.passage_node_ids[:4]],
        s.node_texts(ranked.passage_node_ids[:4]))}
    titles = {i: t for i, t, _ in rows}
    expected = reference_scores(q, [f"{titles[p]}\n{texts[p]}" for p in ranked.passages[:4]], 512)
    assert np.all(np.diff(expected) <= 0)  # best first by the model's own scores
    np.testing.assert_allclose(ranked.passage_scores[:4], expected)
    assert all(a >= b for a, b in zip(ranked.passage_scores, ranked.passage_scores[1:]))
