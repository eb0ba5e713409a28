"""RLOO (REINFORCE with a leave-one-out baseline) with TRL's RLOOTrainer and rlft's verifier registry.

Per prompt, k completions are sampled and scored by the verifier(s); each completion's advantage is its
reward minus the mean reward of the other k-1 (no value model, and, unlike GRPO, no division by the
group's std: TRL's `normalize_advantages` is off by default). A group whose k rewards are equal has zero
advantage everywhere, exactly as in GRPO, so rlft runs the same checks before any step (rlft.methods.group_rl):
gold-field validation (file:line errors), the pre-flight that refuses a run with too few mixed groups, and
optional prompt filtering; after training, held-out pass@1 with the same verifiers goes into summary.json.

Departure from TRL's defaults: `rloo.beta` defaults to 0 (TRL: 0.05), so no reference copy is loaded; this
matches rlft's GRPO and halves the model memory. Set `--set rloo.beta=0.05` for TRL's KL penalty in the reward.

Departure from TRL's trainer: TRL's RLOO runs the model once more per step, without gradient, for the
"old" log-probabilities of its clipped ratio, even when the update follows the sampling at once (one
iteration, one generation per optimizer step, no dropout), where they are the current ones: the ratio is
exp(0) = 1.
Then rlft skips that pass and gives the loss the current log-probabilities, detached, as the old ones: the
same values, loss and gradient (tests/test_rloo.py compares a step with TRL's), one forward fewer (~1 s of a
SmolLM2 step on one CPU thread). With beta > 0, several iterations, generations reused across steps or
dropout on (`disable_dropout: false`), TRL's pass runs as before.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from rlft.config import RunConfig
from rlft.methods import group_rl
from rlft.methods.common import Prepared

KIND = "verifiable"
SAMPLES_WHILE_TRAINING = True  # the policy samples as it trains: rlft.speed.attach in methods.common.train
SECTION = "rloo"


def prepare(cfg: RunConfig, train_rows, eval_rows, console: Console) -> Prepared:
    """Before the run folder exists: validate gold, load the model, pre-flight, filter prompts."""
    return group_rl.prepare(cfg, SECTION, train_rows, eval_rows, console)


def build(cfg: RunConfig, out: Path, prepared: Prepared):
    from trl import RLOOConfig, RLOOTrainer

    return group_rl.build(cfg, SECTION, out, prepared, RLOOConfig, RLOOTrainer, outer=with_current_old_logps)


def with_current_old_logps(trainer_cls):
    """A subclass of (a subclass of) TRL's RLOOTrainer that skips the no-grad "old log-probabilities" pass when
    they equal the current ones, and fills them in from the loss's own pass (see the module docstring)."""
    import torch

    class CurrentOldLogps(trainer_cls):
        rlft_generating = False
        rlft_old_skipped = False
        rlft_loss_inputs = None

        def _old_logps_are_current(self) -> bool:
            a = self.args
            return (self.num_iterations == 1 and a.steps_per_generation == a.gradient_accumulation_steps
                    and not self.beta and not getattr(a, "use_vllm", False) and _deterministic(self.model))

        def _generate_and_score_completions(self, inputs):
            self.rlft_generating, self.rlft_old_skipped = True, False
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                self.rlft_generating = False

        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args,
                                               **kwargs):
            if (self.rlft_generating and not torch.is_grad_enabled() and model is self.model and model.training
                    and self._old_logps_are_current()):
                self.rlft_old_skipped = True  # a placeholder: _compute_loss's own pass fills them in
                return torch.zeros(input_ids.size(0), logits_to_keep, device=input_ids.device), None, None
            out = super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep,
                                                             *args, **kwargs)
            pending = self.rlft_loss_inputs
            if pending is not None and torch.is_grad_enabled():
                self.rlft_loss_inputs = None
                pending["old_logps"] = (out[0].detach() * pending["completion_mask"]).sum(1)
            return out

        def _compute_loss(self, model, inputs):
            if self.rlft_old_skipped:
                self.rlft_loss_inputs = inputs
            try:
                return super()._compute_loss(model, inputs)
            finally:
                self.rlft_loss_inputs = None

    return CurrentOldLogps


def _deterministic(model) -> bool:
    """No dropout anywhere (rlft's default for on-policy methods): with dropout TRL's two passes draw different
    masks, so its ratio is not exactly 1 and the skip would not give TRL's update."""
    import torch

    if any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules()):
        return False
    configs = [getattr(m, "config", None) for m in model.modules() if hasattr(m, "config")]
    return not any(getattr(c, "attention_dropout", 0) for c in configs if c is not None)


def after(cfg: RunConfig, trainer, prepared: Prepared, console: Console) -> dict[str, float]:
    """Greedy pass@1 on the held-out rows, scored by the run's verifiers (rlft.methods.group_rl.heldout)."""
    return group_rl.after(cfg, SECTION, trainer, prepared)
