"""`rlft kto`: KTO on thumbs up/down feedback (rlft/methods/kto.py, TRL KTOTrainer)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rlft.commands.options import (
    LR,
    Batch,
    Epochs,
    EvalData,
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
    resolve_config,
    run_method,
)


def kto(
    feedback: Annotated[Optional[list[str]], typer.Option("--feedback", "-d", help="Thumbs rows: prompt, "
                                                          "completion, label (true/false). Repeatable.")] = None,
    eval_data: EvalData = None, model: Model = None, recipe: Recipe = None, output_dir: OutputDir = None,
    max_steps: MaxSteps = None, epochs: Epochs = None, lr: LR = None, batch_size: Batch = None,
    seed: Seed = None, lora: Lora = None,
    beta: Annotated[Optional[float], typer.Option(help="KL strength (default 0.1).")] = None,
    desirable_weight: Annotated[Optional[float], typer.Option(help="Weight of label-true losses (default 1; "
                                                              "raise it when true rows are rare).")] = None,
    undesirable_weight: Annotated[Optional[float], typer.Option(help="Weight of label-false losses "
                                                                "(default 1).")] = None,
    on_alarm: OnAlarm = None, holdout: Holdout = None, holdout_verifier: HoldoutVerifier = None,
    set_: Sets = None, print_config: PrintConfig = False, overwrite: Overwrite = False, resume: Resume = False,
) -> None:
    """KTO on unpaired thumbs up/down feedback (TRL KTOTrainer): one completion per row, labelled good or bad."""
    flags = flags_of(**{"data.train": feedback,
                      **common_flags(eval_data, model, output_dir, max_steps, epochs, lr, batch_size, seed,
                                      lora, on_alarm, holdout, holdout_verifier), "kto.beta": beta,
                      "kto.desirable_weight": desirable_weight, "kto.undesirable_weight": undesirable_weight})
    cfg = resolve_config("kto", recipe, flags, set_, print_config, resume, overwrite)
    finish(run_method(cfg, overwrite, resume))
