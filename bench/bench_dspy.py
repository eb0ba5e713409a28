"""Benchmark: a dspy.GRPO step through rlft.dspy beside `rlft grpo`'s step, same group size, batch, completion
length and prompts (goal: within 1.5x).

    python bench/bench_dspy.py [--model smollm2] [--steps 6] [--group 4] [--examples 2] [--tokens 16]

The default model is SmolLM2-135M (make install-real), where a step's work is the model's. On the tiny model
(`--model tiny`) a step is ~0.15 s and DSPy's own per-step work (its threads, adapters, trace collection) is of
the same size, so the ratio there measures DSPy's Python, not rlft's step.

Both sides train one LoRA policy on the same prompts: DSPy's ChatAdapter messages of a `dspy.Predict("question ->
answer")` program over data/arith questions (for `rlft grpo` written as conversational prompts). Both rewards are
the same deterministic coin per completion text (a parity of its characters), so groups are mixed on both sides
and neither skips more rows than the other. `rlft grpo` runs with --no-preflight and no held-out check; its step
time is train_runtime / steps from summary.json. The dspy side is dspy.GRPO's compile (num_rollouts_per_grpo_step
= G, num_dspy_examples_per_grpo_step = B, DSPy samples through rlft's engine with max_tokens = the completion
length, and no check: `watch.keep_best` off, as `rlft grpo` has none); its step time is the time from the end of
the job's first step to the end of its last, per step (model loading and the first step's warm-up excluded on both
sides as far as each reports them: the rlft grpo figure includes its first step). Printed: both step times and
their ratio; exit 1 when the ratio is above 1.5.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL = 1.5


def coin(text: str) -> float:
    return float(sum(map(ord, text)) % 2)


VERIFIER = '''
def reward(completions, **row):
    out = []
    for c in completions:
        text = c if isinstance(c, str) else c[-1]["content"]
        out.append(float(sum(map(ord, text)) % 2))
    return out
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--examples", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import dspy
    from dspy.teleprompt.grpo import GRPO

    import rlft.dspy

    rows = [json.loads(line) for line in (ROOT / "data/arith/grpo_prompts.jsonl").read_text().splitlines()][:64]
    questions = [r["prompt"] if isinstance(r["prompt"], str) else r["prompt"][-1]["content"] for r in rows]
    trainset = [dspy.Example(question=q, answer="0").with_inputs("question") for q in questions]
    sig = dspy.Predict("question -> answer").signature
    work = Path(tempfile.mkdtemp(prefix="bench-dspy-"))
    prompts = work / "prompts.jsonl"
    with prompts.open("w") as f:
        for q in questions:
            f.write(json.dumps({"prompt": dspy.ChatAdapter().format(sig, demos=[], inputs={"question": q})}) + "\n")
    (work / "coin.py").write_text(VERIFIER)
    batch = args.group * args.examples
    cmd = [sys.executable, "-m", "rlft", "grpo", "--model", args.model, "--prompts", str(prompts), "--lora",
           "--no-preflight", "-o", str(work / "grpo"), "--max-steps", str(args.steps),
           "--set", f"grpo.verifiers=[{work / 'coin.py'}:reward]", "--set", f"grpo.num_generations={args.group}",
           "--set", f"train.per_device_train_batch_size={batch}", "--set", f"grpo.max_completion_length={args.tokens}",
           "--set", "watch.auto_holdout=false", "--set", "grpo.temperature=1.0", "--set", "train.logging_steps=1"]
    print(f"uptime before: {os.popen('uptime').read().strip()}", flush=True)
    t = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-2000:])
        return 1
    summary = json.loads((work / "grpo" / "summary.json").read_text())
    rlft_step = summary["final_metrics"]["train_runtime"] / args.steps
    print(f"rlft grpo: {args.steps} steps in {time.time() - t:.1f} s wall, {rlft_step:.2f} s/step", flush=True)

    lm = rlft.dspy.local_lm(args.model, lora=True, max_tokens=args.tokens, output_dir=str(work / "dspy"),
                            temperature=None, **{"grpo.temperature": 1.0, "watch.keep_best": False})
    program = dspy.Predict("question -> answer")
    program.set_lm(lm)
    jobs = []
    reinforce = lm.reinforce

    def keep(train_kwargs):
        job = reinforce(train_kwargs)
        jobs.append(job)
        return job

    lm.reinforce = keep
    opt = GRPO(metric=lambda ex, pred, trace=None: coin(str(pred.answer)), num_train_steps=args.steps + 1,
               num_dspy_examples_per_grpo_step=args.examples, num_rollouts_per_grpo_step=args.group,
               exclude_demos=True, num_threads=batch, num_steps_for_val=10 ** 6)
    opt.compile(program, trainset=trainset)
    ends = jobs[0].step_ends
    dspy_step = (ends[-1] - ends[0]) / (len(ends) - 1)
    print(f"dspy.GRPO through rlft: {len(ends)} steps, {dspy_step:.2f} s/step after the first", flush=True)
    ratio = dspy_step / rlft_step
    print(f"uptime after: {os.popen('uptime').read().strip()}")
    print(f"G {args.group}, B {args.examples} ({batch} completions a step), {args.tokens} tokens, {args.model}: "
          f"dspy.GRPO / rlft grpo step = {ratio:.2f}x (goal <= {GOAL}x) {'met' if ratio <= GOAL else 'MISSED'}")
    return 0 if ratio <= GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
