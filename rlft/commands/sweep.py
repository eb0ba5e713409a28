"""`rlft sweep`: short trials of one method over a grid or range of config values, judged on the held-out
metric, pruned by Optuna; a table, a plot and the best config as a recipe (logic: rlft.sweep)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rlft.commands import options as o
from rlft.errors import UserError


def run_trial(cfg, console, on_check):
    """One trial's run (rlft.methods.run), its held-out checks reported through `on_check`."""
    from rlft import methods

    return methods.run(cfg, overwrite=True, console=console, on_check=on_check)


def _kind(method: str) -> str:
    """The rows `method` trains on (its module's KIND)."""
    import importlib

    return importlib.import_module(f"rlft.methods.{method}").KIND


def sweep(
    method: Annotated[str, typer.Argument(help="The method to sweep: sft, dpo, kto, reward, grpo, rloo, distill, "
                                                "ppo.")],
    grid: Annotated[Optional[list[str]], typer.Option("--grid", help="KEY=V1,V2,...: values to try, e.g. "
                                                      "train.learning_rate=1e-5,3e-5,1e-4. Repeatable.")] = None,
    range_: Annotated[Optional[list[str]], typer.Option("--range", help="KEY=LOW:HIGH[:log]: a range Optuna's TPE "
                                                        "sampler draws from. Repeatable.")] = None,
    trials: Annotated[Optional[int], typer.Option(help="Trials (default: every grid combination; 8 with a "
                                                  "--range).", min=1)] = None,
    trial_steps: Annotated[int, typer.Option(help="Optimizer steps per trial (train.max_steps).", min=1)] = 50,
    data: Annotated[Optional[list[str]], typer.Option("--data", "-d", help="Training file(s) (data.train).")] = None,
    recipe: o.Recipe = None, model: o.Model = None, output_dir: o.OutputDir = None, seed: o.Seed = None,
    set_: o.Sets = None, overwrite: o.RunOverwrite = False,
) -> None:
    """Short trials over a grid or range, judged on the held-out metric, bad ones pruned; the best as a recipe."""
    from rlft import sweep as sw
    from rlft.config import resolve
    from rlft.methods import MODULES

    if method not in MODULES:
        raise UserError(f"rlft sweep {method}: not a method it sweeps", f"use one of {', '.join(MODULES)}")
    space = sw.parse_space(list(grid or []), list(range_ or []))
    out = Path(output_dir or f"runs/sweep-{method}").expanduser()
    flags = {"model.name_or_path": (model, "--model"), "data.train": (list(data) if data else None, "--data"),
             "train.seed": (seed, "--seed")}
    sets = list(set_ or [])
    base = resolve(method, recipe, flags, sets)  # the base config: every problem at once, before any trial
    sw.check_sweep_output(out, base, overwrite)  # the output rule, before anything is created
    if method == "ppo" and not (base.data.get("eval") or base.data.get("eval_fraction") or base.watch.get("holdout")):
        # rlft's PPO has no automatic slice of its prompts: without held-out rows a trial has nothing to judge by
        raise UserError("rlft sweep ppo needs held-out rows to judge its trials by",
                        "pass --set data.eval=FILE (prompts with answers, scored by ppo.verifiers or "
                        "watch.holdout_verifier), --set data.eval_fraction=0.05 or --set watch.holdout=FILE")
    sw.check_space(method, recipe, flags, sets, space)
    from rlft.data import load_split

    train_rows, eval_rows = load_split(base.data, _kind(method), seed=base.train.seed)  # a typo in -d: refused
    sw.check_judged(base, train_rows, eval_rows)  # every trial needs held-out rows to be judged by
    result = sw.sweep(method, recipe, flags, sets, space, out, trials=trials, trial_steps=trial_steps,
                      seed=seed or 0, console=o.err_console, run_trial=run_trial)
    from rich.table import Table

    t = Table("trial", "params", "status", "steps", "held-out (best trained check)", title=f"rlft sweep {method}")
    for row in sw.table(result["trials"]):
        t.add_row(*row)
    o.out_console.print(t)
    best = result["best"]
    o.out_console.print(f"best: trial {best['trial']} ({best['value']:.3f}); recipe {result['recipe']}\n"
                        f"run it: rlft {method} --recipe {result['recipe']} -o runs/{method}-best", markup=False,
                        highlight=False, soft_wrap=True)
