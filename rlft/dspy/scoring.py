"""Log-probs of completions after their prompts: what the GRPO step differentiates and guided choice ranks."""

from __future__ import annotations


def completion_logps(model, prompt_ids: list[list[int]], completion_ids: list[list[int]], pad_id: int):
    """Per-token log-probs of each completion after its prompt (rows right-padded): (logps, mask), both
    (rows, longest completion); differentiable (the GRPO step's forward).

    The numbers of one forward over every row's left-padded prompt and right-padded completion, as TRL lays a
    GRPO batch out (default positions, every completion starting at the same column), but each distinct prompt
    runs once: its forward fills a KV cache and projects only its last position through the LM head, the cache
    is repeated for the rows that share it (an index, so every row's gradient flows back into the one prompt
    pass), and only the completions' tokens run a second time. A DSPy group is G completions of one prompt
    (ChatAdapter's ~200-token prompt, ~20-token answers): about 1/G of the full forward's work. Where that does
    not apply (remote-code models, gradient checkpointing, which turns the cache off, caches other than
    transformers' per-layer key/value ones, such as state-space models'), it is that one whole forward."""
    return _logps(model, prompt_ids, completion_ids, pad_id, count_positions=False)


def choice_logps(model, prompt_ids: list[list[int]], values: list[list[list[int]]], pad_id: int) -> list[list[float]]:
    """Summed log-prob of each allowed value after its prompt: `values[i]` holds row i's values as token ids;
    returns one list of floats a row. completion_logps's prompt-once forward over every (prompt, value) pair (a
    ticket's 300-token prompt and five 2-token labels: one prompt forward instead of five), with positions that
    count a row's real tokens only, as generate() sets them for left-padded prompts (the answer the model would
    give), where a GRPO batch keeps TRL's default positions. The prompts' common head (DSPy's system message and
    instructions: most of a Predict's prompt, the same for every example) also runs once: its cache is repeated
    for every prompt and only the tails run on it (left-padded after the head; counted positions skip the gap),
    so an Evaluate over many examples costs about its tails."""
    prompts = [p for p, vs in zip(prompt_ids, values) for _ in vs]
    flat = [v for vs in values for v in vs]
    logps, mask = _logps(model, prompts, flat, pad_id, count_positions=True)
    scores = (logps * mask).sum(-1).tolist()
    out, k = [], 0
    for vs in values:
        out.append(scores[k:k + len(vs)])
        k += len(vs)
    return out


def _logps(model, prompt_ids: list[list[int]], completion_ids: list[list[int]], pad_id: int, *,
           count_positions: bool):
    """completion_logps and choice_logps: the prompt-once forward where it applies, else one whole forward.
    `count_positions`: position ids that skip the left padding (generate's), else the default ones (TRL's)."""
    import torch

    rows = len(prompt_ids)
    plen = max(len(p) for p in prompt_ids)
    clen = max(len(c) for c in completion_ids)
    device = next(model.parameters()).device
    cont = torch.full((rows, clen), pad_id, dtype=torch.long)
    cmask = torch.zeros((rows, clen), dtype=torch.long)
    for i, c in enumerate(completion_ids):
        cont[i, :len(c)] = torch.tensor(c)
        cmask[i, :len(c)] = 1
    cont, cmask = cont.to(device), cmask.to(device)
    if clen > 1 and _shares_prompts(model):
        shared = _shared_logps(model, prompt_ids, cont, cmask, pad_id, count_positions)
        if shared is not None:
            return shared, cmask.to(shared.dtype)
    ids, att = _left_padded(prompt_ids, pad_id, device)
    ids, att = torch.cat([ids, cont], dim=1), torch.cat([att, cmask], dim=1)
    extra = {"position_ids": _counted(att)} if count_positions else {}
    logits = model(input_ids=ids, attention_mask=att, **extra).logits[:, plen - 1:-1].float()
    logps = torch.log_softmax(logits, dim=-1).gather(-1, cont.unsqueeze(-1)).squeeze(-1)
    return logps, cmask.to(logps.dtype)


def _left_padded(rows, pad_id: int, device):
    """(ids, attention mask) of token rows left-padded to the longest."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long, device=device)
    att = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        att[i, width - len(r):] = 1
    return ids, att


def _counted(att):
    """Position ids that count real tokens only (left padding at 0), as generate() sets them."""
    return (att.cumsum(-1) - 1).clamp(min=0)


def _shares_prompts(model) -> bool:
    """Whether the prompt-once forward applies: one of transformers' own classes, not gradient-checkpointed."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    flag = next((a for a in ("is_activation_checkpointing", "is_gradient_checkpointing") if hasattr(type(base), a)),
                None)  # the newer name first: transformers 5 warns on the old one
    return type(base).__module__.startswith("transformers.") and not (flag and getattr(base, flag))


