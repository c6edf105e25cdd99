"""Static embeddings: a token-embedding table, mean-pooled (no transformer): ``embed.spec = "static:wordllama"``.

A static model embeds a text as the mean of its tokens' rows in one table, so it costs a
tokenizer pass and a gather: hundreds of times fewer CPU-seconds per text than a transformer
(``benchmarks/results/embedders.md``), at some loss of dense recall that the rest of the
search mostly recovers. Two sources:

- ``static:wordllama``: WordLlama ``l2_supercat_256`` (MIT), whose 256-d float16 table (32,000
  Llama-2 tokens, 16 MB) and tokenizer ship inside the ``wordllama`` wheel (``pip install
  'noderag[static]'``); both files are sha256-pinned and read here directly (WordLlama's own
  loader looks for the tokenizer in a folder the wheel does not have, then downloads it).
- ``static:DIR``: a Model2Vec-style folder, ``DIR/model.safetensors`` (one 2-D table) and
  ``DIR/tokenizer.json``; not pinned.

Pipeline (as WordLlama's ``embed``): the tokenizer without special tokens or truncation, ids
clipped to the table, the mean of their rows (float32 sums of a sparse bag-of-tokens matrix
times the table, each text's row on its own, so a vector does not depend on its batch), L2
normalisation. The safetensors file is parsed here (a JSON
header and raw little-endian arrays): no pickle, no framework.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix

from .base import batch_frame, check_batch_size, check_pinned, l2_normalize, shipped_file

__all__ = [
    "WORDLLAMA_NAME",
    "WORDLLAMA_SHA256",
    "WORDLLAMA_TOKENIZER_SHA256",
    "StaticEmbedder",
    "load_safetensors_table",
    "wordllama_embedder",
    "wordllama_paths",
]

#: Name recorded in manifests for ``static:wordllama``.
WORDLLAMA_NAME = "wordllama-l2-supercat-256"
#: sha256 of ``wordllama/weights/l2_supercat_256.safetensors`` in ``wordllama==0.4.0.post1``.
WORDLLAMA_SHA256 = "64b47a2dc493cb8e85944076601189739852d7b64e0e1eedcb1937a251cd9fd5"
#: sha256 of ``wordllama/tokenizers/l2_supercat_tokenizer_config.json`` in the same wheel.
WORDLLAMA_TOKENIZER_SHA256 = "93248f2a9ec36c7b35f700a033d5f36228aae48db61aee31007fa49062cdeb68"
_RELEASE = "wordllama==0.4.0.post1"

_DTYPES = {"F16": "<f2", "F32": "<f4", "BF16": None, "F64": "<f8"}


def wordllama_paths() -> tuple[Path, Path]:
    """The shipped ``l2_supercat_256`` table and its tokenizer, found without importing wordllama."""
    needs = ("embedder 'static:wordllama' needs the 'wordllama' package, which ships the WordLlama "
             "l2_supercat_256 table (pip install 'noderag[static]' or pip install wordllama==0.4.0.post1)")
    return (shipped_file("wordllama", "wordllama", "weights/l2_supercat_256.safetensors", needs),
            shipped_file("wordllama", "wordllama", "tokenizers/l2_supercat_tokenizer_config.json", needs))


def load_safetensors_table(path: Path, key: str | None = None) -> np.ndarray:
    """The 2-D float tensor ``key`` (or the file's only tensor) of a safetensors file, as float32.

    ValueError names the file for a malformed header, a missing or non-2-D tensor, or a dtype
    other than F16/F32/F64."""
    path = Path(path)
    raw = path.read_bytes()
    if len(raw) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    (n,) = struct.unpack("<Q", raw[:8])
    try:
        header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: malformed safetensors header: {exc}") from None
    tensors = {k: v for k, v in header.items() if k != "__metadata__"} if isinstance(header, dict) else {}
    if key is None:
        if len(tensors) != 1:
            raise ValueError(f"{path}: expected one tensor, found {sorted(tensors)}; name one")
        key = next(iter(tensors))
    info = tensors.get(key)
    if not isinstance(info, dict):
        raise ValueError(f"{path}: no tensor {key!r} (has {sorted(tensors)})")
    dtype, shape, offsets = _DTYPES.get(info.get("dtype")), info.get("shape"), info.get("data_offsets")
    if dtype is None:
        raise ValueError(f"{path}: tensor {key!r} has dtype {info.get('dtype')!r}; expected F16, F32 or F64")
    if not (isinstance(shape, list) and len(shape) == 2 and all(isinstance(d, int) and d > 0 for d in shape)):
        raise ValueError(f"{path}: tensor {key!r} has shape {shape!r}; expected a 2-D table")
    begin, end = (int(o) + 8 + n for o in offsets)
    if end > len(raw) or end - begin != shape[0] * shape[1] * np.dtype(dtype).itemsize:
        raise ValueError(f"{path}: tensor {key!r} data ({begin}..{end}) does not match its shape {shape}")
    return np.frombuffer(raw, dtype=dtype, count=shape[0] * shape[1], offset=begin).reshape(shape).astype(np.float32)


def _load_tokenizer(path: Path):
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:
        raise ValueError(f"cannot load tokenizer file {path}: {exc}") from None
    tok.no_padding()
    tok.no_truncation()
    return tok


class StaticEmbedder:
    """Mean-pooled rows of a token-embedding table, L2-normalised float32.

    Parameters
    ----------
    weights_path, tokenizer_path : path
        The safetensors table (vocabulary x dim) and the HuggingFace ``tokenizer.json``.
    name : str
        Name recorded in manifests.
    tensor_key : str, optional
        The table's name in the file (None: its only tensor).
    batch_size : int, default=512
        Texts tokenized per call (the tokenizer runs a call's texts on every core).
    weights_sha256, tokenizer_sha256 : str, optional
        Pinned digests; a file that does not match is a ValueError naming it.
    """

    def __init__(self, weights_path: str | os.PathLike[str], tokenizer_path: str | os.PathLike[str], *,
                 name: str, tensor_key: str | None = None, batch_size: int = 512,
                 weights_sha256: str | None = None, tokenizer_sha256: str | None = None,
                 release: str = "pinned release") -> None:
        weights_path, tokenizer_path = Path(weights_path), Path(tokenizer_path)
        for what, path in (("weights_path", weights_path), ("tokenizer_path", tokenizer_path)):
            if not path.is_file():
                raise FileNotFoundError(f"{what}={str(path)!r} is not a file")
        for path, digest in ((weights_path, weights_sha256), (tokenizer_path, tokenizer_sha256)):
            if digest is not None:
                check_pinned(path, digest, release)
        self.name = name
        self.batch_size = check_batch_size(batch_size)
        self.table = np.ascontiguousarray(load_safetensors_table(weights_path, tensor_key))
        self.dim = int(self.table.shape[1])
        self._tok = _load_tokenizer(tokenizer_path)

    def token_ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Each text's token ids (no special tokens), clipped to the table as WordLlama does."""
        encs = self._tok.encode_batch(list(texts), add_special_tokens=False)
        top = self.table.shape[0] - 1
        return [np.clip(np.asarray(e.ids, dtype=np.int64), 0, top) for e in encs]

    def token_lengths(self, texts: Sequence[str]) -> np.ndarray:
        """Tokens each text is pooled over (int64), what the embedding of a text costs."""
        return np.fromiter((a.size for a in self.token_ids(texts)), dtype=np.int64, count=len(texts))

    def embed(self, texts: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
        """Float32 of shape (len(texts), dim), rows L2-normalised; a text with no tokens gives zeros."""
        texts, bs, out = batch_frame(texts, batch_size, self.batch_size, self.dim)
        for start in range(0, len(texts), bs):
            ids = self.token_ids(texts[start : start + bs])
            counts = np.fromiter((a.size for a in ids), dtype=np.int64, count=len(ids))
            indptr = np.concatenate(([0], np.cumsum(counts)))
            # a (texts x vocabulary) matrix of token counts times the table: each row summed in token order
            # without materialising the (tokens x dim) gathered rows
            bag = csr_matrix((np.ones(int(indptr[-1]), np.float32), np.concatenate(ids), indptr),
                             shape=(len(ids), self.table.shape[0]))
            sums = np.asarray(bag @ self.table, dtype=np.float32)
            out[start : start + len(ids)] = sums / np.maximum(counts, 1)[:, None].astype(np.float32)
        return l2_normalize(out)

    def __repr__(self) -> str:
        return f"StaticEmbedder(name={self.name!r}, dim={self.dim}, vocab={self.table.shape[0]})"


def wordllama_embedder(*, verify: bool = True, batch_size: int = 512) -> StaticEmbedder:
    """WordLlama ``l2_supercat_256`` from the installed ``wordllama`` wheel (``static:wordllama``)."""
    weights, tokenizer = wordllama_paths()
    pins = (WORDLLAMA_SHA256, WORDLLAMA_TOKENIZER_SHA256) if verify else (None, None)
    return StaticEmbedder(weights, tokenizer, name=WORDLLAMA_NAME, tensor_key="embedding.weight",
                          batch_size=batch_size, weights_sha256=pins[0], tokenizer_sha256=pins[1],
                          release=_RELEASE)


def static_dir_embedder(root: Path, **overrides) -> StaticEmbedder:
    """A Model2Vec-style folder (``model.safetensors`` + ``tokenizer.json``): ``static:DIR``."""
    if not root.is_dir():
        raise FileNotFoundError(f"embedder spec 'static:{root}': not a directory with model.safetensors "
                                "and tokenizer.json (or 'static:wordllama')")
    overrides.setdefault("name", f"static:{root.name}")
    return StaticEmbedder(root / "model.safetensors", root / "tokenizer.json", **overrides)
