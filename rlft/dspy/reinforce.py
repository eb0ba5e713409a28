"""RlftReinforceJob: dspy's ReinforceJob, taking GRPO steps on DSPy's groups in this process.

DSPy's GRPO (dspy/teleprompt/grpo.py, 3.4.1) samples every rollout itself, through the LM, scores it with the
metric and hands the backend text-only groups: `step(train_data=[{"batch_id": i, "group": [{"messages": [...],
"completion": {"role": "assistant", "content": "..."}, "reward": r}, ...]}, ...], "grpo_chat")`. It sends one
group per id that `get_status()["pending_batch_ids"]` lists and waits, with no timeout, until some id is
listed. This job:
- `initialize`: resolves an rlft `grpo` config from the LM's and GRPO's train_kwargs (rlft.dspy.config), loads
  the policy (LoRA by default, rlft.speed.precision's dtype), attaches rlft.speed.sampling's copy on the CPU, opens a
  normal run folder (config.yaml, versions.json, summary.json, metrics.jsonl) and has the engine serve the
  policy under the LM's model name, sampled at grpo.temperature while the job is open. A group size under 2
  (DSPy's default num_rollouts_per_grpo_step=1: every group's advantages are zero) is refused in one line
  (UserError) before anything loads;
- `step`: renders each member with the chat template (prompt = messages + generation prompt, completion =
  the content + the end-of-turn token the model emitted), computes group-relative advantages as TRL does
  (A = (r - mean) / (std + 1e-4), std unbiased, scale_rewards "group"), and takes `grpo.num_iterations`
  optimizer steps on TRL's GRPO loss over those groups (loss_type "dapo": per token -min(ratio * A,
  clip(ratio, 1 - epsilon, 1 + epsilon) * A), ratio = exp(logp - old logp), summed over completion tokens / all
  completion tokens of the step; beta 0: no reference). The first iteration is on-policy (ratio 1, TRL's one
  iteration per generation); later ones reuse the same groups against the log-probs before the first update,
  as TRL's num_iterations (the DeepSeekMath paper's mu) does. The default is TRL's 1
  (rlft.dspy.config.DSPY_DEFAULTS says why). The loss is rlft's (`grpo_loss`): TRL's sits inside
  GRPOTrainer._compute_loss, which needs a trainer that generated the batch; tests/test_dspy.py checks the two
  equal on the same groups, with and without old log-probs. Rows with advantage 0 contribute nothing and are
  not run through the model (their tokens still count in the normalizer, as in TRL);
- watches like `rlft grpo`: reward, reward_std, frac_reward_zero_std (DSPy's "no diversity"), loss, grad norm,
  completion length into metrics.jsonl through rlft.watch.monitor.Watcher, so zero_signal and the other alarms fire;
  with a valset (the calling GRPO's, or train_kwargs `valset` + `metric`) a greedy dspy.Evaluate every
  `watch.holdout_every` steps (default 5) logs heldout/pass_at_1, so reward_hacking fires when the reward
  rises while it falls, and the best check's adapter is what `terminate` keeps (watch.keep_best). With no
  valset, the check reads up to TRAIN_CHECK_ROWS of the calling GRPO's training examples, evenly spaced, and says
  so (metrics `heldout/source: trainset`, summary `check_source`): not a held-out score, there to keep the best
  step, since a small model's GRPO on a typed field can swing between labels from one step to the next and end
  on a bad one (BENCHMARKS.md, "DSPy programs"). `terminate` checks the final weights too before it picks;
- explores where DSPy's groups carry no signal (a confident small model answers a typed field the same way
  in all G rollouts: nothing to learn from): when more than half of a step's groups have equal rewards, the
  next step is sampled at 1.25x the temperature (up to train_kwargs `max_temperature`, default 2.0); when
  fewer than a quarter do, it cools back toward grpo.temperature. Each step's temperature is in metrics.jsonl.
  This departs from TRL, whose temperature is fixed, and from its loss, which divides the logits by it: the
  loss here is always on the policy at temperature 1 (for a temperature-1 run the two are the same);
- `get_status`: the next `groups_per_step` batch ids. DSPy's GRPO does not tell the backend how many groups a
  step has (its train_kwargs carry only `num_generations`; it fills whatever count `pending_batch_ids` lists,
  duplicating groups when the list is longer): rlft takes train_kwargs `groups_per_step`, else
  num_dspy_examples_per_grpo_step x predictors read from the GRPO whose compile() called `lm.reinforce` (the
  caller's frame: the one read of DSPy internals, docs/dspy.md), else 4;
- `save_checkpoint(name)`: the adapter into <run>/checkpoints/<name>; `terminate`: the final (or best) model
  into the run folder, summary.json and report, `lm.model` set to the run folder (what `rlft eval / merge /
  export / chat` take) and served from the same weights;
- Ctrl-C (SIGINT in the main thread, while the job is open) marks the job interrupted: a step running then
  saves a checkpoint and records `interrupted`; every later `step` or `get_status` raises one line
  (RuntimeError), so DSPy's wait loop ends instead of polling forever. A terminated job does the same.
"""

