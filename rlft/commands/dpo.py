"""`rlft dpo`: Direct Preference Optimization on chosen/rejected pairs (rlft/methods/dpo.py, TRL DPOTrainer)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rlft.commands import options as o


def dpo(
    ctx: typer.Context,
    pairs: Annotated[Optional[list[str]], typer.Option("--pairs", "-d", help="Preference pairs: prompt/chosen/"
                                                       "rejected rows. Repeatable.")] = None,
    eval_data: o.EvalData = None, model: o.Model = None, recipe: o.Recipe = None, output_dir: o.OutputDir = None,
    max_steps: o.MaxSteps = None, epochs: o.Epochs = None, lr: o.LR = None, batch_size: o.Batch = None,
    seed: o.Seed = None, lora: o.Lora = None,
    beta: Annotated[Optional[float], typer.Option(help="KL strength (default 0.1).")] = None,
    on_alarm: o.OnAlarm = None, holdout: o.Holdout = None, holdout_verifier: o.HoldoutVerifier = None,
    set_: o.Sets = None, print_config: o.PrintConfig = False, overwrite: o.RunOverwrite = False,
    resume: o.Resume = False,
) -> None:
    """Direct Preference Optimization on chosen/rejected pairs (TRL DPOTrainer)."""
    o.train(ctx, "dpo")
