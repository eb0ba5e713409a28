"""`train.max_minutes`: a wall-clock limit on training that ends a run the way max_steps does.

The clock starts when training starts (after the model loads and the pre-flight runs) and covers the steps
and the held-out checks. After each step the run stops if one more step, then a last held-out check, would
pass the limit: the estimate is the slowest of the last three steps (steps vary: rows with nothing to learn
skip their backward) and the slowest check so far. So a run ends inside its limit, checked and saved like
a run that reached max_steps, rather than being cut off mid-step. The model it keeps follows watch.keep_best.
Used by rlft.methods.callback (every TRL-backed method) and the PPO loop.
"""

from __future__ import annotations

import time


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
            self.steps = (self.steps + [now - self.last_mark])[-3:]
        self.last_mark = now

    def out_of_time(self, step: int, checks: int = 1) -> bool:
        """True when a step, then `checks` held-out checks (2 where one is due at `step`, the step just
        finished), would end past the limit."""
        if self.seconds is None or self.start is None:
            return False
        need = (max(self.steps) if self.steps else 0.0) + checks * self.check
        if self.clock() - self.start + need <= self.seconds:
            return False
        self.stopped_at = step
        return True

    def line(self, max_steps: int) -> str:
        return (f"time limit: training stopped after step {self.stopped_at} of {max_steps}: another step and "
                f"a held-out check would pass train.max_minutes {self.seconds / 60:g}")
