"""`rlft rloo`: RLOO against verifiers (rlft/methods/rloo.py, TRL RLOOTrainer), GRPO's checks included."""

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


def rloo(
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
    num_generations: Annotated[Optional[int], typer.Option(help="Completions per prompt (k).")] = None,
    preflight: Annotated[Optional[bool], typer.Option("--preflight/--no-preflight", help="Probe the model "
                         "first and refuse when too few groups have mixed rewards (default on).")] = None,
    filter_prompts: Annotated[bool, typer.Option("--filter-prompts", help="Train only on prompts whose "
                              "pre-flight group had mixed rewards.")] = False,
    on_alarm: OnAlarm = None, holdout: Holdout = None, holdout_verifier: HoldoutVerifier = None,
    set_: Sets = None, print_config: PrintConfig = False, overwrite: Overwrite = False, resume: Resume = False,
) -> None:
    """RLOO against verifiers (TRL RLOOTrainer): REINFORCE with a leave-one-out baseline, no critic."""
    flags = flags_of(**{"data.train": prompts,
                      **common_flags(eval_data, model, output_dir, max_steps, epochs, lr, batch_size, seed,
                                      lora, on_alarm, holdout, holdout_verifier), "rloo.verifiers": verifier,
                      "rloo.num_generations": num_generations, "rloo.preflight": preflight,
                      "rloo.filter_prompts": filter_prompts or None, "rloo.reward_model": reward_model})
    if reward_model and not verifier:
        flags["rloo.verifiers"] = ([], "--reward-model")  # the reward model is the only reward
    cfg = resolve_config("rloo", recipe, flags, set_, print_config, resume, overwrite)
    finish(run_method(cfg, overwrite, resume))
