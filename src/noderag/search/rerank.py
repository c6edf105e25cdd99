"""Optional cross-encoder reranking of retrieved passages (onnxruntime, no torch).

A cross-encoder reads the question and one passage together (``[CLS] question [SEP] passage
[SEP]``, segment ids 0 / 1) and returns one relevance logit, which is what MS MARCO rerankers
such as ``cross-encoder/ms-marco-MiniLM-L-6-v2`` or ``ms-marco-TinyBERT-L-2-v2`` do. This module
runs any such BERT-style export on onnxruntime with a HuggingFace ``tokenizer.json``:

    reranker = CrossEncoderReranker.from_spec("onnx:/models/ms-marco-MiniLM-L-6-v2")
    scores = reranker.score("who designed the lighthouse?", passages)   # float32, higher is better

Specs: ``onnx:DIR`` reads ``DIR/model.onnx`` and ``DIR/tokenizer.json`` (or ``tokenizer.json.gz``),
e.g. the output of ``optimum-cli export onnx --model cross-encoder/ms-marco-MiniLM-L-6-v2 DIR``.
No registry package that we could find ships cross-encoder weights (checked for issue 26:
flashrank, rerankers, swiftrank and others download at run time), so there is no named,
download-free reranker yet; the model directory is the user's.

Scores are the model's raw logit (column 1 of a two-class head), not probabilities: only the
order within one question matters. Pairs longer than ``max_length`` tokens are truncated longest
side first, as sentence-transformers' ``CrossEncoder`` does.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..embed.base import check_batch_size
from ..embed.onnx import OnnxModel, pad_batch

__all__ = ["CrossEncoderReranker", "RERANK_SPEC_EXAMPLES"]

RERANK_SPEC_EXAMPLES = "'onnx:/path/to/dir' (with model.onnx and tokenizer.json)"


class CrossEncoderReranker(OnnxModel):
    """Question–passage relevance scores from a BERT-style cross-encoder ONNX model.

    Pairs are tokenised together, sorted by length and run in batches padded to their longest
    member; ``n_threads`` batches run in parallel, each single-threaded (onnxruntime releases the
    GIL), and the output keeps the input order. For an fp32 model a passage's score does not
    depend on the other passages of the call (padding is masked); an int8 model with dynamic
    quantisation quantises activations per batch, so there ``batch_size=1`` gives that guarantee.

    Parameters
    ----------
    model_path : str or Path
        ONNX file with inputs ``input_ids``, ``attention_mask`` (and optionally
        ``token_type_ids``), int64, and a first output of shape (batch,), (batch, 1) or (batch, 2).
    tokenizer_path : str or Path
        HuggingFace ``tokenizer.json`` (optionally gzipped) whose post-processor builds pairs.
    max_length : int, default=512
        Token limit of a pair.
    batch_size : int, default=8
        Pairs per ONNX run.
    **options
        ``name`` (str or None: name for reports; ``None`` uses the model directory's name),
        ``n_threads`` (int or None: parallel ONNX runs; ``None`` uses ``min(8, os.cpu_count())``),
        ``model_sha256`` and ``tokenizer_sha256`` (str or None: when given, the files' sha256 must match).
    """

    _runtime = ("onnxruntime", "tokenizers")
    _needs = "the reranker needs onnxruntime and tokenizers (pip install onnxruntime tokenizers)"
    _missing = ("cross-encoder model {!r} is not a file", "cross-encoder tokenizer {!r} is not a file")
    _model_file = "cross-encoder model"
    _min_length = 4

    def __init__(self, model_path: str | os.PathLike[str], tokenizer_path: str | os.PathLike[str], *,
                 max_length: int = 512, batch_size: int = 8, **options: Any) -> None:
        """Load as the ONNX embedder does (``options``: ``name``, ``n_threads``, the sha256 pins), with a
        cross-encoder's defaults."""
        super().__init__(model_path, tokenizer_path, max_length=max_length, batch_size=batch_size, **options)

    @staticmethod
    def _default_name(model_path: Path) -> str:
        """The model directory's name (an exported model's file is always ``model.onnx``)."""
        return model_path.parent.name or model_path.stem

    def _tokenizer(self, path: Path, expected_sha256: str | None):
        """The tokenizer, checked to build question-passage pairs (a cross-encoder's input)."""
        tok = super()._tokenizer(path, expected_sha256)
        self._probe = tok.encode("a", "b")
        if len(set(self._probe.type_ids)) < 2 or sum(self._probe.special_tokens_mask) < 2:
            raise ValueError(f"tokenizer {path} does not build question-passage pairs "
                             "([CLS] a [SEP] b [SEP] with type ids 0 / 1: its post-processor has no pair template); "
                             "it is not a cross-encoder tokenizer")
        return tok

    def _setup(self, inputs: set[str]) -> None:
        """Refuse inputs a cross-encoder does not take; probe that the first output is a score."""
        extra = inputs - {"input_ids", "attention_mask", "token_type_ids"}
        if extra:
            raise ValueError(f"ONNX model {self.model_path} has inputs {sorted(extra)} that a cross-encoder does not take")
        self._output = self._session.get_outputs()[0].name
        self._run(*pad_batch([self._probe]))  # fail now, not on the first query, if the output is not a score

    @classmethod
    def from_spec(cls, spec: str, **overrides) -> "CrossEncoderReranker":
        """A reranker from a spec: ``onnx:DIR`` (``DIR/model.onnx`` + ``DIR/tokenizer.json[.gz]``).

        ``overrides`` go to the constructor (``batch_size``, ``n_threads``, ``max_length``, ...).
        """
        if not isinstance(spec, str) or not spec.strip():
            raise ValueError(f"reranker spec must be a non-empty string, e.g. {RERANK_SPEC_EXAMPLES}; got {spec!r}")
        kind, sep, rest = spec.strip().partition(":")
        if kind.lower() != "onnx" or not sep or not rest:
            raise ValueError(
                f"reranker spec {spec!r}: expected {RERANK_SPEC_EXAMPLES}. No named reranker ships with noderag: "
                "no registry package provides cross-encoder weights without a download, so export one "
                "(e.g. optimum-cli export onnx --model cross-encoder/ms-marco-MiniLM-L-6-v2 DIR) and pass its folder"
            )
        root = Path(rest).expanduser()
        if not root.is_dir():
            raise FileNotFoundError(f"reranker spec {spec!r}: {root} is not a directory with model.onnx and tokenizer.json")
        model = root / "model.onnx"
        tok = root / "tokenizer.json"
        if not tok.is_file() and (root / "tokenizer.json.gz").is_file():
            tok = root / "tokenizer.json.gz"
        if not model.is_file() or not tok.is_file():
            found = sorted(p.name for p in root.iterdir())[:20]
            raise FileNotFoundError(f"reranker spec {spec!r}: {root} needs model.onnx and tokenizer.json (found {found})")
        overrides.setdefault("name", f"onnx:{root.name}")
        return cls(model, tok, **overrides)

    def _run(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        out = np.asarray(self._forward(ids, mask, types))
        b = ids.shape[0]
        if out.shape == (b,):
            return out.astype(np.float32)
        if out.ndim == 2 and out.shape[0] == b and out.shape[1] in (1, 2):
            return out[:, -1].astype(np.float32)  # one logit, or the "relevant" column of two
        raise ValueError(f"ONNX model {self.model_path} output {self._output!r} has shape {out.shape}; "
                         f"a cross-encoder returns ({b},), ({b}, 1) or ({b}, 2)")

    def score(self, query: str, passages: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
        """Relevance of each passage to ``query``: float32 of shape (len(passages),), higher is better."""
        if not isinstance(query, str):
            raise TypeError(f"query must be str, got {type(query).__name__}")
        if isinstance(passages, (str, bytes)):
            raise TypeError("passages must be a sequence of str, not a single string")
        passages = list(passages)
        for i, p in enumerate(passages):
            if not isinstance(p, str):
                raise TypeError(f"passages[{i}] must be str, got {type(p).__name__}")
        bs = self.batch_size if batch_size is None else check_batch_size(batch_size, "batch_size")
        out = np.empty(len(passages), dtype=np.float32)
        if not passages:
            return out
        return self._in_batches(self._tok.encode_batch([(query, p) for p in passages]), bs, out)

    def rerank(self, query: str, passages: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
        """Indices of ``passages`` best first (ties keep the input order), int64."""
        s = self.score(query, passages, batch_size=batch_size)
        return np.argsort(-s, kind="stable").astype(np.int64)

    def __repr__(self) -> str:
        return f"CrossEncoderReranker(name={self.name!r}, max_length={self.max_length}, n_threads={self.n_threads})"
