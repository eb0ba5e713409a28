"""A verifier for bench/gpu_check.py's GRPO speed step: reward 1 or 0 from a hash of the completion's text.

A randomly initialised model never earns the math verifier's reward, so every group would have zero advantage
and rlft would skip its backward pass (rlft/zero_advantage.py): the step would not be timed as training. A coin
per completion gives mixed groups, so each step trains as a real one would. It measures speed only: nothing
learns from it."""

from __future__ import annotations

import hashlib


def coin(completions, **_):
    texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
    return [float(hashlib.sha256(t.encode()).digest()[0] & 1) for t in texts]


coin.gold_fields = ()
