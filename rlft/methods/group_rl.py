"""What the group-sampling, verifier-rewarded methods (GRPO, RLOO) share: prepare, build and after.

rlft/methods/grpo.py and rloo.py differ only in their trainer class and docstring; both call these with their
section name. Before the run folder exists (`prepare`): gold-field validation of every row for the section's verifiers
(file:line errors), the model load, the pre-flight (sample G completions for some prompts; refuse the run
when too few groups have mixed rewards, since an all-equal group has zero advantage under both GRPO's
group-mean baseline and RLOO's leave-one-out baseline) and the optional filter to prompts whose pre-flight
group was mixed. After training (`heldout`): greedy pass@1 on the held-out rows, scored by the same
verifiers. `plan` is what a run will sample (`rlft grpo --dry-run`).
`section` names the config section (`grpo` or `rloo`): both carry the same rlft-only fields
(verifiers, reward_model, preflight, preflight_prompts, min_mixed_fraction, filter_prompts,
heldout_max_new_tokens) and TRL's num_generations, max_completion_length and temperature.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from rlft.errors import UserError
from rlft.methods.common import Prepared, build_trl_config, load_run_tokenizer
from rlft.methods.prompt_sampler import indexed, with_band
from rlft.verifiers.loading import build_reward, load_verifiers, validate_gold


def reward_function(cfg, section: str):
    """The run's reward: its verifiers, its reward model, or their sum (weights: NAME:WEIGHT)."""
    sec = cfg.values[section]
    return build_reward(list(sec["verifiers"]), sec.get("reward_model"))


