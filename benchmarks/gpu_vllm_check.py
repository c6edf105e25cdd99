"""GPU check of the vLLM backend: decompose the MuSiQue sample's passages with a local model.

Needs a GPU machine with ``pip install 'noderag[vllm]'`` and a model directory (no download).
Reports requests/s, tokens/s, valid-JSON rate and cached-token share as JSON on stdout
(and in ``--out`` when given)::

    python benchmarks/gpu_vllm_check.py --model /models/Qwen2.5-7B-Instruct --limit 500 --out vllm.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from noderag.llm.backends.vllm import VLLMBackend, VLLMConfig
from noderag.llm.prompts import decompose_request


def load_passages(data: Path, limit: int | None) -> list[str]:
    """Read passage texts from ``data/corpus.jsonl`` (first ``limit``)."""
    corpus = data / "corpus.jsonl"
    if not corpus.is_file():
        raise SystemExit(f"--data: {corpus} not found")
    out = []
    with corpus.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{corpus}:{lineno}: invalid JSON ({e.msg})") from None
            text = rec.get("text")
            if not isinstance(text, str):
                raise SystemExit(f"{corpus}:{lineno}: no string field 'text'")
            out.append(text)
            if limit is not None and len(out) >= limit:
                break
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="local model directory (or a name already in the HF cache)")
    ap.add_argument("--data", default="/work/shared/data/musique", help="folder with corpus.jsonl")
    ap.add_argument("--limit", type=int, default=None, help="first N passages (default: all)")
    ap.add_argument("--tp", type=int, default=1, help="tensor_parallel_size")
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    ap.add_argument("--max-tokens", type=int, default=1024, help="completion budget per passage")
    ap.add_argument("--retries", type=int, default=1, help="validation retries for invalid output")
    ap.add_argument("--out", default=None, help="also write the JSON report here")
    args = ap.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        raise SystemExit(f"--limit must be >= 1, got {args.limit}")

    passages = load_passages(Path(args.data), args.limit)
    requests = [decompose_request(t, lang="en", max_tokens=args.max_tokens, id=str(i)) for i, t in enumerate(passages)]

    t0 = time.perf_counter()
    llm = VLLMBackend(VLLMConfig(
        model=args.model, tensor_parallel_size=args.tp, max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization, max_validation_retries=args.retries,
    ))
    load_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    results = llm.run(requests, stage="decompose")
    wall = time.perf_counter() - t0

    st = llm.ledger.stages["decompose"]
    ok = [r for r in results if r.ok]
    first_try = sum(1 for r in ok if r.attempts == 1)
    units = [len(r.value["units"]) for r in ok]
    ents = [sum(len(u["entities"]) for u in r.value["units"]) for r in ok]
    rels = [sum(len(u["relations"]) for u in r.value["units"]) for r in ok]
    report = {
        "model": args.model,
        "passages": len(requests),
        "load_s": round(load_s, 2),
        "wall_s": round(wall, 2),
        "chat_calls": llm.chat_calls,
        "requests_per_s": round(len(requests) / wall, 2),
        "prompt_tokens": st.prompt_tokens,
        "completion_tokens": st.completion_tokens,
        "cached_tokens": st.cached_tokens,
        "cached_token_share": round(st.cached_tokens / max(1, st.prompt_tokens), 3),
        "prompt_tokens_per_s": round(st.prompt_tokens / wall, 1),
        "completion_tokens_per_s": round(st.completion_tokens / wall, 1),
        "total_tokens_per_s": round(st.total_tokens / wall, 1),
        "valid_json_rate": round(len(ok) / len(results), 4),
        "valid_first_try_rate": round(first_try / len(results), 4),
        "attempts": st.attempts,
        "units_per_passage_median": statistics.median(units) if units else 0,
        "entities_per_passage_median": statistics.median(ents) if ents else 0,
        "relations_per_passage_median": statistics.median(rels) if rels else 0,
        "failures_sample": [r.error for r in results if not r.ok][:5],
        "python": platform.python_version(),
    }
    try:
        import vllm

        report["vllm"] = vllm.__version__
    except (ImportError, AttributeError):
        pass
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
