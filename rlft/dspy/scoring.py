"""Log-probs of completions after their prompts: what the GRPO step differentiates and guided choice ranks."""

from __future__ import annotations


def completion_logps(model, prompt_ids: list[list[int]], completion_ids: list[list[int]], pad_id: int):
    """Per-token log-probs of each completion after its prompt (rows right-padded): (logps, mask), both
    (rows, longest completion)."""
    import torch

    rows = len(prompt_ids)
    plen = max(len(p) for p in prompt_ids)
    clen = max(len(c) for c in completion_ids)
    device = next(model.parameters()).device
    # prompts left-padded, completions right-padded: every completion starts at column plen, as in TRL
    ids = torch.full((rows, plen + clen), pad_id, dtype=torch.long)
    att = torch.zeros((rows, plen + clen), dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
        ids[i, plen - len(p):plen] = torch.tensor(p)
        att[i, plen - len(p):plen] = 1
        ids[i, plen:plen + len(c)] = torch.tensor(c)
        att[i, plen:plen + len(c)] = 1
    ids, att = ids.to(device), att.to(device)
    logits = model(input_ids=ids, attention_mask=att).logits[:, plen - 1:-1].float()
    target = ids[:, plen:]
    logps = torch.log_softmax(logits, dim=-1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return logps, att[:, plen:].to(logps.dtype)
