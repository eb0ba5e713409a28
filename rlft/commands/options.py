"""What the command modules share: option types, the flag -> config table, and the body of a training command.

A training command is a signature of `Annotated` options (its own flags, then the shared ones of the "Run"
panel) and one call, `o.train(ctx, "dpo")`: CONFIG_KEYS maps each option to its config key, the spelling an
error names comes from the declared option, and the method's module is picked from one explicit table.

Every command module imports this one (never rlft.cli, which imports the commands). Light at import: typer
and rich only; the config and run modules are imported inside the helpers.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from rlft.errors import UserError

# emoji=False: rich would turn `file.jsonl:100:` (a file:line message) into an emoji
out_console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)

RUN = "Run"  # the help panel of the options every training command shares; the method's own flags come first


def run_option(*names: str, help: str):
    return typer.Option(*names, help=help, rich_help_panel=RUN)


Recipe = Annotated[Optional[Path], run_option("--recipe", "-r", help="YAML recipe (see recipes/).")]
Model = Annotated[Optional[str], run_option("--model", "-m",
                                             help="Local folder, hub id, .gguf file, `tiny` or `smollm2`.")]
OutputDir = Annotated[Optional[str], run_option("--output-dir", "-o", help="Run folder.")]
EvalData = Annotated[Optional[str], run_option("--eval-data", help="Held-out file for eval loss.")]
MaxSteps = Annotated[Optional[int], run_option("--max-steps", help="Stop after N optimizer steps.")]
Epochs = Annotated[Optional[float], run_option("--epochs", help="Epochs over the data.")]
LR = Annotated[Optional[float], run_option("--lr", help="Learning rate.")]
Batch = Annotated[Optional[int], run_option("--batch-size", help="Rows per device per step.")]
Seed = Annotated[Optional[int], run_option("--seed", help="Random seed.")]
Lora = Annotated[Optional[bool], run_option("--lora/--no-lora", help="Train a LoRA adapter.")]
Sets = Annotated[Optional[list[str]], run_option("--set", help="Override any field: section.key=value "
                                                  "(any TRL config field too). Repeatable.")]
PrintConfig = Annotated[bool, run_option("--print-config", help="Print the resolved config and exit.")]
RunOverwrite = Annotated[bool, run_option("--overwrite", help="Replace a non-empty output_dir.")]
Resume = Annotated[bool, run_option("--resume", help="Continue from the last checkpoint in output_dir.")]
OnAlarm = Annotated[Optional[str], run_option("--on-alarm", help="warn (default) or stop: stop saves a "
                                               "checkpoint and ends the run when an alarm fires.")]
Holdout = Annotated[Optional[str], run_option("--holdout", help="Held-out prompts + gold, scored greedily "
                                               "every watch.holdout_every steps (reward-hacking check).")]
HoldoutVerifier = Annotated[Optional[str], run_option("--holdout-verifier", help="Verifier for --holdout "
                                                       "(default math).")]
# The reward options of the verifier-rewarded methods (GRPO, RLOO; PPO words --reward-model its own way).
Verifier = Annotated[Optional[list[str]], typer.Option("--verifier", "-v", help="Reward: NAME, NAME:WEIGHT "
                                                       "or file.py:function. Repeatable (weighted sum).")]
RewardModel = Annotated[Optional[str], typer.Option("--reward-model", help="A reward model folder (rlft reward) "
                                                    "as a reward; alone unless --verifier is given too.")]
Preflight = Annotated[Optional[bool], typer.Option("--preflight/--no-preflight", help="Probe the model first and "
                                                   "refuse when too few groups have mixed rewards (default on).")]
FilterPrompts = Annotated[bool, typer.Option("--filter-prompts", help="Train only on prompts whose pre-flight "
                                             "group had mixed rewards.")]
Tools = Annotated[Optional[str], typer.Option("--tools", help="FILE.py of typed, documented tool functions the "
                                              "model may call (GRPO; rlft/tools.py).")]
Env = Annotated[Optional[str], typer.Option("--env", help="FILE.py:Class: an environment (TRL's environment_factory "
                                            "contract: tool methods, reset(**row), optional get_reward()).")]
HeldoutAfter = Annotated[Optional[str], typer.Option("--eval-data", help="Held-out rows: greedy pass@1 after "
                                                     "training.")]

# Options of the other commands.
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace a non-empty output_dir.")]
AsChat = Annotated[bool, typer.Option("--as-chat", help="Wrap plain-string prompts as a user message, so the "
                                      "model's chat template is applied.")]

# Every training flag's config key, by parameter name ({method}: the command's own section). The flag's
# spelling (for the origin a config error names) is read from the declared option, so it is written once.
CONFIG_KEYS = {
    "data": "data.train", "pairs": "data.train", "feedback": "data.train", "prompts": "data.train",
    "eval_data": "data.eval", "model": "model.name_or_path", "output_dir": "train.output_dir",
    "max_steps": "train.max_steps", "epochs": "train.num_train_epochs", "lr": "train.learning_rate",
    "batch_size": "train.per_device_train_batch_size", "seed": "train.seed", "lora": "model.lora.enabled",
    "on_alarm": "watch.on_alarm", "holdout": "watch.holdout", "holdout_verifier": "watch.holdout_verifier",
    "beta": "{method}.beta", "desirable_weight": "{method}.desirable_weight",
    "undesirable_weight": "{method}.undesirable_weight", "verifier": "{method}.verifiers",
    "reward_model": "{method}.reward_model", "num_generations": "{method}.num_generations",
    "preflight": "{method}.preflight", "filter_prompts": "{method}.filter_prompts",
    "max_memory": "{method}.max_memory_gb", "teacher": "{method}.teacher_model_name_or_path",
    "tools": "{method}.tools", "env": "{method}.env",
    "samples": "{method}.samples", "rounds": "{method}.rounds", "keep_per_prompt": "{method}.keep_per_prompt",
    "threshold": "{method}.threshold", "temperature": "{method}.temperature",
    "max_new_tokens": "{method}.max_new_tokens", "bootstrap_teacher": "{method}.teacher",
}
# The options that steer the command rather than set a config value.
CONTROLS = ("recipe", "set_", "print_config", "overwrite", "resume", "dry_run")


def config_flags(ctx: typer.Context, method: str) -> dict:
    """{dotted.key: (value, "--flag")} for the options the user gave, from `ctx.params` and CONFIG_KEYS.

    An option at its declared default of None or False, or a repeatable one never given (click's empty tuple),
    was not given; repeatable options come as lists. With
    a reward model and no verifier, the reward model is the only reward (`{method}.verifiers` = [])."""
    spelled = {p.name: p.opts[0] for p in ctx.command.params}
    defaults = {p.name: p.default for p in ctx.command.params}
    flags = {}
    for name, value in ctx.params.items():
        if name in CONTROLS or value is None or value == () or (value is False and defaults[name] is False):
            continue
        flags[CONFIG_KEYS[name].format(method=method)] = (list(value) if isinstance(value, tuple) else value,
                                                           spelled[name])
    if ctx.params.get("reward_model") and not ctx.params.get("verifier"):
        flags[f"{method}.verifiers"] = ([], spelled["reward_model"])
    return flags


def train(ctx: typer.Context, method: str, dry_run: Callable | None = None) -> None:
    """The body of every training command: flags -> config -> the early checks -> the method -> exit code.
    With --dry-run, `dry_run(cfg)` prints the plan instead (the early checks are skipped: nothing runs)."""
    p = ctx.params
    planning = bool(p.get("dry_run"))
    cfg = resolve_config(method, p["recipe"], config_flags(ctx, method), p["set_"], p["print_config"], p["resume"],
                         p["overwrite"], check=not planning)
    if planning:
        dry_run(cfg)
        raise typer.Exit(0)
    finish(run_method(cfg, p["overwrite"], p["resume"]))


def resolve_config(method: str, recipe, flags: dict, sets, print_config: bool, resume: bool = False,
                   overwrite: bool = False, check: bool = True):
    """The validated config (--print-config prints it with its decided precision and exits); then, unless
    --print-config (or `check` is off: a dry run that only plans), every check that needs no data and no weights
    before anything is written: the run folder against the inputs and --resume (rlft.run.folder.check_run_folder),
    then models and verifier plugins (rlft.checks)."""
    from rlft.checks import check_inputs, expand_user_paths
    from rlft.config import resolve
    from rlft.run.folder import check_run_folder

    cfg = resolve(method, recipe, flags, sets)
    expand_user_paths(cfg)
    if resume and cfg.origins.get("train.output_dir") == "default":
        raise UserError("--resume needs the run folder", "pass --output-dir DIR of the interrupted run")
    if print_config:
        from rlft.speed import precision

        precision.apply(cfg)  # the decided precision (model.dtype, train.bf16/fp16), as config.yaml records it
        sys.stdout.write(cfg.to_yaml())  # plain text: rich would wrap long paths
        raise typer.Exit(0)
    if check:
        check_run_folder(cfg, overwrite=overwrite, resume=resume)
        check_inputs(cfg)
    return cfg


def run_method(cfg, overwrite: bool = False, resume: bool = False):
    """Run the config's method (rlft.methods.run: the one method table)."""
    from rlft import methods

    return methods.run(cfg, overwrite=overwrite, resume=resume, console=err_console)


def finish(result) -> None:
    from rlft.run.folder import is_main_process

    if result.status == "completed" and is_main_process():
        shown = {k: round(v, 4) for k, v in result.metrics.items() if isinstance(v, float)}
        err_console.print(f"[green]done[/]: {result.output_dir}  {shown}")
    raise typer.Exit(result.exit_code)


