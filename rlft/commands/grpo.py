"""`rlft grpo`: GRPO against verifiers (rlft/methods/grpo.py, TRL GRPOTrainer); `--dry-run` prints the plan."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rlft.commands.options import (
    LR,
    Batch,
    Epochs,
    Holdout,
    HoldoutVerifier,
    Lora,
    MaxSteps,
    Model,
    OnAlarm,
    OutputDir,
    Overwrite,
    PrintConfig,
    Recipe,
    Resume,
    Seed,
    Sets,
    common_flags,
    finish,
    flags_of,
    out_console,
    resolve_config,
    run_method,
)


def grpo(
    prompts: Annotated[Optional[list[str]], typer.Option("--prompts", "-d", help="Prompts with gold fields "
                                                         "(answer, label, schema, tests, ...). Repeatable.")] = None,
    verifier: Annotated[Optional[list[str]], typer.Option("--verifier", "-v", help="Reward: NAME, NAME:WEIGHT "
                        "or file.py:function. Repeatable (weighted sum).")] = None,
    reward_model: Annotated[Optional[str], typer.Option("--reward-model", help="A reward model folder "
                            "(rlft reward) as a reward; alone unless --verifier is given too.")] = None,
    eval_data: Annotated[Optional[str], typer.Option("--eval-data", help="Held-out rows: greedy pass@1 "
                                                     "after training.")] = None,
    model: Model = None, recipe: Recipe = None, output_dir: OutputDir = None,
    max_steps: MaxSteps = None, epochs: Epochs = None, lr: LR = None, batch_size: Batch = None,
    seed: Seed = None, lora: Lora = None,
    num_generations: Annotated[Optional[int], typer.Option(help="Completions per prompt (G).")] = None,
    preflight: Annotated[Optional[bool], typer.Option("--preflight/--no-preflight", help="Probe the model "
                         "first and refuse when too few groups have mixed rewards (default on).")] = None,
    filter_prompts: Annotated[bool, typer.Option("--filter-prompts", help="Train only on prompts whose "
                              "pre-flight group had mixed rewards.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the rollout plan and exit.")] = False,
    on_alarm: OnAlarm = None, holdout: Holdout = None, holdout_verifier: HoldoutVerifier = None,
    set_: Sets = None, print_config: PrintConfig = False, overwrite: Overwrite = False, resume: Resume = False,
) -> None:
    """GRPO against verifiers (TRL GRPOTrainer): RL from a program that checks answers."""
    flags = flags_of(**{"data.train": prompts,
                      **common_flags(eval_data, model, output_dir, max_steps, epochs, lr, batch_size, seed,
                                      lora, on_alarm, holdout, holdout_verifier), "grpo.verifiers": verifier,
                      "grpo.num_generations": num_generations, "grpo.preflight": preflight,
                      "grpo.filter_prompts": filter_prompts or None, "grpo.reward_model": reward_model})
    if reward_model and not verifier:
        flags["grpo.verifiers"] = ([], "--reward-model")  # the reward model is the only reward
    cfg = resolve_config("grpo", recipe, flags, set_, print_config, resume, overwrite, check=not dry_run)
    if dry_run:
        _print_plan(cfg)
        raise typer.Exit(0)
    finish(run_method(cfg, overwrite, resume))


def _print_plan(cfg) -> None:
    from rlft.data import read_many
    from rlft.methods.group_rl import plan
    from rlft.verifiers.loading import validate_gold

    rows = read_many(cfg.data.train, fields=cfg.data.fields, split=cfg.data.split, max_rows=cfg.data.max_rows)
    validate_gold(rows, list(cfg.grpo.verifiers))
    p = plan(cfg, "grpo", len(rows))
    out_console.print(
        f"GRPO plan: {p['steps']} steps x {p['prompts_per_step']} prompts x G={p['num_generations']} "
        f"= {p['rollouts']:,} sampled completions\n"
        f"generated tokens: at most {p['max_generated_tokens']:,} "
        f"({p['rollouts']:,} x max_completion_length {cfg.grpo.max_completion_length})\n"
        f"SFT on the same prompts would train on {p['sft_rows_same_prompts']:,} rows, one target each: GRPO "
        f"samples {p['rollouts_per_sft_row']}x as many sequences, and needs no written answers",
        highlight=False)
