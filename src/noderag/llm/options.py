"""Backend settings from the config file and the command line (``--llm-option KEY=VALUE``).

One table of the settings every LLM backend understands (dialect, concurrency, timeouts, retries,
sampling, API-key variable), a parser for ``KEY=VALUE`` strings that names the bad key, and the
split of a settings dict into backend-config overrides and request-sampling overrides.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any, Iterable, Mapping

from ..errors import NodeRAGError
from ..retry import RetrySettings

__all__ = [
    "LLM_OPTIONS",
    "SAMPLING_OPTIONS",
    "ClientOptions",
    "LLMOptions",
    "OptionError",
    "parse_option_value",
    "parse_llm_options",
    "split_llm_options",
]


class OptionError(NodeRAGError, ValueError):
    """A ``KEY=VALUE`` backend option is malformed, unknown or out of range; the message names the key."""


@dataclass(frozen=True)
class _Opt:
    kind: type
    help: str
    minimum: float | None = None
    choices: tuple[str, ...] | None = None
    #: backends the option applies to (None: every backend)
    backends: tuple[str, ...] | None = None
    #: an engine setting of one backend: kept in the ``[llm] options`` table, not a key of ``[llm]``
    engine: bool = False
    #: the value a client setting (:class:`ClientOptions`) takes when it is not set
    default: Any = None


#: Settings shared by the LLM backends (``[llm]`` keys and ``--llm-option`` keys).
LLM_OPTIONS: dict[str, _Opt] = {
    "dialect": _Opt(str, "structured-output dialect of the openai backend",
                    choices=("auto", "json_schema", "json_object", "vllm", "none"), backends=("openai",),
                    default="auto"),
    "max_concurrency": _Opt(int, "requests in flight at once (openai)", 1, backends=("openai",), default=8),
    # as long as the openai client's default: requests queued behind others on a one-slot server (llama.cpp)
    # wait there, and a timed-out request keeps the server busy
    "timeout_s": _Opt(float, "read timeout of one request in seconds (openai)", 0.001, backends=("openai",),
                      default=600.0),
    "connect_timeout_s": _Opt(float, "connect timeout in seconds (openai)", 0.001, backends=("openai",),
                              default=10.0),
    "max_retries": _Opt(int, "retries of a transient HTTP failure (openai)", 0, backends=("openai",), default=4),
    "backoff_base_s": _Opt(float, "first retry delay in seconds, doubled per retry (openai)", 0, backends=("openai",),
                           default=0.5),
    "backoff_max_s": _Opt(float, "largest retry delay in seconds (openai)", 0.001, backends=("openai",),
                          default=20.0),
    "max_validation_retries": _Opt(int, "retries of an invalid (non-schema) output", 0, default=2),
    "api_key_env": _Opt(str, "name of the environment variable holding the API key (openai)", backends=("openai",)),
    "temperature": _Opt(float, "sampling temperature of every request (default: greedy 0)", 0),
    "top_p": _Opt(float, "nucleus sampling of every request (default 1)", 0.000001),
    "seed": _Opt(int, "sampling seed of every request (default 0)", 0),
    "max_tokens": _Opt(int, "completion budget of every request (default: per task)", 1),
    # backend-specific engine settings
    "tensor_parallel_size": _Opt(int, "GPUs per model (vllm)", 1, backends=("vllm",), engine=True),
    "gpu_memory_utilization": _Opt(float, "fraction of GPU memory (vllm)", 0.01, backends=("vllm",), engine=True),
    "max_model_len": _Opt(int, "context length (vllm)", 1, backends=("vllm",), engine=True),
    "n_ctx": _Opt(int, "context length (llamacpp)", 1, backends=("llamacpp",), engine=True),
    "n_threads": _Opt(int, "CPU threads (llamacpp)", 1, backends=("llamacpp",), engine=True),
    "n_gpu_layers": _Opt(int, "layers offloaded to the GPU (llamacpp; -1 all)", -1, backends=("llamacpp",), engine=True),
}

#: Options applied to each request's sampling (part of the cache key), not to the backend.
SAMPLING_OPTIONS = ("temperature", "top_p", "seed", "max_tokens")


@dataclass
class ClientOptions(RetrySettings):
    """The settings of a client of an LLM server, declared once: the ``[llm]`` section
    (:class:`noderag.config.LLMConfig`) and the openai backend's settings
    (:class:`~noderag.llm.backends.openai.OpenAIConfig`) both extend it, and it extends the timeouts and retries
    every HTTP client shares (:class:`noderag.retry.RetrySettings`). ``None`` is the backend's default
    (:data:`LLM_OPTIONS`' ``default``); :meth:`client_settings` fills and checks them.
    """

    dialect: str | None = None
    max_concurrency: int | None = None
    max_validation_retries: int | None = None

    def client_settings(self, where: str) -> dict[str, Any]:
        """Every client setting, unset ones at their default, each checked (:class:`OptionError` names
        ``where`` and the key)."""
        out = {}
        for f in fields(ClientOptions):
            value = getattr(self, f.name)
            out[f.name] = LLM_OPTIONS[f.name].default if value is None else parse_option_value(
                f.name, value, where=where)
        return out


@dataclass
class LLMOptions(ClientOptions):
    """Every ``[llm]`` setting a backend understands, declared beside their table (its options that are not
    engine settings; ``None``: the backend's default): the client settings, the API-key variable and the
    sampling of every request. :class:`noderag.config.LLMConfig` adds the spec, the cache switch and the
    engine options."""

    api_key_env: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    max_tokens: int | None = None


def parse_option_value(key: str, value: Any, *, where: str = "--llm-option") -> Any:
    """Check (and convert from a string) the value of option ``key``; OptionError names the key."""
    opt = LLM_OPTIONS.get(key)
    if opt is None:
        raise OptionError(f"{where}: unknown LLM option {key!r}; known: {', '.join(sorted(LLM_OPTIONS))}")
    where = f"{where}{key}" if where.endswith(".") else f"{where} {key}"
    v = value
    if isinstance(v, str) and opt.kind is not str:
        try:
            v = json.loads(v)
        except ValueError:
            raise OptionError(f"{where}: expected a {opt.kind.__name__}, got {value!r}") from None
    if opt.kind is float and isinstance(v, int) and not isinstance(v, bool):
        v = float(v)
    if not isinstance(v, opt.kind) or isinstance(v, bool):
        raise OptionError(f"{where}: expected a {opt.kind.__name__}, got {value!r}")
    if opt.choices is not None and v not in opt.choices:
        raise OptionError(f"{where}: expected one of {opt.choices}, got {value!r}")
    if opt.minimum is not None and v < opt.minimum:
        raise OptionError(f"{where}: must be >= {opt.minimum:g}, got {value!r}")
    if opt.kind is str and not v.strip():
        raise OptionError(f"{where}: must be a non-empty string")
    return v


def parse_llm_options(items: Iterable[str] | None) -> dict[str, Any]:
    """Parse ``["KEY=VALUE", ...]`` (``--llm-option``) into checked values; later keys win."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, eq, value = str(item).partition("=")
        key = key.strip().replace("-", "_")
        if not eq or not key:
            raise OptionError(f"--llm-option {item!r}: expected KEY=VALUE, e.g. dialect=json_object")
        out[key] = parse_option_value(key, value.strip())
    return out


def split_llm_options(kind: str, options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split checked options into (backend overrides, sampling overrides) for backend ``kind``.

    An option that does not apply to ``kind`` raises OptionError naming it (a setting that would be
    silently ignored is a mistake the user should hear about).
    """
    backend: dict[str, Any] = {}
    sampling: dict[str, Any] = {}
    for key, value in options.items():
        if value is None:
            continue
        opt = LLM_OPTIONS.get(key)
        if opt is None:
            raise OptionError(f"unknown LLM option {key!r}; known: {', '.join(sorted(LLM_OPTIONS))}")
        if opt.backends is not None and kind not in opt.backends:
            raise OptionError(f"LLM option {key!r} applies to the {'/'.join(opt.backends)} backend, not {kind!r}")
        (sampling if key in SAMPLING_OPTIONS else backend)[key] = value
    return backend, sampling


#: ``[llm]`` keys of :class:`noderag.config.LLMConfig` (its fields, pinned by a test); engine settings go to
#: its ``options`` table.
CONFIG_KEYS = tuple(k for k, o in LLM_OPTIONS.items() if not o.engine)


def llm_option_overrides(items: Iterable[str] | None, engine_options: Mapping[str, Any] | None = None
                         ) -> dict[str, Any]:
    """Dotted config overrides (``{"llm.dialect": ..., "llm.options": {...}}``) from ``--llm-option`` items."""
    parsed = parse_llm_options(items)
    out: dict[str, Any] = {f"llm.{k}": v for k, v in parsed.items() if k in CONFIG_KEYS}
    engine = {k: v for k, v in parsed.items() if k not in CONFIG_KEYS}
    if engine:
        out["llm.options"] = {**dict(engine_options or {}), **engine}
    return out
