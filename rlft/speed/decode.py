"""One sampling loop for a frozen causal LM: what rlft's sampling copy runs instead of `generate`.

`decode(model, input_ids, attention_mask, generation_config)` returns what `model.generate` would for the
settings RL sampling uses (greedy or sampling with temperature, top-k, top-p, min-p; one or more stop ids;
left-padded prompts), in the same shape: the prompts followed by the new tokens, pad after each row's stop
token, as many columns as the longest row needed. It returns None for anything else (beams, penalties,
suppressed tokens, constraints, a model without a KV cache), and the caller falls back to `generate`.

Where it departs from `generate`, and why (SmolLM2-135M, 8 rows = 2 prompts x G 4, one CPU thread):
- One prefill per distinct prompt. GRPO/RLOO repeat each prompt G times; the prompt's keys and values are
  computed once and the cache rows copied (TRL's batch of 2 prompts x 4 prefills 2 rows, not 8).
- Finished rows leave the batch: a row that has emitted a stop token is dropped from the cache, so the
  last long answer does not carry the short ones.
- Sampling by inverse CDF (one uniform per row, a cumulative sum and a binary search) instead of
  `torch.multinomial`, which draws one exponential per vocabulary entry (49,152 per row per step on
  SmolLM2: ~8 ms of a ~100 ms step). The distribution is the same; the random stream is not, so a seed
  gives other samples than `generate` does (greedy decoding gives the same tokens).
- No logits processors, stopping criteria objects or per-step input preparation: the step is the model's
  forward on one token per row, and the sampling arithmetic.
- The KV cache is written in place: each plain cache layer reserves room for every new token at the prefill
  and hands attention a view of the filled part, where transformers' DynamicCache concatenates every layer's
  keys and values per token (torch.cat: 8% of a SmolLM2 decode of 8 x 48 tokens, 0.47 of 6.0 s).
"""

from __future__ import annotations

import functools
from typing import Any

# generation settings this loop honours; any other setting away from its default means "use generate"
HANDLED = {"max_new_tokens", "do_sample", "temperature", "top_k", "top_p", "min_p", "eos_token_id",
           "pad_token_id", "bos_token_id", "repetition_penalty", "cache_implementation", "disable_compile",
           "use_cache", "return_dict_in_generate", "output_scores", "output_logits", "transformers_version",
           "_from_model_config", "num_return_sequences", "num_beams", "max_length", "renormalize_logits",
           "stop_strings", "min_new_tokens", "min_length", "compile_config", "begin_suppress_tokens"}


def supported(config, model) -> bool:
    """Whether `decode` gives what `model.generate(generation_config=config)` would."""
    from transformers import GenerationConfig

    default = GenerationConfig()
    for key, value in config.to_dict().items():
        if key in HANDLED or value == getattr(default, key, value):
            continue
        if key in ("output_attentions", "output_hidden_states") and not value:  # False where the default is None
            continue
        return False
    if (config.num_beams or 1) != 1 or (config.num_return_sequences or 1) != 1:
        return False
    if config.repetition_penalty not in (None, 1.0) or config.stop_strings or config.return_dict_in_generate:
        return False
    if (config.min_new_tokens or 0) > 0 or (config.min_length or 0) > 0:
        return False
    if config.max_new_tokens is None or config.eos_token_id is None:
        return False
    if config.cache_implementation not in (None, "dynamic"):
        return False
    return cache_key(model) is not None and "logits_to_keep" in _forward_params(model)


def _forward_params(model) -> set[str]:
    import inspect

    return set(inspect.signature(model.forward).parameters)


def last_positions(model, input_ids, keep: int = 1):
    """`logits_to_keep` for `model`'s last `keep` positions: an index tensor where `model` (under a peft wrapper)
    is one of transformers' own classes on the CPU, the int elsewhere.

    With an int, transformers slices the hidden states into a strided view ([rows, keep, hidden] inside
    [rows, width, hidden]), and torch's CPU linear multiplies such a view (with or without gradients) as a
    batched product with the LM head's weight expanded per row. SmolLM2-135M's head (49,152 x 576), 64 rows,
    keep 1, one thread, torch 2.13, no_grad: bf16 7.9 s and +3.6 GB against 0.02 s; fp32 0.72 against 0.08 s
    (keep 41, 8 rows: bf16 0.92 against 0.10 s, fp32 0.43 against 0.29 s; bench/lm_head_slice.py). An index
    tensor (transformers' models take one: `hidden_states[:, positions]`) gives a contiguous copy and the same
    values. Remote-code models may slice with the int themselves (`hidden_states[:, -logits_to_keep:]`), which
    a tensor of several positions would break, and GPUs have no such slowdown: both keep the int, as do `keep`
    values the int means otherwise (0: every position) or that cover every position. Any other path to the head
    (transformers' `generate`) is covered by rlft.speed.model_hooks.contiguous_head."""
    width = input_ids.shape[1]
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    if (not type(inner).__module__.startswith("transformers.") or input_ids.device.type != "cpu"
            or keep <= 0 or keep >= width):
        return keep
    import torch

    return torch.arange(width - keep, width, device=input_ids.device)