def _shared_logps(model, prompt_ids: list[list[int]], cont, cmask, pad_id: int, count_positions: bool):
    """_logps's prompt-once path; None when the model's cache is not per-layer keys and values."""
    import torch

    device = cont.device
    keys = [tuple(p) for p in prompt_ids]
    distinct = list(dict.fromkeys(keys))
    owner = torch.tensor([distinct.index(k) for k in keys], dtype=torch.long, device=device)
    common = _common_prefix(distinct) if count_positions else 0
    if common:  # the prompts' common head (DSPy's system message) once, its cache repeated for every prompt
        out = model(input_ids=torch.tensor([distinct[0][:common]], device=device), use_cache=True,
                    logits_to_keep=_last_position(model, common))
        cache = _cache_of(out)
        if not _plain(cache):
            return None
        cache.reorder_cache(torch.zeros(len(distinct), dtype=torch.long, device=device))
        ids, tail_att = _left_padded([p[common:] for p in distinct], pad_id, device)
        att = torch.cat([torch.ones((len(distinct), common), dtype=torch.long, device=device), tail_att], dim=-1)
        out = model(input_ids=ids, attention_mask=att, use_cache=True, position_ids=_counted(att)[:, common:],
                    logits_to_keep=_last_position(model, ids.size(1)), **{_cache_keyword(model): cache})
    else:
        ids, att = _left_padded(distinct, pad_id, device)
        first_pos = {"position_ids": _counted(att)} if count_positions else {}
        out = model(input_ids=ids, attention_mask=att, use_cache=True,
                    logits_to_keep=_last_position(model, ids.size(1)), **first_pos)
    cache = _cache_of(out)
    if not _plain(cache):
        return None
    first = torch.log_softmax(out.logits[:, -1].float(), dim=-1)[owner].gather(-1, cont[:, :1])
    cache.reorder_cache(owner)
    rest_pos = {}
    if count_positions:  # the completion continues from each row's own last real position
        start = att.sum(-1)[owner].unsqueeze(-1)
        rest_pos = {"position_ids": start + torch.arange(cont.size(1) - 1, device=device).unsqueeze(0)}
    logits = model(input_ids=cont[:, :-1], attention_mask=torch.cat([att[owner], cmask[:, :-1]], dim=-1),
                   use_cache=True, **{_cache_keyword(model): cache}, **rest_pos).logits.float()
    rest = torch.log_softmax(logits, dim=-1).gather(-1, cont[:, 1:].unsqueeze(-1)).squeeze(-1)
    return torch.cat([first, rest], dim=-1)


# transformers' cache layers that keep keys and values per row (reorder_cache copies them row-wise)
_PLAIN_LAYERS = frozenset({"DynamicLayer", "DynamicSlidingWindowLayer"})
# a common head shorter than this is run with each prompt (a second forward costs more than it saves)
MIN_COMMON = 32


def _cache_of(out):
    return out.cache if getattr(out, "cache", None) is not None else getattr(out, "past_key_values", None)


def _plain(cache) -> bool:
    from transformers import DynamicCache

    return type(cache) is DynamicCache and all(type(x).__name__ in _PLAIN_LAYERS
                                               for x in getattr(cache, "layers", [None]))


def _common_prefix(prompts: list[list[int]]) -> int:
    """How many leading tokens every prompt shares, leaving each at least one of its own (its last position's
    logits come from the second pass); 0 for one prompt or a head under MIN_COMMON tokens."""
    if len(prompts) < 2:
        return 0
    n = min(len(p) for p in prompts) - 1
    first = prompts[0]
    for p in prompts[1:]:
        k = 0
        while k < n and p[k] == first[k]:
            k += 1
        n = k
    return n if n >= MIN_COMMON else 0


def _last_position(model, width: int):
    """`logits_to_keep` for the last position: an index tensor for transformers' own model classes (a contiguous
    copy of the hidden state; the int's strided view is multiplied slowly on the CPU), the int elsewhere
    (remote code may slice with it itself)."""
    import torch

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if type(base).__module__.startswith("transformers."):
        return torch.tensor([width - 1], device=next(model.parameters()).device)
    return 1


def _cache_keyword(model) -> str:
    """`cache` where the model's forward takes it (transformers 5.25 renamed `past_key_values`), else the old
    name."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
