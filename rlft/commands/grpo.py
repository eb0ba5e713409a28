"""`rlft grpo`: GRPO against verifiers (rlft/methods/grpo.py, TRL GRPOTrainer); `--dry-run` prints the plan."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rlft.commands import options as o


def grpo(
    ctx: typer.Context,
    prompts: Annotated[Optional[list[str]], typer.Option("--prompts", "-d", help="Prompts with gold fields "
                                                         "(answer, label, schema, tests, ...). Repeatable.")] = None,
    verifier: o.Verifier = None, reward_model: o.RewardModel = None, tools: o.Tools = None, env: o.Env = None,
    eval_data: o.HeldoutAfter = None,
    model: o.Model = None, recipe: o.Recipe = None, output_dir: o.OutputDir = None,
    max_steps: o.MaxSteps = None, epochs: o.Epochs = None, lr: o.LR = None, batch_size: o.Batch = None,
    seed: o.Seed = None, lora: o.Lora = None,
    num_generations: Annotated[Optional[int], typer.Option(help="Completions per prompt (G).")] = None,
    preflight: o.Preflight = None, filter_prompts: o.FilterPrompts = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the rollout plan and exit.")] = False,
    on_alarm: o.OnAlarm = None, holdout: o.Holdout = None, holdout_verifier: o.HoldoutVerifier = None,
    set_: o.Sets = None, print_config: o.PrintConfig = False, overwrite: o.RunOverwrite = False,
    resume: o.Resume = False,
) -> None:
    """GRPO against verifiers (TRL GRPOTrainer): RL from a program that checks answers."""
    o.train(ctx, "grpo", dry_run=_print_plan)


def _print_plan(cfg) -> None:
    from rlft.methods.group_rl import plan_text

    o.out_console.print(plan_text(cfg, "grpo"), highlight=False)
