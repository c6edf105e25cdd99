"""Soak test of ``noderag serve`` (a benchmark, not run in CI): a bounded mixed load on loopback.

Usage::

    nice -n 10 python benchmarks/bench_soak.py --data ../shared/data/musique

Builds the index of the first ``--passages`` passages of ``--data``'s ``corpus.jsonl`` (nlp mode, default
embedder) under ``/tmp``, starts a real ``noderag serve`` process on it (127.0.0.1 only, ephemeral port),
and for ``--minutes`` minutes runs ``--clients`` closed-loop clients sending ``POST /retrieve`` with the
sample's questions while a writer runs, every ``--every-s`` seconds, one ``noderag insert`` (two
passages not yet indexed) and one ``noderag delete`` (the two inserted ``--every-s`` seconds before,
so the index size stays level) as separate processes. Every loop is bounded: the clients stop at the
deadline, the writer after its last cycle.

Reported: requests and errors (any non-200 or connection error), client latency p50/p99 overall and
per minute, the server's RSS after the first minute and at the end (and their ratio; the target is
within 5%), its open files, open deleted files and memory-mapped deleted files per minute (flat: a superseded
generation's files are let go of), the writer's operations and their times, generation folders seen after each operation,
and whether every superseded generation was removed by the end (after the server has switched to the
last generation and ``noderag gc`` has run). Writes ``benchmarks/results/soak.json`` and ``soak.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
#: the server's RSS at the end over its RSS after the first minute must stay within this
RSS_LIMIT = 1.05
HOST = "127.0.0.1"  # loopback only: the soak never listens on another interface


def _noderag() -> list[str]:
    exe = Path(sys.executable).with_name("noderag")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "noderag.cli"]


def _rss_mb(pid: int) -> float:
    """Resident set size of a process in MiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _handles(pid: int) -> dict[str, int]:
    """Open files, open deleted files, and memory-mapped deleted files of a process (Linux /proc): a superseded
    generation a server did not let go of shows as deleted files once ``gc`` removed its folder."""
    fds = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            fds.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed meanwhile
            pass
    maps = {line.split(None, 5)[5] for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
            if len(line.split(None, 5)) == 6}
    return {"open_files": len(fds), "deleted_open": sum(f.endswith(" (deleted)") for f in fds),
            "deleted_mapped": sum(m.endswith(" (deleted)") for m in maps)}


def _handles_flat(samples: list[dict], end: dict) -> tuple[bool, bool]:
    """(open files flat, no deleted file held): the second half's most open files within 10% (+8) of the first
    half's (the count moves with the live generation's delta segments and doubles while a new generation is
    prepared beside the old one, so a leak shows as growth between halves, not between two samples); no open or
    mapped deleted file in the second half's samples beyond the first half's, and none at the end."""
    if len(samples) < 4:
        return False, False
    first, second = samples[:len(samples) // 2], samples[len(samples) // 2:]
    most = lambda hs, k: max(h[k] for h in hs)  # noqa: E731
    fds_flat = most(second, "open_files") <= 1.1 * most(first, "open_files") + 8
    deleted_flat = all(most(second, k) <= most(first, k) for k in ("deleted_open", "deleted_mapped")) and \
        end["deleted_open"] == 0 and end["deleted_mapped"] == 0
    return fds_flat, deleted_flat


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(np.asarray(values, dtype=np.float64), q)) * 1e3, 1) if values else None


