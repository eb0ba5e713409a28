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
(tests/speed/test_prompt_sharing.py checks both against TRL's own path). The completion part goes through TRL's
fused LM head as TRL calls it (`fused_lm_head=True` with labels), so temperature and the entropy are TRL's.

It applies where the trainer's call is a plain text batch on the CPU (no images, no MoE auxiliary loss),
the model is not gradient-checkpointed (checkpointing recomputes layers without the cache), its KV cache is
made of per-row key/value layers (not the linear-attention or state-space layers of hybrid models) and at
least two rows share a prompt; anything else returns None and TRL's own path runs.

Lanes: the completions without their padding. TRL pads every completion to the longest of the batch (the
positions after a row's stop token), and the row layout computes them forward and backward although the
completion mask zeroes their loss: in a GRPO step of SmolLM2 with 48 new tokens, 247 of 392 completion
positions were real. Where a batch's padding is worth it (the lanes at most LANE_SHARE of the row layout's
positions), each prompt's rows are laid end to end in one lane (a new lane after LANE_POSITIONS), over that
prompt's cache: a position attends to its prompt and to its own row's earlier positions (a 4D boolean mask,
sdpa's form), at the rotary position the row layout gives it, and its label scores it as there. Causal
attention makes a real position's output independent of the padding after it, so the log-probabilities and
gradients are the row layout's up to float rounding (the layouts sum in other orders); the padded positions
get 0, which TRL's mask zeroes as before. A lane's attention spans all its rows (masked, not skipped), so
lanes pay only where the padding is a large share (no gain at 48 new tokens with most positions real, a
clear one at 128 and 256: BENCHMARKS.md, "Two days in: what is left of a step with every row", Lanes).
Only for sdpa attention without sliding windows (the mask is written for it), in the model families of
LANE_MODEL_TYPES (rotary positions from position_ids); others keep the row layout.

SFT: the rows' common head. A fine-tune whose rows open with one long system message (DSPy's BootstrapFinetune:
its ~200-token instructions ahead of each ~20-token example and answer) runs that head through the model once a
row in TRL's SFTTrainer. `with_head_sharing` runs it once a batch, on one row, repeats its KV cache for the rows
and runs each row's rest on it with the row's labels through TRL's fused LM head (`_HeadOnce`), so the loss and
its gradients are the full pass's up to float rounding (tests/speed/test_prompt_sharing.py). It stands aside
where `shared_head` finds no head of MIN_HEAD tokens before the first scored label, and for everything
`applies` refuses.
"""

from __future__ import annotations

from typing import Any, NamedTuple

# lanes are used when their positions are at most this share of the row layout's (0: never): below ~0.8 they
# pay for their wider attention (SmolLM2, forward + backward: 81% of the positions, no gain; 50%, -35%)
LANE_SHARE = 0.75
# the most positions in one lane (at least one row's tail): the lane's attention and mask grow with its square
LANE_POSITIONS = 1024
# transformers' model types whose positions come from position_ids alone and whose attention takes a 4D mask
# as given (tests/speed/test_prompt_sharing.py checks each against the row layout). Not OPT (positions from the 2D
# mask's cumsum: the lanes would shift them) nor ALiBi models (Falcon, Bloom: the bias is built from the mask).
LANE_MODEL_TYPES = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "phi3", "smollm3"})


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
    from rlft.speed.decode import cache_key

    return cache_key(inner) is not None


def _inner(model):
    """The transformers model under a peft wrapper (the model itself without one)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def per_token_logps(model, input_ids, attention_mask, logits_to_keep: int, compute_entropy: bool = False):
    """(log-probabilities, entropies or None) of each row's last `logits_to_keep` tokens, as TRL's
    `_get_per_token_logps_and_entropies` returns them for one chunk, or None where no prompt is shared."""
    from transformers import DynamicCache

    from rlft.speed.decode import cache_key, distinct_rows, last_positions, plain_layers

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
          **{key: cache}, use_cache=True, logits_to_keep=last_positions(inner, prompts[:, :head]))
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    labels[:, :-logits_to_keep] = -100
    lanes = _lanes(inner, attention_mask[:, head:], inverse, prompts.size(0))
    if lanes is not None:
        return _lane_pass(model, key, cache, lanes, input_ids[:, head:], labels[:, head:], prompt_mask[:, :head],
                          head, logits_to_keep, compute_entropy)
    cache.batch_select_indices(inverse)
    out: Any = model(input_ids=input_ids[:, head:], attention_mask=attention_mask, labels=labels[:, head:],
                     fused_lm_head=True, **{key: cache})
    logps = out.log_probs[:, -logits_to_keep:]
    entropy = out.entropy[:, -logits_to_keep:] if compute_entropy else None
    return logps, entropy


