"""Benchmark: what rlft's CPU speed layer (rlft.speed) buys a GRPO step, on against off in one run.

    python bench/bench_speedups.py [--model tiny] [--steps 4] [--rounds 2] [--lora/--no-lora] [--threads 1]

Runs `rlft grpo` as a subprocess with `--set train.speedups=true` and `=false` in turn (on, off, on, off, ...:
load on the machine hits both alike), same seed, data (data/arith/grpo_prompts.jsonl, math verifier), model and
settings, no pre-flight and no held-out set (the same work on both sides). Each run's step time is summary.json's
train_seconds / steps_this_run (the training loop alone: loading and saving excluded); the best of --rounds is
kept for each side. Prints the CPU model and its bf16 flag, torch's thread count, the load average before and
after, each run's step time, and the ratio off / on (above 1: the layer is faster). Nothing is asserted on time;
the exit code is 1 when a run failed. Dated results go to BENCHMARKS.md with the printed machine line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def machine_line() -> str:
    sys.path.insert(0, str(ROOT))
    from rlft.speed.precision import cpu_bf16_flag, cpu_model

    return f"CPU: {cpu_model()}, bf16 flag: {cpu_bf16_flag() or 'none'}, {os.cpu_count()} cores"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(out: Path, on: bool, args) -> float | None:
    cmd = [sys.executable, "-m", "rlft", "grpo", "--prompts", str(ROOT / "data/arith/grpo_prompts.jsonl"),
           "--verifier", "math", "--model", args.model, "-o", str(out), "--max-steps", str(args.steps),
           "--batch-size", "16", "--set", "grpo.num_generations=8", "--set", "grpo.max_completion_length=16",
           "--set", "grpo.preflight=false", "--set", "train.logging_steps=1", "--set", "train.save_strategy=no",
           "--set", f"train.speedups={'true' if on else 'false'}", "--overwrite", *(["--lora"] if args.lora else [])]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(ROOT)}
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"  run failed ({'on' if on else 'off'}): {p.stderr.strip().splitlines()[-1:]}")
        return None
    s = json.loads((out / "summary.json").read_text())
    return s["train_seconds"] / max(1, s.get("steps_this_run") or args.steps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--lora", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    print(machine_line(), f"| threads {args.threads} | load before {load()}")
    best: dict[bool, float] = {}
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for on in (True, False):
                t = run(Path(tmp) / f"{'on' if on else 'off'}{r}", on, args)
                if t is None:
                    failed = True
                    continue
                print(f"  round {r + 1} speedups {'on ' if on else 'off'}: {t:.3f} s/step")
                best[on] = min(best.get(on, t), t)
    print(f"load after {load()}")
    if True in best and False in best:
        print(f"GRPO step ({args.model}, lora={args.lora}): on {best[True]:.3f} s, off {best[False]:.3f} s, "
              f"off/on {best[False] / best[True]:.2f}x")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