def plan(cfg, section: str, n_prompts: int) -> dict[str, Any]:
    """What a run will generate: rollouts, a bound on generated tokens, and the SFT comparison."""
    sec = cfg.values[section]
    g = sec["num_generations"]
    batch = cfg.train.per_device_train_batch_size * cfg.train.gradient_accumulation_steps
    prompts_per_step = max(1, batch // g)
    steps = cfg.train.max_steps if cfg.train.max_steps > 0 else int(n_prompts * cfg.train.num_train_epochs
                                                                     // prompts_per_step)
    rollouts = steps * prompts_per_step * g
    return {"steps": steps, "prompts_per_step": prompts_per_step, "num_generations": g, "rollouts": rollouts,
            "max_generated_tokens": rollouts * sec["max_completion_length"],
            "sft_rows_same_prompts": steps * prompts_per_step,
            "rollouts_per_sft_row": g}


def plan_text(cfg, section: str) -> str:
    """`rlft grpo --dry-run`: the plan of the run's prompts (read and gold-checked, no model loaded), as text."""
    from rlft.data import read_many

    rows = read_many(cfg.data.train, fields=cfg.data.fields, split=cfg.data.split, max_rows=cfg.data.max_rows)
    validate_gold(rows, list(cfg.values[section]["verifiers"]))
    p = plan(cfg, section, len(rows))
    return (f"{section.upper()} plan: {p['steps']} steps x {p['prompts_per_step']} prompts x "
            f"G={p['num_generations']} = {p['rollouts']:,} sampled completions\n"
            f"generated tokens: at most {p['max_generated_tokens']:,} "
            f"({p['rollouts']:,} x max_completion_length {cfg.values[section]['max_completion_length']})\n"
            f"SFT on the same prompts would train on {p['sft_rows_same_prompts']:,} rows, one target each: "
            f"{section.upper()} samples {p['rollouts_per_sft_row']}x as many sequences, and needs no written answers")


def prepare(cfg, section: str, train_rows, eval_rows, console: Console) -> Prepared:
    """Validate gold, load the model, pre-flight, filter prompts (the kept rows are returned, the caller's
    list is left as it was)."""
    from rlft.models import load_model
    from rlft.preflight import PreflightRefused, probe
    from rlft.tools import setup_tools, tool_tokenizer

    sec = cfg.values[section]
    tools = setup_tools(cfg, section, [r.data for r in train_rows], cfg.model.name_or_path)
    specs = list(sec["verifiers"])
    if not specs and not sec.get("reward_model"):
        raise UserError(f"{section.upper()} needs a reward: no verifier and no reward model given",
                        "pass --verifier NAME (e.g. math) and/or --reward-model DIR")
    reward_fn = reward_function(cfg, section)
    if specs:
        validate_gold(train_rows + eval_rows, specs)
    tok = load_run_tokenizer(cfg)
    if tools is not None:
        tok = tool_tokenizer(tok, cfg.model.name_or_path)
    model = load_model(cfg.model)
    # TRL stops generation (and ends the completion mask) at the generation config's eos ids plus the
    # tokenizer's eos: add the chat template's end-of-turn token, which some tokenizers' eos is not.
    from rlft.chat.templates import stop_token_ids

    model.generation_config.eos_token_id = stop_token_ids(tok, model)
    from rlft import speed

    speed.attach(model, console)  # the pre-flight samples the way training will (LoRA on the CPU: a plain copy)
    result = None
    if sec["preflight"] or sec["filter_prompts"]:  # with tools, whole episodes (rlft.preflight._EpisodeSampler)
        import torch

        torch.manual_seed(cfg.train.seed)
        n = len(train_rows) if sec["filter_prompts"] else sec["preflight_prompts"]
        result = probe(model, tok, [r.data for r in train_rows], reward_fn,
                       num_generations=sec["num_generations"], max_prompts=n,
                       max_new_tokens=sec["max_completion_length"], temperature=sec["temperature"],
                       min_mixed=sec["min_mixed_fraction"], section=section,
                       max_prompts_cap=sec.get("preflight_max_prompts"), tools=tools)
        console.print(f"pre-flight: {result.line()}", highlight=False)
        if result.verdict == "refuse" and sec["preflight"]:
            lo, hi = result.mixed_interval
            raise PreflightRefused(f"pre-flight refused: only {result.mixed_fraction:.0%} of groups have mixed "
                                   f"rewards ({lo:.0%}-{hi:.0%} over {result.prompts} prompts, clearly below "
                                   f"{result.min_mixed:g}; pass rate {result.pass_rate:.0%}): all-equal groups "
                                   "teach nothing",
                                   "; ".join(result.advice) + " (or --no-preflight to run anyway)")
        if sec["filter_prompts"]:
            kept = [r for r, mixed in zip(train_rows, result.mixed) if mixed]
            console.print(f"--filter-prompts: kept {len(kept)} of {len(train_rows)} prompts (mixed groups)")
            if not kept:
                raise PreflightRefused("--filter-prompts left no prompt with mixed rewards",
                                       "; ".join(result.advice) or "use other prompts")
            train_rows = kept
    return Prepared(train_rows, eval_rows, tok=tok, model=model, reward_fn=reward_fn, preflight=result, tools=tools)


def trainer_class(trainer_cls, sec, outer=None):
    """The trainer class GRPO and RLOO train with: TRL's class under rlft's subclasses. Its MRO, first to last
    (each subclass calls `super()` where it does not apply):
      ZeroAdvantageSkip   `_compute_loss`: rows whose advantage is zero skip the loss (rlft.methods.zero_advantage;
                          only with skip_zero_advantage; outermost, so they never reach the hooks below)
      outer               a method's own subclass (RLOO's CurrentOldLogps: `_generate_and_score_completions`,
                          `_get_per_token_logps_and_entropies`, `_compute_loss`; rlft.methods.rloo)
      SharedPrompt        `_get_per_token_logps_and_entropies`: each prompt's forward once for its G rows
                          (rlft.speed.trainer_class; TRL's own path where it does not apply)
      Band                `_get_train_sampler`, `_calculate_rewards`, `log`: the prompt sampler and the
                          per-prompt pass records (rlft.methods.prompt_sampler)
      GRPOTrainer / RLOOTrainer (TRL)"""
    from rlft import speed
    from rlft.methods.zero_advantage import with_zero_advantage_skip

    trainer_cls = speed.trainer_class(with_band(trainer_cls, sec["prompt_sampler"]))
    if outer is not None:
        trainer_cls = outer(trainer_cls)
    if sec["skip_zero_advantage"]:
        trainer_cls = with_zero_advantage_skip(trainer_cls)
    return trainer_cls


def build(cfg, section: str, out: Path, prepared: Prepared, config_cls, trainer_cls, outer=None):
    """The TRL trainer (GRPOTrainer or RLOOTrainer, with the per-prompt pass records and the section's
    prompt_sampler: rlft.methods.prompt_sampler) on the prepared model and reward; preflight.json written.
    `outer`: a method's own subclass, wrapped around rlft's (its overrides run first)."""
    from rlft.data.table import to_dataset
    from rlft.run.folder import is_main_process, write_json

    if prepared.preflight is not None and is_main_process():
        write_json(out / "preflight.json", prepared.preflight.as_dict())
    tools = prepared.tools
    extra = {"max_tool_calling_iterations": tools.max_tool_calls} if tools is not None else {}
    args = build_trl_config(cfg, config_cls, out, False, **extra)
    trainer_cls = trainer_class(trainer_cls, cfg.values[section], outer)
    trainer = trainer_cls(model=prepared.model, reward_funcs=[prepared.reward_fn], args=args,
                          processing_class=prepared.tok, train_dataset=indexed(to_dataset(prepared.train_rows)),
                          **(tools.trainer_kwargs() if tools is not None else {}))
    from rlft import models

    models.drop_fresh_ref_adapter(trainer.model)  # beta > 0: a fresh adapter's reference is its base, no copy
    if tools is not None:  # rlft.tools: per-log counts of tool calls and bad calls into metrics.jsonl
        from rlft.episodes import watch_rendering
        from rlft.run.folder import process_console
        from rlft.tools import counts_callback

        trainer.add_callback(counts_callback(tools.stats))
        watch_rendering(trainer, tools.stats, process_console(None))
        from rlft.tools.process import watch_batches

        watch_batches(trainer, tools.stats)  # a batch of only failed episodes: one line, not a silent run
    return trainer


def after(cfg, section: str, trainer, prepared: Prepared) -> dict[str, float]:
    """The held-out scores when the run has held-out rows (`heldout`), else nothing; with tools, the run's
    tool calls and bad calls (rlft.tools.ToolStats) too, and tools.json."""
    out: dict[str, float] = {}
    if prepared.tools is not None:
        from rlft.run.folder import is_main_process, write_json

        counts = prepared.tools.stats.as_dict()
        if is_main_process():
            write_json(Path(trainer.args.output_dir) / "tools.json", counts)
        out.update(tool_calls=counts["tool_calls"], tool_errors=counts["tool_errors"])
        if counts["env_failed_episodes"]:  # episodes a failing reset / get_reward cost (rlft/tools/process.py)
            out["env_failed_episodes"] = sum(counts["env_failed_episodes"].values())
    if not prepared.eval_rows:
        return out
    if prepared.tools is not None:  # episodes, tools called, as in training (rlft.episodes)
        from rlft.episodes import episode_success

        sec = cfg.values[section]
        checker = load_verifiers(list(sec["verifiers"]) or [cfg.watch.holdout_verifier])[0]
        return {**out, **episode_success(trainer.model, trainer.processing_class, [r.data for r in prepared.eval_rows],
                                         prepared.tools, checker,
                                         sec.get("heldout_max_new_tokens") or sec["max_completion_length"])}
    return {**out, **heldout(cfg, section, trainer, prepared.eval_rows, prepared.reward_fn)}


def heldout(cfg, section: str, trainer, eval_rows, reward_fn) -> dict[str, float]:
    """Greedy pass@1 on held-out rows, scored by the verifiers (or, with a reward model as the only reward,
    by watch.holdout_verifier), plus the training reward's mean on the same completions."""
    from rlft.evaluate import evaluate_rows

    sec = cfg.values[section]
    budget = sec.get("heldout_max_new_tokens") or sec["max_completion_length"]
    rows = [r.data for r in eval_rows]
    checker = load_verifiers(list(sec["verifiers"]) or [cfg.watch.holdout_verifier])[0]
    result = evaluate_rows(trainer.model, trainer.processing_class, rows, scorer=checker, max_new_tokens=budget,
                           served=True)
    out = {"heldout_pass_at_1": result.pass_at_1, "heldout_mean_reward": result.mean_reward}
    if sec.get("reward_model"):
        scores = reward_fn([s["completion"] for s in result.samples], prompts=[s["prompt"] for s in result.samples],
                           **{k: [r.get(k) for r in rows] for k in rows[0] if k != "prompt"})
        out["heldout_train_reward"] = sum(scores) / max(len(scores), 1)
    return out