class Lanes(NamedTuple):
    """Where each kept tail position goes: tail (row, column) -> (lane, slot), one entry per position; the
    prompt each lane continues, and the lanes' width."""

    row: Any
    col: Any
    lane: Any
    slot: Any
    prompt: Any
    width: int


def _lanes(inner, tail_mask, inverse, n_prompts: int) -> Lanes | None:
    """The lane layout of a batch's tails (module docstring), or None where the row layout runs: an attention
    other than sdpa, sliding-window or other non-full attention layers, a row whose tail is not a run of ones
    then zeros (TRL's completion mask ends at the stop token), or lanes over LANE_SHARE of the row layout."""
    import torch

    config = inner.config
    if LANE_SHARE <= 0 or getattr(config, "_attn_implementation", None) != "sdpa":
        return None  # the 4D mask below is sdpa's boolean form (eager adds a float mask; others: their own)
    if config.model_type not in LANE_MODEL_TYPES or not type(inner).__module__.startswith(
            f"transformers.models.{config.model_type}."):
        return None  # positions from the mask (OPT), ALiBi from the mask (Falcon, Bloom), unknown code
    from rlft.speed.decode_step import full_attention_only

    if not full_attention_only(config):
        return None
    rows, tail = tail_mask.shape
    lengths = tail_mask.sum(1)
    if bool((lengths < 1).any()) or not bool((tail_mask == (torch.arange(tail) < lengths[:, None])).all()):
        return None
    cap = max(tail, LANE_POSITIONS)
    row, col, lane, slot = [], [], [], []
    open_lane: dict[int, int] = {}  # prompt -> the lane its rows are filling
    prompt_of, fill = [], []  # per lane
    for r in range(rows):  # a few rows a step: plain Python is cheaper than index arithmetic
        p, n = int(inverse[r]), int(lengths[r])
        j = open_lane.get(p)
        if j is None or fill[j] + n > cap:
            j = open_lane[p] = len(fill)
            prompt_of.append(p)
            fill.append(0)
        row += [r] * n
        col += range(n)
        lane += [j] * n
        slot += range(fill[j], fill[j] + n)
        fill[j] += n
    width = max(fill)
    if len(fill) * width > LANE_SHARE * rows * tail:
        return None

    def index(values):
        return torch.tensor(values, dtype=torch.long, device=tail_mask.device)

    return Lanes(index(row), index(col), index(lane), index(slot), index(prompt_of), width)


def _lane_pass(model, key, cache, lanes: Lanes, tail_ids, tail_labels, prompt_mask, head: int,
               logits_to_keep: int, compute_entropy: bool):
    """The tails laid end to end in their lanes over the prompts' cache, each position attending to its
    prompt and its own row's earlier positions, at its row-layout position; the log-probabilities and
    entropies put back in TRL's [rows, logits_to_keep] layout (0 at the row layout's padding, which TRL's
    completion mask zeroes)."""
    import torch

    row, col, lane, slot, prompt, width = lanes
    n_lanes, rows, device = prompt.numel(), tail_ids.size(0), tail_ids.device
    if not torch.equal(prompt, torch.arange(prompt_mask.size(0), device=device)):
        cache.batch_select_indices(prompt)  # a prompt with more than one lane: its cache rows copied
    ids = torch.zeros(n_lanes, width, dtype=tail_ids.dtype, device=device)
    ids[lane, slot] = tail_ids[row, col]
    labels = torch.full_like(ids, -100)
    labels[lane, slot] = tail_labels[row, col]
    positions = torch.zeros_like(ids)
    positions[lane, slot] = head + col  # the column the row layout has it at: the same rotary positions
    # the row each slot holds (-1: the lane's padding, which attends to itself only: no empty softmax row)
    owner = torch.full((n_lanes, width), -1, dtype=torch.long, device=device)
    owner[lane, slot] = row
    order = torch.arange(width, device=device)
    own = (owner[:, :, None] == owner[:, None, :]) & (order[:, None] >= order[None, :])
    own &= (owner[:, :, None] >= 0) | torch.eye(width, dtype=torch.bool, device=device)
    sees_prompt = prompt_mask[prompt].bool()[:, None, :] & (owner[:, :, None] >= 0)
    mask = torch.cat([sees_prompt, own], dim=2)[:, None]  # [lanes, 1, width, head + width], True: attends
    out: Any = model(input_ids=ids, attention_mask=mask, position_ids=positions, labels=labels,
                     fused_lm_head=True, **{key: cache})
    scored = col >= 1  # the completion's positions (column 0 is the prompt's last token)
    at = (row[scored], col[scored] - 1)  # tail column c is completion position c - 1
    # the fused head's outputs are shifted: position t holds the score of token t + 1 (from position t's state)
    src = (lane[scored], slot[scored] - 1)
    logps = out.log_probs.new_zeros(rows, logits_to_keep).index_put(at, out.log_probs[src])
    entropy = out.entropy.new_zeros(rows, logits_to_keep).index_put(at, out.entropy[src]) if compute_entropy \
        else None
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


