"""`rlft sft`: supervised fine-tuning on demonstrations (rlft/methods/sft.py, TRL SFTTrainer)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rlft.commands import options as o


def sft(
    ctx: typer.Context,
    data: Annotated[Optional[list[str]], typer.Option("--data", "-d", help="Demonstrations: prompt/completion "
                                                      "or messages rows. Repeatable.")] = None,
    eval_data: o.EvalData = None, model: o.Model = None, recipe: o.Recipe = None, output_dir: o.OutputDir = None,
    max_steps: o.MaxSteps = None, epochs: o.Epochs = None, lr: o.LR = None, batch_size: o.Batch = None,
    seed: o.Seed = None, lora: o.Lora = None,
    on_alarm: o.OnAlarm = None, holdout: o.Holdout = None, holdout_verifier: o.HoldoutVerifier = None,
    set_: o.Sets = None, print_config: o.PrintConfig = False, overwrite: o.RunOverwrite = False,
    resume: o.Resume = False,
) -> None:
    """Supervised fine-tuning on demonstrations (TRL SFTTrainer)."""
    o.train(ctx, "sft")
