"""What every verifier-rewarded, group-sampling method (GRPO, RLOO) does before and after training.

Before the run folder exists (`prepare`): gold-field validation of every row for the section's verifiers
(file:line errors), the model load, the pre-flight (sample G completions for some prompts; refuse the run
when too few groups have mixed rewards, since an all-equal group has zero advantage under both GRPO's
group-mean baseline and RLOO's leave-one-out baseline) and the optional filter to prompts whose pre-flight
group was mixed. After training (`heldout`): greedy pass@1 on the held-out rows, scored by the same
verifiers. `section` names the config section (`grpo` or `rloo`): both carry the same rlft-only fields
(verifiers, reward_model, preflight, preflight_prompts, min_mixed_fraction, filter_prompts,
heldout_max_new_tokens) and TRL's num_generations, max_completion_length and temperature.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from rlft.errors import UserError
from rlft.verifiers.loading import build_reward, load_verifiers, validate_gold


def reward_function(cfg, section: str):
    """The run's reward: its verifiers, its reward model, or their sum (weights: NAME:WEIGHT)."""
    sec = cfg.values[section]
    return build_reward(list(sec["verifiers"]), sec.get("reward_model"))


def prepare(cfg, section: str, train_rows, eval_rows, console: Console) -> dict[str, Any]:
    """Validate gold, load the model, pre-flight, filter prompts; returns model, tok, reward_fn, preflight."""
    from rlft.models import load_model, load_tokenizer
    from rlft.preflight import PreflightRefused, probe

    sec = cfg.values[section]
    specs = list(sec["verifiers"])
    if not specs and not sec.get("reward_model"):
        raise UserError(f"{section.upper()} needs a reward: no verifier and no reward model given",
                        "pass --verifier NAME (e.g. math) and/or --reward-model DIR")
    reward_fn = reward_function(cfg, section)
    if specs:
        validate_gold(train_rows + eval_rows, specs)
    tok = load_tokenizer(cfg.model.name_or_path, cfg.model.revision, cfg.model.trust_remote_code)
    model = load_model(cfg.model)
    # TRL stops generation (and ends the completion mask) at the generation config's eos ids plus the
    # tokenizer's eos: add the chat template's end-of-turn token, which some tokenizers' eos is not.
    from rlft.chat import stop_token_ids

    model.generation_config.eos_token_id = stop_token_ids(tok, model)
    result = None
    if sec["preflight"] or sec["filter_prompts"]:
        import torch

        torch.manual_seed(cfg.train.seed)
        n = len(train_rows) if sec["filter_prompts"] else sec["preflight_prompts"]
        result = probe(model, tok, [r.data for r in train_rows], reward_fn,
                       num_generations=sec["num_generations"], max_prompts=n,
                       max_new_tokens=sec["max_completion_length"], temperature=sec["temperature"],
                       min_mixed=sec["min_mixed_fraction"])
        console.print(f"pre-flight: pass rate {result.pass_rate:.2f}, mixed groups {result.mixed_fraction:.2f}, "
                      f"truncated {result.truncation_rate:.2f} over {result.prompts} prompts x "
                      f"{result.num_generations} -> [bold]{result.verdict}[/]")
        if result.verdict == "refuse" and sec["preflight"]:
            raise PreflightRefused(f"pre-flight refused: only {result.mixed_fraction:.0%} of groups have mixed "
                                   f"rewards (pass rate {result.pass_rate:.0%}); all-equal groups teach nothing",
                                   "; ".join(result.advice) + " (or --no-preflight to run anyway)")
        if sec["filter_prompts"]:
            kept = [r for r, mixed in zip(train_rows, result.mixed) if mixed]
            console.print(f"--filter-prompts: kept {len(kept)} of {len(train_rows)} prompts (mixed groups)")
            if not kept:
                raise PreflightRefused("--filter-prompts left no prompt with mixed rewards",
                                       "; ".join(result.advice) or "use other prompts")
            train_rows[:] = kept
    return {"model": model, "tok": tok, "reward_fn": reward_fn, "preflight": result}


def heldout(cfg, section: str, trainer, eval_rows, reward_fn) -> dict[str, float]:
    """Greedy pass@1 on held-out rows, scored by the verifiers (or, with a reward model as the only reward,
    by watch.holdout_verifier), plus the training reward's mean on the same completions."""
    from rlft.evaluate import evaluate_rows

    sec = cfg.values[section]
    budget = sec.get("heldout_max_new_tokens") or sec["max_completion_length"]
    rows = [r.data for r in eval_rows]
    checker = load_verifiers(list(sec["verifiers"]) or [cfg.watch.holdout_verifier])[0]
    result = evaluate_rows(trainer.model, trainer.processing_class, rows, scorer=checker, max_new_tokens=budget)
    out = {"heldout_pass_at_1": result.pass_at_1, "heldout_mean_reward": result.mean_reward}
    if sec.get("reward_model"):
        scores = reward_fn([s["completion"] for s in result.samples], prompts=[s["prompt"] for s in result.samples],
                           **{k: [r.get(k) for r in rows] for k in rows[0] if k != "prompt"})
        out["heldout_train_reward"] = sum(scores) / max(len(scores), 1)
    return out
