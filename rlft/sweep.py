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
    ints: set[str] = field(default_factory=set)  # range keys of integer type (check_space): sampled as ints

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
        if sep and "." in key and not (math.isfinite(low) and math.isfinite(high)) and low == low and high == high:
            raise UserError(f"--range {r!r}: the bounds must be finite numbers", "e.g. --range train.max_steps=10:100")
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


# What the sweep itself sets in every trial (a grid or range over them would be silently overridden)
SET_BY_SWEEP = {"train.max_steps": "--trial-steps", "train.output_dir": "--output-dir (trial-N folders)",
                "watch.auto_holdout_min_steps": "the sweep (its trials are judged on held-out checks)"}


def key_kind(method: str, key: str) -> str | None:
    """"int" or "float" for a numeric config key (rlft's schema, else the TRL field's default), else None."""
    from rlft.config import _schema_field, _trl_fields

    spec = _schema_field(key)
    if spec is not None:
        return spec.kind if spec.kind in ("int", "float") else None
    section, _, name = key.partition(".")
    try:
        default = _trl_fields(method).get(section, {}).get(name)
    except Exception:  # noqa: BLE001  (an unknown section: resolve() names it)
        return None
    if isinstance(default, bool) or not isinstance(default, (int, float)):
        return None
    return "int" if isinstance(default, int) else "float"


def check_space(method: str, recipe, flags: dict, sets: list[str], space: Space) -> None:
    """Resolve the config with each grid value and each range's bounds, so a bad key or value is one error
    before any trial runs; a key the sweep sets itself is refused, and each range is typed by its key (an int
    key samples ints, with integer bounds)."""
    from rlft.config import resolve

    for key in [*space.grid, *space.ranges]:
        if key in SET_BY_SWEEP:
            raise UserError(f"--{'grid' if key in space.grid else 'range'} over {key}: the sweep sets it in every "
                            f"trial ({SET_BY_SWEEP[key]}), so the values would never be tried",
                            "drop it; --trial-steps is each trial's length" if key == "train.max_steps"
                            else "drop it")
    for key, (low, high, _) in list(space.ranges.items()):
        kind = key_kind(method, key)
        if kind is None:
            raise UserError(f"--range over {key}: not a numeric setting", f"use --grid {key}=V1,V2 for its values")
        if kind == "int":
            if low != int(low) or high != int(high):
                raise UserError(f"--range {key}={low:g}:{high:g}: {key} is an integer, so its bounds must be too",
                                f"e.g. --range {key}={math.ceil(low)}:{math.floor(high)}")
            space.ints.add(key)
    for key, values in space.grid.items():
        for v in values:
            resolve(method, recipe, flags, sets + _sets({key: v}))
    for key, (low, high, _) in space.ranges.items():
        cast = int if key in space.ints else float
        resolve(method, recipe, flags, sets + _sets({key: cast(low)}))
        resolve(method, recipe, flags, sets + _sets({key: cast(high)}))


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

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # its failed-trial warning prints a traceback: ours is one line
    final, out = out, staging_dir(out)  # the trials are staged: `final` changes only once a trial has run
    out.mkdir(parents=True)
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
            params[k] = (trial.suggest_int(k, int(low), int(high), log=log) if k in space.ints
                         else trial.suggest_float(k, low, high, log=log))
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

    try:
        study.optimize(objective, n_trials=n, catch=())
    except BaseException as exc:  # a trial that failed, Ctrl-C: keep what the trials that ran found
        done = [r for r in rows if r["status"] != "pruned" and r["value"] is not None]
        if not done:
            import shutil

            shutil.rmtree(out, ignore_errors=True)  # nothing ran to the end: `final` is left as it was
            if isinstance(exc, Exception) and not isinstance(exc, UserError):
                raise UserError(f"rlft sweep: trial {len(rows)} failed ({type(exc).__name__}: {exc}); no trial "
                                f"ran to its end, so '{final}' was left as it was",
                                "run that trial's settings alone (rlft <method> --set KEY=VALUE) to see why, "
                                "fix them and sweep again") from exc
            raise
        what = (f"interrupted during trial {len(rows)}" if isinstance(exc, KeyboardInterrupt)
                else f"trial {len(rows)} failed ({exc})")
        summary = finish(method, recipe, flags, sets, rows, done, out, final, console, partial=what)
        if isinstance(exc, (KeyboardInterrupt, UserError)) or not isinstance(exc, Exception):
            console.print(f"[yellow]partial[/]: {what}; {summary['recipe']} holds the best of the {len(done)} "
                          "trial(s) that ran", highlight=False, soft_wrap=True)
            raise
        raise UserError(f"rlft sweep: {what}; {summary['recipe']} holds the best of the {len(done)} trial(s) that "
                        "ran (marked partial)", f"see {final}/trial-{len(rows)}.log; fix it and run the sweep again "
                        "(--overwrite)") from exc
    done = [r for r in rows if r["status"] != "pruned" and r["value"] is not None]
    if not done:
        import shutil

        shutil.rmtree(out, ignore_errors=True)
        raise UserError("every trial was pruned or failed", "widen the grid or raise --trial-steps")
    return finish(method, recipe, flags, sets, rows, done, out, final, console)


