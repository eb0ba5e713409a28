"""Benchmark: what rlft costs on top of TRL, against hand-written TRL scripts doing the same runs.

    python bench/bench_overhead.py [--sft-steps 200] [--dpo-steps 100] [--grpo-steps 100] [--repeats 2]
        [--methods sft,dpo,grpo,kto,rloo,distill] [--kto-steps 100] [--rloo-steps 100] [--distill-steps 100]

For each method, `rlft <method> --recipe recipes/<x>.yaml ...` runs as a subprocess next to a minimal
TRL script, written by this benchmark into a temporary folder and run as a subprocess too: tokenizer and
model loaded with `from_pretrained` from the same local folder, the data read with `datasets.load_dataset`,
the same TRL config values (learning rate, batch, schedule, max_steps, max_length, logging and save steps,
bf16 False, gradient checkpointing False, ...), `trainer.train()` and `trainer.save_model()`.

  SFT   the tiny model (`rlft init-model`) on data/arith/sft_train.jsonl, recipes/sft_tiny.yaml settings
  DPO   from a short SFT'd tiny model on data/arith/pairs_train.jsonl, recipes/dpo_tiny.yaml settings
        (no eval set); the TRL script leaves ref_model=None, so TRL loads the reference itself
  GRPO  from the same model on data/arith/grpo_prompts.jsonl, recipes/grpo_math_tiny.yaml settings,
        reward rlft.verifiers.math_reward in both; rlft with --no-preflight and no held-out set, so both
        do the same work (the pre-flight and held-out pass@1 are rlft features, not overhead)
  KTO   from the same model on data/arith/thumbs_train.jsonl, recipes/kto_tiny.yaml settings; the TRL
        script shuffles the rows with the same seed as rlft (TRL reads them in order) and leaves
        ref_model=None
  RLOO  as GRPO, recipes/rloo_math_tiny.yaml settings (k = 4), --no-preflight, no held-out set
  distill  the same model taught by the untrained tiny model (same tokenizer, a non-zero loss) on
        data/arith/grpo_prompts.jsonl, recipes/distill_tiny.yaml settings, no held-out set

The short SFT'd model is recipes/sft_tiny_short.yaml run on the tiny model once, before anything is
timed (or --base DIR, an existing one). Runs are interleaved (rlft, TRL, rlft, TRL, ...) so that load on
the machine hits both alike, and the better of --repeats is kept for each. Both sides run with the
same torch thread count, --threads (default 1: on a shared 2-core machine two OpenMP threads spin
against other load and one step can take 5x longer, which turns every timing into noise; 0 keeps
torch's default). Printed per method: wall time of each process, the ratio, `train_runtime` as each
trainer reports it (the training loop alone), the
time outside it (start-up, imports, loading, data, saving) and the final train_loss of each (same
seed, data order and config: they should match). A check compares the two runs' saved
training_args.bin and prints every TrainingArguments field that differs (output paths aside): an empty
list means the TRL configs were the same. Nothing is asserted on time: the table is the result. The exit
code is 1 when the comparison could not be made: a process failed, a side reported no train_runtime or
train_loss, the TrainingArguments differ (not the same run), or --methods named nothing known.
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
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

COMMON_ARGS = """num_train_epochs=1, bf16=False, gradient_checkpointing=False, report_to="none", seed=42,
    save_total_limit=2, disable_tqdm=True"""

HAND_SFT = f'''
import json, sys
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer

model_dir, data, out, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir)
ds = load_dataset("json", data_files=data, split="train")
args = SFTConfig(output_dir=out, learning_rate=0.001, max_steps=steps, per_device_train_batch_size=32,
    warmup_steps=100, lr_scheduler_type="linear", logging_steps=100, save_steps=1000, max_length=32,
    {COMMON_ARGS})
trainer = SFTTrainer(model=model, args=args, processing_class=tok, train_dataset=ds)
result = trainer.train()
trainer.save_model(out)
json.dump(result.metrics, open(out + "/bench_metrics.json", "w"))
'''

HAND_DPO = f'''
import json, sys
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import DPOConfig, DPOTrainer

model_dir, data, out, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir)
ds = load_dataset("json", data_files=data, split="train")
args = DPOConfig(output_dir=out, learning_rate=0.0001, max_steps=steps, per_device_train_batch_size=32,
    logging_steps=10, save_steps=200, beta=0.1, loss_type="sigmoid", max_length=32,
    {COMMON_ARGS})
trainer = DPOTrainer(model=model, args=args, processing_class=tok, train_dataset=ds)
result = trainer.train()
trainer.save_model(out)
json.dump(result.metrics, open(out + "/bench_metrics.json", "w"))
'''

HAND_GRPO = f'''
import json, sys
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer
from rlft.verifiers import math_reward

model_dir, data, out, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir)
ds = load_dataset("json", data_files=data, split="train")
args = GRPOConfig(output_dir=out, learning_rate=0.0001, lr_scheduler_type="constant", max_steps=steps,
    per_device_train_batch_size=64, logging_steps=10, save_steps=300, num_generations=8,
    max_completion_length=8, temperature=1.0, beta=0.0,
    {COMMON_ARGS})
trainer = GRPOTrainer(model=model, reward_funcs=[math_reward], args=args, processing_class=tok,
                      train_dataset=ds)
result = trainer.train()
trainer.save_model(out)
json.dump(result.metrics, open(out + "/bench_metrics.json", "w"))
'''

HAND_KTO = f'''
import json, random, sys
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import KTOConfig, KTOTrainer

model_dir, data, out, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir)
rows = [json.loads(line) for line in open(data) if line.strip()]
random.Random(42).shuffle(rows)
args = KTOConfig(output_dir=out, learning_rate=0.0001, max_steps=steps, per_device_train_batch_size=32,
    logging_steps=10, save_steps=500, beta=0.1, desirable_weight=1.33, undesirable_weight=1.0, max_length=32,
    {COMMON_ARGS})
trainer = KTOTrainer(model=model, args=args, processing_class=tok, train_dataset=Dataset.from_list(rows))
result = trainer.train()
trainer.save_model(out)
json.dump(result.metrics, open(out + "/bench_metrics.json", "w"))
'''

HAND_RLOO = f'''
import json, sys
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import RLOOConfig, RLOOTrainer
from rlft.verifiers import math_reward

model_dir, data, out, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir)
ds = load_dataset("json", data_files=data, split="train")
args = RLOOConfig(output_dir=out, learning_rate=0.0001, lr_scheduler_type="constant", max_steps=steps,
    per_device_train_batch_size=64, logging_steps=10, save_steps=300, num_generations=4,
    max_completion_length=8, temperature=1.0, beta=0.0,
    {COMMON_ARGS})
trainer = RLOOTrainer(model=model, reward_funcs=[math_reward], args=args, processing_class=tok,
                      train_dataset=ds)
result = trainer.train()
trainer.save_model(out)
json.dump(result.metrics, open(out + "/bench_metrics.json", "w"))
'''

# The teacher folder comes in the environment (BENCH_TEACHER): trl_run passes the same four arguments to all.
HAND_DISTILL = f'''
import json, os, sys
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import DistillationConfig, DistillationTrainer

model_dir, data, out, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir)
teacher = AutoModelForCausalLM.from_pretrained(os.environ["BENCH_TEACHER"])
ds = load_dataset("json", data_files=data, split="train").select_columns(["prompt"])
args = DistillationConfig(output_dir=out, learning_rate=0.0001, lr_scheduler_type="constant", max_steps=steps,
    per_device_train_batch_size=32, logging_steps=10, save_steps=200, beta=1.0, temperature=1.0,
    max_completion_length=8,
    {COMMON_ARGS})
trainer = DistillationTrainer(model=model, teacher_model=teacher, args=args, processing_class=tok,
                              train_dataset=ds)
result = trainer.train()
trainer.save_model(out)
json.dump(result.metrics, open(out + "/bench_metrics.json", "w"))
'''

# Loads two saved TrainingArguments and prints the fields that differ (output paths aside).
ARGS_DIFF = """
import json, sys, torch
a, b = (torch.load(p, weights_only=False).to_dict() for p in sys.argv[1:3])
skip = {"output_dir", "logging_dir", "run_name", "hub_model_id"}
print(json.dumps({k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b))
                  if k not in skip and a.get(k) != b.get(k)}, default=str))