from __future__ import annotations

import inspect
import signal
import threading
import time
from pathlib import Path
from typing import Any

from dspy.clients.provider import ReinforceJob

from rlft.dspy.scoring import completion_logps
from rlft.errors import UserError

DEFAULT_GROUPS_PER_STEP = 4
HOLDOUT_EVERY = 5
# With no valset, the check reads up to this many training examples (evenly spaced; module docstring).
TRAIN_CHECK_ROWS = 48
STD_EPS = 1e-4  # TRL's: advantages / (std + 1e-4)
# Exploration: when more than EXPLORE_ABOVE of a step's groups carry no signal, the next step samples hotter
# (x EXPLORE_FACTOR, up to train_kwargs `max_temperature`); below SETTLE_BELOW it cools back toward grpo.temperature.
EXPLORE_ABOVE = 0.5
SETTLE_BELOW = 0.25
EXPLORE_FACTOR = 1.25
MAX_TEMPERATURE = 2.0


def next_temperature(current: float, base: float, cap: float, frac_zero: float) -> float:
    """The sampling temperature for the next step, from the share of this step's groups with equal rewards:
    hotter (x EXPLORE_FACTOR, at most `cap`) above EXPLORE_ABOVE, cooler (/ EXPLORE_FACTOR, at least `base`)
    below SETTLE_BELOW, else unchanged. `cap` <= `base` turns it off."""
    if cap <= base:
        return base
    if frac_zero > EXPLORE_ABOVE:
        return min(current * EXPLORE_FACTOR, cap)
    if frac_zero < SETTLE_BELOW:
        return max(current / EXPLORE_FACTOR, base)
    return current


def group_advantages(rewards: list[float]) -> list[float]:
    """TRL's group-relative advantages for one group: (r - mean) / (unbiased std + 1e-4); a group of equal
    rewards gets zeros."""
    import torch

    r = torch.tensor(rewards, dtype=torch.float64)
    if len(rewards) < 2:
        return [0.0] * len(rewards)
    std = r.std()
    if torch.isclose(std, torch.zeros_like(std)):
        return [0.0] * len(rewards)
    return ((r - r.mean()) / (std + STD_EPS)).tolist()


def grpo_loss(logps, mask, advantages, total_tokens: float, old_logps=None, epsilon: float = 0.2):
    """TRL's GRPO loss, loss_type dapo, beta 0: per token -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A),
    ratio = exp(logp - old logp), summed over completion tokens and divided by every completion token of the
    step (TRL's num_items_in_batch). With `old_logps` None (the first iteration on a batch) the old log-probs
    are the current ones detached: the ratio is 1 with the policy gradient's gradient and nothing is clipped."""
    import torch

    old = logps.detach() if old_logps is None else old_logps
    ratio = torch.exp(logps - old)
    adv = advantages.unsqueeze(1)
    per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * adv)
    return (per_token * mask).sum() / max(float(total_tokens), 1.0)


