"""`rlft ppo`: PPO against a reward model or verifiers (rlft's own trainer, rlft/methods/ppo.py).

Light at import (typer only); the method is imported inside the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlft.commands.options import common_flags, finish, flags_of, resolve_config, run_method


def ppo(
    prompts: Annotated[list[str] | None, typer.Option("--prompts", "-d", help="Prompts (text or chat), with "
                       "gold fields when a verifier scores them. Repeatable.")] = None,
    verifier: Annotated[list[str] | None, typer.Option("--verifier", "-v", help="Reward: NAME, NAME:WEIGHT or "
                        "file.py:function. Repeatable (weighted sum).")] = None,
    reward_model: Annotated[str | None, typer.Option("--reward-model", help="Reward: a reward model folder "
                            "(rlft reward).")] = None,
    eval_data: Annotated[str | None, typer.Option("--eval-data", help="Held-out rows: greedy pass@1 under the "
                         "verifier (watch.holdout_verifier with a reward model) before and after training.")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Local folder, hub id, or `tiny`.")] = None,
    recipe: Annotated[Path | None, typer.Option("--recipe", "-r", help="YAML recipe (see recipes/).")] = None,
    output_dir: Annotated[str | None, typer.Option("--output-dir", "-o", help="Run folder.")] = None,
    max_steps: Annotated[int | None, typer.Option("--max-steps", help="Stop after N PPO steps (rollout + "
                         "update).")] = None,
    epochs: Annotated[float | None, typer.Option("--epochs", help="Passes over the prompts.")] = None,
    lr: Annotated[float | None, typer.Option("--lr", help="Learning rate (policy and value model).")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="Prompts per rollout batch, per "
                          "device (one response each).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Random seed.")] = None,
    lora: Annotated[bool | None, typer.Option("--lora/--no-lora", help="Train LoRA adapters; the reference "
                    "is then the policy with its adapter disabled.")] = None,
    max_memory: Annotated[float | None, typer.Option("--max-memory", help="Refuse to start when the estimated "
                          "memory of the four networks exceeds this many GB.")] = None,
    on_alarm: Annotated[str | None, typer.Option("--on-alarm", help="warn (default) or stop: stop saves a "
                        "checkpoint and ends the run when an alarm fires.")] = None,
    holdout: Annotated[str | None, typer.Option("--holdout", help="Held-out prompts + gold, scored greedily "
                       "every watch.holdout_every steps (reward-hacking check).")] = None,
    holdout_verifier: Annotated[str | None, typer.Option("--holdout-verifier", help="Verifier for the held-out "
                                "checks (default math).")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override any field: section.key=value, "
                    "e.g. ppo.kl_coef=0.1. Repeatable.")] = None,
    print_config: Annotated[bool, typer.Option("--print-config", help="Print the resolved config and "
                            "exit.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace a non-empty output_dir.")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the last checkpoint in "
                      "output_dir.")] = False,
) -> None:
    """PPO (RLHF) against a reward model or verifiers: policy, reference, value model, reward."""
    flags = flags_of(**{"data.train": prompts,
                        **common_flags(eval_data, model, output_dir, max_steps, epochs, lr, batch_size, seed,
                                       lora, on_alarm, holdout, holdout_verifier),
                        "ppo.verifiers": verifier, "ppo.reward_model": reward_model, "ppo.max_memory_gb": max_memory})
    if reward_model and not verifier:
        flags["ppo.verifiers"] = ([], "--reward-model")  # the reward model is the only reward (as in grpo)
    cfg = resolve_config("ppo", recipe, flags, set_, print_config, resume, overwrite)
    finish(run_method(cfg, overwrite, resume))