SWEEP_MARKERS = ("trials.json", "best_recipe.yaml")


def check_sweep_output(out: Path, base, overwrite: bool) -> None:
    """The output rule of every command, for a sweep folder: never an input, inside one or holding one (the
    base config's model, data, verifier files...: a --model that is a trial of the sweep being overwritten
    included); a folder, not a file; empty, or a sweep's folder replaced only with --overwrite."""
    from rlft.run.outputs import check_output, input_paths

    if out.exists() and not out.is_dir():
        raise UserError(f"--output-dir '{out}' is a file, not a folder", "choose a folder path for --output-dir")
    check_output(out, input_paths(base), "--output-dir", "choose an --output-dir outside the sweep's inputs")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise UserError(f"{out} is not empty", "pass another --output-dir, or --overwrite to replace its trials")
        if not any((out / m).exists() for m in SWEEP_MARKERS) and not any(out.glob("trial-*")):
            raise UserError(f"--output-dir '{out}' is not an rlft sweep folder; refusing to replace it",
                            "choose another --output-dir")


def check_judged(base, train_rows: list, eval_rows: list) -> None:
    """The trials' held-out check will have rows (rlft.watch.auto_holdout's rule), else one line before any
    trial: a sweep whose trials cannot be judged ends at its first trial."""
    from rlft.watch.heldout import prompt_groups, slice_size

    watch = base.values.get("watch") or {}
    if watch.get("holdout") or eval_rows:
        return
    if not watch.get("auto_holdout", True):
        raise UserError("rlft sweep judges trials on their held-out check, and watch.auto_holdout=false turns it off",
                        "drop watch.auto_holdout=false, or pass --set data.eval=FILE")
    limit = int(watch.get("holdout_max_rows") or 100)
    n = slice_size(len(prompt_groups(train_rows)), float(watch.get("auto_holdout_fraction") or 0.05), limit)
    if n < 10:
        raise UserError(f"rlft sweep: {len(train_rows)} training rows are too few to hold out the 10 its trials "
                        f"are judged by (watch.holdout_max_rows={limit})",
                        "pass held-out rows (--set data.eval=FILE), more training rows, or raise "
                        "watch.holdout_max_rows")


def staging_dir(out: Path) -> Path:
    """A fresh sibling of `out` the trials are written into (moved to `out` when the sweep ends)."""
    import os

    return out.with_name(f".{out.name}.staging-{os.getpid()}")


def finish(method: str, recipe, flags: dict, sets: list[str], rows: list[dict], done: list[dict], staged: Path,
           final: Path, console, partial: str | None = None) -> dict[str, Any]:
    """Write best_recipe.yaml (marked partial when the sweep ended early), trials.json and trials.png into the
    staged folder, then make it `final` (replacing an earlier sweep there, which --overwrite allowed)."""
    import os
    import shutil

    from rlft.config import resolve

    best = max(done, key=lambda r: (r["beat_start"], r["value"]))
    if not best["beat_start"]:
        console.print("[yellow]note[/]: no trial beat its start clearly on the held-out rows (each kept its starting "
                      "model): best_recipe.yaml holds the best-scoring one, whose full run may well keep its start "
                      "too; more training rows, or more held-out rows (--holdout FILE), would tell", highlight=False)
    full = resolve(method, recipe, flags, sets + _sets(best["params"]))
    write_recipe(full, staged / "best_recipe.yaml", best, rows, partial=partial)
    (staged / "trials.json").write_text(json.dumps({"trials": rows, "best": best, "partial": partial}, indent=2,
                                                   default=str))
    plot(rows, staged / "trials.png")
    if os.path.lexists(final):
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        os.replace(staged, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, final)
    return {"best": best, "trials": rows, "recipe": str(final / "best_recipe.yaml"), "partial": partial}


def write_recipe(cfg, path: Path, best: dict, rows: list[dict], partial: str | None = None) -> Path:
    """The best trial's resolved config as a recipe (its output_dir left to -o), opening with how it was found
    (and, for a sweep that ended early, `partial`: why)."""
    values = cfg.to_dict()
    values.get("train", {}).pop("output_dir", None)
    head = [f"# Found by rlft sweep: trial {best['trial']} of {len(rows)}, held-out {best['value']} with "
            + ", ".join(f"{k}={v}" for k, v in best["params"].items()) + ".",
            f"# Command: rlft {cfg.method} --recipe {path} -o runs/{cfg.method}-best",
            "# Every trial (params, state, held-out value): trials.json beside this file."]
    if partial:
        head.insert(1, f"# PARTIAL: the sweep ended early ({partial}); this is the best of the trials that ran.")
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

