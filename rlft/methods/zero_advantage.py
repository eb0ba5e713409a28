"""GRPO's and RLOO's loss without the forward and backward of rows whose advantage is zero.

In TRL's GRPO (beta 0) and RLOO losses each completion's term is its advantage times a function of its
log-probabilities (the clipped surrogate, CISPO, SAPO), so a row whose advantage is exactly 0 (every row of a
group whose rewards are all equal) adds exactly 0 to the loss and to every gradient. TRL still runs the model
forward and backward over it, and early in RL most groups are all-equal (all wrong on hard prompts, all right
on easy ones; `frac_reward_zero_std` in TRL's logs). `with_zero_advantage_skip(trainer_cls)` computes TRL's
own loss over the other rows only and rescales it to TRL's normalizer for the whole micro-batch: the rows
(grpo, sapo, dr_grpo, luspo, RLOO), the micro-batch's completion tokens (bnpo), or nothing (dapo, cispo divide
by the generation batch's token count, which TRL computed before this point). Loss value and gradients are
TRL's up to float rounding (tests/test_zero_advantage.py runs both trainers and compares the adapters). A
micro-batch with no such row gets a zero loss tied to every trainable weight, so the optimizer still steps
with zero gradients, as under TRL (AdamW's momentum and weight decay move the weights on such a step too).

What differs from TRL: its per-batch metrics (entropy, clip ratios) cover the rows trained on, and a step
with none logs none of them; `skipped_rows` logs the share of rows skipped. A policy that collapses (every
group all-equal) then shows up in the zero-signal alarm (fed by the rewards), not the entropy one.

Applies where the zero is exact and the loss is one of those: GRPO with beta 0, no entropy bonus or
high-entropy token mask (both read every row's entropy), no off-policy mask, no vLLM importance weights, no
MoE auxiliary loss; one process (a rank that skips its forward would leave the others waiting in the
gradient all-reduce); text-only inputs. Anything else runs TRL's loss unchanged.
"""

from __future__ import annotations

# the per-row tensors of a GRPO/RLOO micro-batch (TRL 1.x); a batch with any other key is left to TRL
ROW_KEYS = frozenset({"prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages",
                      "old_per_token_logps", "ref_per_token_logps", "sampling_per_token_logps", "tool_mask",
                      "old_logps"})
BATCH_KEYS = frozenset({"num_items_in_batch"})

# GRPO loss type -> what TRL divides the summed per-token loss by (see the module docstring)
GRPO_NORMALIZERS = {"grpo": "rows", "sapo": "rows", "dr_grpo": "rows", "luspo": "rows", "bnpo": "tokens",
                    "dapo": "generation", "cispo": "generation"}


def normalizer(trainer) -> str | None:
    """How `trainer`'s loss is normalized ("rows", "tokens", "generation"), or None where skipping zero-advantage
    rows would not give TRL's loss (see the module docstring)."""
    from trl import GRPOTrainer, RLOOTrainer

    if trainer.accelerator.num_processes != 1 or getattr(trainer, "aux_loss_enabled", False):
        return None
    if isinstance(trainer, RLOOTrainer):
        return "rows"  # -min(r A, clip(r) A), mean over the rows; its KL (beta) is in the reward, hence in A
    if not isinstance(trainer, GRPOTrainer):
        return None
    args = trainer.args
    if (trainer.beta != 0.0 or trainer.top_entropy_quantile < 1.0 or getattr(trainer, "off_policy_mask_threshold", None)
            is not None or getattr(trainer, "_entropy_bonus_enabled", False) or getattr(args, "use_vllm", False)):
        return None
    return GRPO_NORMALIZERS.get(trainer.loss_type)


def with_zero_advantage_skip(trainer_cls):
    """A subclass of (a subclass of) TRL's GRPOTrainer or RLOOTrainer whose loss skips zero-advantage rows."""
    import torch

    class ZeroAdvantageSkip(trainer_cls):
        def _compute_loss(self, model, inputs):
            kind = normalizer(self) if self.model.training else None
            advantages = inputs.get("advantages")
            if (kind is None or advantages is None or advantages.dim() != 1
                    or not set(inputs) <= ROW_KEYS | BATCH_KEYS):
                return super()._compute_loss(model, inputs)
            keep = advantages != 0
            rows, kept = advantages.numel(), int(keep.sum())
            self._metrics["train"]["skipped_rows"].append(1.0 - kept / max(rows, 1))
            if kept == rows:
                return super()._compute_loss(model, inputs)
            if kept == 0:  # zero gradients for every trainable weight, as TRL's pass would give
                weights = [p for p in model.parameters() if p.requires_grad]
                return torch.stack([p.sum() for p in weights]).sum() * 0.0
            sub = {k: (v[keep] if k in ROW_KEYS and torch.is_tensor(v) and v.dim() >= 1 and v.size(0) == rows
                       else v) for k, v in inputs.items()}
            loss = super()._compute_loss(model, sub)
            if kind == "rows":
                return loss * (kept / rows)
            if kind == "tokens":
                mask = inputs["completion_mask"]
                if "tool_mask" in inputs:
                    mask = mask * inputs["tool_mask"]
                return loss * (mask[keep].sum().clamp(min=1.0) / mask.sum().clamp(min=1.0))
            return loss

    return ZeroAdvantageSkip
