"""`rlft kto`: KTO on thumbs up/down feedback (rlft/methods/kto.py, TRL KTOTrainer)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rlft.commands import options as o


def kto(
    ctx: typer.Context,
    feedback: Annotated[Optional[list[str]], typer.Option("--feedback", "-d", help="Thumbs rows: prompt, "
                                                          "completion, label (true/false). Repeatable.")] = None,
    eval_data: o.EvalData = None, model: o.Model = None, recipe: o.Recipe = None, output_dir: o.OutputDir = None,
    max_steps: o.MaxSteps = None, epochs: o.Epochs = None, lr: o.LR = None, batch_size: o.Batch = None,
    seed: o.Seed = None, lora: o.Lora = None,
    beta: Annotated[Optional[float], typer.Option(help="KL strength (default 0.1).")] = None,
    desirable_weight: Annotated[Optional[float], typer.Option(help="Weight of label-true losses (default 1; "
                                                              "raise it when true rows are rare).")] = None,
    undesirable_weight: Annotated[Optional[float], typer.Option(help="Weight of label-false losses "
                                                                "(default 1).")] = None,
    on_alarm: o.OnAlarm = None, holdout: o.Holdout = None, holdout_verifier: o.HoldoutVerifier = None,
    set_: o.Sets = None, print_config: o.PrintConfig = False, overwrite: o.RunOverwrite = False,
    resume: o.Resume = False,
) -> None:
    """KTO on unpaired thumbs up/down feedback (TRL KTOTrainer): one completion per row, labelled good or bad."""
    o.train(ctx, "kto")
