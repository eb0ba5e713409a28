"""Benchmark: the rows' common head run once (rlft.speed.prompt_sharing.with_head_sharing for SFT,
rlft.dspy.scoring's common head for guided choice) against each row running it, side by side in one process.

    python bench/bench_common_head.py [--model smollm2] [--rows 8] [--steps 4] [--rounds 2] [--choices 48]

The rows are what DSPy's BootstrapFinetune hands rlft: DSPy's ChatAdapter prompt for the triage program (its
~150-token system message, the same for every row) with one ticket and its label (data/triage). Two parts:
- SFT: TRL's SFTTrainer and rlft's head-sharing subclass, same model (LoRA), same rows and seed, --steps
  optimizer steps each, alternating (TRL, rlft, TRL, rlft...) for --rounds so load hits both alike; the best
  step time of each side is kept. The first step's loss must agree (the same numbers, computed twice as fast
  is the point), else exit 1.
- Guided choice: rlft.dspy.scoring.choice_logps over --choices ticket prompts with the common head once and
  with it turned off (MIN_COMMON above any prompt), alternating; the scores must agree to 1e-3.
Prints the CPU model and bf16 flag, torch's threads, the load average before and after, each side's times and
the ratios (above 1: the common head once is faster). Nothing is asserted on time. Dated results go to
BENCHMARKS.md with the printed machine line. Needs dspy (make install) and the real model (make install-real).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def triage_rows(n: int) -> list[dict]:
    """DSPy's ChatAdapter rendering of the demo's triage program (scripts/dspy_demo.py) for n training tickets:
    {prompt: [system, user], completion: [assistant]}, as rlft's finetune receives DSPy's traces."""
    import dspy

    sys.path.insert(0, str(ROOT))
    from scripts.dspy_demo import triage_data, triage_program

    adapter = dspy.ChatAdapter()
    sig = triage_program().signature
    out = []
    for ex in triage_data(str(ROOT / "data/triage/tickets_train.jsonl"), n):
        messages = adapter.format(sig, demos=[], inputs={"ticket": ex.ticket})
        answer = adapter.format_assistant_message_content(sig, {"label": ex.label})
        out.append({"prompt": messages, "completion": [{"role": "assistant", "content": answer}]})
    return out


def sft_side(model_name: str, rows: list[dict], steps: int, shared: bool, work: Path) -> tuple[float, float]:
    """(seconds a step after the first, first step's loss) of `steps` SFT steps on `rows`."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from rlft.config import Section
    from rlft.models import load_model, load_tokenizer
    from rlft.speed.prompt_sharing import with_head_sharing

    torch.manual_seed(0)
    cfg = Section(name_or_path=model_name, dtype="auto", revision=None, trust_remote_code=False, load_in_4bit=False,
                  lora=Section(enabled=True, r=16, alpha=32, dropout=0.0, target_modules="all-linear"))
    model = load_model(cfg)
    tok = load_tokenizer(model_name)
    ends: list[float] = []
    losses: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            ends.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    args = SFTConfig(output_dir=str(work), per_device_train_batch_size=len(rows), max_steps=steps, use_cpu=True,
                     report_to=[], logging_steps=1, save_strategy="no", disable_tqdm=True, bf16=False, seed=0,
                     learning_rate=1e-4, gradient_checkpointing=False)  # rlft's CPU default (TRL's is on)
    cls = with_head_sharing(SFTTrainer) if shared else SFTTrainer
    trainer = cls(model=model, args=args, processing_class=tok, train_dataset=Dataset.from_list(rows),
                  callbacks=[Clock()])
    trainer.train()
    return (ends[-1] - ends[0]) / (len(ends) - 1), losses[0]


def choice_side(model, tok, prompts, values, common: bool) -> tuple[float, list]:
    import torch

    from rlft.dspy import scoring

    saved = scoring.MIN_COMMON
    scoring.MIN_COMMON = saved if common else 10 ** 9
    try:
        t = time.perf_counter()
        with torch.no_grad():
            scores = []
            for k in range(0, len(prompts), 8):  # the engine's CHOICE_ROWS
                scores += scoring.choice_logps(model, prompts[k:k + 8], values[k:k + 8], tok.pad_token_id or 0)
        return time.perf_counter() - t, scores
    finally:
        scoring.MIN_COMMON = saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--rows", type=int, default=8, help="SFT batch (BootstrapFinetune's 8 a step)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--choices", type=int, default=48, help="prompts scored by guided choice (a GRPO check's 48)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch

    from rlft.speed.precision import cpu_bf16_flag, cpu_model

    print(f"CPU: {cpu_model()}, bf16 flag: {cpu_bf16_flag() or 'none'}, {os.cpu_count()} cores, "
          f"torch threads {torch.get_num_threads()}")
    print(f"load average before: {load()}", flush=True)
    rows = triage_rows(max(args.rows, args.choices))
    work = Path(tempfile.mkdtemp(prefix="bench-head-"))
    ok = True

    sides: dict[bool, list] = {False: [], True: []}
    for _ in range(args.rounds):
        for shared in (False, True):
            step, first = sft_side(args.model, rows[:args.rows], args.steps, shared, work / str(shared))
            sides[shared].append((step, first))
            print(f"  SFT {'head once ' if shared else 'TRL      '}: {step:.2f} s/step, first loss {first:.4f}",
                  flush=True)
    trl_step, rlft_step = min(s for s, _ in sides[False]), min(s for s, _ in sides[True])
    if abs(sides[False][0][1] - sides[True][0][1]) > 1e-3 * max(1.0, abs(sides[False][0][1])):
        print("MISMATCH: the first losses differ")
        ok = False
    print(f"SFT, {args.rows} rows a step: TRL {trl_step:.2f} s/step, head once {rlft_step:.2f} s/step: "
          f"{trl_step / rlft_step:.2f}x", flush=True)

    from rlft.models import load_for_inference, load_tokenizer

    tok, model = load_tokenizer(args.model), load_for_inference(args.model)
    prompts, values = [], []
    for r in rows[:args.choices]:
        text = tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) + "[[ ## label ## ]]\n"
        prompts.append(tok(text, add_special_tokens=False)["input_ids"])
        values.append([tok(v + "\n\n", add_special_tokens=False)["input_ids"]
                       for v in ("billing", "bug", "account", "shipping")])
    times: dict[bool, list] = {False: [], True: []}
    got: dict[bool, list] = {}
    for _ in range(args.rounds):
        for common in (False, True):
            sec, got[common] = choice_side(model, tok, prompts, values, common)
            times[common].append(sec)
    if any(abs(a - b) > 1e-3 for ra, rb in zip(got[False], got[True]) for a, b in zip(ra, rb)):
        print("MISMATCH: guided choice scores differ")
        ok = False
    each, once = min(times[False]), min(times[True])
    print(f"guided choice, {args.choices} prompts: head with each {each:.2f} s, head once {once:.2f} s: "
          f"{each / once:.2f}x")
    print(f"load average after: {load()}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
