"""``noderag build --estimate``: what an LLM build would cost, without calling any model.

How: the inputs are read and chunked by the build's own reader and chunker, and a *dry run* of the
real build pipeline runs on them (into a temporary folder) with a stand-in backend that answers
every LLM request offline. So the decompose prompts are the real prompts rendered on the real
chunks, and the attribute and community prompts are rendered by the real augment code on a graph
built from offline stand-in answers: the ``nlp`` decomposer's units, entities and relations for
each chunk, extractive attribute summaries of ``attributes.summary_tokens`` tokens and one element
per community. Decompose figures are therefore exact up to the tokenizer; attribute and community
figures depend on the graph an LLM would extract and are an estimate from the nlp graph. Retries of
invalid replies are not counted (a pilot calibrates both, below).

Tokenizer (:func:`prompt_counter`): when the model is known as a GGUF file (``llamacpp:PATH.gguf``, or
``tokenizer=PATH.gguf``), each request is rendered with the chat format a llama.cpp server picks for that
model and tokenized with the model's vocabulary (loaded alone, no weights): exactly the ``prompt_tokens``
the server reports, chat template included. Otherwise the project's offline cl100k tokenizer plus 4
tokens of chat framing per message (as :func:`noderag.llm.base.estimate_usage`), which undercounts a
model with a smaller vocabulary and a longer template (SmolLM2: about 10%).

Completion tokens: the completion/prompt ratio per stage measured in an LLM cache (``llm_cache.sqlite``
of the index, when it holds answers of that stage), else the ratios of the committed LLM build of the
demo corpus (``benchmarks/results/llm_demo_build_stats.json``), stated in the result.

Sampling (``sample=N``): only N chunks, spread evenly over the input (deterministic), are rendered
and dry-run; every count is multiplied by (chunks / N), and the result says so.

Calibration (``calibrate=PILOT``, ``--estimate-calibrate PILOT``): what the dry run cannot know is the
model's own behaviour: how often it breaks the schema and is asked again, and how large a graph its
answers make (so how many attribute and community prompts follow). A *pilot* index, built by one LLM
build of a few chunks with the model in question, measures both. Decompose: the pilot's chunks are
dry-run the same way, and (prompt tokens its build spent) / (prompt tokens its dry run counted), the
model's retries, scales the inputs' exact first attempts. Attributes and communities: what the pilot's
build spent per token of its chunks, times the inputs' chunk tokens (the stand-in's nlp graph says
little about a model's: a small model's graph is far sparser). Completion tokens follow the pilot's own
completion/prompt ratios. The dry run's own figures stay in the result (``dry_run``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import ConfigError
from ..store.layout import CURRENT, LLM_CACHE

__all__ = ["estimate_build", "format_estimate", "prompt_counter", "gguf_path", "DEFAULT_COMPLETION_RATIO"]

STAGES = ("decompose", "attributes", "communities")
# completion / prompt tokens per stage in the committed LLM build of the demo corpus (12 chunks,
# benchmarks/results/llm_demo_build_stats.json: 2577/3345, 134/330, 714/944)
DEFAULT_COMPLETION_RATIO = {"decompose": 0.770, "attributes": 0.406, "communities": 0.756}
# the node types a build embeds (T, S, A, H: build_stages' emb_ids; N, R and O get no vector of their own)
_EMBEDDED_TYPES = ("T", "S", "A", "H")


class _DryRunLLM:
    """Offline stand-in backend: answers each request without a model and counts its prompt tokens.

    Replies are schema-valid: decompose from the nlp decomposer, attributes extractive, communities
    one element. Built lazily on the BaseBackend so that importing this module stays cheap.
    """

    def __new__(cls, decompose_config, count=None):
        from ..llm.base import BaseBackend, RawOutput, validated_batch
        from ..llm.prompts import USER_TEMPLATES
        from ..llm.types import Usage

        from .decompose.base import ChunkInput
        from .decompose.nlp import NLPDecomposer

        class DryRun(BaseBackend):
            model_id = "noderag-estimate-dry-run"

            def __init__(self) -> None:
                super().__init__(max_validation_retries=0)
                self.nlp = NLPDecomposer(decompose_config)
                self.frames = [USER_TEMPLATES[lg]["decompose"].split("{text}") for lg in USER_TEMPLATES]
                self.prompt: dict[str, int] = {s: 0 for s in STAGES}
                self.requests: dict[str, int] = {s: 0 for s in STAGES}
                self.units = 0
                #: prompt tokens of one request's messages (:func:`prompt_counter`)
                self.count = count or prompt_counter(None)[0]

            def run(self, requests, *, stage: str):
                key = stage if stage in STAGES else stage.split(":")[0]
                for r in requests:
                    self.requests[key] = self.requests.get(key, 0) + 1
                    self.prompt[key] = self.prompt.get(key, 0) + self.count(r.messages)
                return super().run(requests, stage=stage)

            def generate(self, requests, *, on_result=None):
                return validated_batch(list(requests), self._call_batch, self.validators, 0, on_result)

            def _chunk_text(self, user: str) -> str:
                for frame in self.frames:
                    if len(frame) == 2 and user.startswith(frame[0]) and user.endswith(frame[1]):
                        return user[len(frame[0]):len(user) - len(frame[1])]
                return user

            def _reply(self, req) -> Any:
                user = req.messages[-1]["content"]
                props = (req.schema or {}).get("properties", {})
                if req.schema is None:  # attribute summary: the leading units, about summary_tokens long
                    from ..tokenize import default_tokenizer

                    lines = [ln[2:] for ln in user.splitlines() if ln.startswith("- ") and len(ln) > 2]
                    return default_tokenizer().truncate(" ".join(lines) or user, self.summary_tokens)
                if "units" in props:
                    item = props["units"]["items"]["properties"]
                    dec = self.nlp.decompose([ChunkInput(0, self._chunk_text(user), None)])[0]
                    units = []
                    for u in dec.units[: props["units"]["maxItems"]]:
                        ents = list(dict.fromkeys(e[:100] for e in u.entities if e.strip()))[
                            : item["entities"]["maxItems"]]
                        rels = [{"source": s[:100], "relation": r[:120], "target": t[:100]}
                                for s, r, t in u.relations if s.strip() and r.strip() and t.strip()][
                            : item["relations"]["maxItems"]]
                        units.append({"text": u.text[: item["text"]["maxLength"]], "entities": ents,
                                      "relations": rels})
                    self.units += len(units)
                    return {"units": units}
                if "elements" in props:
                    first = next((ln[2:] for ln in user.splitlines() if ln.startswith("- ")), "community")
                    return {"elements": [{"title": first[:60].strip() or "community",
                                          "description": first[:600].strip() or "community"}]}
                raise ValueError(f"the estimate has no stand-in reply for a schema with {sorted(props)}")

            def _call_batch(self, batch):
                out = []
                for req in batch:
                    v = self._reply(req)
                    text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                    out.append(RawOutput(text=text, usage=Usage(0, 0, 0, True), finish_reason="stop"))
                return out

        return DryRun()


CL100K_COUNTER = "noderag.tokenize (offline cl100k) + 4 tokens of chat framing per message"
TOKENIZER_CHOICES = "expected 'cl100k' or the path of a GGUF model file (its vocabulary and chat template)"


def _cl100k_count(messages: Sequence[dict]) -> int:
    """Prompt tokens as :func:`noderag.llm.base.estimate_usage` counts them (what a server that reports none is
    charged with): the offline cl100k tokenizer plus 4 tokens of chat framing per message."""
    from ..llm.accounting import count_tokens_offline

    return sum(count_tokens_offline(m["content"]) + 4 for m in messages)


def _gguf_counter(path: Path):
    """Count as a llama.cpp server of this GGUF counts (``usage.prompt_tokens``): the messages rendered by the
    chat format the server picks for the model (a built-in format when llama-cpp-python recognises the GGUF's
    template, else the template itself, else llama-2), tokenized with the model's vocabulary (loaded alone,
    no weights) and its special tokens, BOS added only where the format does not add it."""
    try:
        from llama_cpp import llama_chat_format as lcf
        from llama_cpp import llama_cpp as lc
        from llama_cpp._internals import LlamaModel
    except ImportError as e:
        raise ConfigError(f"tokenizer {path}: counting with a GGUF needs llama-cpp-python "
                          f"(pip install llama-cpp-python): {e}") from None
    params = lc.llama_model_default_params()
    params.vocab_only = True
    try:
        model = LlamaModel(path_model=str(path), params=params, verbose=False)
    except (ValueError, RuntimeError, OSError) as e:
        raise ConfigError(f"tokenizer {path}: llama.cpp cannot read its vocabulary: {e}") from None
    meta = model.metadata()
    template = meta.get("tokenizer.chat_template")
    guessed = lcf.guess_chat_format_from_gguf_metadata(meta) if template else None
    builtin = {"chatml": "format_chatml", "mistral-instruct": "format_mistral_instruct", "llama-3": "format_llama3"}
    if guessed in builtin:
        fmt, how = getattr(lcf, builtin[guessed]), f"its '{guessed}' chat format"
    elif template:
        eos, bos = model.token_eos(), model.token_bos()
        fmt = lcf.Jinja2ChatFormatter(template=template, eos_token=model.token_get_text(eos) if eos != -1 else "",
                                      bos_token=model.token_get_text(bos) if bos != -1 else "",
                                      stop_token_ids=[eos])
        how = "its GGUF chat template"
    else:
        fmt, how = lcf.format_llama2, "the llama-2 chat format (the GGUF has no template)"

    def count(messages: Sequence[dict]) -> int:
        r = fmt(messages=[{"role": m["role"], "content": m["content"]} for m in messages])
        return len(model.tokenize(r.prompt.encode("utf-8"), add_bos=not r.added_special, special=True))

    count.model = model  # the vocabulary stays loaded as long as the counter lives
    return count, f"the tokenizer of {path.name} + {how} (as a llama.cpp server counts)"


def prompt_counter(tokenizer=None):
    """``(count, description)``: ``count(messages)`` is the prompt tokens of one request.

    ``tokenizer``: None or ``"cl100k"`` (the offline tokenizer + 4 tokens of framing per message); the path of a
    GGUF model file (its vocabulary and chat template, exactly what a llama.cpp server of that model reports);
    or a callable ``count(messages) -> int``. Anything else is a :class:`~noderag.errors.ConfigError` naming it.
    """
    if tokenizer is None or tokenizer == "cl100k":
        return _cl100k_count, CL100K_COUNTER
    if callable(tokenizer):
        return tokenizer, getattr(tokenizer, "__name__", "the caller's counter")
    return _gguf_counter(gguf_path(tokenizer))


def gguf_path(tokenizer) -> Path:
    """The GGUF model file a tokenizer value names (checked by its magic bytes, so any file name works).

    A value that is no file is a :class:`~noderag.errors.ConfigError` in one line: "no such GGUF file" when it
    looks like a path (a ``.gguf`` suffix or a folder in it), else "unknown tokenizer" with the choices.
    """
    try:
        text = os.fspath(tokenizer)
    except TypeError:
        raise ConfigError(f"tokenizer {tokenizer!r}: {TOKENIZER_CHOICES}") from None
    path = Path(text).expanduser()
    if path.is_file():
        with open(path, "rb") as fh:
            if fh.read(4) != b"GGUF":
                raise ConfigError(f"tokenizer {text}: not a GGUF model file (no GGUF magic at its start)")
        return path
    if path.exists():
        raise ConfigError(f"tokenizer {text}: not a file (a GGUF model file is expected)")
    if path.suffix.lower() == ".gguf" or os.sep in text or (os.altsep and os.altsep in text):
        raise ConfigError(f"tokenizer {text}: no such GGUF file")
    raise ConfigError(f"unknown tokenizer {text!r}: {TOKENIZER_CHOICES}")


def _spec_tokenizer(spec: str | None):
    """The GGUF a build's LLM spec names, if any (``llamacpp:PATH.gguf``, or ``openai:PATH.gguf@URL`` as a
    llama.cpp server started without an alias names its model); else None (the tokenizer is unknown)."""
    if not spec:
        return None
    from ..llm.factory import parse_llm_spec

    try:
        kind, model, _ = parse_llm_spec(spec)
    except ValueError:
        return None
    if kind in ("llamacpp", "openai") and model and model.lower().endswith(".gguf") and Path(model).is_file():
        return model
    return None


def _cache_ratios(cache_path: Path) -> dict[str, tuple[float, int]]:
    """(completion/prompt ratio, answers) per stage measured in an LLM cache; stages told apart by reply shape."""
    if not cache_path.is_file():
        return {}
    sums = {s: [0, 0, 0] for s in STAGES}
    try:
        con = sqlite3.connect(f"file:{cache_path}?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT value, usage FROM responses").fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return {}
    for value, usage in rows:
        try:
            v = json.loads(value) if value else None
            u = json.loads(usage)
        except (TypeError, ValueError):
            continue
        stage = ("decompose" if isinstance(v, dict) and "units" in v else
                 "communities" if isinstance(v, dict) and "elements" in v else
                 "attributes" if v is None or isinstance(v, str) else None)
        if stage is None or u.get("estimated") or not u.get("prompt"):
            continue
        s = sums[stage]
        s[0] += int(u.get("prompt", 0))
        s[1] += int(u.get("completion", 0))
        s[2] += 1
    return {k: (v[1] / v[0], v[2]) for k, v in sums.items() if v[2] and v[0]}


def _dry_run(chunks: list, pick: list[int], n_chunks: int, config, count, progress: bool, log
             ) -> tuple[dict[str, dict], dict[str, int]]:
    """Requests and prompt tokens per LLM stage, and embedding texts and tokens, of the build pipeline run on
    the picked chunks with a stand-in LLM that counts (no model is called)."""
    from ..tokenize import count_tokens

    stages: dict[str, dict] = {s: {"requests": 0, "prompt_tokens": 0} for s in STAGES}
    embed = {"texts": 0, "tokens": 0}
    if not pick:
        return stages, embed
    dry_cfg = replace(config, decompose=replace(config.decompose, method="llm"),
                      embed=replace(config.embed, spec="hash:64"),  # vectors never reach a prompt
                      llm=replace(config.llm, spec=None, cache=False))
    llm = _DryRunLLM(dry_cfg.decompose, count)
    llm.summary_tokens = int(config.attributes.summary_tokens)
    from .driver import build_index
    from ..store.tables import IndexStore

    with tempfile.TemporaryDirectory(prefix="noderag-estimate-") as tmp:
        part = Path(tmp) / "sample.jsonl"
        with open(part, "w", encoding="utf-8") as fh:  # each picked chunk as one document: chunked alike
            for k, i in enumerate(pick):
                title, text = chunks[i]
                fh.write(json.dumps({"id": f"chunk-{k}", "title": title, "text": text}, ensure_ascii=False)
                         + "\n")
        if log:
            log(f"estimate: dry run of the build pipeline on {len(pick):,} of {n_chunks:,} chunks "
                "(no model is called)")
        build_index([str(part)], Path(tmp) / "ix", dry_cfg, llm=llm, progress=progress, allow_failures=True)
        for s in STAGES:
            stages[s] = {"requests": llm.requests.get(s, 0), "prompt_tokens": llm.prompt.get(s, 0)}
        with IndexStore.open(Path(tmp) / "ix") as store:
            from ..graph.types import NodeType

            types = store.types
            texts = store.texts
            want = [int(NodeType[n]) for n in _EMBEDDED_TYPES]
            active = np.asarray(store.active, dtype=bool)
            for i in np.flatnonzero(np.isin(types, want) & active).tolist():
                embed["texts"] += 1
                embed["tokens"] += count_tokens(texts[i])
    return stages, embed


#: settings a pilot must share with the estimate: they shape the chunks and the prompts
_PILOT_SETTINGS = (("chunk", "max_tokens"), ("chunk", "min_tokens"), ("decompose", "max_units"),
                   ("decompose", "max_entities"), ("decompose", "max_relations"))


def _pilot_chunks(store) -> list[tuple[str, str]]:
    """(title, text) of every chunk of an index, in chunk order: what its build decomposed."""
    docs = store.documents
    titles = docs.column("title").to_pylist()
    texts = store.texts
    out = []
    for title, ids in zip(titles, docs.column("chunk_ids").to_pylist()):
        out += [(title or "", texts[int(i)]) for i in ids or ()]
    return out


def pilot_calibration(pilot, config, count, progress: bool = False, log=None) -> dict:
    """What a pilot index, made by one LLM build, tells about its model, per stage: for decompose, the factor
    (real / dry run) of prompt tokens and requests on its own chunks (the model's retries); for the later
    stages, the prompt tokens and requests its build spent per token of its chunks; and the completion/prompt
    ratios. Requests answered from a cache are counted at the mean of the others. A pilot that is no index,
    was made by more than one run, or without an LLM, is a :class:`~noderag.errors.ConfigError` naming it."""
    from ..store.tables import IndexStore
    from ..tokenize import count_tokens

    path = Path(pilot)
    if not (path / CURRENT).is_file():
        raise ConfigError(f"--estimate-calibrate {path}: not an index (no {CURRENT} file)")
    with IndexStore.open(path) as store:
        manifest = store.manifest
        runs = manifest.get("runs") or []
        if len(runs) != 1:
            raise ConfigError(f"--estimate-calibrate {path}: made by {len(runs)} runs; a pilot is one LLM build "
                              "of a few chunks (its manifest's tokens are those of the whole index)")
        tokens = manifest.get("tokens") or {}
        built = manifest.get("config") or {}
        for section, key in _PILOT_SETTINGS:  # what shapes the chunks and the prompts must be the same
            was, now = (built.get(section) or {}).get(key), getattr(getattr(config, section), key)
            if was is not None and was != now:
                raise ConfigError(f"--estimate-calibrate {path}: the pilot was built with {section}.{key} = {was!r}, "
                                  f"the estimate uses {now!r}; build the pilot with the same settings")
        chunks = _pilot_chunks(store)
        model = (built.get("llm") or {}).get("spec")
    spent = {}
    for s in STAGES:
        st = tokens.get(s) or {}
        made = int(st.get("requests", 0)) - int(st.get("cache_hits", 0))
        scale = int(st.get("requests", 0)) / made if made > 0 else 0.0
        spent[s] = {"requests": int(st.get("requests", 0)), "prompt_tokens": int(st.get("prompt_tokens", 0)) * scale,
                    "completion_tokens": int(st.get("completion_tokens", 0)) * scale,
                    "measured": made > 0 and not st.get("estimated")}
    if not spent["decompose"]["measured"]:
        raise ConfigError(f"--estimate-calibrate {path}: its build made no decompose call whose tokens a server "
                          "reported (built without an LLM, from a cache, or by a server that reports no usage)")
    if log:
        log(f"estimate: calibrating on the pilot {path} ({len(chunks):,} chunks, model {model or 'unknown'})")
    dry, _ = _dry_run(chunks, list(range(len(chunks))), len(chunks), config, count, progress, None)
    chunk_tokens = sum(count_tokens(text) for _, text in chunks)
    out = {"pilot": str(path), "model": model, "chunks": len(chunks), "chunk_tokens": chunk_tokens, "stages": {}}
    for s in STAGES:
        real, proxy = spent[s], dry[s]
        cal = {"completion_ratio": (real["completion_tokens"] / real["prompt_tokens"]
                                    if real["measured"] and real["prompt_tokens"] else None),
               "pilot_prompt_tokens": int(round(real["prompt_tokens"])), "pilot_requests": real["requests"],
               "pilot_dry_run_prompt_tokens": proxy["prompt_tokens"], "pilot_dry_run_requests": proxy["requests"]}
        if s == "decompose":  # one request per chunk, rendered exactly: the pilot adds the model's retries
            cal["prompt_factor"] = real["prompt_tokens"] / proxy["prompt_tokens"]
            cal["request_factor"] = real["requests"] / proxy["requests"]
        else:
            cal["prompt_per_chunk_token"] = real["prompt_tokens"] / chunk_tokens if chunk_tokens else 0.0
            cal["requests_per_chunk_token"] = real["requests"] / chunk_tokens if chunk_tokens else 0.0
        out["stages"][s] = cal
    return out


def _update_mode(previous, config, n_new: int) -> dict | None:
    """How a build into an existing index adds ``n_new`` documents (None: a new index). A delta insert
    (:func:`noderag.indexing.update.delta.delta_reason`) makes no attribute or community request: the summaries describe
    the base until ``noderag compact``. A recompute renders them for the whole index, which the dry run of
    the new documents does not."""
    if previous is None or not n_new:
        return None
    from .update.delta import delta_reason

    why = delta_reason(previous, config, [], n_new)
    if why is None:
        return {"mode": "delta", "note": "a delta insert: no attribute or community request (the summaries "
                                         "wait for `noderag compact`, which makes them for the whole index)"}
    return {"mode": "recompute", "reason": why,
            "note": f"the build recomputes the whole index ({why}): its attribute and community requests cover "
                    "every document; these figures are the new documents' alone"}


def _existing_index(index_dir: str | os.PathLike | None) -> tuple[set[str], Any, Path | None]:
    """(content hashes of the documents it holds, its current generation, its LLM cache) of an existing index
    (empty, None, None when ``index_dir`` holds none)."""
    if index_dir is None or not (Path(index_dir) / CURRENT).is_file():
        return set(), None, None
    from ..store.tables import IndexStore
    from .previous import Previous

    with IndexStore.open(index_dir) as store:
        known = set(store.documents.column("content_hash").to_pylist())
        previous = Previous(store.generation, store.path, store.manifest)
    return known, previous, Path(index_dir) / LLM_CACHE


def _stage_estimate(s: str, dry: dict, factor: float, cal: dict | None, measured: tuple | None, chunk_tokens: int,
                    delta: bool) -> dict:
    """One stage's estimate: the dry run's requests and prompt tokens scaled by ``factor`` (or by the pilot's
    calibration ``cal``), none after decompose for a ``delta`` insert, and the completion tokens at the
    pilot's, the cache's (``measured``: ratio, answers) or the default completion ratio."""
    req = dry["requests"] * factor
    prompt = dry["prompt_tokens"] * factor
    if cal is not None and s == "decompose":
        req, prompt = req * cal["request_factor"], prompt * cal["prompt_factor"]
    elif cal is not None:
        req, prompt = chunk_tokens * cal["requests_per_chunk_token"], chunk_tokens * cal["prompt_per_chunk_token"]
    if delta and s != "decompose":
        req = prompt = 0  # a delta insert leaves the summaries to `noderag compact`
    if cal is not None and cal["completion_ratio"] is not None:
        ratio, source = cal["completion_ratio"], f"measured on the pilot's {cal['pilot_requests']} requests"
    elif measured is not None:
        ratio, source = measured[0], f"measured on {measured[1]} cached answers"
    else:
        ratio, source = DEFAULT_COMPLETION_RATIO[s], "default (the demo corpus LLM build)"
    out = {"requests": int(round(req)), "prompt_tokens": int(round(prompt)),
           "completion_tokens": int(round(prompt * ratio)), "completion_ratio": round(ratio, 3),
           "completion_ratio_source": source,
           "dry_run": {"requests": int(round(dry["requests"] * factor)),
                       "prompt_tokens": int(round(dry["prompt_tokens"] * factor))},
           "exact": s == "decompose" and factor == 1.0 and cal is None}
    if cal is not None:
        out["calibration"] = {k: round(v, 6) for k, v in cal.items() if k in (
            "prompt_factor", "request_factor", "prompt_per_chunk_token", "requests_per_chunk_token")}
    return out


def estimate_build(inputs: Sequence[str | os.PathLike], config=None, *, index_dir: str | os.PathLike | None = None,
                   sample: int | None = None, tps: float | None = None, progress: bool = False,
                   log=None, tokenizer=None, calibrate: str | os.PathLike | None = None) -> dict:
    """Requests and tokens per LLM stage, embedding texts and tokens, and a time range, of an LLM build.

    Parameters
    ----------
    inputs : the build's inputs (files, folders, JSONL corpora)
    config : NodeRAGConfig (chunking, decompose limits, attributes and communities settings)
    index_dir : an existing index: documents it already holds are not counted (a build only adds new
        ones), and its ``llm_cache.sqlite`` gives the completion/prompt ratios when it has them
    sample : render and dry-run only this many chunks, spread over the input, and extrapolate
    tps : LLM throughput in tokens per second, for the time range
    tokenizer : how prompt tokens are counted (:func:`prompt_counter`; ``--estimate-tokenizer``): the path of a
        GGUF model file counts exactly as a llama.cpp server of that model does (its vocabulary and chat
        template); ``"cl100k"`` the offline tokenizer plus 4 tokens per message; a callable counts itself.
        Default: the GGUF that ``config.llm.spec`` names, else cl100k. An unknown value or a missing file is a
        :class:`~noderag.errors.ConfigError`, raised before any input is read.
    calibrate : a pilot index, built by one LLM build of a few chunks with the model to be used
        (:func:`pilot_calibration`): decompose is scaled by the model's retries measured there, and the later
        stages follow what the pilot's build spent per chunk token
    """
    from ..config import NodeRAGConfig
    from ..tokenize import count_tokens

    from .chunk import chunk_text
    from .ingest import ingest

    config = config or NodeRAGConfig()
    t0 = time.perf_counter()
    count, counted_with = prompt_counter(tokenizer if tokenizer is not None else _spec_tokenizer(config.llm.spec))
    if sample is not None and int(sample) < 1:
        raise ValueError(f"--estimate-sample must be >= 1, got {sample}")
    calibration = pilot_calibration(calibrate, config, count, progress, log) if calibrate is not None else None
    known, previous, cache_path = _existing_index(index_dir)
    docs, dupes = ingest(list(inputs), known_hashes=known)
    update = _update_mode(previous, config, len(docs))
    chunks = [(d.title, c) for d in docs for c in chunk_text(d.text, config.chunk.max_tokens, config.chunk.min_tokens)]
    n_chunks = len(chunks)
    if sample is not None and int(sample) < n_chunks:
        pick = np.unique(np.linspace(0, n_chunks - 1, int(sample)).round().astype(np.int64)).tolist()
    else:
        pick = list(range(n_chunks))
    factor = n_chunks / len(pick) if pick else 1.0
    chunk_tokens = sum(count_tokens(c) for _, c in chunks)

    stages, embed = _dry_run(chunks, pick, n_chunks, config, count, progress, log)
    measured = _cache_ratios(cache_path) if cache_path is not None else {}
    delta = update is not None and update["mode"] == "delta"
    out_stages = {s: _stage_estimate(s, stages[s], factor, calibration["stages"][s] if calibration else None,
                                     measured.get(s), chunk_tokens, delta) for s in STAGES}
    total_p = sum(v["prompt_tokens"] for v in out_stages.values())
    total_c = sum(v["completion_tokens"] for v in out_stages.values())
    res = {
        "documents": len(docs), "documents_known_or_duplicate": dupes, "chunks": n_chunks,
        "chunk_tokens": chunk_tokens, "sampled_chunks": len(pick), "extrapolated": factor != 1.0,
        "scale_factor": round(factor, 4), "stages": out_stages,
        "total": {"requests": sum(v["requests"] for v in out_stages.values()), "prompt_tokens": total_p,
                  "completion_tokens": total_c},
        "embedding": {"texts": int(round(embed["texts"] * factor)), "tokens": int(round(embed["tokens"] * factor))},
        "tokenizer": counted_with,
        "calibration": None if calibration is None else {
            k: calibration[k] for k in ("pilot", "model", "chunks", "chunk_tokens")},
        "update": update,
        "estimate_s": round(time.perf_counter() - t0, 1),
    }
    if tps:
        if tps <= 0:
            raise ValueError(f"--estimate-tps must be > 0, got {tps}")
        # fastest: prompt processing is free next to generation; slowest: every token at tps
        res["time_s"] = {"tps": tps, "low": round(total_c / tps, 1), "high": round((total_p + total_c) / tps, 1)}
    return res


def format_estimate(est: dict) -> str:
    """The estimate as a plain-text table (what ``noderag build --estimate`` prints)."""
    lines = []
    how = (f"extrapolated from {est['sampled_chunks']:,} of {est['chunks']:,} chunks (x{est['scale_factor']})"
           if est["extrapolated"] else f"all {est['chunks']:,} chunks rendered")
    lines.append(f"LLM build estimate: {est['documents']:,} new document(s), {est['chunks']:,} chunks "
                 f"({est['chunk_tokens']:,} tokens); {how}; no model was called")
    lines.append("")
    lines.append(f"{'stage':<14}{'requests':>10}{'prompt tok':>14}{'completion tok':>16}  completion ratio")
    for s, v in est["stages"].items():
        cal = v.get("calibration")
        note = ("" if not cal and s == "decompose" else "  (prompts rendered on the nlp graph)" if not cal else
                f"  (x{cal['prompt_factor']:.2f} of the dry run: the pilot's retries)" if s == "decompose" else
                f"  ({cal['prompt_per_chunk_token']:.3f} per chunk token, as the pilot)")
        lines.append(f"{s:<14}{v['requests']:>10,}{v['prompt_tokens']:>14,}{v['completion_tokens']:>16,}  "
                     f"{v['completion_ratio']} {v['completion_ratio_source']}{note}")
    t = est["total"]
    lines.append(f"{'total':<14}{t['requests']:>10,}{t['prompt_tokens']:>14,}{t['completion_tokens']:>16,}")
    lines.append("")
    lines.append(f"embedding: {est['embedding']['texts']:,} texts, {est['embedding']['tokens']:,} tokens")
    if "time_s" in est:
        ts = est["time_s"]
        lines.append(f"time at {ts['tps']:,} tokens/s: {ts['low']:,.0f} s (completion tokens only) to "
                     f"{ts['high']:,.0f} s (prompt + completion)")
    if est.get("update"):
        lines.append(est["update"]["note"])
    cal = est.get("calibration")
    lines.append(f"tokens counted with {est['tokenizer']}; " + (
        f"retries and graph density calibrated on the pilot {cal['pilot']} ({cal['chunks']:,} chunks, model "
        f"{cal['model'] or 'unknown'})" if cal else "retries of invalid replies not included"))
    return "\n".join(lines)


def run_estimate(args, config, log=None) -> int:
    """``noderag build INPUT... --index DIR --estimate [--estimate-tps N] [--estimate-sample N]
    [--estimate-tokenizer cl100k|PATH.gguf] [--estimate-calibrate PILOT]``."""
    from ..config import ConfigError

    if args.estimate_tps is not None and not args.estimate_tps > 0:
        raise ConfigError(f"--estimate-tps must be > 0, got {args.estimate_tps}")
    if args.estimate_sample is not None and args.estimate_sample < 1:
        raise ConfigError(f"--estimate-sample must be >= 1, got {args.estimate_sample}")
    est = estimate_build(args.inputs, config, index_dir=args.index, sample=args.estimate_sample,
                         tps=args.estimate_tps, progress=False, log=log,
                         tokenizer=getattr(args, "estimate_tokenizer", None),
                         calibrate=getattr(args, "estimate_calibrate", None))
    print(format_estimate(est))
    return 0
