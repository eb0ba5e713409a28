"""Benchmark: what bubblewrap isolation costs per test in the code verifier's sandbox.

    python bench/bench_sandbox.py [--n 30] [--rounds 3]

Each case of each completion runs in its own process (rlft/verifiers/sandbox/processes.py; with a cgroup,
spawned by the slot's helper, one started ahead, rlft/verifiers/sandbox/spawner.py). Measured, one worker
(sequential), on `--n` one-test jobs (`def f(x): return x + 1` / `assert f(i) == i + 1`):
  bwrap   the default: bubblewrap (namespaces, uid 65534, read-only stdlib, tmpfs work dir) + rlimits
  none    RLFT_CODE_ISOLATION=none: the same harness as a plain child process with the rlimits only
and, below the verifier, the bare start of `python -I -S -B -c pass` with and without the bwrap wrapper.
Rounds are interleaved (bwrap, none, bwrap, ...) so load on the machine hits both alike; the best round
of each is kept. Goal: bwrap adds < 100 ms per test (exit 1 when missed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from rlft.verifiers.sandbox import isolation as sandbox_isolation  # noqa: E402
from rlft.verifiers.sandbox import run_many  # noqa: E402

GOAL_MS = 100.0


def per_test_ms(mode: str, n: int) -> float:
    os.environ[sandbox_isolation.ENV_VAR] = mode
    jobs = [("def f(x): return x + 1", [f"assert f({i}) == {i + 1}"]) for i in range(n)]
    started = time.perf_counter()
    results = run_many(jobs, workers=1)
    elapsed = time.perf_counter() - started
    if not all(r.passed for r in results):
        raise SystemExit(f"{mode}: an honest job failed: {next(r for r in results if not r.passed)}")
    return elapsed / n * 1000


def bare_ms(argv: list[str], n: int) -> float:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        subprocess.run([*argv, "-c", "pass"], check=True, env={})
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30, help="jobs (one test each) per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    problem = sandbox_isolation._probe()
    if problem:
        print(f"bubblewrap unavailable: {problem}")
        return 1
    per_test_ms("bwrap", 2)
    per_test_ms("none", 2)  # warm-up (and the opt-out's warning, printed once)
    best = {"bwrap": float("inf"), "none": float("inf")}
    for _ in range(args.rounds):
        for mode in best:
            best[mode] = min(best[mode], per_test_ms(mode, args.n))
    wrapped = sandbox_isolation.bwrap_argv(16)
    bare_python, bare_bwrap = bare_ms(wrapped[wrapped.index("-I") - 1:], args.n), bare_ms(wrapped, args.n)
    overhead = best["bwrap"] - best["none"]
    print(f"{'':34}{'ms':>8}")
    print(f"{'verifier, per test, bwrap':34}{best['bwrap']:8.1f}")
    print(f"{'verifier, per test, none':34}{best['none']:8.1f}")
    print(f"{'bwrap overhead per test':34}{overhead:8.1f}   goal < {GOAL_MS:g}")
    print(f"{'bare python -I -S -B -c pass':34}{bare_python:8.1f}")
    print(f"{'bare bwrap + python (median)':34}{bare_bwrap:8.1f}")
    return 0 if overhead < GOAL_MS else 1


if __name__ == "__main__":
    sys.exit(main())
