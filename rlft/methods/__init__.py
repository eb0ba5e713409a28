"""One module per method, parallel in shape (rlft.methods.common): the TRL-backed ones expose `KIND` (the
rows they train on, named by signal as in rlft.data), `prepare`, `build` and `after`; rlft's own PPO and bootstrap
expose `KIND`, `prepare` and `run`. Shared parts: common (the run lifecycle), callback (the trainers' watch),
group_rl (GRPO and RLOO)."""

from __future__ import annotations

import importlib
from typing import Any

# The one method table: `rlft <method>` (rlft.commands.options.run_method) and `rlft sweep <method>`
# (rlft.commands.sweep.run_trial) both run a method through `run`; the order is the one `rlft sweep` lists.
MODULES = ("sft", "dpo", "kto", "reward", "grpo", "rloo", "distill", "ppo", "bootstrap")


def run(cfg, *, overwrite: bool = False, resume: bool = False, console: Any = None, on_check: Any = None):
    """Run the config's method: rlft's own loop for PPO (rlft.methods.ppo.run), rlft.methods.common.train with
    the method's module for the TRL-backed ones. Returns the run's RunResult."""
    module = importlib.import_module(f"rlft.methods.{MODULES[MODULES.index(cfg.method)]}")
    if cfg.method == "ppo":
        return module.run(cfg, overwrite=overwrite, resume=resume, console=console, on_check=on_check)
    if cfg.method == "bootstrap":  # rounds of sample -> keep -> SFTTrainer: rlft's own loop, no per-step checks
        return module.run(cfg, overwrite=overwrite, resume=resume, console=console)
    from rlft.methods.common import train

    return train(cfg, module, overwrite=overwrite, resume=resume, console=console, on_check=on_check)
