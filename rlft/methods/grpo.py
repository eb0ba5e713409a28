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

from rlft.config import RunConfig
from rlft.methods.common import RunResult, build_trl_config, train_with
from rlft.verifiers.loading import build_reward, load_verifiers, validate_gold

KIND = "verifiable"


def reward_function(cfg: RunConfig):
    """The GRPO run's reward: its verifiers, its reward model, or their sum (weights: NAME:WEIGHT)."""
    return build_reward(list(cfg.grpo.verifiers), cfg.grpo.reward_model)


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
    from rlft.chat import stop_token_ids
    from rlft.models import load_model, load_tokenizer
    from rlft.preflight import PreflightRefused, probe

    specs = list(cfg.grpo.verifiers)
    if not specs and not cfg.grpo.reward_model:
        from rlft.errors import UserError

        raise UserError("GRPO needs a reward: no verifier and no reward model given",
                        "pass --verifier NAME (e.g. math) and/or --reward-model DIR")
    reward_fn = reward_function(cfg)
    if specs:
        validate_gold(train_rows + eval_rows, specs)
    tok = load_tokenizer(cfg.model.name_or_path, cfg.model.revision, cfg.model.trust_remote_code)
    model = load_model(cfg.model)
    # TRL stops generation (and ends the completion mask) at the generation config's eos ids plus the
    # tokenizer's eos: add the chat template's end-of-turn token, which some tokenizers' eos is not.
    model.generation_config.eos_token_id = stop_token_ids(tok, model)
    result = None
    if cfg.grpo.preflight or cfg.grpo.filter_prompts:
        import torch

        torch.manual_seed(cfg.train.seed)
        n = len(train_rows) if cfg.grpo.filter_prompts else cfg.grpo.preflight_prompts
        result = probe(model, tok, [r.data for r in train_rows], reward_fn,
                       num_generations=cfg.grpo.num_generations, max_prompts=n,
                       max_new_tokens=cfg.grpo.max_completion_length, temperature=cfg.grpo.temperature,
                       min_mixed=cfg.grpo.min_mixed_fraction)
        console.print(f"pre-flight: pass rate {result.pass_rate:.2f}, mixed groups {result.mixed_fraction:.2f}, "
                      f"truncated {result.truncation_rate:.2f} over {result.prompts} prompts x "
                      f"{result.num_generations} -> [bold]{result.verdict}[/]")
        if result.verdict == "refuse" and cfg.grpo.preflight:
            raise PreflightRefused(f"pre-flight refused: only {result.mixed_fraction:.0%} of groups have mixed "
                                   f"rewards (pass rate {result.pass_rate:.0%}); all-equal groups teach nothing",
                                   "; ".join(result.advice) + " (or --no-preflight to run anyway)")
        if cfg.grpo.filter_prompts:
            kept = [r for r, mixed in zip(train_rows, result.mixed) if mixed]
            console.print(f"--filter-prompts: kept {len(kept)} of {len(train_rows)} prompts (mixed groups)")
            if not kept:
                raise PreflightRefused("--filter-prompts left no prompt with mixed rewards",
                                       "; ".join(result.advice) or "use other prompts")
            train_rows[:] = kept
    return {"model": model, "tok": tok, "reward_fn": reward_fn, "preflight": result}


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
    """Greedy pass@1 on held-out rows, scored by the verifiers (or, with a reward model as the only reward,
    by watch.holdout_verifier), plus the training reward's mean on the same completions."""
    from rlft.evaluate import evaluate_rows

    budget = cfg.grpo.heldout_max_new_tokens or cfg.grpo.max_completion_length
    rows = [r.data for r in eval_rows]
    checker = load_verifiers(list(cfg.grpo.verifiers) or [cfg.watch.holdout_verifier])[0]
    result = evaluate_rows(trainer.model, trainer.processing_class, rows, scorer=checker, max_new_tokens=budget)
    out = {"heldout_pass_at_1": result.pass_at_1, "heldout_mean_reward": result.mean_reward}
    if cfg.grpo.reward_model:
        scores = reward_fn([s["completion"] for s in result.samples], prompts=[s["prompt"] for s in result.samples],
                           **{k: [r.get(k) for r in rows] for k in rows[0] if k != "prompt"})
        out["heldout_train_reward"] = sum(scores) / max(len(scores), 1)
    return out


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
