"""A longer run of the random write sequences of ``tests/test_random_writes.py`` (a benchmark, not run in CI).

Usage::

    nice -n 10 python benchmarks/bench_random_writes.py --examples 12 --steps 10

Runs the hypothesis state machine (build, insert, replace, delete, compact, compact --full, gc and writers
SIGKILLed at a checkpoint, checked after every step against a model of the document set: ``verify``, the
document set, exact-text retrieval, no deleted text) for ``--examples`` sequences of up to ``--steps`` steps,
seeded. Writes ``benchmarks/results/random_writes.json`` and ``random_writes.md``: the steps run by kind,
the time, and the failure (the falsifying sequence) if any.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _machine():
    """The test module (tests are not a package: loaded by path)."""
    spec = importlib.util.spec_from_file_location("random_writes", HERE.parent / "tests" / "test_random_writes.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=12)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=44, help="hypothesis seed (0: derandomized, as in CI)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "random_writes")
    args = ap.parse_args(argv)
    mod = _machine()
    t0 = time.perf_counter()
    failure = None
    try:
        mod.run_machine(args.examples, args.steps, seed=args.seed)
    except Exception as exc:  # noqa: BLE001 - reported, with the falsifying sequence hypothesis printed
        failure = "".join(traceback.format_exception_only(type(exc), exc)).strip()[-4000:]
    seconds = time.perf_counter() - t0
    counts = dict(sorted(mod.STEP_COUNTS.items()))
    result = {"examples": args.examples, "max_steps": args.steps, "seed": args.seed, "seconds": round(seconds, 1),
              "steps": sum(counts.values()), "by_kind": counts, "passed": failure is None, "failure": failure,
              "machine": {"python": platform.python_version(), "platform": platform.platform()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    lines = ["# Random write sequences against a model of the document set", "",
             f"`python benchmarks/bench_random_writes.py --examples {args.examples} --steps {args.steps} "
             f"--seed {args.seed}`", "",
             f"{result['steps']} steps in {args.examples} sequences, {seconds:.0f} s: "
             f"{'every check passed' if failure is None else 'FAILED'}.", "",
             "After every step: `verify` (full), the document set equals the model's, each of (up to) three "
             "documents' exact text retrieves its own passage first, and no node text, context or retrieved node "
             "holds a deleted or replaced version's marker.", "", "| step | count |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in counts.items()]
    if failure:
        lines += ["", "Failure:", "", "```", failure, "```"]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0 if failure is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
