"""What the command modules share: option types, the flag -> config mapping, resolving and finishing a run.

Every command module imports this one (never rlft.cli, which imports the commands). Light at import: typer
and rich only; the config and run modules are imported inside the helpers.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from rlft.errors import UserError

# emoji=False: rich would turn `file.jsonl:100:` (a file:line message) into an emoji
out_console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)

Recipe = Annotated[Optional[Path], typer.Option("--recipe", "-r", help="YAML recipe (see recipes/).")]
Model = Annotated[Optional[str], typer.Option("--model", "-m",
                                              help="Local folder, hub id, .gguf file, `tiny` or `smollm2`.")]
OutputDir = Annotated[Optional[str], typer.Option("--output-dir", "-o", help="Run folder.")]
EvalData = Annotated[Optional[str], typer.Option("--eval-data", help="Held-out file for eval loss.")]
MaxSteps = Annotated[Optional[int], typer.Option("--max-steps", help="Stop after N optimizer steps.")]
Epochs = Annotated[Optional[float], typer.Option("--epochs", help="Epochs over the data.")]
LR = Annotated[Optional[float], typer.Option("--lr", help="Learning rate.")]
Batch = Annotated[Optional[int], typer.Option("--batch-size", help="Rows per device per step.")]
Seed = Annotated[Optional[int], typer.Option("--seed", help="Random seed.")]
Lora = Annotated[Optional[bool], typer.Option("--lora/--no-lora", help="Train a LoRA adapter.")]
Sets = Annotated[Optional[list[str]], typer.Option("--set", help="Override any field: section.key=value "
                                                   "(any TRL config field too). Repeatable.")]
PrintConfig = Annotated[bool, typer.Option("--print-config", help="Print the resolved config and exit.")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace a non-empty output_dir.")]
Resume = Annotated[bool, typer.Option("--resume", help="Continue from the last checkpoint in output_dir.")]
OnAlarm = Annotated[Optional[str], typer.Option("--on-alarm", help="warn (default) or stop: stop saves a "
                                                "checkpoint and ends the run when an alarm fires.")]
Holdout = Annotated[Optional[str], typer.Option("--holdout", help="Held-out prompts + gold, scored greedily "
                                                "every watch.holdout_every steps (reward-hacking check).")]
AsChat = Annotated[bool, typer.Option("--as-chat", help="Wrap plain-string prompts as a user message, so the "
                                      "model's chat template is applied.")]
HoldoutVerifier = Annotated[Optional[str], typer.Option("--holdout-verifier", help="Verifier for --holdout "
                                                        "(default math).")]


def flags_of(**pairs) -> dict:
    """{dotted.key: (value, origin)} for the flags the user actually passed."""
    names = {"data.train": "--data", "data.eval": "--eval-data", "model.name_or_path": "--model",
             "train.output_dir": "--output-dir", "train.max_steps": "--max-steps",
             "train.num_train_epochs": "--epochs", "train.learning_rate": "--lr",
             "train.per_device_train_batch_size": "--batch-size", "train.seed": "--seed",
             "model.lora.enabled": "--lora", "grpo.verifiers": "--verifier",
             "grpo.num_generations": "--num-generations", "grpo.preflight": "--preflight",
             "grpo.filter_prompts": "--filter-prompts", "dpo.beta": "--beta", "watch.on_alarm": "--on-alarm",
             "watch.holdout": "--holdout", "watch.holdout_verifier": "--holdout-verifier",
             "grpo.reward_model": "--reward-model", "ppo.verifiers": "--verifier",
             "ppo.reward_model": "--reward-model", "ppo.max_memory_gb": "--max-memory",
             "kto.beta": "--beta", "kto.desirable_weight": "--desirable-weight",
             "kto.undesirable_weight": "--undesirable-weight", "rloo.verifiers": "--verifier",
             "rloo.num_generations": "--num-generations", "rloo.preflight": "--preflight",
             "rloo.filter_prompts": "--filter-prompts", "rloo.reward_model": "--reward-model",
             "distill.teacher_model_name_or_path": "--teacher"}
    return {key: (value, names.get(key, key)) for key, value in pairs.items() if value is not None}


def common_flags(eval_data, model, output_dir, max_steps, epochs, lr, batch_size, seed, lora, on_alarm,
                  holdout, holdout_verifier) -> dict:
    """The dotted config keys of the options every training command shares."""
    return {"data.eval": eval_data, "model.name_or_path": model, "train.output_dir": output_dir,
            "train.max_steps": max_steps, "train.num_train_epochs": epochs, "train.learning_rate": lr,
            "train.per_device_train_batch_size": batch_size, "train.seed": seed, "model.lora.enabled": lora,
            "watch.on_alarm": on_alarm, "watch.holdout": holdout, "watch.holdout_verifier": holdout_verifier}


def resolve_config(method: str, recipe, flags: dict, sets, print_config: bool, resume: bool = False,
                   overwrite: bool = False, check: bool = True):
    """The validated config; then, unless --print-config (or `check` is off: a dry run that only plans),
    every check that needs no data and no weights before anything is written: the run folder against the
    inputs and --resume (rlft.run.check_run_folder), then models and verifier plugins (rlft.checks)."""
    from rlft.checks import check_inputs, expand_user_paths
    from rlft.config import resolve
    from rlft.run import check_run_folder

    cfg = resolve(method, recipe, flags, sets)
    expand_user_paths(cfg)
    if resume and cfg.origins.get("train.output_dir") == "default":
        raise UserError("--resume needs the run folder", "pass --output-dir DIR of the interrupted run")
    if print_config:
        sys.stdout.write(cfg.to_yaml())  # plain text: rich would wrap long paths
        raise typer.Exit(0)
    if check:
        check_run_folder(cfg, overwrite=overwrite, resume=resume)
        check_inputs(cfg)
    return cfg


def run_method(cfg, overwrite: bool = False, resume: bool = False):
    """Run the config's method: rlft's own loop for PPO, rlft.methods.common.train for the TRL-backed ones."""
    from rlft.methods import distill, dpo, grpo, kto, ppo, reward, rloo, sft
    from rlft.methods.common import train

    if cfg.method == "ppo":
        return ppo.run(cfg, overwrite=overwrite, resume=resume, console=err_console)
    module = {"sft": sft, "dpo": dpo, "kto": kto, "reward": reward, "grpo": grpo, "rloo": rloo,
              "distill": distill}[cfg.method]
    return train(cfg, module, overwrite=overwrite, resume=resume, console=err_console)


def finish(result) -> None:
    from rlft.run import is_main_process

    if result.status == "completed" and is_main_process():
        shown = {k: round(v, 4) for k, v in result.metrics.items() if isinstance(v, float)}
        err_console.print(f"[green]done[/]: {result.output_dir}  {shown}")
    raise typer.Exit(result.exit_code)