"""


@dataclass
class Run:
    wall: float
    train_runtime: float | None
    train_loss: float | None
    out: Path

    @property
    def outside(self) -> float | None:
        return None if self.train_runtime is None else self.wall - self.train_runtime


@dataclass
class Pair:
    method: str
    steps: int
    rlft: list[Run] = field(default_factory=list)
    trl: list[Run] = field(default_factory=list)
    args_diff: dict | None = None

    @staticmethod
    def best(runs: list[Run]) -> Run:
        return min(runs, key=lambda r: r.wall)


def rlft_command() -> list[str]:
    exe = BIN / "rlft"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "rlft"]


def run(cmd: list[str], env: dict[str, str], log: Path) -> float:
    """Run one process to the end; its output goes to `log`. Returns wall seconds."""
    start = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.run(cmd, check=False, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise SystemExit(f"`{' '.join(cmd)}` exited {proc.returncode}:\n{tail}")
    return wall


def rlft_run(args: list[str], out: Path, env: dict[str, str]) -> Run:
    wall = run([*rlft_command(), *args, "-o", str(out)], env, out.with_suffix(".log"))
    final = json.loads((out / "summary.json").read_text()).get("final_metrics", {})
    return Run(wall, final.get("train_runtime"), final.get("train_loss"), out)


def trl_run(script: Path, model: Path, data: str, steps: int, out: Path, env: dict[str, str]) -> Run:
    out.mkdir(parents=True)
    wall = run([sys.executable, str(script), str(model), data, str(out), str(steps)], env, out.with_suffix(".log"))
    metrics = json.loads((out / "bench_metrics.json").read_text())
    return Run(wall, metrics.get("train_runtime"), metrics.get("train_loss"), out)


def args_diff(a: Path, b: Path, env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", ARGS_DIFF, str(a / "training_args.bin"),
                           str(b / "training_args.bin")], check=True, capture_output=True, text=True, env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare(pair: Pair, rlft_args: list[str], script: Path, model: Path, data: str, repeats: int,
            work: Path, env: dict[str, str]) -> Pair:
    for i in range(repeats):
        pair.rlft.append(rlft_run(rlft_args, work / f"{pair.method}-rlft-{i}", env))
        pair.trl.append(trl_run(script, model, data, pair.steps, work / f"{pair.method}-trl-{i}", env))
        print(f"  {pair.method} round {i + 1}: rlft {pair.rlft[-1].wall:6.1f} s, TRL script "
              f"{pair.trl[-1].wall:6.1f} s", flush=True)
    pair.args_diff = args_diff(pair.rlft[0].out, pair.trl[0].out, env)
    for runs in (pair.rlft, pair.trl):  # keep the temp folder small: the best run's folder is enough
        for r in runs[:-1]:
            shutil.rmtree(r.out, ignore_errors=True)
    return pair


def fmt(x: float | None, spec: str = "7.1f") -> str:
    return format(x, spec) if x is not None else "   n/a"


def report(pairs: list[Pair]) -> None:
    print("\nrlft against a hand-written TRL script, best of each (seconds; ratio = rlft / TRL):")
    print(f"  {'method':6s} {'steps':>5s} | {'wall rlft':>9s} {'TRL':>7s} {'ratio':>6s} | "
          f"{'train_runtime rlft':>18s} {'TRL':>7s} {'ratio':>6s} | {'outside rlft':>12s} {'TRL':>7s} {'extra':>6s} | "
          f"{'train_loss rlft':>15s} {'TRL':>8s}")
    for p in pairs:
        a, b = Pair.best(p.rlft), Pair.best(p.trl)
        rt = a.train_runtime / b.train_runtime if a.train_runtime and b.train_runtime else None
        extra = a.outside - b.outside if a.outside is not None and b.outside is not None else None
        print(f"  {p.method:6s} {p.steps:5d} | {a.wall:9.1f} {b.wall:7.1f} {a.wall / b.wall:5.2f}x | "
              f"{fmt(a.train_runtime, '18.1f')} {fmt(b.train_runtime)} {fmt(rt, '5.2f')}x | "
              f"{fmt(a.outside, '12.1f')} {fmt(b.outside)} {fmt(extra, '6.1f')} | "
              f"{fmt(a.train_loss, '15.4f')} {fmt(b.train_loss, '8.4f')}")
    print("  outside = wall - train_runtime: interpreter start, imports, config, data, model loading, saving and,")
    print("  for rlft, its run folder (config, versions, summary, the end-of-run report and plots);")
    print("  extra = outside rlft - outside TRL, rlft's fixed cost per run. On a loaded machine trust the")
    print("  extra and the train_loss columns more than the wall ratios.")
    print("TrainingArguments fields that differ between the rlft run and the TRL script (output paths aside):")
    for p in pairs:
        diff = p.args_diff or {}
        shown = ", ".join(f"{k}: rlft={v[0]!r} trl={v[1]!r}" for k, v in diff.items()) or "none (same config)"
        print(f"  {p.method}: {shown}")
    print("final table of ratios (rlft / hand-written TRL, wall time):  " +
          "  ".join(f"{p.method} {Pair.best(p.rlft).wall / Pair.best(p.trl).wall:.2f}x" for p in pairs))


METHODS = ("sft", "dpo", "grpo")


def unmeasured(pairs: list[Pair]) -> list[str]:
    """Why the table does not compare like with like (empty when it does)."""
    problems = [] if pairs else ["no method was run"]
    for p in pairs:
        for side, runs in (("rlft", p.rlft), ("TRL", p.trl)):
            best = Pair.best(runs) if runs else None
            if best is None or best.train_runtime is None or best.train_loss is None:
                problems.append(f"{p.method}: {side} reported no train_runtime/train_loss")
        if p.args_diff:
            problems.append(f"{p.method}: TrainingArguments differ ({', '.join(p.args_diff)})")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sft-steps", type=int, default=200)
    parser.add_argument("--dpo-steps", type=int, default=100)
    parser.add_argument("--grpo-steps", type=int, default=100)
    parser.add_argument("--kto-steps", type=int, default=100)
    parser.add_argument("--rloo-steps", type=int, default=100)
    parser.add_argument("--distill-steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2, help="interleaved rounds per method (best kept)")
    parser.add_argument("--base", type=Path, help="an existing short-SFT'd model folder (skips that SFT)")
    parser.add_argument("--methods", default="sft,dpo,grpo,kto,rloo,distill", help="comma-separated subset")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads on both sides "
                        "(OMP_NUM_THREADS; 0 = torch's default, one per core)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder and print its path")
    args = parser.parse_args()
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if not methods or unknown:
        print(f"nothing to measure: --methods {args.methods!r} (unknown: {unknown}); use a subset of "
              f"{','.join(METHODS)}")
        return 1
    started, load = time.perf_counter(), os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="rlft-bench-overhead-"))
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", RLFT_CACHE=str(work / "rlft-cache"),
               HF_DATASETS_CACHE=str(work / "hf-datasets"), COLUMNS="120", BENCH_TEACHER=str(work / "tiny"))
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    try:
        tiny = work / "tiny"
        wall = run([*rlft_command(), "init-model", "--out", str(tiny)], env, work / "init-model.log")
        print(f"setup: rlft init-model {wall:.1f} s", flush=True)
        base = args.base
        if base is None and {"dpo", "grpo", "kto", "rloo", "distill"} & set(methods):
            base = work / "sft-short"
            wall = run([*rlft_command(), "sft", "--recipe", "recipes/sft_tiny_short.yaml", "--model", str(tiny),
                        "-o", str(base)], env, work / "sft-short.log")
            print(f"setup: rlft sft --recipe recipes/sft_tiny_short.yaml (the start of the others) {wall:.1f} s",
                  flush=True)
        scripts = {}
        for name, text in (("sft", HAND_SFT), ("dpo", HAND_DPO), ("grpo", HAND_GRPO), ("kto", HAND_KTO),
                           ("rloo", HAND_RLOO), ("distill", HAND_DISTILL)):
            scripts[name] = work / f"trl_{name}.py"
            scripts[name].write_text(text)
        plans = {
            "sft": (args.sft_steps, ["sft", "--recipe", "recipes/sft_tiny.yaml", "--model", str(tiny),
                                     "--data", "data/arith/sft_train.jsonl"], tiny, "data/arith/sft_train.jsonl"),
            "dpo": (args.dpo_steps, ["dpo", "--recipe", "recipes/dpo_tiny.yaml", "--model", str(base),
                                     "--pairs", "data/arith/pairs_train.jsonl", "--set", "data.eval=null"],
                    base, "data/arith/pairs_train.jsonl"),
            "grpo": (args.grpo_steps, ["grpo", "--recipe", "recipes/grpo_math_tiny.yaml", "--model", str(base),
                                       "--prompts", "data/arith/grpo_prompts.jsonl", "--no-preflight",
                                       "--set", "data.eval=null"], base, "data/arith/grpo_prompts.jsonl"),
            "kto": (args.kto_steps, ["kto", "--recipe", "recipes/kto_tiny.yaml", "--model", str(base),
                                     "--feedback", "data/arith/thumbs_train.jsonl"],
                    base, "data/arith/thumbs_train.jsonl"),
            "rloo": (args.rloo_steps, ["rloo", "--recipe", "recipes/rloo_math_tiny.yaml", "--model", str(base),
                                       "--prompts", "data/arith/grpo_prompts.jsonl", "--no-preflight",
                                       "--set", "data.eval=null"], base, "data/arith/grpo_prompts.jsonl"),
            "distill": (args.distill_steps, ["distill", "--recipe", "recipes/distill_tiny.yaml", "--model", str(base),
                                             "--teacher", str(tiny), "--prompts", "data/arith/grpo_prompts.jsonl",
                                             "--set", "data.eval=null"], base, "data/arith/grpo_prompts.jsonl"),
        }
        pairs = []
        for method in methods:
            steps, rlft_args, model, data = plans[method]
            pair = Pair(method, steps)
            pairs.append(compare(pair, [*rlft_args, "--max-steps", str(steps)], scripts[method], model, data,
                                 args.repeats, work, env))
        report(pairs)
        problems = unmeasured(pairs)
    finally:
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"total {time.perf_counter() - started:.0f} s; torch threads {args.threads or 'default'}; "
          f"load average (1 min) {load:.2f} at start, {os.getloadavg()[0]:.2f} at end, on {os.cpu_count()} CPUs")
    if problems:
        print("NOT a like-for-like comparison: " + "; ".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
