"""`rlft distill`: on-policy distillation from a teacher model (rlft/methods/distill.py, TRL DistillationTrainer)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rlft.commands import options as o


def distill(
    ctx: typer.Context,
    teacher: Annotated[Optional[str], typer.Option("--teacher", "-t", help="Teacher model (folder, hub id or "
                       "tiny); must share the student's tokenizer.")] = None,
    prompts: Annotated[Optional[list[str]], typer.Option("--prompts", "-d", help="Prompts (other fields are "
                                                         "ignored). Repeatable.")] = None,
    eval_data: Annotated[Optional[str], typer.Option("--eval-data", help="Held-out prompts + gold: greedy "
                                                     "pass@1 after training (distill.heldout_verifier).")] = None,
    model: o.Model = None, recipe: o.Recipe = None, output_dir: o.OutputDir = None,
    max_steps: o.MaxSteps = None, epochs: o.Epochs = None, lr: o.LR = None, batch_size: o.Batch = None,
    seed: o.Seed = None, lora: o.Lora = None,
    on_alarm: o.OnAlarm = None, holdout: o.Holdout = None, holdout_verifier: o.HoldoutVerifier = None,
    set_: o.Sets = None, print_config: o.PrintConfig = False, overwrite: o.RunOverwrite = False,
    resume: o.Resume = False,
) -> None:
    """On-policy distillation (TRL DistillationTrainer): the student (--model) samples, the teacher scores."""
    o.train(ctx, "distill")