# --- SFT: the rows' common head once ------------------------------------------------------------------------------
# a head shorter than this runs with each row (a second forward costs more than it saves)
MIN_HEAD = 32
# what TRL's SFT collator hands the model (padding-free batches carry position_ids and sequence boundaries instead)
_SFT_KEYS = frozenset({"input_ids", "attention_mask", "labels", "use_cache", "fused_lm_head"})


def shared_head(model, inputs: dict) -> int:
    """How many leading tokens every row of an SFT batch shares (a long system message: DSPy's fine-tunes, where
    it is most of each row), or 0 where the head-once pass does not apply or does not pay: not a plain CPU text
    batch (right-padded input_ids, attention_mask, labels), gradient checkpointing, a hybrid cache, or a head under
    MIN_HEAD tokens. The head stops before the first scored label's column, so every scored position's logits
    come from the second pass."""
    ids, att, labels = inputs.get("input_ids"), inputs.get("attention_mask"), inputs.get("labels")
    if ids is None or att is None or labels is None or set(inputs) - _SFT_KEYS:
        return 0
    if ids.device.type != "cpu" or ids.dim() != 2 or ids.size(0) < 2 or labels.shape != ids.shape:
        return 0
    if not applies(model, ids, 0):
        return 0
    same = ((ids == ids[:1]) & (att == 1)).all(0)
    head = int(same.long().cumprod(0).sum())
    scored = (labels != -100).any(0).nonzero()
    if len(scored):
        head = min(head, int(scored[0]) - 1)  # the label at column `head` is not scored: no logits precede it
    return head if head >= MIN_HEAD else 0


class _HeadOnce:
    """The model as TRL's SFT compute_loss calls it (`model(**inputs, fused_lm_head=True)`), with the batch's
    common head run once on one row: its KV cache is repeated for every row (an index, so each row's gradient
    flows back into the one head pass) and the rest of each row runs on it at the positions it has in the full
    row. Labels before the head's end are unscored (shared_head), so the loss, the log-probs and their gradients
    are the full pass's up to float rounding. Any other call goes to the model as it is."""

    def __init__(self, model, head: int):
        self.model, self.head = model, head

    def __getattr__(self, name):
        return getattr(self.model, name)

    def __call__(self, **kw):
        import torch
        from transformers import DynamicCache

        from rlft.speed.decode import cache_key, last_positions, plain_layers

        if not kw.get("fused_lm_head") or set(kw) - _SFT_KEYS or kw.get("labels") is None:
            return self.model(**kw)
        inner = _inner(self.model)
        cache = DynamicCache(config=inner.config)
        if not plain_layers(cache):
            return self.model(**kw)
        key, head, ids, att = cache_key(inner), self.head, kw["input_ids"], kw["attention_mask"]
        self.model(input_ids=ids[:1, :head], attention_mask=att[:1, :head], **{key: cache}, use_cache=True,
                   logits_to_keep=last_positions(inner, ids[:1, :head]))
        cache.batch_select_indices(torch.zeros(ids.size(0), dtype=torch.long, device=ids.device))
        return self.model(input_ids=ids[:, head:], attention_mask=att, labels=kw["labels"][:, head:],
                          fused_lm_head=True, use_cache=True, **{key: cache})


def with_head_sharing(trainer_cls):
    """A subclass of TRL's SFTTrainer whose loss runs the batch's common head once where shared_head finds one
    (TRL's compute_loss otherwise, and always for its metrics: it sees the same outputs)."""

    class SharedHeadTrainer(trainer_cls):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            head = shared_head(model, inputs) if self.model.training else 0
            if head:
                model = _HeadOnce(model, head)
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)

    SharedHeadTrainer.__name__ = SharedHeadTrainer.__qualname__ = f"SharedHead{trainer_cls.__name__}"
    return SharedHeadTrainer