def cache_key(model) -> str | None:
    """The forward argument that takes the KV cache (`cache` from transformers 5.2x, `past_key_values` before)."""
    params = _forward_params(model)
    return next((k for k in ("cache", "past_key_values") if k in params), None)


def _next_tokens(logits, config):
    """The next token per row from last-position logits (fp32), as `generate` would draw it."""
    import torch

    if not config.do_sample:
        return logits.argmax(-1)
    if config.temperature not in (None, 1.0):
        logits = logits / config.temperature
    vocab = logits.size(-1)
    if config.top_k and 0 < config.top_k < vocab:
        kth = torch.topk(logits, config.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if config.top_p is not None and config.top_p < 1.0:
        # transformers' rule: drop the tokens whose cumulative mass, counted from the least likely, is within
        # 1 - top_p; the most likely token always stays
        sorted_p, order = torch.sort(probs, dim=-1)
        drop_sorted = sorted_p.cumsum(-1) <= 1 - config.top_p
        drop_sorted[:, -1] = False
        probs = probs.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), 0.0)
    if config.min_p is not None and config.min_p > 0:
        floor = probs.max(dim=-1, keepdim=True).values * config.min_p
        probs = probs.masked_fill(probs < floor, 0.0)
    cdf = probs.cumsum(-1)
    u = torch.rand(cdf.size(0), 1, device=cdf.device, dtype=cdf.dtype) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=vocab - 1)


@functools.cache
def _reserved_layer_class():
    from transformers.cache_utils import DynamicLayer

    class ReservedLayer(DynamicLayer):
        """A DynamicLayer that keeps its keys and values in buffers with `room` spare positions, written in
        place; `keys`/`values` are views of the filled part (what DynamicLayer's readers expect)."""

        def __init__(self, room: int):
            super().__init__()
            self.room, self.filled, self.buffers = room, 0, None

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            new = key_states.shape[-2]
            if self.buffers is None or self.filled + new > self.buffers[0].shape[-2]:
                grown = []
                for old, fresh in zip((self.keys, self.values), (key_states, value_states)):
                    buf = fresh.new_empty(*fresh.shape[:-2], self.filled + new + self.room, fresh.shape[-1])
                    if self.filled:
                        buf[..., :self.filled, :] = old
                    grown.append(buf)
                self.buffers = tuple(grown)
            for buf, fresh in zip(self.buffers, (key_states, value_states)):
                buf[..., self.filled:self.filled + new, :] = fresh
            self.filled += new
            self.keys, self.values = (buf[..., :self.filled, :] for buf in self.buffers)
            return self.keys, self.values

        def batch_select_indices(self, indices) -> None:
            if self.buffers is not None:
                self.buffers = tuple(buf[indices] for buf in self.buffers)
                self.keys, self.values = (buf[..., :self.filled, :] for buf in self.buffers)

        def batch_repeat_interleave(self, repeats: int) -> None:
            if self.buffers is not None:
                self.buffers = tuple(buf.repeat_interleave(repeats, dim=0) for buf in self.buffers)
                self.keys, self.values = (buf[..., :self.filled, :] for buf in self.buffers)

        def crop(self, tokens_to_remove: int) -> None:
            super().crop(tokens_to_remove)
            if self.buffers is not None and self.is_initialized:
                self.filled = self.keys.shape[-2]
                self.keys, self.values = (buf[..., :self.filled, :] for buf in self.buffers)

        def reset(self) -> None:
            self.buffers, self.filled = None, 0
            super().reset()

    return ReservedLayer


def distinct_rows(input_ids, attention_mask):
    """The distinct (tokens, mask) rows of a left-padded batch and, per row, the index of its distinct row:
    (ids, mask, inverse), so that ids[inverse] is input_ids again (GRPO's G repeats of a prompt: one row)."""
    import torch

    width = input_ids.size(1)
    keyed = torch.cat([input_ids, attention_mask.to(input_ids.dtype)], dim=1)
    distinct, inverse = torch.unique(keyed, dim=0, return_inverse=True)
    return distinct[:, :width], distinct[:, width:], inverse


def plain_layers(cache) -> bool:
    """Whether every layer of a transformers cache keeps keys and values per row (DynamicLayer and its sliding
    and indexed kinds), so rows can be selected and repeated; hybrid models' linear-attention layers do not."""
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    return bool(layers) and all(isinstance(layer, DynamicLayer) for layer in layers)


