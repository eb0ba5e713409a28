"""The `watch` section read before the run folder exists: alarm thresholds, on_alarm, the held-out check.

`prepare_watch(cfg)` validates it (alarm names, the holdout file and its gold fields), so a bad holdout file
leaves nothing behind; rlft.monitor.Watcher then applies it while the run trains.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rlft.alarms import Thresholds


@dataclass
class Holdout:
    """The held-out check: rows with gold fields, the verifier's reward function, and when to run."""

    rows: list[dict]
    scorer: Callable
    verifier: str
    every: int
    max_new_tokens: int


@dataclass
class WatchSetup:
    thresholds: Thresholds = field(default_factory=Thresholds)
    on_alarm: str = "warn"
    holdout: Holdout | None = None
    samples: int = 3


def prepare_watch(cfg) -> WatchSetup:
    """Read and validate the `watch` section: thresholds, alarm names, the held-out file and its gold.
    Called before the run folder is touched, so a bad holdout file leaves nothing behind."""
    watch = dict(cfg.values.get("watch") or {}) if cfg is not None else {}
    setup = WatchSetup(Thresholds.from_watch(watch, getattr(cfg, "method", None)), watch.get("on_alarm") or "warn",
                       samples=int(watch.get("samples", 3) if watch.get("samples") is not None else 3))
    if watch.get("holdout"):
        from rlft.data import read_rows
        from rlft.verifiers.loading import load_verifiers, validate_gold

        spec = watch.get("holdout_verifier") or "math"
        rows = read_rows(watch["holdout"], max_rows=watch.get("holdout_max_rows") or 100)
        if (cfg.values.get("data") or {}).get("as_chat"):  # held-out prompts are wrapped like the training prompts
            from rlft.chat_templates import wrap_as_chat

            rows = wrap_as_chat(rows)
        validate_gold(rows, [spec])
        scorer, _ = load_verifiers([spec])
        setup.holdout = Holdout([r.data for r in rows], scorer, spec, int(watch.get("holdout_every") or 50),
                                int(watch.get("holdout_max_new_tokens") or 32))
    return setup
