"""`rlft bootstrap`: rejection-sampling fine-tuning against verifiers (rlft/methods/bootstrap.py, TRL SFTTrainer)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rlft.commands import options as o


def bootstrap(
    ctx: typer.Context,
    prompts: Annotated[Optional[list[str]], typer.Option("--prompts", "-d", help="Prompts with gold fields "
                                                         "(answer, label, schema, tests, ...). Repeatable.")] = None,
    verifier: o.Verifier = None, tools: o.Tools = None, env: o.Env = None, eval_data: o.HeldoutAfter = None,
    bootstrap_teacher: Annotated[Optional[str], typer.Option("--teacher", help="The model that samples (default: "
                                                             "the model being trained, each round: expert "
                                                             "iteration).")] = None,
    samples: Annotated[Optional[int], typer.Option("--samples", min=1, help="Completions sampled per prompt "
                                                   "per round (N).")] = None,
    rounds: Annotated[Optional[int], typer.Option("--rounds", min=1, help="Rounds of sample -> keep -> "
                                                  "fine-tune.")] = None,
    keep_per_prompt: Annotated[Optional[int], typer.Option("--keep-per-prompt", min=1, help="At most M distinct "
                                                           "accepted completions kept per prompt.")] = None,
    threshold: Annotated[Optional[float], typer.Option("--threshold", help="Accept a completion whose reward is "
                                                       ">= this (default 1.0).")] = None,
    temperature: Annotated[Optional[float], typer.Option("--temperature", min=0.0, help="Sampling "
                                                         "temperature.")] = None,
    max_new_tokens: Annotated[Optional[int], typer.Option("--max-new-tokens", min=1, help="Generation budget "
                                                          "per sampled completion.")] = None,
    model: o.Model = None, recipe: o.Recipe = None, output_dir: o.OutputDir = None,
    max_steps: o.MaxSteps = None, epochs: o.Epochs = None, lr: o.LR = None, batch_size: o.Batch = None,
    seed: o.Seed = None, lora: o.Lora = None, preflight: o.Preflight = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the rollout plan and exit.")] = False,
    on_alarm: o.OnAlarm = None, holdout: o.Holdout = None, holdout_verifier: o.HoldoutVerifier = None,
    set_: o.Sets = None, print_config: o.PrintConfig = False, overwrite: o.RunOverwrite = False,
    resume: o.Resume = False,
) -> None:
    """Rejection-sampling fine-tuning (expert iteration): sample, keep what the verifiers accept, SFT on it, repeat."""
    o.train(ctx, "bootstrap", dry_run=_print_plan)


def _print_plan(cfg) -> None:
    from rlft.methods.bootstrap import plan_text

    o.out_console.print(plan_text(cfg), highlight=False)