def reserved_cache(config, room: int):
    """A DynamicCache whose plain layers write new tokens in place, with room for `room` of them after the
    first update (sliding-window and other special layers are kept as transformers builds them)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache(config=config)
    layer = _reserved_layer_class()
    cache.layers = [layer(room) if type(x) is DynamicLayer else x for x in cache.layers]
    return cache


def decode(model, input_ids=None, attention_mask=None, generation_config=None, *, pack: bool = False,
           **kwargs: Any):
    """Prompts + sampled tokens as `model.generate` returns them, or None where the settings are not handled
    (see the module docstring). `kwargs` are further generation settings, as `generate` takes them.
    `pack`: decode from weights packed for the batch's row count (rlft.speed.packed_linear) where that applies,
    keeping finished rows in the batch so that every step has that count; it packs `model` in place."""
    import copy as _copy

    import torch
    from transformers import GenerationConfig

    from rlft.speed.switch import enabled

    if not enabled():  # train.speedups=false: the caller's `generate`
        return None
    extra = {k: v for k, v in kwargs.items() if k not in ("input_ids", "attention_mask")}
    if any(k not in GenerationConfig().to_dict() for k in extra):  # model inputs (images, ...): not ours
        return None
    config = _copy.deepcopy(generation_config or model.generation_config)
    config.update(**extra)
    if input_ids is None or input_ids.dim() != 2 or not supported(config, model):
        return None
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    stops = torch.tensor([config.eos_token_id] if isinstance(config.eos_token_id, int) else
                         list(config.eos_token_id), device=input_ids.device)
    pad = config.pad_token_id if config.pad_token_id is not None else int(stops[0])
    rows, width = input_ids.shape
    room = config.max_new_tokens
    positions_left = getattr(model.config, "max_position_embeddings", None)
    if positions_left is not None:
        room = min(room, max(positions_left - width, 0))
    out = torch.full((rows, room), pad, dtype=input_ids.dtype, device=input_ids.device)
    if room == 0:
        return input_ids

    # one prefill per distinct prompt, its cache rows copied to every repeat
    ids, mask, inverse = distinct_rows(input_ids, attention_mask)
    cache = reserved_cache(model.config, room)
    if not plain_layers(cache):  # hybrid models' linear-attention layers: generate handles them
        return None
    key = cache_key(model)
    position = mask.long().cumsum(-1) - 1
    position = position.masked_fill(mask == 0, 0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=position, **{key: cache},
                   use_cache=True, logits_to_keep=last_positions(model, ids)).logits[:, -1].float()
    # back to the caller's rows: repeats copied, and distinct rows reordered (torch.unique sorts them)
    if not torch.equal(inverse, torch.arange(rows, device=inverse.device)):
        cache.batch_select_indices(inverse)
        logits = logits[inverse]
    mask = attention_mask.clone()
    last_position = position[inverse, -1]
    alive = torch.arange(rows, device=input_ids.device)  # the output rows still in the batch
    if pack:
        from rlft.speed.packed_linear import pack as pack_linears

        pack = pack_linears(model, rows)
    finished = torch.zeros(rows, dtype=torch.bool, device=input_ids.device)  # packed: rows riding along
    from rlft.speed.decode_step import step_fn

    lean = step_fn(model, cache)  # one token per row without transformers' per-step machinery, where it applies
    if config.begin_suppress_tokens:  # the first new token, as SuppressTokensAtBeginLogitsProcessor
        banned = torch.tensor(list(config.begin_suppress_tokens), device=logits.device)
        logits[:, banned[(banned >= 0) & (banned < logits.size(-1))]] = float("-inf")  # others: no token
    steps = 0
    for step in range(room):
        token = _next_tokens(logits, config)
        if pack:
            token = token.masked_fill(finished, pad)
        out[alive, step] = token
        steps = step + 1
        done = torch.isin(token, stops)
        if step + 1 == room:
            break
        if pack:
            finished |= done
            if bool(finished.all()):
                break
        elif bool(done.any()):
            keep = (~done).nonzero().squeeze(-1)
            if keep.numel() == 0:
                break
            alive, token, mask, last_position = alive[keep], token[keep], mask[keep], last_position[keep]
            cache.batch_select_indices(keep)
        mask = torch.cat([mask, mask.new_ones(mask.size(0), 1)], dim=1)
        last_position = last_position + 1
        if lean is not None:
            logits = lean(token, last_position, mask).float()
        else:
            logits = model(input_ids=token[:, None], attention_mask=mask, position_ids=last_position[:, None],
                           **{key: cache}, use_cache=True, logits_to_keep=1).logits[:, -1].float()
    return torch.cat([input_ids, out[:, :steps]], dim=1)
