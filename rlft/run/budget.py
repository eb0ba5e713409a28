"""A budget that follows the data: how many passes over the training rows a run plans, and when to warn.

A recipe that fixes `train.max_steps` was tuned on its own data: 500 steps x 32 rows is 4 passes over
4,000 thumbs rows and 26 over 600. Past a few passes, the offline preference methods learn the training
pairs rather than the preference (held-out pass@1 fell 15 points that way on 600 rows), so before training,
when the planned passes exceed the method's sensible number, one line says so and names the step count that
would be 1-2 passes. Sensible numbers (`LIMITS`, overridable with watch.max_passes):
  dpo, kto, reward  3   (the DPO/KTO papers and TRL's examples train 1-3 epochs)
  sft               10  (rlft's choice: small demonstration sets are often trained for several epochs;
                         the held-out token loss, rlft.watch.heldout, is what says when it is too many)
GRPO, RLOO, PPO and distillation sample new completions every step, so a pass over their prompts is not a
pass over fixed targets: no warning; their held-out check watches them instead.
"""

from __future__ import annotations

import os

LIMITS = {"dpo": 3.0, "kto": 3.0, "reward": 3.0, "sft": 10.0}


def rows_per_step(cfg) -> int:
    world = int(os.environ.get("WORLD_SIZE") or 1)
    return cfg.train.per_device_train_batch_size * (cfg.train.gradient_accumulation_steps or 1) * world


def planned(cfg, n_rows: int) -> tuple[int, float]:
    """(optimizer steps, passes over the rows) the config plans for `n_rows` training rows."""
    per = rows_per_step(cfg)
    steps_per_pass = max(1, -(-n_rows // per))
    if cfg.train.max_steps and cfg.train.max_steps > 0:
        return cfg.train.max_steps, cfg.train.max_steps * per / max(n_rows, 1)
    epochs = float(cfg.train.num_train_epochs)
    return int(round(epochs * steps_per_pass)), epochs


def warning(cfg, n_rows: int) -> str | None:
    """The one-line warning when the planned passes exceed the method's limit, else None.

    >>> from types import SimpleNamespace as NS
    >>> cfg = NS(method="kto", values={"watch": {}}, train=NS(per_device_train_batch_size=32,
    ...          gradient_accumulation_steps=1, max_steps=500, num_train_epochs=1.0))
    >>> w = warning(cfg, 600)
    >>> "26.7 passes over 600 training rows, more than 3 for kto" in w, "1-2 passes is 19-38 steps" in w
    (True, True)
    """
    watch = cfg.values.get("watch") or {}
    limit = watch.get("max_passes") or LIMITS.get(cfg.method)
    if not limit or n_rows <= 0:
        return None
    steps, passes = planned(cfg, n_rows)
    if passes <= limit + 1e-9:
        return None
    per = rows_per_step(cfg)
    one, two = max(1, -(-n_rows // per)), max(1, -(-2 * n_rows // per))
    return (f"budget: {steps} steps x {per} rows = {passes:.1f} passes over {n_rows} training rows, more than "
            f"{limit:g} for {cfg.method} (it learns the rows, not the task): 1-2 passes is {one}-{two} steps "
            f"(--max-steps {two}, or --max-steps -1 --epochs 2)")
