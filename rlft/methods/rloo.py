"""RLOO (REINFORCE with a leave-one-out baseline) with TRL's RLOOTrainer and rlft's verifier registry.

Per prompt, k completions are sampled and scored by the verifier(s); each completion's advantage is its
reward minus the mean reward of the other k-1 (no value model, and, unlike GRPO, no division by the
group's std: TRL's `normalize_advantages` is off by default). A group whose k rewards are equal has zero
advantage everywhere, exactly as in GRPO, so rlft runs the same checks before any step (rlft.methods.group_rl):
gold-field validation (file:line errors), the pre-flight that refuses a run with too few mixed groups, and
optional prompt filtering; after training, held-out pass@1 with the same verifiers goes into summary.json.

Departure from TRL's defaults: `rloo.beta` defaults to 0 (TRL: 0.05), so no reference copy is loaded; this
matches rlft's GRPO and halves the model memory. Set `--set rloo.beta=0.05` for TRL's KL penalty in the reward.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from rlft.config import RunConfig
from rlft.methods import group_rl
from rlft.methods.common import Prepared

KIND = "verifiable"
SECTION = "rloo"


def prepare(cfg: RunConfig, train_rows, eval_rows, console: Console) -> Prepared:
    """Before the run folder exists: validate gold, load the model, pre-flight, filter prompts."""
    return group_rl.prepare(cfg, SECTION, train_rows, eval_rows, console)


def build(cfg: RunConfig, out: Path, prepared: Prepared):
    from trl import RLOOConfig, RLOOTrainer

    return group_rl.build(cfg, SECTION, out, prepared, RLOOConfig, RLOOTrainer)


def after(cfg: RunConfig, trainer, prepared: Prepared, console: Console) -> dict[str, float]:
    """Greedy pass@1 on the held-out rows, scored by the run's verifiers (rlft.methods.group_rl.heldout)."""
    return group_rl.after(cfg, SECTION, trainer, prepared)
