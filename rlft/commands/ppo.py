"""`rlft ppo`: PPO against a reward model or verifiers (rlft's own trainer, rlft/methods/ppo.py).

The shared options keep their own help where PPO gives them another meaning (a step is a rollout + update, a
batch is prompts per rollout, LoRA also makes the reference).
"""

from __future__ import annotations

from typing import Annotated

import typer

from rlft.commands import options as o


def ppo(
    ctx: typer.Context,
    prompts: Annotated[list[str] | None, typer.Option("--prompts", "-d", help="Prompts (text or chat), with "
                       "gold fields when a verifier scores them. Repeatable.")] = None,
    verifier: o.Verifier = None,
    reward_model: Annotated[str | None, typer.Option("--reward-model", help="Reward: a reward model folder "
                            "(rlft reward).")] = None,
    eval_data: Annotated[str | None, o.run_option("--eval-data", help="Held-out rows: greedy pass@1 under the "
                         "verifier (watch.holdout_verifier with a reward model) before and after training.")] = None,
    model: o.Model = None, recipe: o.Recipe = None, output_dir: o.OutputDir = None,
    max_steps: Annotated[int | None, o.run_option("--max-steps", help="Stop after N PPO steps (rollout + "
                         "update).")] = None,
    epochs: Annotated[float | None, o.run_option("--epochs", help="Passes over the prompts.")] = None,
    lr: Annotated[float | None, o.run_option("--lr", help="Learning rate (policy and value model).")] = None,
    batch_size: Annotated[int | None, o.run_option("--batch-size", help="Prompts per rollout batch, per "
                          "device (one response each).")] = None,
    seed: o.Seed = None,
    lora: Annotated[bool | None, o.run_option("--lora/--no-lora", help="Train LoRA adapters; the reference "
                    "is then the policy with its adapter disabled.")] = None,
    max_memory: Annotated[float | None, typer.Option("--max-memory", help="Refuse to start when the estimated "
                          "memory of the four networks exceeds this many GB.")] = None,
    on_alarm: o.OnAlarm = None, holdout: o.Holdout = None,
    holdout_verifier: Annotated[str | None, o.run_option("--holdout-verifier", help="Verifier for the held-out "
                                "checks (default math).")] = None,
    set_: o.Sets = None, print_config: o.PrintConfig = False, overwrite: o.RunOverwrite = False,
    resume: o.Resume = False,
) -> None:
    """PPO (RLHF) against a reward model or verifiers: policy, reference, value model, reward."""
    o.train(ctx, "ppo")
