"""GRPO (RL with verifiable rewards) with TRL's GRPOTrainer and rlft's verifier registry.

Per prompt, G completions are sampled and scored by the verifier(s); each completion's advantage is its
reward minus the group mean (divided by the group std, TRL's `scale_rewards="group"`), and the policy is
pushed toward above-average completions. rlft keeps TRL's defaults (beta 0: no reference model, DAPO
token-level loss normalisation) and adds, before any training step:
  - gold-field validation: every row carries the fields its verifiers need, parseable (file:line errors);
  - a pre-flight (on by default): sample G completions for some prompts and refuse the run when too few
    groups are mixed, since all-equal groups have zero advantage and teach nothing;
  - optional prompt filtering to the prompts whose pre-flight group was mixed;
  - generation stops at the chat template's end-of-turn token too (rlft.chat.templates.stop_token_ids), not only at
    the tokenizer's eos; with pad == eos (SmolLM2, Qwen2.5) TRL's mask keeps the first eos and drops the rest.
After training, held-out pass@1 (greedy, scored by the same verifiers) goes into summary.json.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from rlft.config import RunConfig
from rlft.methods import group_rl
from rlft.methods.common import Prepared

KIND = "verifiable"
SAMPLES_WHILE_TRAINING = True  # the policy samples as it trains: rlft.speed.attach in methods.common.train
SECTION = "grpo"


def prepare(cfg: RunConfig, train_rows, eval_rows, console: Console) -> Prepared:
    """Before the run folder exists: validate gold, load the model, pre-flight, filter prompts."""
    return group_rl.prepare(cfg, SECTION, train_rows, eval_rows, console)


def build(cfg: RunConfig, out: Path, prepared: Prepared):
    from trl import GRPOConfig, GRPOTrainer

    return group_rl.build(cfg, SECTION, out, prepared, GRPOConfig, GRPOTrainer)


def after(cfg: RunConfig, trainer, prepared: Prepared, console: Console) -> dict[str, float]:
    """Greedy pass@1 on the held-out rows, scored by the run's verifiers (rlft.methods.group_rl.heldout)."""
    return group_rl.after(cfg, SECTION, trainer, prepared)
