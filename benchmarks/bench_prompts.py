"""Prompt tokens: noderag templates vs the reference NodeRAG (noderag==0.1.0 wheel), same tokenizer.

The reference templates are read as text from the wheel (its Python files are parsed with ``ast``
and only string constants are taken; nothing from it is imported or executed). Get the wheel with::

    pip download noderag==0.1.0 --no-deps -d .benchcache/ref

Run: ``python benchmarks/bench_prompts.py [--wheel PATH] [--data /work/shared/data/musique]``.
Writes ``benchmarks/results/prompts.json`` and ``prompts.md``.
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import platform
import statistics
import string
import sys
import zipfile
from pathlib import Path

from noderag.llm import prompts as P
from noderag.llm.validate import canonical_json
from noderag.tokenize import count_tokens

HERE = Path(__file__).resolve().parent
# our task -> (reference module file, English constant, Chinese constant)
REF = {
    "decompose": ("text_decomposition.py", "text_decomposition_prompt", "text_decomposition_prompt_Chinese"),
    "attribute": ("attribute_generation_prompt.py", "attribute_generation_prompt", "attribute_generation_prompt_Chinese"),
    "community": ("community_summary.py", "community_summary", "community_summary_Chinese"),
    "query": ("decompose.py", "decompos_query", "decompos_query_Chinese"),
    "answer": ("answer.py", "answer_prompt", "answer_prompt_Chinese"),
}
OUR_SCHEMA = {"decompose": P.DECOMPOSE_SCHEMA, "community": P.COMMUNITY_SCHEMA,
              "query": P.QUERY_ENTITIES_SCHEMA, "answer": P.ANSWER_SCHEMA}


def read_reference(wheel: Path) -> dict[str, str]:
    """Return ``{constant name: template text}`` of the reference prompt modules (parsed, not imported)."""
    out: dict[str, str] = {}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if not name.startswith("NodeRAG/utils/prompt/") or not name.endswith(".py"):
                continue
            tree = ast.parse(z.read(name).decode("utf-8"), filename=name)
            for node in tree.body:
                if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                        and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                    out[node.targets[0].id] = node.value.value
    if not out:
        raise SystemExit(f"no prompt templates found in {wheel}")
    return out


def fill(template: str, value: str = "") -> str:
    """Replace every ``{field}`` of a str.format template by ``value`` (``{{``/``}}`` unescaped)."""
    fields = {f for _, f, _, _ in string.Formatter().parse(template) if f}
    return template.format(**{f: value for f in fields})


def ours(task: str, lang: str, value: str = "") -> str:
    """Our system prompt plus the user template with its fields replaced."""
    return P.SYSTEM_PROMPTS[lang][task] + "\n" + fill(P.USER_TEMPLATES[lang][task], value)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", default=None, help="reference wheel (default: .benchcache/ref/noderag-0.1.0-*.whl)")
    ap.add_argument("--data", default="/work/shared/data/musique", help="folder with corpus.jsonl")
    ap.add_argument("--out", default=str(HERE / "results"), help="output folder")
    args = ap.parse_args(argv)
    wheel = Path(args.wheel) if args.wheel else None
    if wheel is None:
        found = sorted(glob.glob(str(HERE.parent / ".benchcache/ref/noderag-0.1.0-*.whl")))
        if not found:
            raise SystemExit("reference wheel missing: pip download noderag==0.1.0 --no-deps -d .benchcache/ref")
        wheel = Path(found[0])
    ref = read_reference(wheel)

    templates = []
    for task, (_, en, zh) in REF.items():
        for lang, name in (("en", en), ("zh", zh)):
            r = count_tokens(fill(ref[name]))
            o = count_tokens(ours(task, lang))
            templates.append({"task": task, "lang": lang, "reference_tokens": r, "ours_tokens": o,
                              "ratio": round(o / r, 3),
                              "our_schema_tokens": count_tokens(canonical_json(OUR_SCHEMA[task])) if task in OUR_SCHEMA else 0})

    corpus = Path(args.data) / "corpus.jsonl"
    passages = [json.loads(line)["text"] for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    chunk_tok = [count_tokens(t) for t in passages]
    ref_static = count_tokens(fill(ref["text_decomposition_prompt"]))
    our_static = count_tokens(ours("decompose", "en"))
    # full prompts with the chunk in place (tokenised together, so merges at the seam count)
    ref_full = [count_tokens(fill(ref["text_decomposition_prompt"], t)) for t in passages]
    our_full = [count_tokens(ours("decompose", "en", t)) for t in passages]
    per_chunk = {
        "passages": len(passages),
        "chunk_tokens_median": statistics.median(chunk_tok),
        "chunk_tokens_total": sum(chunk_tok),
        "reference_prompt_tokens_median": statistics.median(ref_full),
        "ours_prompt_tokens_median": statistics.median(our_full),
        "reference_prompt_tokens_total": sum(ref_full),
        "ours_prompt_tokens_total": sum(our_full),
        "ratio_total": round(sum(our_full) / sum(ref_full), 3),
        "reference_instruction_share": round(ref_static * len(passages) / sum(ref_full), 3),
        "ours_instruction_share": round(our_static * len(passages) / sum(our_full), 3),
    }
    # the same passages packed into chunks of <= 1024 tokens (the default chunk size)
    chunks, cur, cur_tok = [], [], 0
    for t, n in zip(passages, chunk_tok):
        if cur and cur_tok + n > 1024:
            chunks.append("\n\n".join(cur))
            cur, cur_tok = [], 0
        cur.append(t)
        cur_tok += n + 1
    if cur:
        chunks.append("\n\n".join(cur))
    ref_packed = sum(count_tokens(fill(ref["text_decomposition_prompt"], t)) for t in chunks)
    our_packed = sum(count_tokens(ours("decompose", "en", t)) for t in chunks)
    per_chunk.update({
        "packed_chunks_1024": len(chunks),
        "reference_prompt_tokens_total_packed": ref_packed,
        "ours_prompt_tokens_total_packed": our_packed,
        "ratio_total_packed": round(our_packed / ref_packed, 3),
    })
    res = {
        "tokenizer": "noderag.tokenize (cl100k_base, offline)",
        "reference": wheel.name,
        "python": platform.python_version(),
        "templates": templates,
        "decompose_over_corpus": {"corpus": str(corpus), **per_chunk},
        "notes": [
            "template tokens = instructions with every {placeholder} empty (ours: system + user template)",
            "our JSON schema goes to the server as response_format / structured_outputs, not into the prompt text;"
            " with constrained decoding (vLLM, llama.cpp) it costs no prompt tokens; our_schema_tokens shows its size",
            "the reference also sends a pydantic JSON schema as response_format for decomposition (not counted)",
        ],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "prompts.json").write_text(json.dumps(res, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "prompts.md").write_text(render_md(res), encoding="utf-8")
    print(render_md(res))
    return 0


def render_md(res: dict) -> str:
    """Markdown report of :func:`main`'s results."""
    lines = [
        "# Prompt tokens: noderag vs reference NodeRAG",
        "",
        f"Tokenizer: {res['tokenizer']}. Reference: `{res['reference']}` (templates read as text from the wheel).",
        "Produced by `python benchmarks/bench_prompts.py`.",
        "",
        "## Templates (instructions only, placeholders empty)",
        "",
        "| task | lang | reference | ours | ours/ref | our schema (sent separately) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for t in res["templates"]:
        lines.append(f"| {t['task']} | {t['lang']} | {t['reference_tokens']} | {t['ours_tokens']} | "
                     f"{t['ratio']:.2f} | {t['our_schema_tokens']} |")
    c = res["decompose_over_corpus"]
    lines += [
        "",
        f"## Decomposition prompt per chunk over MuSiQue ({c['passages']} passages)",
        "",
        "| | reference | ours |",
        "|---|---:|---:|",
        f"| median prompt tokens per chunk | {c['reference_prompt_tokens_median']} | {c['ours_prompt_tokens_median']} |",
        f"| total prompt tokens | {c['reference_prompt_tokens_total']} | {c['ours_prompt_tokens_total']} |",
        f"| share spent on instructions | {c['reference_instruction_share']:.0%} | {c['ours_instruction_share']:.0%} |",
        "",
        f"Median chunk: {c['chunk_tokens_median']} tokens; ours/reference total prompt tokens: {c['ratio_total']:.2f}.",
        "",
        f"Same passages packed into {c['packed_chunks_1024']} chunks of <= 1024 tokens (the default chunk size): "
        f"reference {c['reference_prompt_tokens_total_packed']} vs ours {c['ours_prompt_tokens_total_packed']} "
        f"prompt tokens in total (ours/ref {c['ratio_total_packed']:.2f}).",
        "",
        "Notes:",
        "",
    ]
    lines += [f"- {n}" for n in res["notes"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
