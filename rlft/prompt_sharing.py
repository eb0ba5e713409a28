"""Score G completions of one prompt with the prompt computed once: GRPO's and RLOO's forward and backward.

TRL's GRPO and RLOO trainers score a step's completions (the loss's log-probabilities, and RLOO's old
log-probabilities) by running the model over every row's prompt + completion, and each prompt appears G times
in the batch. On the CPU, where the forward and backward are the other half of a step beside sampling, that
is G x the prompt's work for nothing: with SmolLM2's chat prompts (57 tokens with the system turn) and 48
new tokens, 2 prompts x G 4 are 8 x 105 positions, of which 8 x 57 are prompt.

`per_token_logps` runs each distinct prompt (all but its last token) once with a KV cache, copies the cache
rows to the prompt's G rows (an index, so the gradient of every copy flows back into the one prompt pass),
then runs the rest: the prompt's last token and the completion, 8 x 49 positions here. The model sees the
same positions (the default arange, continued from the cache), the same attention mask and the same tokens,
so the log-probabilities and their gradients are those of the full pass up to float rounding
(tests/test_prompt_sharing.py checks both against TRL's own path). The completion part goes through TRL's
fused LM head as TRL calls it (`fused_lm_head=True` with labels), so temperature and the entropy are TRL's.

It applies where the trainer's call is a plain text batch on the CPU (no images, no MoE auxiliary loss),
the model is not gradient-checkpointed (checkpointing recomputes layers without the cache), its KV cache is
made of per-row key/value layers (not the linear-attention or state-space layers of hybrid models) and at
least two rows share a prompt; anything else returns None and TRL's own path runs.
"""

from __future__ import annotations

from typing import Any


def applies(model, input_ids, logits_to_keep: int) -> bool:
    """Whether `per_token_logps` handles this call (see the module docstring)."""
    if input_ids.device.type != "cpu" or input_ids.dim() != 2:
        return False
    if input_ids.size(1) - logits_to_keep < 2:
        return False
    inner = _inner(model)
    checkpointing = next((a for a in ("is_activation_checkpointing", "is_gradient_checkpointing")
                          if hasattr(type(inner), a)), None)
    if checkpointing is not None and getattr(inner, checkpointing):
        return False
    from rlft.decode import cache_key

    return cache_key(inner) is not None


def _inner(model):
    """The transformers model under a peft wrapper (the model itself without one)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def per_token_logps(model, input_ids, attention_mask, logits_to_keep: int, compute_entropy: bool = False):
    """(log-probabilities, entropies or None) of each row's last `logits_to_keep` tokens, as TRL's
    `_get_per_token_logps_and_entropies` returns them for one chunk, or None where no prompt is shared."""
    from transformers import DynamicCache

    from rlft.decode import cache_key, distinct_rows, plain_layers

    width = input_ids.size(1) - logits_to_keep  # the prompt block, left-padded to one width
    prompts, prompt_mask, inverse = distinct_rows(input_ids[:, :width], attention_mask[:, :width])
    if prompts.size(0) == input_ids.size(0):
        return None
    inner = _inner(model)
    cache = DynamicCache(config=inner.config)
    if not plain_layers(cache):  # linear-attention / state-space layers cannot be copied row-wise: TRL's path
        return None
    key = cache_key(inner)
    head = width - 1  # the prompt's last token goes with the completion: its output scores the first new token
    model(input_ids=prompts[:, :head], attention_mask=prompt_mask[:, :head],
          **{key: cache}, use_cache=True, logits_to_keep=1)
    cache.batch_select_indices(inverse)
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    labels[:, :-logits_to_keep] = -100
    out: Any = model(input_ids=input_ids[:, head:], attention_mask=attention_mask, labels=labels[:, head:],
                     fused_lm_head=True, **{key: cache})
    logps = out.log_probs[:, -logits_to_keep:]
    entropy = out.entropy[:, -logits_to_keep:] if compute_entropy else None
    return logps, entropy


def with_prompt_sharing(trainer_cls):
    """A subclass of TRL's GRPOTrainer or RLOOTrainer whose per-token log-probabilities compute each prompt once
    where `applies` (TRL's method otherwise, and for any call with images or an auxiliary loss)."""

    class SharedPromptTrainer(trainer_cls):
        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep,
                                               batch_size=None, compute_entropy=False, compute_aux_loss=False,
                                               **extra):
            import torch

            if compute_aux_loss or any(v is not None for v in extra.values()) or \
                    not applies(model, input_ids, logits_to_keep):
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                    compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **extra)
            batch_size = batch_size or input_ids.size(0)
            logps, entropies = [], []
            for start in range(0, input_ids.size(0), batch_size):
                ids, mask = input_ids[start:start + batch_size], attention_mask[start:start + batch_size]
                with self.accelerator.autocast():
                    got = per_token_logps(model, ids, mask, logits_to_keep, compute_entropy)
                if got is None:
                    got = super()._get_per_token_logps_and_entropies(
                        model, ids, mask, logits_to_keep, compute_entropy=compute_entropy)[:2]
                logps.append(got[0])
                entropies.append(got[1])
            return (torch.cat(logps), torch.cat(entropies) if compute_entropy else None, None)

    SharedPromptTrainer.__name__ = SharedPromptTrainer.__qualname__ = f"SharedPrompt{trainer_cls.__name__}"
    return SharedPromptTrainer
