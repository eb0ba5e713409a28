"""What a run's watch does while it trains, free of transformers: metrics log, alarms, samples, held-out scores.

`Watcher` is driven by rlft.methods.callback.RunCallback (the TRL trainers) and by rlft's own PPO loop:
  - it writes metrics.jsonl at every logging step; `ProgressLine` turns the records into the stats of the rich
    progress line (loss or reward, KL, entropy, held-out score, and the alarm state);
  - it runs the alarm rules of `rlft.alarms` on the logged history at every log; a rule that fires is
    printed (message, evidence, fix) and appended to alarms.jsonl, once per rule per run; with
    `watch.on_alarm: stop` it also records the alarm that asked for the stop (`stopped_by`);
  - with a held-out check (rlft.watch.setup: watch.holdout, the eval rows or the automatic slice), the caller asks it
    to measure the method's metric (rlft.watch.heldout), logged as `heldout/score` with its noise (verifiable rows
    also as `heldout/pass_at_1`, which the reward-hacking alarm compares with the training reward); the
    `overfitting` alarm (rlft.watch.overfit) runs on those checks;
  - it writes a few samples to samples.jsonl and prints them: for GRPO/RLOO/PPO, the real rollouts of the
    latest step with their rewards, captured by `RolloutRecorder` wrapping the reward functions; otherwise,
    the latest held-out check's completions and scores. Per prompt, the best and the worst completion, for up
    to watch.samples prompts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from rlft.alarms import Alarm, check, repetition
from rlft.run.folder import is_main_process, read_jsonl
from rlft.watch.setup import WatchSetup

# The keys shown on the progress line, in order, when the trainer logs them.
SHOWN = ("loss", "reward", "rewards/accuracies", "rewards/margins", "kl", "entropy", "eval_loss",
         "heldout/score")
LABELS = {"rewards/accuracies": "acc", "rewards/margins": "margin", "heldout/score": "heldout"}
ALARMS_FILE = "alarms.jsonl"
STOPPED_EXIT_CODE = 4  # a run ended by an alarm under watch.on_alarm=stop (2: user error, 3: refused)
SAMPLES_FILE = "samples.jsonl"
HELDOUT_ROWS_FILE = "heldout_rows.jsonl"


def progress_bar(console: Console) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TextColumn("eta"),
                    TimeRemainingColumn(), console=console, transient=False)


class ProgressLine:
    """The stats of the progress line: the latest value of each SHOWN key the run has logged, then the alarms."""

    def __init__(self) -> None:
        self.shown: dict[str, float] = {}

    def stats(self, record: dict[str, Any], alarm_names: list[str]) -> str:
        self.shown.update({k: v for k, v in record.items() if k in SHOWN and isinstance(v, (int, float))})
        stats = "  ".join(f"{LABELS.get(k, k)} {self.shown[k]:.4g}" for k in SHOWN if k in self.shown)
        return f"{stats}  {alarm_state(alarm_names)}"


def clean_logs(logs: dict[str, Any]) -> dict[str, Any]:
    """Floats rounded for the log; NaN/inf kept as strings so the JSON stays valid."""
    out = {}
    for k, v in logs.items():
        if isinstance(v, float):
            out[k] = v if math.isfinite(v) else str(v)
        else:
            out[k] = v
    return out


# --------------------------------------------------------------------------- rollouts (GRPO)


def _text(x: Any) -> str:
    """A prompt or completion as text: strings as is, a message list as its last message's content."""
    if isinstance(x, list) and x and isinstance(x[-1], dict):
        return str(x[-1].get("content", ""))
    return "" if x is None else str(x)


