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

``embed_with_pieces`` embeds texts and spans of them (a chunk and its semantic units) from one
tokenizer pass over the texts cut into pieces at spaces, where the tokenizer provably gives the same
ids as tokenizing each span on its own (see ``splits_at_spaces``): the same vectors, bit for bit.
"""

from __future__ import annotations

import json
import os
import struct
from itertools import chain
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
    "splits_at_spaces",
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


def splits_at_spaces(tokenizer_json: dict) -> bool:
    """Whether the tokenizer's ids of ``x + " " + y`` are always its ids of ``x`` followed by those of ``y``
    (``x`` not ending in a space or "\u2581", both non-empty, no added token in either).

    True for a SentencePiece-style BPE (Llama's): the normalizer prepends "\u2581" and maps spaces to it,
    no pre-tokenizer, and no merge whose result holds "\u2581" after a non-"\u2581" character, so no
    token crosses the "\u2581" that starts a word and each word's merges do not see its neighbours."""
    norm, model = tokenizer_json.get("normalizer"), tokenizer_json.get("model")
    steps = norm.get("normalizers") if isinstance(norm, dict) and norm.get("type") == "Sequence" else None
    want = [{"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]
    if steps != want or tokenizer_json.get("pre_tokenizer") is not None or not isinstance(model, dict):
        return False
    if model.get("type") != "BPE" or model.get("dropout") or model.get("ignore_merges"):
        return False
    for merge in model.get("merges", []):
        pair = merge.split(" ") if isinstance(merge, str) else merge
        if "\u2581" in "".join(pair).lstrip("\u2581"):
            return False
    return True


def _cut_ok(text: str, p: int) -> bool:
    """Whether ``text`` may be cut at ``p`` (dropping the space at ``p - 1``) without changing its ids."""
    return 1 < p < len(text) and text[p - 1] == " " and text[p - 2] not in " \u2581"


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
        self._encode = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)  # fast: tokenizers >= 0.20
        try:
            spec = json.loads(tokenizer_path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{tokenizer_path}: not a tokenizer.json: {exc}") from None
        #: whether ``embed_with_pieces`` may cut texts at spaces (else it covers no span)
        self.splits_at_spaces = isinstance(spec, dict) and splits_at_spaces(spec)
        self._added = [t["content"] for t in spec.get("added_tokens", []) if isinstance(t, dict)
                       and isinstance(t.get("content"), str)] if isinstance(spec, dict) else []

    def token_ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Each text's token ids (no special tokens), clipped to the table as WordLlama does."""
        # encode_batch_fast: the same ids without the character offsets (a fifth less CPU, fewer allocations)
        lists = [e.ids for e in self._encode(list(texts), add_special_tokens=False)]
        counts = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        flat = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=int(counts.sum()))
        np.clip(flat, 0, self.table.shape[0] - 1, out=flat)  # once for the batch, not per text
        return np.split(flat, np.cumsum(counts)[:-1]) if lists else []

    def token_lengths(self, texts: Sequence[str]) -> np.ndarray:
        """Tokens each text is pooled over (int64), what the embedding of a text costs."""
        return np.fromiter((a.size for a in self.token_ids(texts)), dtype=np.int64, count=len(texts))

    def embed(self, texts: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
        """Float32 of shape (len(texts), dim), rows L2-normalised; a text with no tokens gives zeros."""
        texts, bs, out = batch_frame(texts, batch_size, self.batch_size, self.dim)
        for start in range(0, len(texts), bs):
            out[start : start + bs] = self._pool(self.token_ids(texts[start : start + bs]))
        return l2_normalize(out)

    def _pool(self, ids: list[np.ndarray]) -> np.ndarray:
        """Mean table row of each id list (float32, not normalised; zeros for an empty list)."""
        counts = np.fromiter((a.size for a in ids), dtype=np.int64, count=len(ids))
        indptr = np.concatenate(([0], np.cumsum(counts)))
        # a (texts x vocabulary) matrix of token counts times the table: each row summed in token order
        # without materialising the (tokens x dim) gathered rows
        flat = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        bag = csr_matrix((np.ones(int(indptr[-1]), np.float32), flat, indptr), shape=(len(ids), self.table.shape[0]))
        sums = np.asarray(bag @ self.table, dtype=np.float32)
        return sums / np.maximum(counts, 1)[:, None].astype(np.float32)

    def embed_with_pieces(self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]],
                          heads: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The texts' vectors and, from the same tokenizer pass, the vector of ``head + text[a:b]`` for each
        span, bit for bit what ``embed`` gives for those strings.

        Each text is cut at the spaces just before and after its spans where ``splits_at_spaces`` makes
        the cut exact, and the pieces are tokenized once; a text's ids are its pieces' ids, a span's are
        its head's then its pieces'. A span is covered when both its ends are such cuts (or the text's
        ends) and its head ends in one space; an uncovered span's row is zero (embed it on its own).

        Parameters
        ----------
        texts : sequence of str
        spans : sequence of sequences of (start, end)
            Character ranges ``[start, end)`` into the text of the same position.
        heads : sequence of sequences of str
            A string each span's unit carries before it ("" for none), parallel to ``spans``.

        Returns
        -------
        text_vectors : float32 of shape (len(texts), dim)
        span_vectors : float32 of shape (total spans, dim), in the order of ``spans`` flattened
        covered : bool of shape (total spans,)
        """
        texts = list(texts)
        if len(spans) != len(texts) or len(heads) != len(texts):
            raise ValueError(f"got {len(texts)} texts, {len(spans)} span lists and {len(heads)} head lists")
        pieces, text_pieces, span_pieces = self._pieces(texts, spans, heads)
        head_text = sorted({h[:-1] for (h, _, _) in span_pieces if h})
        ids = self.token_ids(pieces + head_text)
        head_ids = dict(zip(head_text, ids[len(pieces):]))
        empty = np.zeros(0, np.int64)
        text_ids = [np.concatenate(ids[a:b]) if b > a + 1 else ids[a] for a, b in text_pieces]
        covered = np.array([a >= 0 for (_, a, _) in span_pieces], dtype=bool)
        unit_ids = [np.concatenate([head_ids[h[:-1]] if h else empty] + ids[a:b])
                    for (h, a, b) in span_pieces if a >= 0]
        text_vecs, span_vecs = self._pooled(text_ids), np.zeros((len(span_pieces), self.dim), np.float32)
        span_vecs[covered] = self._pooled(unit_ids)
        return text_vecs, span_vecs, covered

    def _pooled(self, ids: list[np.ndarray]) -> np.ndarray:
        out = np.zeros((len(ids), self.dim), np.float32)
        for start in range(0, len(ids), self.batch_size):
            out[start : start + self.batch_size] = self._pool(ids[start : start + self.batch_size])
        return l2_normalize(out)

    def _pieces(self, texts: list[str], spans, heads) -> tuple[list[str], list[tuple[int, int]],
                                                                list[tuple[str, int, int]]]:
        """The texts cut at their spans' exact ends: (pieces, each text's piece range, each span's
        (head, piece range) with range (-1, -1) where it is not covered)."""
        pieces: list[str] = []
        text_pieces: list[tuple[int, int]] = []
        span_pieces: list[tuple[str, int, int]] = []
        for text, sp, hd in zip(texts, spans, heads):
            if len(sp) != len(hd):
                raise ValueError(f"got {len(sp)} spans but {len(hd)} heads for one text")
            whole = not self.splits_at_spaces or any(t in text for t in self._added)
            ok = [not whole and (a == 0 or _cut_ok(text, a)) and (b == len(text) or _cut_ok(text, b + 1))
                  and 0 <= a < b <= len(text) and _head_ok(h) and not any(t in h for t in self._added)
                  for (a, b), h in zip(sp, hd)]
            cuts = sorted({p for (a, b), good in zip(sp, ok) if good for p in (a, b + 1) if 0 < p < len(text)})
            first = len(pieces)
            starts = [0] + cuts
            piece_at = {p: first + k for k, p in enumerate(starts)}
            ends = [c - 1 for c in cuts] + [len(text)]
            pieces.extend(text[p:q] for p, q in zip(starts, ends))
            text_pieces.append((first, len(pieces)))
            for (a, b), h, good in zip(sp, hd, ok):
                if good:
                    span_pieces.append((h, piece_at[a], piece_at[b + 1] if b < len(text) else len(pieces)))
                else:
                    span_pieces.append((h, -1, -1))
        return pieces, text_pieces, span_pieces

    def __repr__(self) -> str:
        return f"StaticEmbedder(name={self.name!r}, dim={self.dim}, vocab={self.table.shape[0]})"


def _head_ok(head: str) -> bool:
    """Whether ``head + span`` tokenizes as ``head[:-1]`` then the span: "" or a text ending in one space."""
    return head == "" or (len(head) > 1 and head[-1] == " " and head[-2] not in " \u2581")


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
