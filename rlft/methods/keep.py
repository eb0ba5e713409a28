"""Which model a run folder keeps: the candidates saved as held-out checks arrive, the choice at the end.

`KeptModels` is shared by the TRL methods (through rlft.methods.callback.RunCallback) and rlft's PPO loop, so
both keep the same model for the same checks. It is given the run's Watcher (whose `checks` are the held-out
checks so far, rlft.watch.overfit.Check) and a `save(path)` that writes the current model with its tokenizer:
  after_check()   after each check: the step-0 model to out/start, a later check's model to out/best when it
                  is the best so far (ties: the later one): the candidates rlft.watch.overfit.kept_check chooses from;
  finish(...)     at the end: the end-of-run no_gain alarm (when the run completed), then the kept check's model
                  into the run folder with the last one beside it in out/last (or the last one into the run
                  folder when it is kept, when watch.keep_best is off, or when the kept one was not saved; when
                  the last is kept within noise of a better check, that check's model stays in out/best, so
                  `rlft eval` can read both); returns summary.json's `heldout` (metric, curve) and `kept` (step,
                  score, why, and `best_beside` when out/best stays).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


class KeptModels:
    """The start/best candidates of one run and the final choice (see the module docstring); `enabled` is
    watch.keep_best; `main`: this process writes the run folder (the others only call `save`, which saves on
    the main one)."""

    def __init__(self, out: Path, watcher, save: Callable[[str], None], enabled: bool = True,
                 main: bool = True) -> None:
        self.out, self.watcher, self.save, self.enabled, self.main = Path(out), watcher, save, enabled, main
        self.best_step: int | None = None  # the step whose model is in out/best

    def after_check(self) -> None:
        """Save the latest check's model if it is a candidate: the start, or the best trained check so far."""
        from rlft.watch.overfit import best_check

        checks = self.watcher.checks
        if not self.enabled or not checks:
            return
        latest = checks[-1]
        if latest.step == 0:
            self.save(str(self.out / "start"))
        elif best_check(checks) is latest and latest.step != self.best_step:
            self.save(str(self.out / "best"))
            self.best_step = latest.step

    def finish(self, last_step: int, console, end: bool = False, keep_start: bool = True) -> dict[str, Any]:
        """Put the kept model in the run folder (see the module docstring). `end`: the run completed, so the
        no_gain alarm is checked first; `keep_start`: the start is a usable model (not a reward model's untrained
        score head). The final metrics a caller reports stay the last model's (in out/last when they differ)."""
        from rlft.watch.overfit import kept_check, summary

        checks = self.watcher.checks
        fell = "overfitting" in self.watcher.alarm_names  # raised during training (a sustained fall), not at the end
        if end:
            self.watcher.end_checks(keep_start)
        kept, why = kept_check(checks, alarm=fell, keep_start=keep_start)
        saved = self.out / ("start" if kept is not None and kept.step == 0 else "best")
        if (self.enabled and kept is not None and kept.step in (0, self.best_step) and kept.step != last_step
                and saved.is_dir()):
            self.save(str(self.out / "last"))
            if self.main:
                for f in saved.iterdir():
                    if f.is_file():
                        shutil.copy2(f, self.out / f.name)
                console.print(f"[bold]kept[/] the model of step {kept.step}: {why}", highlight=False)
            better = None
        else:
            self.save(str(self.out))
            better = beside(checks, self.best_step, kept, last_step, self.out, self.enabled)
            if kept is not None and kept.step != last_step:
                why = ("the last model (watch.keep_best=false)" if not self.enabled
                       else "the last model (the best check's model was not saved)")
                kept = checks[-1]
        if self.main:
            tidy(self.out, better, console)
        if not checks:
            return {}
        info = {"step": kept.step, "score": round(kept.score, 4), "why": why}
        if better is not None:
            info["best_beside"] = {"step": better.step, "score": round(better.score, 4), "folder": "best"}
        return {"heldout": summary(checks), "kept": info}


def beside(checks: list, best_step: int | None, kept, last_step: int, out: Path, enabled: bool):
    """The better check whose model stays in out/best beside a kept last model (`kept` is the last check, kept
    within noise of it), or None. Shared with rlft.methods.bootstrap's rounds."""
    if not (enabled and kept is not None and kept.step == last_step and best_step is not None
            and best_step != last_step and (out / "best").is_dir()):
        return None
    return next((c for c in checks if c.step == best_step and c.score > kept.score), None)


def tidy(out: Path, better, console) -> None:
    """Remove the candidates' folders at the end of a run: start/ always, best/ unless `better` stays in it."""
    if better is None:
        shutil.rmtree(out / "best", ignore_errors=True)
    else:
        console.print(f"the best check's model (step {better.step}, {better.score:.3f}; the last is within noise "
                      f"of it) is beside it in {out / 'best'}", highlight=False)
    shutil.rmtree(out / "start", ignore_errors=True)
