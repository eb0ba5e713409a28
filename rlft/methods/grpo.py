"""GRPO (RL with verifiable rewards) with TRL's GRPOTrainer and rlft's verifier registry.

Per prompt, G completions are sampled and scored by the verifier(s); each completion's advantage is its
reward minus the group mean (divided by the group std, TRL's `scale_rewards="group"`), and the policy is
pushed toward above-average completions. rlft keeps TRL's defaults (beta 0: no reference model, DAPO
token-level loss normalisation) and adds, before any training step:
  - gold-field validation: every row carries the fields its verifiers need, parseable (file:line errors);
  - a pre-flight (on by default): sample G completions for some prompts and refuse the run when too few
    groups are mixed, since all-equal groups have zero advantage and teach nothing;
  - optional prompt filtering to the prompts whose pre-flight group was mixed;
  - generation stops at the chat template's end-of-turn token too (rlft.chat.stop_token_ids), not only at
    the tokenizer's eos; with pad == eos (SmolLM2, Qwen2.5) TRL's mask keeps the first eos and drops the rest.
After training, held-out pass@1 (greedy, scored by the same verifiers) goes into summary.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from rlft import rollout_checks
from rlft.config import RunConfig
from rlft.methods.common import RunResult, build_trl_config, train_with

KIND = "verifiable"


def reward_function(cfg: RunConfig):
    """The GRPO run's reward: its verifiers, its reward model, or their sum (weights: NAME:WEIGHT)."""
    return rollout_checks.reward_function(cfg, "grpo")


def plan(cfg: RunConfig, n_prompts: int) -> dict[str, Any]:
    """What a run will generate: rollouts, a bound on generated tokens, and the SFT comparison."""
    g = cfg.grpo.num_generations
    batch = cfg.train.per_device_train_batch_size * cfg.train.gradient_accumulation_steps
    prompts_per_step = max(1, batch // g)
    steps = cfg.train.max_steps if cfg.train.max_steps > 0 else int(n_prompts * cfg.train.num_train_epochs
                                                                     // prompts_per_step)
    rollouts = steps * prompts_per_step * g
    return {"steps": steps, "prompts_per_step": prompts_per_step, "num_generations": g, "rollouts": rollouts,
            "max_generated_tokens": rollouts * cfg.grpo.max_completion_length,
            "sft_rows_same_prompts": steps * prompts_per_step,
            "rollouts_per_sft_row": g}


def prepare(cfg: RunConfig, train_rows, eval_rows, console: Console) -> dict[str, Any]:
    """Before the run folder exists: validate gold, load the model, pre-flight, filter prompts."""
    return rollout_checks.prepare(cfg, "grpo", train_rows, eval_rows, console)


def build(cfg: RunConfig, out: Path, train_rows, eval_rows, model=None, tok=None, reward_fn=None,
          preflight=None):
    from trl import GRPOConfig, GRPOTrainer

    from rlft.data import to_dataset
    from rlft.run import is_main_process, write_json

    if preflight is not None and is_main_process():
        write_json(out / "preflight.json", preflight.as_dict())
    args = build_trl_config(cfg, GRPOConfig, out, False)
    return GRPOTrainer(model=model, reward_funcs=[reward_fn], args=args, processing_class=tok,
                       train_dataset=to_dataset(train_rows))


def heldout(cfg: RunConfig, trainer, eval_rows, reward_fn) -> dict[str, float]:
    """Greedy pass@1 on held-out rows, scored by the verifiers (rlft.rollout_checks.heldout)."""
    return rollout_checks.heldout(cfg, "grpo", trainer, eval_rows, reward_fn)


def run(cfg: RunConfig, console: Console | None = None, **kwargs) -> RunResult:
    from rlft.run import process_console

    console = process_console(console)
    state: dict[str, Any] = {}

    def _prepare(cfg, train_rows, eval_rows):
        state.update(prepare(cfg, train_rows, eval_rows, console))
        state["eval_rows"] = eval_rows
        return state

    def _after(trainer, out):
        if not state.get("eval_rows"):
            return {}
        return heldout(cfg, trainer, state["eval_rows"], state["reward_fn"])

    def _build(cfg, out, train_rows, eval_rows):
        return build(cfg, out, train_rows, [], **{k: state[k] for k in ("model", "tok", "reward_fn", "preflight")})

    return train_with(cfg, KIND, _build, prepare=_prepare, after=_after, console=console, **kwargs)
