"""`rlft rloo`: RLOO against verifiers (rlft/methods/rloo.py, TRL RLOOTrainer), GRPO's checks included."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rlft.commands import options as o


def rloo(
    ctx: typer.Context,
    prompts: Annotated[Optional[list[str]], typer.Option("--prompts", "-d", help="Prompts with gold fields "
                                                         "(answer, label, schema, tests, ...). Repeatable.")] = None,
    verifier: o.Verifier = None, reward_model: o.RewardModel = None, tools: o.Tools = None, env: o.Env = None,
    eval_data: o.HeldoutAfter = None,
    model: o.Model = None, recipe: o.Recipe = None, output_dir: o.OutputDir = None,
    max_steps: o.MaxSteps = None, epochs: o.Epochs = None, lr: o.LR = None, batch_size: o.Batch = None,
    seed: o.Seed = None, lora: o.Lora = None,
    num_generations: Annotated[Optional[int], typer.Option(help="Completions per prompt (k).")] = None,
    preflight: o.Preflight = None, filter_prompts: o.FilterPrompts = False,
    on_alarm: o.OnAlarm = None, holdout: o.Holdout = None, holdout_verifier: o.HoldoutVerifier = None,
    set_: o.Sets = None, print_config: o.PrintConfig = False, overwrite: o.RunOverwrite = False,
    resume: o.Resume = False,
) -> None:
    """RLOO against verifiers (TRL RLOOTrainer): REINFORCE with a leave-one-out baseline, no critic."""
    o.train(ctx, "rloo")
