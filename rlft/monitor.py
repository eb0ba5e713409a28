"""Training callbacks shared by every method: metrics log, live progress, clean stop on signals.

`RunCallback` is a transformers `TrainerCallback`; rlft's own PPO loop calls the same hooks. It writes
metrics.jsonl at every logging step, drives a rich progress bar (step / total, loss or reward, ETA), and
turns a SIGINT/SIGTERM caught by `rlft.run.Interrupt` into "save a checkpoint, then stop".
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from rlft.run import Interrupt

# The keys shown on the progress line, in order, when the trainer logs them.
SHOWN = ("loss", "reward", "rewards/accuracies", "rewards/margins", "kl", "entropy", "eval_loss")


def progress_bar(console: Console) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TextColumn("eta"),
                    TimeRemainingColumn(), console=console, transient=False)


def clean_logs(logs: dict[str, Any]) -> dict[str, Any]:
    """Floats rounded for the log; NaN/inf kept as strings so the JSON stays valid."""
    out = {}
    for k, v in logs.items():
        if isinstance(v, float):
            out[k] = v if math.isfinite(v) else str(v)
        else:
            out[k] = v
    return out


def _callback_base():
    from transformers import TrainerCallback

    return TrainerCallback


def make_run_callback(out: Path, interrupt: Interrupt, console: Console, label: str):
    """Build the callback (the class is created here so transformers is imported only when training)."""

    class RunCallback(_callback_base()):
        def __init__(self) -> None:
            self.progress: Progress | None = None
            self.task = None
            self.metrics = open(out / "metrics.jsonl", "a", buffering=1)
            self.last: dict[str, Any] = {}

        def on_train_begin(self, args, state, control, **kwargs):
            self.progress = progress_bar(console)
            self.progress.start()
            self.task = self.progress.add_task(label, total=state.max_steps, completed=state.global_step,
                                               stats="")

        def on_step_end(self, args, state, control, **kwargs):
            if self.progress is not None:
                self.progress.update(self.task, completed=state.global_step)
            if interrupt.signum is not None:
                control.should_save = True
                control.should_training_stop = True

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs:
                return
            record = {"step": state.global_step, "epoch": round(state.epoch or 0.0, 4), **clean_logs(logs)}
            self.metrics.write(json.dumps(record) + "\n")
            self.last.update(record)
            stats = "  ".join(f"{k.split('/')[-1]} {v:.4g}" for k, v in record.items()
                              if k in SHOWN and isinstance(v, (int, float)))
            if self.progress is not None and stats:
                self.progress.update(self.task, stats=stats)

        def on_train_end(self, args, state, control, **kwargs):
            if self.progress is not None:
                self.progress.update(self.task, completed=state.global_step)
                self.progress.stop()
            self.metrics.flush()

        def close(self) -> None:
            if self.progress is not None and self.progress.live.is_started:
                self.progress.stop()
            self.metrics.close()

    return RunCallback()
