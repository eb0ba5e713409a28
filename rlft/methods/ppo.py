"""PPO for language models: rlft's own trainer on transformers + peft + accelerate (TRL has none since 1.13).

This module is the training loop (part 3 of 3); setup is in ppo_setup.py, rollout and update in
ppo_rollout.py, the arithmetic in ppo_math.py.

What it is. Each step takes B prompts (train.per_device_train_batch_size per process) and
  1. rollout: samples one response per prompt from the policy (temperature `temperature`, no top-k/top-p, at
     most `response_length` tokens, cut after the first eos) and keeps each token's log-prob under the
     sampling distribution; scores the response with the verifier(s) or the reward model (through
     rlft.reward_model.scoring, the path `rlft reward` was evaluated on) and subtracts `missing_eos_penalty` from
     responses that never emitted eos; runs the frozen reference (with LoRA: the policy with its adapter
     disabled, so one base model sits in memory, not two) and the value model over the same tokens;
  2. advantages: per-token reward R'_t = -kl_coef * (log pi - log pi_ref), plus the score on the response's
     last token (its eos), or, for an implicit reward model (ppo.token_rewards), its log-ratio
     beta * (log pi_rm - log pi_ref) on every token; GAE (gamma, lam) with the value model as the baseline,
     then whitening over the batch's tokens; returns = advantages + values;
  3. update: `num_ppo_epochs` passes over the batch in `num_mini_batches` shuffled minibatches (each split
     into train.gradient_accumulation_steps micro-batches), one AdamW step per minibatch on
     -min(ratio * A, clip(ratio, 1 +- cliprange) * A) + vf_coef * the clipped value loss (cliprange_value).
The arithmetic is in rlft/methods/ppo_math.py, checked against numbers computed by hand.

Where it departs from the paper (Schulman et al. 2017, as used for RLHF by Ziegler et al. 2019):
  - an episode is one response and an action one token; the reward arrives once, at the end, and the KL
    penalty to the reference is folded into every token's reward (Ziegler et al.), with a fixed kl_coef
    (the paper's adaptive KL controller is not implemented); a DPO-trained (implicit) reward model is a sum
    of per-token log-ratios, and rlft puts each on its token (Rafailov et al. 2024, "From r to Q*", read it
    as a token-level reward), so a token's advantage does not carry the log-ratios of the tokens before it
    (rlft.methods.ppo_setup.token_reward says why and when);
  - the advantages are whitened per batch, and gamma is 1.0 by default (episodes are a few dozen tokens);
  - the value model is a separate network (a one-output score head on its own copy of the backbone,
    initialised from the policy's weights, head zeroed) rather than a second head on the policy;
  - dropout is switched off in every network, and the rollout's log-probs are recomputed by the policy's own
    forward after sampling (as TRL's trainer did), not taken from the sampler's logits: the sampling copy
    (rlft.speed.sampling: merged weights, bf16 over a bf16 base) rounds the adapter's small updates, and its
    log-probs would put that rounding into the ratio and the KL. The first update sees ratio 1.

Where it departs from TRL's old PPOTrainer (trl <= 1.12, trl.experimental.ppo):
  - the same data as the other rlft methods: text or chat prompts with gold fields, rendered like
    GRPO renders them; no pre-tokenised `input_ids`; stopping at eos is the default, not opt-in;
  - the reward can be a verifier (any rlft verifier spec) as well as a reward model (TRL issue #3093); a
    score-head reward model is scored through rlft.reward_model.scoring.score on the decoded text, so it need
    not share the policy's tokenizer (an implicit one scored per token reads the policy's own token ids);
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
from rlft.methods.ppo_setup import (
    build_networks,
    check_config,
    check_reward_model,
    memory_check,
    reward_function,
    token_reward,
)
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
    if cfg.ppo.reward_model and cfg.watch.get("holdout") and (cfg.ppo.get("min_reward_agreement") or 0) > 0 \
            and not resume:  # --resume needs a checkpoint: the run passed the check (or was let past) when it began
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


def _train(run_: Run, train_rows, heldout_rows, scorer, budget) -> RunResult:
    """The loop: set up (trackers, networks, optimizer and schedule, resume), the held-out check before, the steps,
    the ending."""
    loop = _Loop(run_, train_rows, heldout_rows, scorer, budget)
    status, pruned = loop.steps()  # an error in the loop propagates as it is (steps() stops the progress line)
    try:
        return loop.finish(status, pruned)
    finally:
        loop.watcher.close()
        loop.accelerator.end_training()


class _Loop:
    """One PPO run's state between its steps: what the loop body, its checks, logs and checkpoints share."""

    def __init__(self, run_: Run, train_rows, heldout_rows, scorer, budget) -> None:
        import torch
        from accelerate import Accelerator
        from accelerate.utils import set_seed
        from transformers import get_scheduler

        from rlft import speed
        from rlft.methods.keep import KeptModels
        from rlft.run.folder import Interrupt
        from rlft.watch.monitor import ProgressLine, RolloutRecorder, Watcher, progress_bar

        self.run_, self.train_rows, self.heldout_rows, self.scorer, self.budget = \
            run_, train_rows, heldout_rows, scorer, budget
        cfg, out, ckpt = run_.cfg, run_.out, run_.checkpoint
        self.cfg, self.out, self.console, self.watch = cfg, out, run_.console, run_.watch
        trackers = tracker_names(cfg.train.report_to)  # train.report_to: the scalars of metrics.jsonl, under train/
        accelerator = self.accelerator = Accelerator(log_with=trackers or None, project_dir=str(out / "runs"))
        if trackers:  # project "rlft" (tensorboard: RUN/runs/rlft/; TRL's methods write RUN/runs/<date>_<host>/)
            names = {"wandb": {"name": out.name}, "trackio": {"name": out.name}}  # the run as the folder is called
            accelerator.init_trackers("rlft", config=tracker_config(cfg),
                                      init_kwargs={k: v for k, v in names.items() if k in trackers})
        set_seed(cfg.train.seed)
        self.main = main = accelerator.is_main_process
        self.tok, policy, self.ref, value = build_networks(cfg)
        speed.attach(policy, self.console)  # LoRA on the CPU: rollouts from a plain copy (rlft.speed.sampling)
        model = policy_and_value(policy, value)
        params = [p for p in model.parameters() if p.requires_grad]
        t = cfg.train  # AdamW as transformers' Trainer builds it: its TrainingArguments defaults, overridable here
        optimizer = torch.optim.AdamW(params, lr=t.learning_rate or DEFAULT_LR,
                                      weight_decay=t.get("weight_decay") or 0.0,
                                      betas=(t.get("adam_beta1") or 0.9, t.get("adam_beta2") or 0.999),
                                      eps=t.get("adam_epsilon") or 1e-8)
        self.batch = batch = cfg.train.per_device_train_batch_size
        self.world = world = accelerator.num_processes
        self.total = cfg.train.max_steps if cfg.train.max_steps > 0 else \
            max(1, math.ceil(len(train_rows) * cfg.train.num_train_epochs / (batch * world)))
        self.scheduler = get_scheduler(cfg.train.get("lr_scheduler_type") or "linear", optimizer,
                                       num_warmup_steps=int(cfg.train.get("warmup_steps") or 0),
                                       num_training_steps=self.total)
        self.model, self.optimizer = accelerator.prepare(model, optimizer)
        accelerator.register_for_checkpointing(self.scheduler)
        if self.ref is not None:
            self.ref.to(accelerator.device)
        self.reward_fn = reward_function(cfg)
        for part in getattr(self.reward_fn, "parts", [self.reward_fn]):
            if hasattr(part, "load"):  # a reward model: load it once, on the training device
                part.load().to(accelerator.device)
        self.token_reward = token_reward(cfg, self.reward_fn, self.tok, self.console)
        self.inner = accelerator.unwrap_model(self.model)
        self.order = PromptOrder(len(train_rows), batch, world, accelerator.process_index, cfg.train.seed)
        self.generator = torch.Generator().manual_seed(cfg.train.seed + 7919 * accelerator.process_index)

        self.step, self.episodes, carried = 0, 0, {}
        if ckpt is not None:
            accelerator.load_state(str(ckpt))
            state = json.loads((ckpt / STATE_FILE).read_text())
            self.step, self.episodes = state["step"], state["episodes"]
            self.generator.set_state(torch.tensor(state["generator"], dtype=torch.uint8))
            carried = state.get("heldout_before", {})
        if ckpt is not None and main:  # a crash after the checkpoint logged steps that will run again
            _truncate_metrics(out / "metrics.jsonl", self.step)
        self.watcher = Watcher(out, self.console, self.watch)  # writes on the main process only
        # the start and the best held-out check's model, and at the end the one the run folder keeps (as TRL runs do)
        self.kept = KeptModels(out, self.watcher, self.save, self.watch.keep_best, main=main)
        recorder = RolloutRecorder()
        self.reward_call = recorder.wrap(self.reward_fn, 0, 1.0)
        self.watcher.recorder = recorder
        self.interrupt = Interrupt()
        self.progress = progress_bar(self.console) if main else None
        self.task = None
        self.logging_steps = max(1, int(cfg.train.logging_steps or 1))
        self.save_steps = int(cfg.train.save_steps or 0)
        self.line = ProgressLine()
        self.before = carried or run_.prior.get("heldout_before") or {}
        if heldout_rows and not self.before and main:
            self.before = self.heldout_scores()
            self.console.print("held-out before: " + "  ".join(f"{k} {v:.3f}" for k, v in self.before.items()),
                               highlight=False)
        run_.record.update(heldout_before=self.before)
        self.console.print(f"[bold]rlft ppo[/]: {len(train_rows)} prompts, {self.total} steps x {batch * world} "
                           f"prompts, {cfg.ppo.num_ppo_epochs} epochs x {cfg.ppo.num_mini_batches} minibatches "
                           f"-> {out}")
        self.window: dict[str, list[float]] = {}
        self.start_time, self.start_step, self.start_episodes = time.time(), self.step, self.episodes
        self.limit = TimeLimit(cfg.train.get("max_minutes"))  # train.max_minutes: end within it, as at `total`
        self.timed: dict | None = None  # summary.json's time_limit when the limit ended the run

    # ---- what the steps share
    def save(self, path: str) -> None:
        if self.main:
            self.inner.policy.save_pretrained(path)
            self.tok.save_pretrained(path)

    def heldout_scores(self) -> dict[str, float]:
        return heldout(self.inner.policy, self.tok, self.heldout_rows, self.scorer, self.reward_fn, self.budget,
                       bool(self.cfg.ppo.reward_model))

    def refresh(self, record: dict) -> None:
        stats = self.line.stats(record, self.watcher.alarm_names)
        if self.progress is not None:
            self.progress.update(self.task, completed=self.step, stats=stats)

    def checkpoint(self) -> Path:
        return save_checkpoint(self.accelerator, self.out, self.step,
                               {"episodes": self.episodes, "heldout_before": self.before,
                                "generator": self.generator.get_state().tolist()}, self.cfg.train.save_total_limit)

    def log(self) -> None:
        """Log the steps since the last log (means over them) and empty the window."""
        rec = {"step": self.step, "epoch": round(self.order.epoch(self.step), 4), "episodes": self.episodes}
        rec.update(_reduce(self.accelerator, {k: sum(v) / len(v) for k, v in self.window.items()}))
        rec["episodes_per_second"] = round((self.episodes - self.start_episodes) / (time.time() - self.start_time), 3)
        self.watcher.log(rec)
        _track(self.accelerator, rec, self.step)
        self.refresh(rec)
        self.window = {}

    def check(self) -> None:
        """A held-out check at this step and the save it makes, timed for the limit (the main process)."""
        began = time.monotonic()
        self.refresh(self.watcher.heldout(self.inner.policy, self.tok, self.step, self.order.epoch(self.step)))
        self.kept.after_check()
        self.limit.checked(time.monotonic() - began)

    def one_step(self) -> None:
        """Rollout, advantages and update on this step's prompts; the statistics into the log window."""
        from rlft.methods.ppo_math import explained_variance

        rows = [self.train_rows[i].data for i in self.order.indices(self.step)]
        ro = rollout(self.inner.policy, self.inner.value, self.ref, self.tok, rows, self.reward_call, self.cfg,
                     self.accelerator.device, self.token_reward, self.watcher.recorder.record)
        stats = {k: float(v) for k, v in ro.stats.items()}
        stats.update(update(self.model, self.optimizer, self.accelerator, ro, self.cfg, self.generator))
        stats["val/explained_variance"] = explained_variance(ro.values, ro.returns, ro.mask)
        stats["learning_rate"] = self.scheduler.get_last_lr()[0]
        self.scheduler.step()
        self.step += 1
        self.episodes += len(rows) * self.world
        for k, v in stats.items():
            self.window.setdefault(k, []).append(v)

    def plan(self, checked: bool, out_of_time: bool):
        from rlft.run.folder import any_process
        from rlft.run.step_plan import after_step

        alarm = self.watcher.stopped_by is not None
        stop = any_process(self.accelerator, self.interrupt.signum is not None or alarm)  # one process stops all
        return after_step(self.step, self.total, checked=checked, has_checks=self.watch.holdout is not None,
                          out_of_time=out_of_time, interrupted=stop and not alarm, alarm_stop=stop and alarm,
                          prune=False, save_steps=self.save_steps, saves_checkpoints=bool(self.save_steps))

    def steps(self) -> tuple[str, bool]:
        """Steps until `total`, a stop, the time limit or the pruner: (status, pruned), the checks, logs and
        checkpoints rlft.run.step_plan decides after each."""
        from rlft.run.folder import any_process
        from rlft.run.step_plan import check_due
        from rlft.watch.monitor import alarm_state

        h = self.watch.holdout
        try:
            if self.progress is not None:
                self.progress.start()
                self.task = self.progress.add_task("ppo", total=self.total, completed=self.step,
                                                   stats=alarm_state(self.watcher.alarm_names))
            self.limit.begin()
            if h is not None and self.main and self.step == 0:
                self.check()
            with self.interrupt.installed():
                while self.step < self.total:
                    self.one_step()
                    self.limit.step_done()
                    if self.step % self.logging_steps == 0 or self.step == self.total:
                        self.log()
                    due = check_due(self.step, self.total, h.every_for(self.total) if h is not None else None)
                    if due and self.main:
                        self.check()
                    out_of_time = (self.limit.on and self.step < self.total
                                   and any_process(self.accelerator, self.limit.out_of_time(self.step, h is not None)))
                    plan = self.plan(due, out_of_time)
                    if plan.log and self.window:  # the last step's metrics, where this step did not log
                        self.log()
                        plan = self.plan(due, out_of_time)  # the log's alarm rules may have stopped the run
                    if plan.closing_check:
                        if self.main:
                            self.check()
                        plan = self.plan(True, out_of_time)  # the closing check may have stopped the run
                    if self.progress is not None:
                        self.progress.update(self.task, completed=self.step)
                    if plan.save:
                        self.checkpoint()
                        if plan.samples and self.main:
                            self.watcher.samples(self.step)
                    if plan.ending in ("interrupted", "stopped"):
                        return plan.ending, False
                    if plan.ending == "time_limit":
                        self.limit.stopped_at = self.step
                        self.timed = self.limit.record(self.total)
                        self.console.print(self.limit.line(self.total), highlight=False)
                        return "completed", False
                    if any_process(self.accelerator, self.watcher.prune):  # rlft sweep's pruner: a shorter run
                        return "completed", True
            return "completed", False
        finally:
            if self.progress is not None and self.progress.live.is_started:
                self.progress.stop()
            self.watcher.flush()

    def finish(self, status: str, pruned: bool) -> RunResult:
        """The ending: the run folder's model (rlft.methods.keep), the held-out check after, summary.json."""
        run_, watcher, console, step = self.run_, self.watcher, self.console, self.step
        train_seconds = round(time.time() - self.start_time, 2)
        alarms = [a["name"] for a in watcher.fired]
        last_log = next((r for r in reversed(watcher.history) if "reward" in r), {})
        if status == "interrupted":
            return run_.end("interrupted", step, alarms=alarms, signum=self.interrupt.signum or signal.SIGTERM,
                            last_log=last_log)
        if status == "stopped":
            fields = self.kept.finish(step, console) if watcher.stopped_by.name == "overfitting" else {}
            return run_.end("stopped", step, alarms=alarms, stopped_by=watcher.stopped_by, last_log=last_log,
                            **fields)
        self.accelerator.wait_for_everyone()
        rate = (self.episodes - self.start_episodes) / max(train_seconds, 1e-9)
        final: dict[str, Any] = {"episodes": self.episodes, "episodes_per_second": round(rate, 3)}
        fields = self.kept.finish(step, console, end=True)  # the kept model into the run folder, the last in last/
        alarms = [a["name"] for a in watcher.fired]  # with the end-of-run no_gain alarm, if it fired
        if self.main:
            watcher.samples(step)
            if self.heldout_rows and not pruned:  # a pruned sweep trial is judged on its checks: no final pass
                after = self.heldout_scores()
                final.update(after)
                final.update({f"{k}_before": v for k, v in self.before.items()})
                console.print("held-out: " + "  ".join(f"{k} {self.before.get(k, float('nan')):.3f} -> {v:.3f}"
                                                       for k, v in after.items()), highlight=False)
        for k in ("reward", "kl", "entropy"):
            if k in last_log:
                final[f"train_{k}"] = last_log[k]
        return run_.end("completed", step, alarms=alarms, final=final, train_seconds=train_seconds,
                        last_log=last_log, steps_this_run=step - self.start_step,
                        **({"time_limit": self.timed} if self.timed else {}), **fields)


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
