"""What a training loop does after a step: one pure decision that RunCallback (every TRL-backed method) and
PPO's loop both act on.

After each optimizer step a loop asks two questions, in this order:
  1. `check_due`: is the held-out check scheduled here (every `every` steps, and at the last step)? The caller
     runs it; the check may fire an alarm and takes time the time limit must see, so the rest waits for it.
  2. `after_step`: given what is known then (the time limit's verdict, a caught signal, an alarm that stops
     the run, a sweep pruner, the checkpoint cadence), a `StepPlan`: a closing check, a checkpoint, the
     samples, a log of the last metrics, and whether and why the run ends here.
Nothing here does I/O or reads a clock; the callers own the trainer, the watcher and the time limit.
"""

from __future__ import annotations

from dataclasses import dataclass


def check_due(step: int, total: int, every: int | None) -> bool:
    """The held-out check is scheduled after `step` (1-based) of `total`: every `every` steps and at the last;
    never without a check (`every` None)."""
    return every is not None and (step % every == 0 or step == total)


@dataclass(frozen=True)
class StepPlan:
    """What to do after a step, and whether the run ends there (`ending`: interrupted, stopped, time_limit,
    pruned, or None to go on)."""

    closing_check: bool  # the time limit ends the run and no check ran at this step
    save: bool  # a checkpoint now
    samples: bool  # write the samples file at this step (with a checkpoint of the cadence, or a stop)
    log: bool  # log the metrics of the steps since the last log (the time limit ends the run)
    ending: str | None

    @property
    def stop(self) -> bool:
        return self.ending is not None


def after_step(step: int, total: int, *, checked: bool, has_checks: bool, out_of_time: bool, interrupted: bool,
               alarm_stop: bool, prune: bool, save_steps: int = 0, saves_checkpoints: bool = False) -> StepPlan:
    """The decision after `step` of `total` and the check that ran at it (`checked`).

    `out_of_time`: the time limit's verdict (rlft.run.time_limit; only before the last step does it end a
    run). A signal or an alarm under `watch.on_alarm: stop` ends it with a checkpoint, and takes precedence;
    a time limit gets a closing check where the run has checks and none ran at this step, and a checkpoint
    where the run saves them (`saves_checkpoints`); a pruned sweep trial ends without one. `save_steps`: the
    loop's own checkpoint cadence (PPO's; TRL's trainer keeps its own, so the callback passes 0).
    """
    timed_out = out_of_time and step < total
    cadence = bool(save_steps) and step % save_steps == 0 and step < total
    if interrupted or alarm_stop:
        ending = "interrupted" if interrupted else "stopped"
    elif timed_out:
        ending = "time_limit"
    elif prune:
        ending = "pruned"
    else:
        ending = None
    hard = ending in ("interrupted", "stopped")
    timed = ending == "time_limit"
    return StepPlan(closing_check=timed and has_checks and not checked,
                    save=hard or cadence or (timed and saves_checkpoints),
                    samples=hard or cadence, log=timed, ending=ending)
