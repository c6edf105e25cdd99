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

import gzip
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..embed.base import check_batch_size
from ..embed.onnx import _sha256_file, cpu_session

__all__ = ["CrossEncoderReranker", "RERANK_SPEC_EXAMPLES"]

RERANK_SPEC_EXAMPLES = "'onnx:/path/to/dir' (with model.onnx and tokenizer.json)"


class CrossEncoderReranker:
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
    name : str or None, default=None
        Name for reports; ``None`` uses the model directory's name.
    max_length : int, default=512
        Token limit of a pair.
    batch_size : int, default=8
        Pairs per ONNX run.
    n_threads : int or None, default=None
        Parallel ONNX runs; ``None`` uses ``min(8, os.cpu_count())``.
    model_sha256 : str or None, default=None
        When given, the model file's sha256 must match.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        tokenizer_path: str | os.PathLike[str],
        *,
        name: str | None = None,
        max_length: int = 512,
        batch_size: int = 8,
        n_threads: int | None = None,
        model_sha256: str | None = None,
    ) -> None:
        try:
            import onnxruntime  # noqa: F401  (cpu_session imports it; a clear message if it is missing)
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - core dependencies
            raise ImportError("the reranker needs onnxruntime and tokenizers (pip install onnxruntime tokenizers)") from exc
        model_path, tokenizer_path = Path(model_path), Path(tokenizer_path)
        if not model_path.is_file():
            raise FileNotFoundError(f"cross-encoder model {str(model_path)!r} is not a file")
        if not tokenizer_path.is_file():
            raise FileNotFoundError(f"cross-encoder tokenizer {str(tokenizer_path)!r} is not a file")
        self.max_length = check_batch_size(max_length, "max_length")
        if self.max_length < 4:
            raise ValueError(f"max_length must be at least 4 (room for the special tokens), got {max_length}")
        self.batch_size = check_batch_size(batch_size, "batch_size")
        self.n_threads = min(8, os.cpu_count() or 1) if n_threads is None else check_batch_size(n_threads, "n_threads")
        if model_sha256 is not None:
            got = _sha256_file(model_path)
            if got != model_sha256:
                raise ValueError(f"cross-encoder model {model_path} has sha256 {got}, expected {model_sha256}")
        self.model_path, self.tokenizer_path = model_path, tokenizer_path
        self.name = name or model_path.parent.name or model_path.stem

        raw = tokenizer_path.read_bytes()
        if tokenizer_path.suffix == ".gz":
            raw = gzip.decompress(raw)
        try:
            tok = Tokenizer.from_str(raw.decode("utf-8"))
        except Exception as exc:
            raise ValueError(f"cannot load tokenizer file {tokenizer_path}: {exc}") from None
        tok.no_padding()
        tok.enable_truncation(max_length=self.max_length, strategy="longest_first")
        probe = tok.encode("a", "b")
        if len(set(probe.type_ids)) < 2 or sum(probe.special_tokens_mask) < 2:
            raise ValueError(f"tokenizer {tokenizer_path} does not build question-passage pairs "
                             "([CLS] a [SEP] b [SEP] with type ids 0 / 1: its post-processor has no pair template); "
                             "it is not a cross-encoder tokenizer")
        self._tok = tok

        self._session = cpu_session(model_path)
        inputs = {i.name for i in self._session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - inputs
        if missing:
            raise ValueError(f"ONNX model {model_path} lacks inputs {sorted(missing)} (has {sorted(inputs)})")
        extra = inputs - {"input_ids", "attention_mask", "token_type_ids"}
        if extra:
            raise ValueError(f"ONNX model {model_path} has inputs {sorted(extra)} that a cross-encoder does not take")
        self._token_types = "token_type_ids" in inputs
        self._output = self._session.get_outputs()[0].name
        self._run(*self._pad([probe]))  # fail now, not on the first query, if the output is not a score

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

    def _pad(self, encodings: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for row, e in enumerate(encodings):
            n = len(e.ids)
            ids[row, :n] = e.ids
            mask[row, :n] = 1
            types[row, :n] = e.type_ids
        return ids, mask, types

    def _run(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self._token_types:
            feeds["token_type_ids"] = types
        out = np.asarray(self._session.run([self._output], feeds)[0])
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
        encodings = self._tok.encode_batch([(query, p) for p in passages])
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(lengths, kind="stable")
        chunks = [order[s : s + bs] for s in range(0, len(order), bs)]

        def run(idx: np.ndarray) -> np.ndarray:
            return self._run(*self._pad([encodings[i] for i in idx]))

        if self.n_threads == 1 or len(chunks) == 1:
            for idx in chunks:
                out[idx] = run(idx)
        else:
            with ThreadPoolExecutor(max_workers=min(self.n_threads, len(chunks))) as pool:
                for idx, vals in zip(chunks, pool.map(run, chunks)):
                    out[idx] = vals
        return out

    def rerank(self, query: str, passages: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
        """Indices of ``passages`` best first (ties keep the input order), int64."""
        s = self.score(query, passages, batch_size=batch_size)
        return np.argsort(-s, kind="stable").astype(np.int64)

    def __repr__(self) -> str:
        return f"CrossEncoderReranker(name={self.name!r}, max_length={self.max_length}, n_threads={self.n_threads})"
