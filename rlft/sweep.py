"""`rlft sweep`: short trials over a grid or a range of config values, judged on the held-out metric.

Each trial is an ordinary run (rlft.methods.common.train, or rlft's PPO) of the same recipe, data and model
with the trial's values set (`--set KEY=VALUE`) and `train.max_steps` set to the trial budget, in its own
folder OUT/trial-N (its console output in OUT/trial-N.log). Its held-out check (rlft.watch.heldout: the eval rows,
else the automatic slice of the training rows) is the judge: every check is reported to Optuna, whose pruner
(MedianPruner: stop a trial whose score at a step is below the median of the earlier trials at that step;
Optuna's, not a hand-written scheduler) may stop it there, and the trial's value is its best check after step 0
(the best model it trained: rlft keeps the best check's model, and step 0, the untrained start, is the same in
every trial, so counting it would tie every trial that never improved).
Grid values only: Optuna's GridSampler runs every combination once; with a --range: its TPE sampler (seeded).

Afterwards: a table of every trial (params, state, value, steps) printed and in OUT/trials.json, a plot of
them in OUT/trials.png, and the best trial's config, resolved without the trial budget (the recipe's own length
in steps or passes), written as OUT/best_recipe.yaml, which `rlft <method> --recipe OUT/best_recipe.yaml` runs.
The best trial is the highest-valued one among those whose folder kept a trained model (a trained check beat the
start clearly: rlft.watch.overfit.kept_check); when none did, the highest-valued one, with a note saying so.
rlft's PPO has no automatic slice of its prompts: `rlft sweep ppo` needs held-out rows (data.eval,
data.eval_fraction or watch.holdout; refused before any trial without them), and its trials check every trial
budget / 5 steps unless train.eval_steps / watch.holdout_every ask for more often.
Departures: a trial's value is its best trained held-out check, not its last (rlft keeps the best model); trials run
one after another in this process (no parallel workers, no storage other than memory).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from rlft.errors import UserError


@dataclass
class Space:
    """What a sweep varies: categorical grids ({key: [values]}) and ranges ({key: (low, high, log)})."""

    grid: dict[str, list] = field(default_factory=dict)
    ranges: dict[str, tuple[float, float, bool]] = field(default_factory=dict)

    def size(self) -> int | None:
        """Number of grid combinations (None with a range: continuous)."""
        return None if self.ranges else math.prod(len(v) for v in self.grid.values())


def _value(text: str) -> Any:
    """A grid value: int, float ("1e-4" too, which YAML 1.1 reads as a string), else YAML."""
    for kind in (int, float):
        try:
            return kind(text.strip())
        except ValueError:
            pass
    return yaml.safe_load(text)


def parse_space(grids: list[str], ranges: list[str]) -> Space:
    """--grid KEY=V1,V2 and --range KEY=LOW:HIGH[:log] into a Space; a malformed one is one UserError."""
    space = Space()
    for g in grids:
        key, sep, values = g.partition("=")
        vals = [_value(v) for v in values.split(",") if v.strip()]
        if not sep or not key.strip() or "." not in key or len(vals) < 1:
            raise UserError(f"--grid {g!r}: expected SECTION.KEY=V1,V2,...",
                            "e.g. --grid train.learning_rate=1e-5,1e-4")
        space.grid[key.strip()] = vals
    for r in ranges:
        key, sep, bounds = r.partition("=")
        parts = bounds.split(":")
        try:
            low, high = float(parts[0]), float(parts[1])
        except (ValueError, IndexError):
            low = high = float("nan")
        log = len(parts) > 2 and parts[2] == "log"
        if not sep or "." not in key or not low < high or len(parts) > 3 or (len(parts) == 3 and not log) \
                or (log and low <= 0):
            raise UserError(f"--range {r!r}: expected SECTION.KEY=LOW:HIGH or LOW:HIGH:log (0 < LOW < HIGH for log)",
                            "e.g. --range train.learning_rate=1e-5:1e-3:log")
        space.ranges[key.strip()] = (low, high, log)
    if not space.grid and not space.ranges:
        raise UserError("rlft sweep needs something to vary", "pass --grid KEY=V1,V2 or --range KEY=LOW:HIGH")
    both = set(space.grid) & set(space.ranges)
    if both:
        raise UserError(f"{sorted(both)[0]} is both a --grid and a --range", "keep one of them")
    return space


def _sets(params: dict[str, Any]) -> list[str]:
    return [f"{k}={json.dumps(v)}" for k, v in params.items()]


def check_space(method: str, recipe, flags: dict, sets: list[str], space: Space) -> None:
    """Resolve the config with each grid value and each range's bounds, so a bad key or value is one error
    before any trial runs."""
    from rlft.config import resolve

    for key, values in space.grid.items():
        for v in values:
            resolve(method, recipe, flags, sets + _sets({key: v}))
    for key, (low, high, _) in space.ranges.items():
        resolve(method, recipe, flags, sets + _sets({key: low}))
        resolve(method, recipe, flags, sets + _sets({key: high}))


def sweep(method: str, recipe, flags: dict, sets: list[str], space: Space, out: Path, *, trials: int | None,
          trial_steps: int, seed: int, console, run_trial: Callable) -> dict[str, Any]:
    """Run the study; write trials.json, trials.png and best_recipe.yaml under `out`; return the summary.
    `run_trial(cfg, console, on_check)` runs one trial (the command's: only commands import methods)."""
    try:
        import optuna
    except ImportError as exc:
        raise UserError("rlft sweep needs optuna, which is not installed",
                        "pip install 'rlft[sweep]' (or `make install`)") from exc
    from rich.console import Console

    from rlft.config import resolve

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out.mkdir(parents=True, exist_ok=True)
    if space.ranges:
        sampler = optuna.samplers.TPESampler(seed=seed)
        n = trials or 8
    else:
        sampler = optuna.samplers.GridSampler(space.grid, seed=seed)
        n = min(trials or space.size(), space.size())
    study = optuna.create_study(direction="maximize", sampler=sampler,
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=2,
                                                                   n_warmup_steps=max(1, trial_steps // 3)))
    rows: list[dict[str, Any]] = []
    checks: list[str] = []
    if method == "ppo":  # rlft's PPO checks every train.eval_steps on data.eval (unset: before and after only),
        # every watch.holdout_every on watch.holdout: at least 5 checks a trial, for the pruner and the value
        base, often = resolve(method, recipe, flags, sets), max(1, trial_steps // 5)
        for key, every in (("train.eval_steps", base.train.get("eval_steps")),
                           ("watch.holdout_every", base.watch.get("holdout_every"))):
            if not every or every > often:
                checks.append(f"{key}={often}")

    def objective(trial) -> float:
        params = {k: trial.suggest_categorical(k, v) for k, v in space.grid.items()}
        for k, (low, high, log) in space.ranges.items():
            params[k] = trial.suggest_float(k, low, high, log=log)
        folder = out / f"trial-{trial.number}"
        trial_sets = [f"train.max_steps={trial_steps}", "watch.auto_holdout_min_steps=0",  # trials are judged on it
                      f"train.output_dir={json.dumps(str(folder))}", *checks]
        cfg = resolve(method, recipe, flags, sets + _sets(params) + trial_sets)
        pruned = []

        def on_check(step: int, score: float) -> bool:
            trial.report(score, step)
            if trial.should_prune():
                pruned.append(step)
                return True
            return False

        with open(out / f"trial-{trial.number}.log", "w") as log:
            result = run_trial(cfg, Console(file=log, width=120), on_check)
        summary = json.loads((folder / "summary.json").read_text())
        trained = [c for c in (summary.get("heldout") or {}).get("curve", []) if c["step"] > 0]
        best_trained = max(trained, key=lambda c: (c["score"], c["step"])) if trained else {}
        row = {"trial": trial.number, "params": params, "steps": summary.get("global_step"),
               "status": "pruned" if pruned else result.status, "value": best_trained.get("score"),
               "best_step": best_trained.get("step"), "alarms": summary.get("alarms") or [],
               # the model the trial's folder kept: step 0 when no trained check clearly beat the start
               "beat_start": bool((summary.get("kept") or {}).get("step"))}
        rows.append(row)
        console.print(f"trial {trial.number}: {params} -> {row['status']} at step {row['steps']}, held-out "
                      f"{row['value']}", highlight=False)
        if pruned:
            raise optuna.TrialPruned()
        if row["value"] is None:
            raise UserError(f"trial {trial.number} had no held-out check to judge it by",
                            "give the run held-out rows (--set data.eval=FILE) or leave watch.auto_holdout on")
        return float(row["value"])

    study.optimize(objective, n_trials=n, catch=())
    done = [r for r in rows if r["status"] != "pruned" and r["value"] is not None]
    if not done:
        raise UserError("every trial was pruned or failed", "widen the grid or raise --trial-steps")
    best = max(done, key=lambda r: (r["beat_start"], r["value"]))
    if not best["beat_start"]:
        console.print("[yellow]note[/]: no trial beat its start clearly on the held-out rows (each kept its starting "
                      "model): best_recipe.yaml holds the best-scoring one, whose full run may well keep its start "
                      "too; more training rows, or more held-out rows (--holdout FILE), would tell", highlight=False)
    full = resolve(method, recipe, flags, sets + _sets(best["params"]))
    recipe_path = write_recipe(full, out / "best_recipe.yaml", best, rows)
    (out / "trials.json").write_text(json.dumps({"trials": rows, "best": best}, indent=2, default=str))
    plot(rows, out / "trials.png")
    return {"best": best, "trials": rows, "recipe": str(recipe_path)}


def write_recipe(cfg, path: Path, best: dict, rows: list[dict]) -> Path:
    """The best trial's resolved config as a recipe (its output_dir left to -o), opening with how it was found."""
    values = cfg.to_dict()
    values.get("train", {}).pop("output_dir", None)
    head = [f"# Found by rlft sweep: trial {best['trial']} of {len(rows)}, held-out {best['value']} with "
            + ", ".join(f"{k}={v}" for k, v in best["params"].items()) + ".",
            f"# Command: rlft {cfg.method} --recipe {path} -o runs/{cfg.method}-best",
            "# Every trial (params, state, held-out value): trials.json beside this file."]
    if not best.get("beat_start", True):
        head.insert(1, "# No trial beat its start clearly on the held-out rows (each kept its starting model).")
    path.write_text("\n".join(head) + "\n" + yaml.safe_dump(values, sort_keys=False))
    return path


def table(rows: list[dict]) -> list[list[str]]:
    """The trials as text rows: trial, params, status, steps, value."""
    return [[str(r["trial"]), " ".join(f"{k.split('.')[-1]}={v:.3g}" if isinstance(v, float) else
                                       f"{k.split('.')[-1]}={v}" for k, v in r["params"].items()),
             r["status"], str(r["steps"]), "-" if r["value"] is None else f"{r['value']:.3f}"] for r in rows]


def plot(rows: list[dict], path: Path) -> None:
    """One bar per trial: its held-out value, pruned trials grey."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(4, len(rows) * 0.8), 3))
    ax = fig.subplots()
    labels = [" ".join(str(v if not isinstance(v, float) else f"{v:.2g}") for v in r["params"].values()) for r in rows]
    ax.bar(range(len(rows)), [r["value"] or 0 for r in rows],
           color=["grey" if r["status"] == "pruned" else "tab:blue" for r in rows])
    ax.set_xticks(range(len(rows)), labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("held-out (best trained check)")
    ax.set_title("rlft sweep: every trial (grey: pruned)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)

