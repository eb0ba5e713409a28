"""`train.max_minutes`: a wall-clock limit on the training loop that ends a run the way max_steps does.

The clock starts when training starts (after the model loads and the pre-flight runs; the opening held-out
check counts) and covers the steps and the held-out checks with the saves they make. After each step, and
after a check due at that step, the run stops if one more step and a closing check would pass the limit: the
estimate is the slowest of the last eight steps (steps vary: rows with nothing to learn skip their backward,
and a sampling step may serve several optimizer steps) and the slowest check so far (one step's time until a
check has been timed, as after --resume). A run stopped so gets a closing check where none ran at that step,
a checkpoint where its save_strategy saves, is recorded with `time_limit` in summary.json, and keeps the
model watch.keep_best picks. What follows the loop (the final save, eval, report) is outside the limit.
Used by rlft.methods.callback (every TRL-backed method) and the PPO loop; on several processes the stop is
decided together (any process out of time stops all).
"""

from __future__ import annotations

import time

WINDOW = 8  # recent steps the next step's time is estimated from


class TimeLimit:
    """Decides, after each step, whether the next step and a closing check still fit in `minutes`."""

    def __init__(self, minutes: float | None, clock=time.monotonic) -> None:
        self.seconds = None if minutes is None else 60.0 * float(minutes)
        self.clock = clock
        self.start: float | None = None
        self.last_mark: float | None = None
        self.steps: list[float] = []  # recent step durations, held-out checks excluded
        self.check = 0.0  # the slowest held-out check so far
        self.stopped_at: int | None = None

    @property
    def on(self) -> bool:
        return self.seconds is not None

    def begin(self) -> None:
        self.start = self.last_mark = self.clock()

    def checked(self, seconds: float) -> None:
        """A held-out check took `seconds`: kept out of the step times, kept as the closing check's estimate."""
        self.check = max(self.check, seconds)
        if self.last_mark is not None:
            self.last_mark += seconds

    def step_done(self) -> None:
        now = self.clock()
        if self.last_mark is not None:
            self.steps = (self.steps + [now - self.last_mark])[-WINDOW:]
        self.last_mark = now

    def out_of_time(self, step: int, checks: bool = True) -> bool:
        """True when another step, then a closing check (where the run has `checks`), would end past the limit;
        `step`: the one just finished."""
        if self.seconds is None or self.start is None:
            return False
        step_time = max(self.steps) if self.steps else 0.0
        need = step_time + ((self.check or step_time) if checks else 0.0)
        if self.clock() - self.start + need <= self.seconds:
            return False
        self.stopped_at = step
        return True

    def record(self, max_steps: int) -> dict:
        """What summary.json records of a run the limit ended."""
        return {"max_minutes": self.seconds / 60, "stopped_at": self.stopped_at, "max_steps": max_steps}

    def line(self, max_steps: int) -> str:
        return (f"time limit: training stopped after step {self.stopped_at} of {max_steps}: another step would "
                f"end past train.max_minutes {self.seconds / 60:g}")
