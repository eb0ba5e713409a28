"""`rlft distill`: on-policy distillation from a teacher model (rlft/methods/distill.py, TRL DistillationTrainer)."""

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
    resolve_config,
    run_method,
)


def distill(
    teacher: Annotated[Optional[str], typer.Option("--teacher", "-t", help="Teacher model (folder, hub id or "
                       "tiny); must share the student's tokenizer.")] = None,
    prompts: Annotated[Optional[list[str]], typer.Option("--prompts", "-d", help="Prompts (other fields are "
                                                         "ignored). Repeatable.")] = None,
    eval_data: Annotated[Optional[str], typer.Option("--eval-data", help="Held-out prompts + gold: greedy "
                                                     "pass@1 after training (distill.heldout_verifier).")] = None,
    model: Model = None, recipe: Recipe = None, output_dir: OutputDir = None,
    max_steps: MaxSteps = None, epochs: Epochs = None, lr: LR = None, batch_size: Batch = None,
    seed: Seed = None, lora: Lora = None,
    on_alarm: OnAlarm = None, holdout: Holdout = None, holdout_verifier: HoldoutVerifier = None,
    set_: Sets = None, print_config: PrintConfig = False, overwrite: Overwrite = False, resume: Resume = False,
) -> None:
    """On-policy distillation (TRL DistillationTrainer): the student (--model) samples, the teacher scores."""
    flags = flags_of(**{"data.train": prompts,
                      **common_flags(eval_data, model, output_dir, max_steps, epochs, lr, batch_size, seed,
                                      lora, on_alarm, holdout, holdout_verifier),
                      "distill.teacher_model_name_or_path": teacher})
    cfg = resolve_config("distill", recipe, flags, set_, print_config, resume, overwrite)
    finish(run_method(cfg, overwrite, resume))