class RolloutRecorder:
    """Wraps GRPO reward functions to keep the latest batch of (prompt, completion, reward) and the
    repetition of the completions since the last log. The wrapped function returns exactly what the
    original returns; only plain callables are wrapped (reward models as nn.Module are left alone)."""

    def __init__(self) -> None:
        self.calls: dict[int, tuple[list[str], list[str], list[float | None]]] = {}
        self.weights: dict[int, float] = {}
        self.pending_repetition: list[float] = []

    def wrap(self, fn: Callable, index: int = 0, weight: float = 1.0) -> Callable:
        recorder = self

        def wrapped(*args, prompts=None, completions=None, **kwargs):
            rewards = fn(*args, prompts=prompts, completions=completions, **kwargs)
            recorder.record(index, prompts or [], completions or [], list(rewards))
            return rewards

        wrapped.__name__ = getattr(fn, "__name__", type(fn).__name__)
        wrapped.__qualname__ = wrapped.__name__
        wrapped.__wrapped__ = fn
        self.weights[index] = weight
        return wrapped

    def record(self, index: int, prompts: list, completions: list, rewards: list) -> None:
        texts = [_text(c) for c in completions]
        self.calls[index] = ([_text(p) for p in prompts], texts, rewards)
        if index == min(self.weights):
            self.pending_repetition += [repetition(t) for t in texts]

    def take_repetition(self) -> float | None:
        if not self.pending_repetition:
            return None
        out = sum(self.pending_repetition) / len(self.pending_repetition)
        self.pending_repetition = []
        return out

    def latest(self) -> list[dict]:
        """The latest batch as rows {prompt, completion, reward}, rewards summed with the trainer's weights
        (a reward function that returned None for a row does not count for it, as in TRL)."""
        if not self.calls:
            return []
        first = self.calls[min(self.calls)]
        rows = []
        for i, (prompt, completion) in enumerate(zip(first[0], first[1])):
            total, seen = 0.0, False
            for j, (_, comps, rewards) in self.calls.items():
                r = rewards[i] if i < len(rewards) and len(comps) == len(first[1]) else None
                if r is not None and not (isinstance(r, float) and math.isnan(r)):
                    total += self.weights.get(j, 1.0) * float(r)
                    seen = True
            rows.append({"prompt": prompt, "completion": completion, "reward": total if seen else None})
        return rows


