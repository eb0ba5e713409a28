"""RLOO (REINFORCE with a leave-one-out baseline) with TRL's RLOOTrainer and rlft's verifier registry.

Per prompt, k completions are sampled and scored by the verifier(s); each completion's advantage is its
reward minus the mean reward of the other k-1 (no value model, and, unlike GRPO, no division by the
group's std: TRL's `normalize_advantages` is off by default). A group whose k rewards are equal has zero
advantage everywhere, exactly as in GRPO, so rlft runs the same checks before any step (rlft.rollout_checks):
gold-field validation (file:line errors), the pre-flight that refuses a run with too few mixed groups, and
optional prompt filtering; after training, held-out pass@1 with the same verifiers goes into summary.json.

Departure from TRL's defaults: `rloo.beta` defaults to 0 (TRL: 0.05), so no reference copy is loaded; this
matches rlft's GRPO and halves the model memory. Set `--set rloo.beta=0.05` for TRL's KL penalty in the reward.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from rlft import rollout_checks
from rlft.config import RunConfig
from rlft.methods.common import RunResult, build_trl_config, train_with

KIND = "verifiable"
SECTION = "rloo"


def build(cfg: RunConfig, out: Path, train_rows, eval_rows, model=None, tok=None, reward_fn=None,
          preflight=None):
    from trl import RLOOConfig, RLOOTrainer

    from rlft.data import to_dataset
    from rlft.run import is_main_process, write_json

    if preflight is not None and is_main_process():
        write_json(out / "preflight.json", preflight.as_dict())
    args = build_trl_config(cfg, RLOOConfig, out, False)
    return RLOOTrainer(model=model, reward_funcs=[reward_fn], args=args, processing_class=tok,
                       train_dataset=to_dataset(train_rows))


def run(cfg: RunConfig, console: Console | None = None, **kwargs) -> RunResult:
    from rlft.run import process_console

    console = process_console(console)
    state: dict[str, Any] = {}

    def _prepare(cfg, train_rows, eval_rows):
        state.update(rollout_checks.prepare(cfg, SECTION, train_rows, eval_rows, console))
        state["eval_rows"] = eval_rows

    def _after(trainer, out):
        if not state.get("eval_rows"):
            return {}
        return rollout_checks.heldout(cfg, SECTION, trainer, state["eval_rows"], state["reward_fn"])

    def _build(cfg, out, train_rows, eval_rows):
        return build(cfg, out, train_rows, [], **{k: state[k] for k in ("model", "tok", "reward_fn", "preflight")})

    return train_with(cfg, KIND, _build, prepare=_prepare, after=_after, console=console, **kwargs)
