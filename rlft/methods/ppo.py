"""PPO for language models: rlft's own trainer on transformers + peft + accelerate (TRL has none since 1.13).

This module is the training loop (part 3 of 3); setup is in ppo_setup.py, rollout and update in
ppo_rollout.py, the arithmetic in ppo_math.py.

What it is. Each step takes B prompts (train.per_device_train_batch_size per process) and
  1. rollout: samples one response per prompt from the policy (temperature `temperature`, no top-k/top-p, at
     most `response_length` tokens, cut after the first eos) and keeps each token's log-prob under the
     sampling distribution; scores the response with the verifier(s) or the reward model (through
     rlft.reward_scoring, the path `rlft reward` was evaluated on) and subtracts `missing_eos_penalty` from
     responses that never emitted eos; runs the frozen reference (with LoRA: the policy with its adapter
     disabled, so one base model sits in memory, not two) and the value model over the same tokens;
  2. advantages: per-token reward R'_t = -kl_coef * (log pi - log pi_ref), plus the score on the response's
     last token (its eos); GAE (gamma, lam) with the value model as the baseline, then whitening over the
     batch's tokens; returns = advantages + values;
  3. update: `num_ppo_epochs` passes over the batch in `num_mini_batches` shuffled minibatches (each split
     into train.gradient_accumulation_steps micro-batches), one AdamW step per minibatch on
     -min(ratio * A, clip(ratio, 1 +- cliprange) * A) + vf_coef * the clipped value loss (cliprange_value).
The arithmetic is in rlft/methods/ppo_math.py, checked against numbers computed by hand.

Where it departs from the paper (Schulman et al. 2017, as used for RLHF by Ziegler et al. 2019):
  - an episode is one response and an action one token; the reward arrives once, at the end, and the KL
    penalty to the reference is folded into every token's reward (Ziegler et al.), with a fixed kl_coef
    (the paper's adaptive KL controller is not implemented);
  - the advantages are whitened per batch, and gamma is 1.0 by default (episodes are a few dozen tokens);
  - the value model is a separate network (a one-output score head on its own copy of the backbone,
    initialised from the policy's weights, head zeroed) rather than a second head on the policy;
  - dropout is switched off in every network, so the rollout's log-probs are the ones the first update sees.

Where it departs from TRL's old PPOTrainer (trl <= 1.12, trl.experimental.ppo):
  - the same data as the other rlft methods: text or chat prompts with gold fields, rendered like
    GRPO renders them; no pre-tokenised `input_ids`; stopping at eos is the default, not opt-in;
  - the reward can be a verifier (any rlft verifier spec) as well as a reward model (TRL issue #3093); a
    reward model is scored through rlft.reward_scoring.score on the decoded text, so the reward model need not
    share the policy's tokenizer;
  - the score goes on the response's last real token (its eos), not one position past it, and the value is
    fitted on exactly the response's tokens (TRL's `padding_mask_p1` put both on a padding position);
  - the training forward keeps only the response's logits (`logits_to_keep`): the prompt's logits are never
    computed; responses are trimmed to the batch's longest real response before the update; no
    gc.collect() per step (with torch, transformers and a verifier's sympy loaded it took ~0.4 s a step);
  - `kl` is logged per token with the non-negative k3 estimator (as GRPO logs it; what rlft's KL alarm
    reads); `objective/kl` is TRL's figure: the penalty's estimator summed over the response;
  - held-out accuracy under a verifier is measured before and after (and every train.eval_steps), so reward
    hacking (reward-model score up, accuracy down) is visible in summary.json and raises the alarm.

Which model the run folder keeps is decided as for the TRL methods (rlft.methods.keep, rlft.watch.overfit.kept_check):
the start unless a trained held-out check beats it by more than its noise (rlft.watch.overfit.START_Z; McNemar on
pass@1), else the best or
the last check's model, with the last one in last/; summary.json's `kept` says which step and why, and the
end-of-run no_gain alarm fires when the start was kept. `final_metrics` stay the last model's.

Checkpoints (checkpoint-N/) hold policy, value model, optimizer, scheduler and RNG states (accelerate's
save_state) plus trainer_state.json; `--resume` continues at the same step with the same data order.
Under `accelerate launch` each process samples its own slice of the prompts and gradients are averaged (DDP);
the policy and value model are one prepared module so their gradients are synchronised together.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import time
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from rlft.config import RunConfig
from rlft.methods.common import Prepared, Run, RunResult, start_run, tracker_config, tracker_names
from rlft.methods.ppo_rollout import heldout, policy_and_value, rollout, update
from rlft.methods.ppo_setup import build_networks, check_config, memory_check, reward_function
from rlft.run.time_limit import TimeLimit

KIND = "verifiable"
DEFAULT_LR = 3e-6  # TRL PPOConfig's default; the tiny recipe uses 1e-4
STATE_FILE = "trainer_state.json"


# --------------------------------------------------------------------------- data order


class PromptOrder:
    """Rows for step s on process `rank`: a fresh seeded shuffle each pass over the data; the same on resume."""

    def __init__(self, n: int, batch: int, world: int, rank: int, seed: int) -> None:
        self.n, self.batch, self.world, self.rank, self.seed = n, batch, world, rank, seed
        self._perms: dict[int, list[int]] = {}

    def _perm(self, epoch: int) -> list[int]:
        if epoch not in self._perms:
            import random

            order = list(range(self.n))
            random.Random(self.seed * 1000003 + epoch).shuffle(order)
            self._perms = {epoch: order}
        return self._perms[epoch]

    def indices(self, step: int) -> list[int]:
        start = (step * self.world + self.rank) * self.batch
        return [self._perm(k // self.n)[k % self.n] for k in range(start, start + self.batch)]

    def epoch(self, step: int) -> float:
        return (step * self.world * self.batch) / self.n


# --------------------------------------------------------------------------- checkpoints


def save_checkpoint(accelerator, out: Path, step: int, state: dict, limit: int | None) -> Path:
    ckpt = out / f"checkpoint-{step}"
    accelerator.save_state(str(ckpt), safe_serialization=False)
    if accelerator.is_main_process:
        from rlft.run.folder import write_json

        write_json(ckpt / STATE_FILE, {**state, "step": step})
        if limit:
            old = sorted((p for p in out.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
                         key=lambda p: int(p.name.split("-")[-1]))
            for p in old[:-limit]:
                shutil.rmtree(p, ignore_errors=True)
    accelerator.wait_for_everyone()
    return ckpt


# --------------------------------------------------------------------------- the run


def prepare(cfg: RunConfig, train_rows, eval_rows, console: Console) -> Prepared:
    """Before the run folder exists: gold fields validated, the process group formed, the memory estimate."""
    from rlft.verifiers.loading import validate_gold

    specs = list(cfg.ppo.verifiers)
    if specs:
        validate_gold(train_rows + eval_rows, specs)
    if eval_rows and not specs:
        validate_gold(eval_rows, [cfg.watch.holdout_verifier])  # the held-out check scores them with it
    import torch
    from accelerate import PartialState  # under `accelerate launch`: which process writes the run folder
    from accelerate.utils import parse_flag_from_env

    # Without CUDA, processes under torchrun form a gloo group only with cpu=True (else each runs alone).
    PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU") or not torch.cuda.is_available())
    memory = memory_check(cfg, console)
    return Prepared(train_rows, eval_rows,
                    summary={"memory_estimate_gb": round(memory["total_gb"], 4) if memory else None})


def run(cfg: RunConfig, *, overwrite: bool = False, resume: bool = False, console: Console | None = None,
        on_check: Callable | None = None) -> RunResult:
    """Validate, estimate memory, then train; see the module docstring. Returns the run's result.
    `on_check(step, score) -> stop?` hears every held-out check (rlft sweep's pruner); True ends training
    there, as a completed (shorter) run."""
    from rlft.verifiers.loading import load_verifiers
    from rlft.watch.setup import Holdout

    check_config(cfg)
    if cfg.ppo.reward_model and cfg.watch.get("holdout") and (cfg.ppo.get("min_reward_agreement") or 0) > 0:
        check_reward_model(cfg, console)  # before the run folder is touched: a refusal writes nothing
    run_, prepared = start_run(cfg, KIND, prepare, overwrite=overwrite, resume=resume, console=console)
    with run_.record.closing_on_error():  # from here on, any ending is recorded in summary.json
        # held-out rows: data.eval (scored by the run's verifiers, else watch.holdout_verifier), else watch.holdout
        watch = run_.watch
        watch.on_check = on_check
        check_specs = list(cfg.ppo.verifiers) or [cfg.watch.holdout_verifier]
        heldout_rows, scorer = [r.data for r in prepared.eval_rows], None
        if heldout_rows:
            scorer = load_verifiers(check_specs)[0]
        elif watch.holdout is not None:
            heldout_rows, scorer = watch.holdout.rows, watch.holdout.scorer
        budget = cfg.ppo.heldout_max_new_tokens or cfg.ppo.response_length
        if watch.holdout is None and heldout_rows and cfg.train.eval_steps:
            watch.holdout = Holdout(heldout_rows, scorer, check_specs[0], int(cfg.train.eval_steps), budget)
        return _train(run_, prepared.train_rows, heldout_rows, scorer, budget)


def check_reward_model(cfg: RunConfig, console: Console | None) -> None:
    """The reward model against the held-out truth (watch.holdout scored by watch.holdout_verifier) on replies
    sampled from the start policy, the distribution PPO optimises (rlft.prefs); exit 3 when it is near chance
    (ppo.min_reward_agreement)."""
    from rlft.prefs import check_agreement, policy_agreement, truth_rows
    from rlft.reward_scoring import RewardModelReward
    from rlft.run.folder import process_console

    console = process_console(console)
    spec = cfg.watch.get("holdout_verifier") or "math"
    p = cfg.ppo
    rows = truth_rows(cfg.watch.holdout, spec, int(p.get("agreement_prompts") or 32), bool(cfg.data.get("as_chat")))
    a = policy_agreement(cfg.model.name_or_path, RewardModelReward(p.reward_model), rows, spec,
                         int(p.get("agreement_samples") or 4), int(p.response_length), float(p.temperature or 1.0),
                         seed=int(cfg.train.seed or 0))
    console.print(a.line(), highlight=False)
    check_agreement(a, float(p.min_reward_agreement), p.reward_model)


def _train(run_: Run, train_rows, heldout_rows, scorer, budget) -> RunResult:
    """The loop: trackers, networks, optimizer and schedule, resume, held-out before, steps, the ending."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from transformers import get_scheduler

    from rlft.methods.ppo_math import explained_variance
    from rlft.run.folder import Interrupt, any_process
    from rlft.watch.monitor import ProgressLine, RolloutRecorder, Watcher, alarm_state, progress_bar

    cfg, out, ckpt, prior, record = run_.cfg, run_.out, run_.checkpoint, run_.prior, run_.record
    watch, console = run_.watch, run_.console

    trackers = tracker_names(cfg.train.report_to)  # train.report_to: the scalars of metrics.jsonl, under train/
    accelerator = Accelerator(log_with=trackers or None, project_dir=str(out / "runs"))
    if trackers:  # project "rlft" (tensorboard: RUN/runs/rlft/; TRL's methods write RUN/runs/<date>_<host>/)
        names = {"wandb": {"name": out.name}, "trackio": {"name": out.name}}  # the run as the folder is called
        accelerator.init_trackers("rlft", config=tracker_config(cfg),
                                  init_kwargs={k: v for k, v in names.items() if k in trackers})
    set_seed(cfg.train.seed)
    main = accelerator.is_main_process
    tok, policy, ref, value = build_networks(cfg)
    from rlft import speed

    speed.attach(policy, console)  # LoRA on the CPU: rollouts from a plain copy of the policy (rlft.speed.sampling)
    model = policy_and_value(policy, value)
    params = [p for p in model.parameters() if p.requires_grad]
    t = cfg.train  # AdamW as transformers' Trainer builds it: its TrainingArguments defaults, overridable here
    optimizer = torch.optim.AdamW(params, lr=t.learning_rate or DEFAULT_LR, weight_decay=t.get("weight_decay") or 0.0,
                                  betas=(t.get("adam_beta1") or 0.9, t.get("adam_beta2") or 0.999),
                                  eps=t.get("adam_epsilon") or 1e-8)
    batch = cfg.train.per_device_train_batch_size
    world = accelerator.num_processes
    total = cfg.train.max_steps if cfg.train.max_steps > 0 else \
        max(1, math.ceil(len(train_rows) * cfg.train.num_train_epochs / (batch * world)))
    scheduler = get_scheduler(cfg.train.get("lr_scheduler_type") or "linear", optimizer,
                              num_warmup_steps=int(cfg.train.get("warmup_steps") or 0), num_training_steps=total)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(scheduler)
    if ref is not None:
        ref.to(accelerator.device)
    reward_fn = reward_function(cfg)
    for part in getattr(reward_fn, "parts", [reward_fn]):
        if hasattr(part, "load"):  # a reward model: load it once, on the training device
            part.load()[0].to(accelerator.device)
    inner = accelerator.unwrap_model(model)
    order = PromptOrder(len(train_rows), batch, world, accelerator.process_index, cfg.train.seed)
    generator = torch.Generator().manual_seed(cfg.train.seed + 7919 * accelerator.process_index)

    step, episodes, carried = 0, 0, {}
    if ckpt is not None:
        accelerator.load_state(str(ckpt))
        state = json.loads((ckpt / STATE_FILE).read_text())
        step, episodes = state["step"], state["episodes"]
        generator.set_state(torch.tensor(state["generator"], dtype=torch.uint8))
        carried = state.get("heldout_before", {})

    if ckpt is not None and main:  # a crash after the checkpoint logged steps that will run again
        _truncate_metrics(out / "metrics.jsonl", step)
    watcher = Watcher(out, console, watch)  # writes on the main process only
    from rlft.methods.keep import KeptModels

    def save(path: str) -> None:
        if main:
            inner.policy.save_pretrained(path)
            tok.save_pretrained(path)

    # the start and the best held-out check's model, and at the end the one the run folder keeps (as TRL runs do)
    kept = KeptModels(out, watcher, save, watch.keep_best, main=main)
    recorder = RolloutRecorder()
    reward_call = recorder.wrap(reward_fn, 0, 1.0)
    watcher.recorder = recorder
    interrupt = Interrupt()
    progress = progress_bar(console) if main else None
    logging_steps = max(1, int(cfg.train.logging_steps or 1))
    save_steps = int(cfg.train.save_steps or 0)
    line = ProgressLine()

    def refresh(record_: dict) -> None:
        stats = line.stats(record_, watcher.alarm_names)
        if progress is not None:
            progress.update(task, completed=step, stats=stats)

    def checkpoint() -> Path:
        return save_checkpoint(accelerator, out, step, {"episodes": episodes, "heldout_before": before,
                                                        "generator": generator.get_state().tolist()},
                               cfg.train.save_total_limit)

    before = carried or prior.get("heldout_before") or {}
    if heldout_rows and not before and main:
        before = heldout(inner.policy, tok, heldout_rows, scorer, reward_fn, budget, bool(cfg.ppo.reward_model))
        console.print("held-out before: " + "  ".join(f"{k} {v:.3f}" for k, v in before.items()), highlight=False)
    record.update(heldout_before=before)
    console.print(f"[bold]rlft ppo[/]: {len(train_rows)} prompts, {total} steps x {batch * world} prompts, "
                  f"{cfg.ppo.num_ppo_epochs} epochs x {cfg.ppo.num_mini_batches} minibatches -> {out}")
    window: dict[str, list[float]] = {}
    start_time, start_step, start_episodes = time.time(), step, episodes
    limit = TimeLimit(cfg.train.get("max_minutes"))  # train.max_minutes: end within it, checked, as at `total`
    timed: dict | None = None  # summary.json's time_limit when the limit ended the run

    def log(window_: dict[str, list[float]]) -> dict[str, list[float]]:
        """Log the steps since the last log (means over them); returns the emptied window."""
        rec = {"step": step, "epoch": round(order.epoch(step), 4), "episodes": episodes}
        rec.update(_reduce(accelerator, {k: sum(v) / len(v) for k, v in window_.items()}))
        rec["episodes_per_second"] = round((episodes - start_episodes) / (time.time() - start_time), 3)
        watcher.log(rec)
        _track(accelerator, rec, step)
        refresh(rec)
        return {}

    def check() -> None:
        """A held-out check at `step` and the save it makes, timed for the limit (the main process)."""
        began = time.monotonic()
        refresh(watcher.heldout(inner.policy, tok, step, order.epoch(step)))
        kept.after_check()
        limit.checked(time.monotonic() - began)
    status, pruned = "completed", False
    try:
        if progress is not None:
            progress.start()
            task = progress.add_task("ppo", total=total, completed=step, stats=alarm_state(watcher.alarm_names))
        limit.begin()
        if watch.holdout is not None and main and step == 0:
            check()
        with interrupt.installed():
            while step < total:
                rows = [train_rows[i].data for i in order.indices(step)]
                ro = rollout(inner.policy, inner.value, ref, tok, rows, reward_call, cfg, accelerator.device)
                stats = {k: float(v) for k, v in ro.stats.items()}
                stats.update(update(model, optimizer, accelerator, ro, cfg, generator))
                stats["val/explained_variance"] = explained_variance(ro.values, ro.returns, ro.mask)
                stats["learning_rate"] = scheduler.get_last_lr()[0]
                scheduler.step()
                step += 1
                episodes += len(rows) * world
                for k, v in stats.items():
                    window.setdefault(k, []).append(v)
                limit.step_done()
                if step % logging_steps == 0 or step == total:
                    window = log(window)
                h = watch.holdout
                due = h is not None and (step % h.every_for(total) == 0 or step == total)
                if due and main:
                    check()
                timed_out = (limit.on and step < total
                             and any_process(accelerator, limit.out_of_time(step, h is not None)))
                if timed_out and window:  # the last step's metrics, where this step did not log
                    window = log(window)
                if timed_out and h is not None and main and not due:
                    check()  # the closing check
                if progress is not None:
                    progress.update(task, completed=step)
                stop = any_process(accelerator, interrupt.signum is not None or watcher.stopped_by is not None)
                if stop or (save_steps and step % save_steps == 0 and step < total):
                    checkpoint()
                    if main:
                        watcher.samples(step)
                if stop:
                    status = "stopped" if watcher.stopped_by is not None else "interrupted"
                    break
                if timed_out:
                    limit.stopped_at = step
                    timed = limit.record(total)
                    console.print(limit.line(total), highlight=False)
                    if save_steps:  # a checkpoint to --resume from, where the run saves them
                        checkpoint()
                    break
                if any_process(accelerator, watcher.prune):  # rlft sweep's pruner: a shorter completed run
                    pruned = True
                    break
    finally:
        if progress is not None and progress.live.is_started:
            progress.stop()
        watcher.flush()
    train_seconds = round(time.time() - start_time, 2)
    alarms = [a["name"] for a in watcher.fired]
    last_log = next((r for r in reversed(watcher.history) if "reward" in r), {})
    try:
        if status == "interrupted":
            return run_.end("interrupted", step, alarms=alarms, signum=interrupt.signum or signal.SIGTERM,
                            last_log=last_log)
        if status == "stopped":
            fields = kept.finish(step, console) if watcher.stopped_by.name == "overfitting" else {}
            return run_.end("stopped", step, alarms=alarms, stopped_by=watcher.stopped_by, last_log=last_log,
                            **fields)
        accelerator.wait_for_everyone()
        rate = (episodes - start_episodes) / max(train_seconds, 1e-9)
        final: dict[str, Any] = {"episodes": episodes, "episodes_per_second": round(rate, 3)}
        fields = kept.finish(step, console, end=True)  # the kept model into the run folder, the last in last/
        alarms = [a["name"] for a in watcher.fired]  # with the end-of-run no_gain alarm, if it fired
        if main:
            watcher.samples(step)
            if heldout_rows and not pruned:  # a pruned sweep trial is judged on its checks: no final pass
                after = heldout(inner.policy, tok, heldout_rows, scorer, reward_fn, budget, bool(cfg.ppo.reward_model))
                final.update(after)
                final.update({f"{k}_before": v for k, v in before.items()})
                console.print("held-out: " + "  ".join(f"{k} {before.get(k, float('nan')):.3f} -> {v:.3f}"
                                                       for k, v in after.items()), highlight=False)
        for k in ("reward", "kl", "entropy"):
            if k in last_log:
                final[f"train_{k}"] = last_log[k]
        return run_.end("completed", step, alarms=alarms, final=final, train_seconds=train_seconds,
                        last_log=last_log, steps_this_run=step - start_step,
                        **({"time_limit": timed} if timed else {}), **fields)
    finally:
        watcher.close()
        accelerator.end_training()


def _track(accelerator, rec: dict, step: int) -> None:
    """Send a logged record's numbers to the trackers of train.report_to (no-op without any)."""
    if accelerator.trackers:
        accelerator.log({f"train/{k}": v for k, v in rec.items() if k != "step" and isinstance(v, (int, float))
                         and not isinstance(v, bool)}, step=step)


def _truncate_metrics(path: Path, step: int) -> None:
    if path.exists():
        lines = [line for line in path.read_text().splitlines()
                 if line.strip() and json.loads(line).get("step", 0) <= step]
        path.write_text("".join(line + "\n" for line in lines))


def _reduce(accelerator, stats: dict[str, float]) -> dict[str, float]:
    """Mean of each statistic over processes (a no-op on one)."""
    if accelerator.num_processes == 1:
        return {k: round(v, 6) if math.isfinite(v) else v for k, v in stats.items()}
    import torch

    keys = sorted(stats)
    t = torch.tensor([stats[k] for k in keys], device=accelerator.device)
    t = accelerator.reduce(t, reduction="mean")
    return {k: round(float(v), 6) for k, v in zip(keys, t.tolist())}