def best_and_worst(rows: list[dict], prompts: int) -> list[dict]:
    """Group rows by prompt; per prompt the best and the worst completion. Up to `prompts` groups: those
    with the highest best reward first (the step's top-reward completion is where a gamed reward shows),
    mixed groups before uniform ones on ties, and the group holding the step's worst completion last."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("reward") is not None:  # a chat prompt (a message list) is grouped by its last message
            groups.setdefault(_text(r["prompt"]), []).append(r)
    out = []
    for group in groups.values():
        ordered = sorted(group, key=lambda r: r["reward"], reverse=True)
        best, worst = ordered[0], ordered[-1]
        out.append({"prompt": group[0]["prompt"], "n": len(group),
                    "best": {"completion": best["completion"], "reward": round(best["reward"], 4)},
                    "worst": {"completion": worst["completion"], "reward": round(worst["reward"], 4)}})
    out.sort(key=lambda g: (g["best"]["reward"], g["best"]["reward"] - g["worst"]["reward"]), reverse=True)
    if len(out) <= prompts or prompts < 2:
        return out[:prompts]
    head = out[:prompts - 1]
    worst = min(out[prompts - 1:], key=lambda g: g["worst"]["reward"])
    return head + [worst]


def best_and_worst_rows(rows: list[dict], k: int) -> list[dict]:
    """One completion per prompt (the held-out check): the ceil(k/2) best-scored rows and the floor(k/2)
    worst, in the same item shape as `best_and_worst` (n = 1, best == worst)."""
    scored = sorted((r for r in rows if r.get("reward") is not None), key=lambda r: r["reward"], reverse=True)
    top = (k + 1) // 2
    rest = scored[top:]
    picked = scored[:top] + rest[max(0, len(rest) - (k - top)):]
    return [{"prompt": r["prompt"], "n": 1, "best": {"completion": r["completion"], "reward": round(r["reward"], 4)},
             "worst": {"completion": r["completion"], "reward": round(r["reward"], 4)}} for r in picked]


def _short(text: Any, n: int = 60) -> str:
    """One line of at most `n` characters; a chat prompt (a message list) shows its last message."""
    text = _text(text).replace("\n", "\\n")
    return text if len(text) <= n else text[:n - 1] + "…"


# --------------------------------------------------------------------------- the watcher


class Watcher:
    """One run's watch, free of transformers: the logged history, alarms, samples and held-out scores.

    `log(record)` appends a metrics record (metrics.jsonl + history) and returns the alarms it newly
    fired; `stopped_by` is the first alarm that asked for a stop (with on_alarm=stop)."""

    def __init__(self, out: Path, console: Console, setup: WatchSetup | None = None) -> None:
        self.out = Path(out)
        self.console = console
        self.setup = setup or WatchSetup()
        # On --resume the folder already has the earlier part of the run: the rules see all of it, and
        # alarms already raised are not raised again.
        self.history: list[dict] = read_jsonl(self.out / "metrics.jsonl")
        self.fired: list[dict] = read_jsonl(self.out / ALARMS_FILE)
        # Only the main process of a multi-process run writes (every process runs the rules alike).
        self.main = is_main_process()
        self.metrics = open(self.out / "metrics.jsonl", "a", buffering=1) if self.main else None  # noqa: SIM115
        self.stopped_by: Alarm | None = None
        self.recorder: RolloutRecorder | None = None
        self.last_heldout: list[dict] = []
        self.prune = False  # setup.on_check asked to end training (rlft sweep)
        self.checks: list = []  # rlft.watch.overfit.Check per held-out check of this process's run
        self.last_samples_step: int | None = None

    def flush(self) -> None:
        if self.metrics is not None:
            self.metrics.flush()

    @property
    def alarm_names(self) -> list[str]:
        return [a["name"] for a in self.fired]

    def log(self, record: dict[str, Any]) -> list[Alarm]:
        if self.recorder is not None and "reward" in record:
            rep = self.recorder.take_repetition()
            if rep is not None:
                record["completions/repetition"] = round(rep, 4)
        if self.main:
            self.metrics.write(json.dumps(record) + "\n")
        self.history.append(record)
        new = check(self.history, self.setup.thresholds, skip=set(self.alarm_names))
        th = self.setup.thresholds
        if "tool_collapse" not in self.alarm_names and "tool_collapse" not in th.ignore:  # rlft.watch.tool_alarms
            from rlft.watch.tool_alarms import tool_collapse

            new += [a for a in [tool_collapse(self.history, th)] if a is not None]
        for alarm in new:
            self.raise_alarm(alarm)
        return new

    def raise_alarm(self, alarm: Alarm, at_end: bool = False) -> None:
        """Record and print `alarm`; with on_alarm=stop it stops the run, unless it comes `at_end` (training
        is over: it only warns)."""
        if alarm.name in ("reward_hacking", "length_hacking") and self.recorder and self.recorder.calls:
            top = best_and_worst(self.recorder.latest(), 1)
            if top:
                alarm.evidence["top_reward_sample"] = {"prompt": top[0]["prompt"], **top[0]["best"]}
        stop = self.setup.on_alarm == "stop" and self.stopped_by is None and not at_end
        entry = {**alarm.as_dict(), "action": "stop" if stop else "warn"}
        self.fired.append(entry)
        if stop:
            self.stopped_by = alarm
        if not self.main:
            return
        with open(self.out / ALARMS_FILE, "a") as f:
            f.write(json.dumps(entry, default=str) + "\n")
        self.console.print(f"[bold red]ALARM {alarm.name}[/] at step {alarm.step}: {escape(alarm.message)}",
                           highlight=False, soft_wrap=True)
        sample = alarm.evidence.get("top_reward_sample")
        if sample:
            self.console.print(f"  top-reward sample: {escape(_short(sample['prompt'], 40))!r} -> "
                               f"{escape(_short(sample['completion']))!r} (reward {sample['reward']:.3g})",
                               highlight=False, soft_wrap=True)
        self.console.print(f"  [bold]fix:[/] {escape(alarm.fix)}"
                           + ("  [red](stopping: checkpoint saved)[/]" if stop else ""),
                           highlight=False, soft_wrap=True)

    def heldout(self, model, tok, step: int, epoch: float = 0.0) -> dict[str, Any]:
        """The held-out check (rlft.watch.heldout: the method's metric, its noise) logged as heldout/* records; the
        overfitting rule (rlft.watch.overfit) runs on the checks so far and the training objective (the logged loss,
        or PPO's mean reward: rlft.watch.overfit.training_objective)."""
        from rlft.watch.heldout import measure
        from rlft.watch.overfit import Check, overfitting, training_objective

        h = self.setup.holdout
        m = measure(h.kind, model, tok, h.rows, scorer=h.scorer, max_new_tokens=h.max_new_tokens,
                    reward_model=h.reward_model, tools=h.tools)
        self.last_heldout = m.samples
        record = {"step": step, "epoch": round(epoch, 4), **m.record()}
        self.checks.append(Check(step, m.value, m.per_row, m.metric, m.stderr))
        self.log(record)
        if self.main:  # each row's outcome, so the paired noise of a fall can be recomputed from the folder
            with open(self.out / HELDOUT_ROWS_FILE, "a") as f:
                f.write(json.dumps({"step": step, "metric": m.metric, "per_row": [round(x, 4) for x in m.per_row]})
                        + "\n")
        if self.setup.on_check is not None and self.setup.on_check(step, m.value):
            self.prune = True
        if "overfitting" not in self.alarm_names and "overfitting" not in self.setup.thresholds.ignore:
            alarm = overfitting(self.checks, training_objective(self.history), self.setup.overfit_checks)
            if alarm is not None:
                self.raise_alarm(alarm)
        return record

    def end_checks(self, keep_start: bool = True) -> None:
        """At the end of training: the no_gain alarm (rlft.watch.overfit: no trained check clearly beat the start,
        raised as `overfitting` when the training objective improved), unless an overfitting alarm already fired or
        the alarm is ignored."""
        from rlft.watch.overfit import no_gain, training_objective

        if "overfitting" in self.alarm_names:
            return
        alarm = no_gain(self.checks, training_objective(self.history), keep_start=keep_start,
                        patience=self.setup.overfit_checks)
        if alarm is not None and alarm.name not in self.setup.thresholds.ignore:
            self.raise_alarm(alarm, at_end=True)

    def samples(self, step: int, show: bool = True) -> dict[str, Any] | None:
        """Best and worst completions of the latest rollouts (GRPO) or held-out check, to samples.jsonl."""
        if self.setup.samples <= 0:
            return None
        if self.recorder is not None and self.recorder.calls:
            groups, source = best_and_worst(self.recorder.latest(), self.setup.samples), "rollouts"
        elif self.last_heldout:
            groups = best_and_worst_rows(self.last_heldout, self.setup.samples)
            source = f"heldout ({self.setup.holdout.verifier or 'exact match'})"
        else:
            return None
        if not groups:
            return None
        entry = {"step": step, "source": source, "samples": groups}
        self.last_samples_step = step
        if not self.main:
            return entry
        with open(self.out / SAMPLES_FILE, "a") as f:
            f.write(json.dumps(entry) + "\n")
        if show:
            per = "best | worst per prompt" if source == "rollouts" else "best and worst scored"
            self.console.print(f"[bold]samples[/] at step {step} ({source}): {per}", highlight=False)
            for g in groups:
                if g["n"] == 1:
                    self.console.print(f"  {escape(_short(g['prompt'], 40))!r} -> "
                                       f"{escape(_short(g['best']['completion']))!r}  reward {g['best']['reward']:.3g}",
                                       highlight=False, soft_wrap=True)
                    continue
                self.console.print(f"  {escape(_short(g['prompt'], 40))!r}  best {g['best']['reward']:.3g} "
                                   f"{escape(_short(g['best']['completion']))!r}  |  worst "
                                   f"{g['worst']['reward']:.3g} {escape(_short(g['worst']['completion']))!r}",
                                   highlight=False, soft_wrap=True)
        return entry

    def close(self) -> None:
        if self.metrics is not None and not self.metrics.closed:
            self.metrics.close()


def alarm_state(names: list[str]) -> str:
    """The alarm part of the progress line."""
    if not names:
        return "[green]ok[/]"
    return "[bold red]ALARM " + ",".join(names) + "[/]"


