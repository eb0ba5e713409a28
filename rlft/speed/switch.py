"""`train.speedups`: the one switch that turns the whole speed layer off for a process (A/B checks, debugging).

With it off, rlft.speed's entry points stand aside (no load options, no model hooks, TRL's own trainer class, no
sampling copy, no TRL patches) and rlft.speed.decode returns None, so its callers use `generate`: plain
transformers/TRL. The run sets it (rlft.methods.common.start_run, rlft.dspy.reinforce) before any model loads;
patches an earlier run of the same process applied stay applied.
"""

from __future__ import annotations

_ENABLED = [True]


def set_enabled(on: bool) -> None:
    _ENABLED[0] = bool(on)


def enabled() -> bool:
    return _ENABLED[0]