def _get_json(port: int, path: str) -> dict:
    """GET ``http://127.0.0.1:PORT/PATH`` as JSON ({} when the server does not answer)."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=30) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return {}


def _generations(index: Path) -> list[int]:
    return sorted(int(p.name) for p in (index / "generations").iterdir() if p.name.isdigit())


def _current(index: Path) -> int:
    return int((index / "CURRENT").read_text().strip())


class Server:
    """A ``noderag serve`` subprocess on 127.0.0.1 with an ephemeral port."""

    def __init__(self, index: Path) -> None:
        self.proc = subprocess.Popen(_noderag() + ["serve", str(index), "--host", HOST, "--port", "0"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 600
        self.port: int | None = None
        while self.port is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"noderag serve did not start: {self.proc.stderr.read() if self.proc.poll() else ''}")
            if select.select([self.proc.stderr], [], [], 0.5)[0]:
                line = self.proc.stderr.readline()
                if line.startswith("noderag serve: http://"):
                    self.port = int(line.split()[2].rstrip("/").rsplit(":", 1)[1])
        self.log: list[str] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)  # its stderr never fills the pipe
        self._reader.start()

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self.log.append(line.rstrip())

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(10)


async def _request(reader, writer, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
    head = f"{method} {path} HTTP/1.1\r\nHost: {HOST}\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    writer.write(head.encode() + b"\r\n" + (body or b""))
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    length = 0
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        k, _, v = line.decode().partition(":")
        if k.strip().lower() == "content-length":
            length = int(v.strip())
    return status, await reader.readexactly(length)


async def _clients(port: int, questions: list[str], n: int, deadline: float, rec: list, errors: list) -> None:
    """``n`` closed-loop clients, one keep-alive connection each, until ``deadline`` (monotonic)."""
    counter = {"i": 0}

    async def client() -> None:
        reader = writer = None
        while time.monotonic() < deadline:
            q = questions[counter["i"] % len(questions)]
            counter["i"] += 1
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection(HOST, port)
                t0 = time.perf_counter()
                status, data = await _request(reader, writer, "POST", "/retrieve",
                                              json.dumps({"question": q, "k": 5}).encode())
                t1 = time.perf_counter()
                if status != 200:
                    errors.append((time.monotonic(), f"HTTP {status}: {data[:200]!r}"))
                else:
                    rec.append((time.monotonic(), t1 - t0))
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                errors.append((time.monotonic(), f"{type(exc).__name__}: {exc}"))
                if writer is not None:
                    writer.close()
                reader = writer = None
        if writer is not None:
            writer.close()

    await asyncio.gather(*(client() for _ in range(n)))


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _writer(index: Path, reserve: list[dict], work: Path, every_s: float, deadline: float,
            ops: list[dict], stop: threading.Event) -> None:
    """Every ``every_s`` s: insert two reserve passages, then delete the two inserted in the cycle before."""
    previous: list[str] = []
    cycle = 0
    next_t = time.monotonic() + every_s
    while not stop.is_set() and 2 * (cycle + 1) <= len(reserve):
        if stop.wait(max(0.0, next_t - time.monotonic())) or time.monotonic() + 5 > deadline:
            break
        next_t += every_s
        batch = reserve[2 * cycle:2 * cycle + 2]
        cycle += 1
        src = _write_jsonl(work / f"insert-{cycle:03d}.jsonl", batch)
        for kind, argv in (("insert", ["insert", str(index), str(src), "--no-progress", "--wait", "120"]),
                           ("delete", ["delete", str(index), *previous, "--no-progress", "--wait", "120"])):
            if kind == "delete" and not previous:
                continue
            t0 = time.perf_counter()
            r = subprocess.run(_noderag() + argv, capture_output=True, text=True, timeout=600)
            ops.append({"t": round(time.monotonic(), 1), "op": kind, "rc": r.returncode,
                        "seconds": round(time.perf_counter() - t0, 2), "generation": _current(index),
                        "generation_folders": len(_generations(index)),
                        "error": r.stderr.strip().splitlines()[-1] if r.returncode else None})
        previous = [row["id"] for row in batch]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "musique",
                    help="folder with corpus.jsonl and questions.jsonl")
    ap.add_argument("--passages", type=int, default=600, help="passages in the served index")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--every-s", type=float, default=30.0, help="seconds between writer cycles (insert + delete)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "noderag-soak")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "soak")
    args = ap.parse_args(argv)

    corpus = [json.loads(line) for line in (args.data / "corpus.jsonl").read_text("utf-8").splitlines() if line]
    questions = [json.loads(line)["question"] for line in
                 (args.data / "questions.jsonl").read_text("utf-8").splitlines() if line]
    cycles = int(args.minutes * 60 // args.every_s) + 1
    base, reserve = corpus[:args.passages], corpus[args.passages:args.passages + 2 * cycles]
    if len(reserve) < 2 * cycles:
        raise SystemExit(f"{args.data}: {len(corpus)} passages, need {args.passages + 2 * cycles}")
    if args.work.exists():
        shutil.rmtree(args.work)
    args.work.mkdir(parents=True)
    index = args.work / "index"
    t0 = time.perf_counter()
    b = subprocess.run(_noderag() + ["build", str(_write_jsonl(args.work / "base.jsonl", base)), "--index",
                                     str(index), "--no-progress"], capture_output=True, text=True)
    if b.returncode != 0:
        raise SystemExit(f"build failed: {b.stderr}")
    build_s = round(time.perf_counter() - t0, 1)
    print(f"built {len(base)} passages in {build_s} s", file=sys.stderr)

    server = Server(index)
    rec: list[tuple[float, float]] = []
    errors: list[tuple[float, str]] = []
    ops: list[dict] = []
    rss: list[tuple[float, float]] = []
    stop = threading.Event()
    load_avg_before = os.getloadavg()
    start = time.monotonic()
    deadline = start + args.minutes * 60

    fds: list[tuple[float, dict]] = []

    def sample_rss() -> None:
        while not stop.wait(5.0):
            rss.append((round(time.monotonic() - start, 1), round(_rss_mb(server.proc.pid), 1)))
            fds.append((round(time.monotonic() - start, 1), _handles(server.proc.pid)))

    sampler = threading.Thread(target=sample_rss, daemon=True)
    writer = threading.Thread(target=_writer, args=(index, reserve, args.work, args.every_s, deadline, ops, stop),
                              daemon=True)
    sampler.start()
    writer.start()
    try:
        asyncio.run(_clients(server.port, questions, args.clients, deadline, rec, errors))
    finally:
        stop.set()
        writer.join(900)
        sampler.join(10)
    wall = time.monotonic() - start
    rss_end = round(_rss_mb(server.proc.pid), 1)
    # the end: wait until the server serves the last generation, then gc removes everything superseded
    want = _current(index)
    served = None
    for _ in range(600):
        served = _get_json(server.port, "/health").get("generation")
        if served == want:
            break
        time.sleep(0.1)
    time.sleep(1.0)
    server_stats = _get_json(server.port, "/stats").get("server", {})
    folders_before_gc = _generations(index)
    gc = subprocess.run(_noderag() + ["gc", str(index)], capture_output=True, text=True)
    folders_after_gc = _generations(index)
    time.sleep(2.5)  # two watcher ticks: what the server released is collected
    handles_end = _handles(server.proc.pid)
    server.stop()

    after_1min = [v for t, v in rss if t >= 60.0]
    rss_1min = after_1min[0] if after_1min else None
    lat = [d for _, d in rec]
    per_min = []
    for m in range(int(np.ceil(wall / 60))):
        sel = [d for t, d in rec if start + 60 * m <= t < start + 60 * (m + 1)]
        hs = [h for t, h in fds if 60 * m <= t < 60 * (m + 1)]
        mem = [v for t, v in rss if 60 * m <= t < 60 * (m + 1)]
        per_min.append({"minute": m + 1, "requests": len(sel), "p50_ms": _pct(sel, 50), "p99_ms": _pct(sel, 99),
                        "rss_mb_max": max(mem, default=None),
                        **{f"{k}_max": max((h[k] for h in hs), default=None)
                           for k in ("open_files", "deleted_open", "deleted_mapped")}})
    fds_flat, deleted_flat = _handles_flat([h for _, h in fds], handles_end)
    result = {
        "revision": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                   text=True).stdout.strip(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}",
        "load_average_before": [round(x, 2) for x in load_avg_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "data": str(args.data), "passages": len(base), "clients": args.clients, "minutes": args.minutes,
        "every_s": args.every_s, "build_s": build_s, "host": HOST,
        "wall_s": round(wall, 1), "requests": len(rec), "qps": round(len(rec) / wall, 1),
        "errors": len(errors), "error_examples": [e for _, e in errors[:5]],
        "p50_ms": _pct(lat, 50), "p99_ms": _pct(lat, 99), "max_ms": _pct(lat, 100), "per_minute": per_min,
        "rss_after_first_minute_mb": rss_1min, "rss_end_mb": rss_end,
        "rss_end_over_first_minute": round(rss_end / rss_1min, 3) if rss_1min else None,
        "rss_samples": rss,
        "writer_ops": ops, "writer_failures": sum(op["rc"] != 0 for op in ops),
        "max_generation_folders": max([op["generation_folders"] for op in ops], default=None),
        "last_generation": want, "server_final_generation": served, "server": server_stats,
        "generation_folders_before_gc": folders_before_gc, "gc": gc.stdout.strip() or gc.stderr.strip(),
        "generation_folders_after_gc": folders_after_gc,
        "superseded_all_removed": folders_after_gc == [want],
        "handles_samples": fds, "handles_end": handles_end, "open_files_flat": fds_flat,
        "deleted_handles_flat": deleted_flat,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    args.out.with_suffix(".md").write_text(_markdown(result), encoding="utf-8")
    print(_markdown(result))
    ok = (result["errors"] == 0 and result["writer_failures"] == 0 and result["superseded_all_removed"]
          and fds_flat and deleted_flat
          and result["rss_end_over_first_minute"] is not None and result["rss_end_over_first_minute"] <= RSS_LIMIT)
    print(f"soak check: {'passed' if ok else 'FAILED'}", file=sys.stderr)
    return 0 if ok else 1


def _half_max(r: dict, half: int) -> int | None:
    """The most open files sampled in the first (0) or second (1) half of the run."""
    hs = [h["open_files"] for _, h in r["handles_samples"]]
    part = hs[:len(hs) // 2] if half == 0 else hs[len(hs) // 2:]
    return max(part, default=None)


def _markdown(r: dict) -> str:
    ops = r["writer_ops"]
    ins = [o["seconds"] for o in ops if o["op"] == "insert"]
    dels = [o["seconds"] for o in ops if o["op"] == "delete"]
    lines = [
        "# Soak test of `noderag serve`", "",
        f"`python benchmarks/bench_soak.py` at {r['revision']}; {r['machine']}; load average before "
        f"{r['load_average_before']}, after {r['load_average_after']}. Index: the first {r['passages']} passages "
        f"of `{Path(r['data']).name}/corpus.jsonl` (nlp mode, default embedder; built in {r['build_s']} s). "
        f"`noderag serve` on {r['host']} (loopback only); {r['clients']} closed-loop clients sending `POST /retrieve` "
        f"for {r['minutes']:g} minutes while a writer process ran, every {r['every_s']:g} s, one `noderag insert` "
        "(2 passages) and one `noderag delete` (the 2 inserted the cycle before).", "",
        "| figure | value |", "|---|---|",
        f"| requests | {r['requests']:,} ({r['qps']} q/s) |",
        f"| errors (non-200 or connection) | **{r['errors']}** |",
        f"| client latency p50 / p99 / max | {r['p50_ms']} / **{r['p99_ms']}** / {r['max_ms']} ms |",
        f"| server RSS after the first minute / at the end | {r['rss_after_first_minute_mb']} / {r['rss_end_mb']} MiB "
        f"(ratio **{r['rss_end_over_first_minute']}**; target ≤ {RSS_LIMIT}) |",
        f"| server open files, most in the first half / in the second half / at the end | "
        f"{_half_max(r, 0)} / {_half_max(r, 1)} / {r['handles_end']['open_files']} (flat: **{r['open_files_flat']}**) |",
        f"| open deleted files / mapped deleted files at the end (after `noderag gc`) | "
        f"**{r['handles_end']['deleted_open']}** / **{r['handles_end']['deleted_mapped']}** (no growth: "
        f"**{r['deleted_handles_flat']}**) |",
        f"| writer operations (failed) | {len(ops)} ({r['writer_failures']}): {len(ins)} inserts, median "
        f"{np.median(ins) if ins else 0:.1f} s; {len(dels)} deletes, median {np.median(dels) if dels else 0:.1f} s |",
        f"| generation folders after each operation (max) | {r['max_generation_folders']} |",
        f"| server reloads / server-side errors | {r['server'].get('generation_reloads')} / "
        f"{r['server'].get('errors')} |",
        f"| last generation / served at the end | {r['last_generation']} / {r['server_final_generation']} |",
        f"| generation folders before / after `noderag gc` | {r['generation_folders_before_gc']} / "
        f"{r['generation_folders_after_gc']} |",
        f"| every superseded generation removed | **{r['superseded_all_removed']}** |", "",
        "Per minute (the server's most open files, open deleted files and mapped deleted files, and RSS, sampled "
        "every 5 s):", "", "| minute | requests | p50 ms | p99 ms | open files | deleted open | deleted mapped | "
        "RSS MiB |", "|---|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {m['minute']} | {m['requests']:,} | {m['p50_ms']} | {m['p99_ms']} | {m['open_files_max']} | "
              f"{m['deleted_open_max']} | {m['deleted_mapped_max']} | {m['rss_mb_max']} |" for m in r["per_minute"]]
    if r["error_examples"]:
        lines += ["", "Errors (first 5): " + "; ".join(r["error_examples"])]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