def _calling_grpo():
    """(GRPO, student, valset, trainset) from the dspy GRPO.compile() frame that called lm.reinforce, if any."""
    try:
        from dspy.teleprompt.grpo import GRPO
    except ImportError:  # pragma: no cover
        return None, None, None, None
    frame = inspect.currentframe()
    try:
        while frame is not None:
            me = frame.f_locals.get("self")
            if isinstance(me, GRPO) and frame.f_code.co_name == "compile":
                f = frame.f_locals
                return me, f.get("student"), f.get("valset"), f.get("trainset")
            frame = frame.f_back
    finally:
        del frame
    return None, None, None, None


def train_check_rows(trainset, limit: int = TRAIN_CHECK_ROWS) -> list:
    """Up to `limit` examples of `trainset`, evenly spaced, in order (the check when no valset is given)."""
    rows = list(trainset or [])
    if len(rows) <= limit:
        return rows
    return [rows[(i * len(rows)) // limit] for i in range(limit)]


class RlftReinforceJob(ReinforceJob):
    """One GRPO training job on the LM's model (module docstring)."""

    def __init__(self, lm, train_kwargs: dict[str, Any] | None = None):
        super().__init__(lm=lm, train_kwargs=train_kwargs)
        self.state = "new"
        self.closed_reason: str | None = None
        self.batch_id = 0
        self.steps = 0
        self.rollouts = 0
        self.step_seconds: list[float] = []  # the training part of each step
        self.step_ends: list[float] = []  # time.time() at the end of each step (bench/bench_dspy.py reads them)
        self._previous_sigint = None
        self._lock = threading.Lock()

    # --- lifecycle ---------------------------------------------------------------------------------------
    def initialize(self):
        from rlft.dspy.config import resolve, shared_engine
        from rlft.methods.common import load_run_tokenizer
        from rlft.models import load_model
        from rlft.quiet import quiet_libraries
        from rlft.run.folder import RunRecord, check_run_folder, prepare_output_dir, versions, write_json
        from rlft.speed import precision
        from rlft.watch.monitor import Watcher
        from rlft.watch.setup import prepare_watch

        quiet_libraries()
        kwargs = {**(self.lm.train_kwargs or {}), **(self.train_kwargs or {})}
        self.kwargs = kwargs
        group = kwargs.get("num_generations")
        if isinstance(group, int) and 0 < group < 2:  # DSPy's GRPO defaults to num_rollouts_per_grpo_step=1
            raise UserError(f"dspy.GRPO's groups have {group} rollout each (num_rollouts_per_grpo_step={group}, "
                            "DSPy's default): GRPO learns from reward differences within a group, so no step "
                            "would change the model", "pass num_rollouts_per_grpo_step=8 (at least 4) to GRPO(...)")
        self.cfg = cfg = resolve("grpo", self.lm.model, kwargs)
        out = Path(cfg.train.output_dir).resolve()
        cfg.values["train"]["output_dir"] = str(out)
        check_run_folder(cfg)
        grpo, student, valset, trainset = _calling_grpo()
        self.groups_per_step = int(kwargs.get("groups_per_step") or (
            grpo.num_dspy_examples_per_grpo_step * max(len(student.predictors()), 1) if grpo is not None and
            student is not None else DEFAULT_GROUPS_PER_STEP))
        self.student = student
        self.valset = kwargs.get("valset") or valset
        self.metric = kwargs.get("metric") or (grpo.metric if grpo is not None else None)
        self.check_source = "valset"
        if not self.valset and trainset and cfg.watch.get("keep_best", True):
            self.valset = train_check_rows(trainset)
            self.check_source = "trainset"
        if kwargs.get("valset") and self.student is None:
            self.student = kwargs.get("program")
        self.holdout_every = int(cfg.watch.get("holdout_every") or HOLDOUT_EVERY)
        self.keep_best = bool(cfg.watch.get("keep_best", True))
        console = _console()
        precision.apply(cfg, console)
        from rlft import speed

        speed.set_enabled(cfg.train.get("speedups", True))  # train.speedups=false: plain transformers/TRL
        from transformers import set_seed

        set_seed(cfg.train.seed)
        self.tok = load_run_tokenizer(cfg)
        self.tok.padding_side = "left"
        self.model = load_model(cfg.model)
        self.model.train()
        from rlft.chat.templates import end_of_turn_token

        eot = end_of_turn_token(self.tok)
        self.eot_ids = self.tok(eot, add_special_tokens=False)["input_ids"] if eot else [self.tok.eos_token_id]
        if self.model.device.type == "cpu" and getattr(self.model, "peft_config", None):
            from rlft.speed import attach

            attach(self.model, console)
        import torch

        params = [p for p in self.model.parameters() if p.requires_grad]
        lr = cfg.train.learning_rate or 1e-6
        self.optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=float(cfg.train.get("weight_decay") or 0.0))
        self.max_grad_norm = float(cfg.train.get("max_grad_norm") or 1.0)
        self.out = prepare_output_dir(out)
        (out / "config.yaml").write_text(cfg.to_yaml())
        write_json(out / "versions.json", versions())
        self.record = RunRecord(out, "dspy-grpo")
        self.record.update(groups_per_step=self.groups_per_step, valset_rows=len(self.valset or []),
                           check_source=self.check_source if self.valset else None, model=self.lm.model)
        self.watch = prepare_watch(cfg)
        self.watcher = Watcher(out, console, self.watch)
        self.console = console
        spec = getattr(self.lm, "_engine_spec", None)
        self.engine = spec if hasattr(spec, "serve") else shared_engine()
        self.served_name = self.lm.model
        self.engine.serve(self.served_name, self.model, self.tok)
        self._temperature = self.lm.kwargs.get("temperature")
        self.base_temperature = float(cfg.grpo.temperature)
        self.max_temperature = float(kwargs.get("max_temperature") or MAX_TEMPERATURE)
        self.lm.kwargs["temperature"] = self.base_temperature
        self.best: tuple[float, int, dict] | None = None
        if threading.current_thread() is threading.main_thread():
            self._previous_sigint = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self._on_sigint)
        self.state = "ready"
        self.started = time.time()
        self.step_ends = []
        console.print(f"[bold]rlft.dspy GRPO[/]: {self.lm.model} -> {out} ({self.groups_per_step} groups a step, "
                      f"temperature {cfg.grpo.temperature}, lr {lr})", highlight=False)
        if self.valset and self.student is not None and self.metric is not None:
            self._heldout(0)

    def _on_sigint(self, signum, frame):
        self.closed_reason = (f"rlft GRPO job interrupted (Ctrl-C); checkpoint and summary in {self.out}; "
                              "start a new dspy GRPO compile to train again")
        if self.state == "ready":
            self._checkpoint_and_close("interrupted")
        previous = self._previous_sigint
        if callable(previous):
            previous(signum, frame)
        raise KeyboardInterrupt

    def _check_open(self):
        if self.state != "ready":
            raise RuntimeError(self.closed_reason or f"rlft GRPO job is {self.state}: start a new GRPO compile")

    def get_status(self):
        self._check_open()
        return {"job_id": str(self.out), "status": "ready", "current_model": self.lm.model,
                "checkpoints": dict(self.checkpoints), "last_checkpoint": self.last_checkpoint,
                "pending_batch_ids": list(range(self.batch_id, self.batch_id + self.groups_per_step))}

    def status(self):
        return self.state

    # --- the step ----------------------------------------------------------------------------------------
    def step(self, train_data: list, train_data_format=None):
        self._check_open()
        fmt = getattr(train_data_format, "value", train_data_format)
        if fmt not in (None, "grpo_chat"):
            raise UserError(f"rlft GRPO takes DSPy's grpo_chat groups, not '{fmt}'", "use dspy.GRPO")
        groups = [item["group"] if isinstance(item, dict) and "group" in item else item for item in train_data]
        ids = [item["batch_id"] for item in train_data if isinstance(item, dict) and "batch_id" in item]
        try:
            with self._lock:
                record = self._train(groups)
        except KeyboardInterrupt:
            if self.state == "ready":
                self.closed_reason = f"rlft GRPO job interrupted (Ctrl-C) in step {self.steps + 1}; see {self.out}"
                self._checkpoint_and_close("interrupted")
            raise
        self.batch_id = max([self.batch_id + self.groups_per_step - 1, *ids]) + 1
        self.steps += 1
        record["step"] = self.steps
        record["temperature"] = self.lm.kwargs.get("temperature")  # what this step's groups were sampled at
        self.lm.kwargs["temperature"] = next_temperature(float(record["temperature"] or 0.0), self.base_temperature,
                                                         self.max_temperature, record["frac_reward_zero_std"])
        self.watcher.log(record)
        self.step_ends.append(time.time())
        if self.valset and self.student is not None and self.metric is not None and \
                self.steps % self.holdout_every == 0:
            self._heldout(self.steps)
        return record

    def _train(self, groups: list[list[dict]]) -> dict[str, Any]:
        import torch

        start = time.time()
        tok = self.tok
        rows = []  # (prompt ids, completion ids, advantage)
        rewards_all, zero, lengths, total_tokens, stds = [], 0, [], 0, []
        for group in groups:
            rewards = [float(m["reward"]) for m in group]
            adv = group_advantages(rewards)
            rewards_all += rewards
            stds.append(float(torch.tensor(rewards).std()) if len(rewards) > 1 else 0.0)
            if all(a == 0.0 for a in adv):
                zero += 1
            for member, a in zip(group, adv):
                p, c = self.render(member)
                total_tokens += len(c)
                lengths.append(len(c))
                if a != 0.0:
                    rows.append((p, c, a))
        self.rollouts += len(rewards_all)
        loss_value, grad_norm = 0.0, 0.0
        served = self.engine.served(self.served_name)
        iterations = max(int(self.cfg.grpo.get("num_iterations") or 1), 1)
        eps = self.cfg.grpo.get("epsilon")
        epsilon = 0.2 if eps is None else float(eps)  # TRL's default; 0 is a value, not "unset"
        if rows:
            with served.lock:
                self.model.train()
                micro = int(self.cfg.train.get("per_device_train_batch_size") or 8)
                parts = [rows[k:k + micro] for k in range(0, len(rows), micro)]
                old: list = [None] * len(parts)  # each part's log-probs before this batch's first update
                for iteration in range(iterations):
                    for i, part in enumerate(parts):
                        logps, mask = completion_logps(self.model, [r[0] for r in part], [r[1] for r in part],
                                                       tok.pad_token_id)
                        if iteration == 0:
                            old[i] = logps.detach()
                        adv = torch.tensor([r[2] for r in part], dtype=logps.dtype, device=logps.device)
                        loss = grpo_loss(logps, mask, adv, total_tokens, old_logps=old[i], epsilon=epsilon)
                        loss.backward()
                        if iteration == 0:  # the on-policy iteration's loss and gradient norm are the ones logged
                            loss_value += float(loss.detach())
                    params = [p for p in self.model.parameters() if p.requires_grad]
                    norm = float(torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm))
                    if iteration == 0:
                        grad_norm = norm
                    self.optimizer.step()
                    self.optimizer.zero_grad(set_to_none=True)
        seconds = time.time() - start
        self.step_seconds.append(seconds)
        n = max(len(groups), 1)
        return {"reward": sum(rewards_all) / max(len(rewards_all), 1), "reward_std": sum(stds) / n,
                "frac_reward_zero_std": zero / n, "loss": loss_value, "grad_norm": grad_norm,
                "completions/mean_length": sum(lengths) / max(len(lengths), 1), "groups": len(groups),
                "rollouts": self.rollouts, "step_seconds": round(seconds, 3)}

    def render(self, member: dict) -> tuple[list[int], list[int]]:
        """(prompt ids, completion ids) of one group member: the chat template's prompt with the generation
        prompt, then the completion's tokens and the end-of-turn token that ended it."""
        tok = self.tok
        text = tok.apply_chat_template(member["messages"], tokenize=False, add_generation_prompt=True)
        prompt = tok(text, add_special_tokens=False)["input_ids"]
        content = member["completion"]["content"] if isinstance(member["completion"], dict) else member["completion"]
        completion = tok(content, add_special_tokens=False)["input_ids"] + list(self.eot_ids)
        return prompt, completion

    # --- held-out check and keeping the best ----------------------------------------------------------------
    def _heldout(self, step: int) -> float:
        import dspy

        temperature = self.lm.kwargs.get("temperature")
        self.lm.kwargs["temperature"] = None  # greedy, as rlft's held-out checks are
        try:
            evaluate = dspy.Evaluate(devset=self.valset, metric=self.metric, num_threads=8,
                                     display_progress=False, display_table=False)
            result = evaluate(self.student)
        finally:
            self.lm.kwargs["temperature"] = temperature
        score = float(getattr(result, "score", result)) / 100.0
        self.watcher.log({"step": step, "heldout/pass_at_1": score, "heldout/n": len(self.valset),
                          "heldout/source": self.check_source})
        what = ("held-out" if self.check_source == "valset"
                else f"{len(self.valset)} training examples, no valset given,")
        self.console.print(f"check on {what} (dspy.Evaluate, greedy) at step {step}: {score:.3f}", highlight=False)
        if self.best is None or score > self.best[0]:
            state = {k: v.detach().clone() for k, v in self.model.state_dict().items() if "lora_" in k}
            self.best = (score, step, state)
        return score

    # --- checkpoints and the end ---------------------------------------------------------------------------
    def save_checkpoint(self, checkpoint_name: str, score: float | None = None):
        self._check_open()
        path = self.out / "checkpoints" / checkpoint_name
        with self.engine.served(self.served_name).lock:
            self.model.save_pretrained(path)
        self.tok.save_pretrained(path)
        self.checkpoints[checkpoint_name] = str(path)
        self.last_checkpoint = checkpoint_name
        return str(path)

    def _checkpoint_and_close(self, status: str) -> None:
        self.state = status
        try:
            path = self.out / f"checkpoint-{self.steps}"
            self.model.save_pretrained(path)
            self.tok.save_pretrained(path)
            self.record.finish(status, global_step=self.steps, checkpoint=str(path), rollouts=self.rollouts,
                               alarms=self.watcher.alarm_names)
        finally:
            self._restore()

    def _restore(self):
        self.lm.kwargs["temperature"] = self._temperature
        if self._previous_sigint is not None:
            signal.signal(signal.SIGINT, self._previous_sigint)
            self._previous_sigint = None

    def _last_check_step(self) -> int | None:
        """The step of the latest check in the run's history (None before the first)."""
        steps = [r["step"] for r in self.watcher.history if "heldout/pass_at_1" in r]
        return steps[-1] if steps else None

    def terminate(self):
        if self.state != "ready":
            return
        from rlft.report import report_and_print

        kept = {}
        if self.best is not None and self._last_check_step() != self.steps:
            self._heldout(self.steps)  # the final weights are checked too before the best is picked
        if self.keep_best and self.best is not None:
            score, step, state = self.best
            if self._last_check_step() != step:
                self.model.load_state_dict(state, strict=False)
                kept = {"kept": {"step": step, "heldout/pass_at_1": score, "source": self.check_source}}
                what = "held-out" if self.check_source == "valset" else "training-example"
                self.console.print(f"kept the best {what} check's adapter: step {step} ({score:.3f})",
                                   highlight=False)
        with self.engine.served(self.served_name).lock:
            self.model.save_pretrained(self.out)
        self.tok.save_pretrained(self.out)
        self.state = "terminated"
        self.closed_reason = f"rlft GRPO job terminated; its model is {self.out}"
        mean = sum(self.step_seconds) / max(len(self.step_seconds), 1)
        self.record.finish("completed", global_step=self.steps, rollouts=self.rollouts,
                           mean_step_seconds=round(mean, 3), alarms=self.watcher.alarm_names,
                           train_seconds=round(time.time() - self.started, 2), **kept)
        self.watcher.flush()
        self._restore()
        report_and_print(self.out, self.console)
        # the LM now names the run folder (rlft eval / merge / export / chat take it) and is served these weights
        self.engine.serve(str(self.out), self.model, self.tok)
        self.lm.model = str(self.out)

    def cancel(self):
        if self.state == "ready":
            self.closed_reason = f"rlft GRPO job cancelled; see {self.out}"
            self._checkpoint_and_close("interrupted")


def _console():
    from rich.console import Console

    return Console(stderr=True)
