"""`RunCallback`: the transformers TrainerCallback that watches every TRL-backed run.

It feeds the trainer's logs to rlft.watch.monitor.Watcher (metrics.jsonl, alarms, samples), drives the progress
line, runs the held-out check (rlft.watch.setup, rlft.watch.heldout) at the start, every holdout_every steps
(default: a tenth of the run) and at the last step, saves the start and the best check's model so far
(rlft.methods.keep), asks the trainer to save a checkpoint and stop when an alarm fires under
`watch.on_alarm: stop`, ends training within train.max_minutes (rlft.run.time_limit: a closing held-out check at
the step it stops), and turns a SIGINT/SIGTERM caught by `rlft.run.folder.Interrupt` into "save a checkpoint,
then stop". Only method modules import this one, and they are imported inside the commands, so transformers is
not loaded before a run starts.
"""

from __future__ import annotations

import inspect
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from transformers import TrainerCallback

from rlft.alarms import Alarm
from rlft.methods.keep import KeptModels
from rlft.run.folder import Interrupt, any_process
from rlft.run.time_limit import TimeLimit
from rlft.watch.monitor import ProgressLine, RolloutRecorder, Watcher, alarm_state, clean_logs, progress_bar
from rlft.watch.setup import WatchSetup


class RunCallback(TrainerCallback):
    """One run's callback; `watch` comes from rlft.watch.setup.prepare_watch (default: alarms that warn, no
    held-out)."""

    def __init__(self, out: Path, interrupt: Interrupt, console: Console, label: str,
                 watch: WatchSetup | None = None, max_minutes: float | None = None) -> None:
        self.interrupt = interrupt
        self.console = console
        self.label = label
        self.setup = watch or WatchSetup()
        self.progress: Progress | None = None
        self.task = None
        self.watcher = Watcher(out, console, self.setup)
        self.last: dict[str, Any] = {}
        self.line = ProgressLine()
        self.max_steps = 0
        self.out = Path(out)
        self.trainer = None
        self.limit = TimeLimit(max_minutes)
        self.timed_out: dict | None = None  # summary.json's time_limit, when train.max_minutes ended the run
        # out/start and out/best as the checks arrive (watch.keep_best); the trainer saves them once attached
        self.kept = KeptModels(out, self.watcher, lambda path: self.trainer.save_model(path), self.setup.keep_best,
                               main=self.watcher.main)

    @property
    def stopped_by(self) -> Alarm | None:
        return self.watcher.stopped_by

    @property
    def alarms(self) -> list[dict]:
        return self.watcher.fired

    def attach(self, trainer) -> None:
        """Wrap a GRPO-style trainer's plain reward functions to capture rollouts and their rewards."""
        self.trainer = trainer
        funcs = getattr(trainer, "reward_funcs", None)
        if not funcs:
            return
        weights = getattr(trainer, "reward_weights", None)
        recorder = RolloutRecorder()
        for i, fn in enumerate(funcs):
            if callable(fn) and not _is_module(fn) and not _is_async(fn):
                w = float(weights[i]) if weights is not None and len(weights) > i else 1.0
                funcs[i] = recorder.wrap(fn, i, w)
        if recorder.weights:
            self.watcher.recorder = recorder

    # ---- hooks
    def on_train_begin(self, args, state, control, **kwargs):
        self.max_steps = state.max_steps
        self.progress = progress_bar(self.console)
        self.progress.start()
        self.task = self.progress.add_task(self.label, total=state.max_steps, completed=state.global_step,
                                           stats=alarm_state(self.watcher.alarm_names))
        self.limit.begin()
        if self.setup.holdout is not None:
            self._heldout(state, control, kwargs)

    def on_step_end(self, args, state, control, **kwargs):
        from rlft.run.step_plan import after_step, check_due

        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)
        self.limit.step_done()
        h = self.setup.holdout
        step, total = state.global_step, state.max_steps
        due = check_due(step, total, h.every_for(total) if h is not None else None)
        if due:
            self._heldout(state, control, kwargs)
        out_of_time = (self.limit.on and step < total
                       and any_process(getattr(self.trainer, "accelerator", None),
                                       self.limit.out_of_time(step, h is not None)))

        def plan(checked: bool):
            return after_step(step, total, checked=checked, has_checks=h is not None, out_of_time=out_of_time,
                              interrupted=self.interrupt.signum is not None,
                              alarm_stop=self.watcher.stopped_by is not None, prune=self.watcher.prune,
                              saves_checkpoints=args.save_strategy == "steps")  # TRL keeps its own save cadence

        decided = plan(due)
        if decided.closing_check:
            self._heldout(state, control, kwargs)
            decided = plan(True)  # the closing check may have stopped the run
        if decided.ending == "time_limit":
            self.limit.stopped_at = step
            self.timed_out = self.limit.record(total)
            self.console.print(self.limit.line(total), highlight=False)
        control.should_log = control.should_log or decided.log  # the last step's metrics go to metrics.jsonl
        control.should_save = control.should_save or decided.save
        control.should_training_stop = control.should_training_stop or decided.stop

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        record = {"step": state.global_step, "epoch": round(state.epoch or 0.0, 4), **clean_logs(logs)}
        self.watcher.log(record)
        self.last.update(record)
        self._stop_if_asked(control)
        self._refresh(record)

    def on_save(self, args, state, control, **kwargs):
        self._samples(state)

    def on_evaluate(self, args, state, control, **kwargs):
        self._samples(state)

    def on_train_end(self, args, state, control, **kwargs):
        if self.watcher.last_samples_step != state.global_step:
            self._samples(state)
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)
            self.progress.stop()
        self.watcher.flush()

    # ---- helpers
    def _heldout(self, state, control, kwargs) -> None:
        model, tok = kwargs.get("model"), kwargs.get("processing_class") or kwargs.get("tokenizer")
        if model is None or tok is None:
            return
        if any(r.get("step") == state.global_step and "heldout/score" in r for r in self.watcher.history):
            return
        began = time.monotonic()
        record = self.watcher.heldout(model, tok, state.global_step, state.epoch or 0.0)
        if self.trainer is not None:
            self.kept.after_check()
        self.limit.checked(time.monotonic() - began)  # the check and the save it makes
        self._stop_if_asked(control)
        self._refresh(record)

    def _samples(self, state) -> None:
        if self.watcher.last_samples_step == state.global_step:
            return
        self.watcher.samples(state.global_step)

    def _stop_if_asked(self, control) -> None:
        if self.watcher.stopped_by is not None:
            control.should_save = True
            control.should_training_stop = True

    def _refresh(self, record: dict) -> None:
        stats = self.line.stats(record, self.watcher.alarm_names)
        if self.progress is not None:
            self.progress.update(self.task, stats=stats)

    def close(self) -> None:
        if self.progress is not None and self.progress.live.is_started:
            self.progress.stop()
        self.watcher.close()


def _is_async(fn: Any) -> bool:
    """TRL awaits async reward functions; a sync wrapper would hand it a coroutine, so those stay unwrapped."""
    call = type(fn).__dict__.get("__call__")  # a callable object: is its __call__ a coroutine function?
    return inspect.iscoroutinefunction(fn) or (call is not None and inspect.iscoroutinefunction(call))


def _is_module(obj: Any) -> bool:
    from torch import nn

    return isinstance(obj, nn.Module)
