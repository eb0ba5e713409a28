"""`rlft reward`: a reward model trained on preference pairs (rlft/methods/reward.py, TRL RewardTrainer)."""

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


def reward(
    pairs: Annotated[Optional[list[str]], typer.Option("--pairs", "-d", help="Preference pairs: prompt/chosen/"
                                                       "rejected rows. Repeatable.")] = None,
    eval_data: EvalData = None, model: Model = None, recipe: Recipe = None, output_dir: OutputDir = None,
    max_steps: MaxSteps = None, epochs: Epochs = None, lr: LR = None, batch_size: Batch = None,
    seed: Seed = None, lora: Lora = None,
    on_alarm: OnAlarm = None, holdout: Holdout = None, holdout_verifier: HoldoutVerifier = None,
    set_: Sets = None, print_config: PrintConfig = False, overwrite: Overwrite = False, resume: Resume = False,
) -> None:
    """Train a reward model on preference pairs (TRL RewardTrainer); reports held-out pair accuracy."""
    flags = flags_of(**{"data.train": pairs,
                      **common_flags(eval_data, model, output_dir, max_steps, epochs, lr, batch_size, seed,
                                      lora, on_alarm, holdout, holdout_verifier)})
    cfg = resolve_config("reward", recipe, flags, set_, print_config, resume, overwrite)
    finish(run_method(cfg, overwrite, resume))
