"""A DPO-trained model as a reward model: DPO's implicit reward (Rafailov et al. 2023, "Direct Preference
Optimization: Your Language Model is Secretly a Reward Model", eq. 5).

`rlft reward` with `reward.objective: implicit` trains the start model on the pairs with DPO's loss (TRL's
DPOTrainer, sigmoid, beta = reward.beta) instead of a score head with the Bradley-Terry loss, and writes
IMPLICIT_MARKER into its run folder. That folder is then a reward model like any other (`--reward-model` of
`rlft ppo`, `rlft grpo`, `rlft eval --best-of`, `rlft verify`): the score of a reply y to a prompt x is

    r(x, y) = beta * (log pi(y | x) - log pi_ref(y | x))

pi the trained model, pi_ref the model it started from (DPO's reference: under LoRA, the adapter's base).

Where this departs from the paper: its reward also has beta * log Z(x), a function of the prompt alone. It is
left out: it cancels between replies to one prompt (pair accuracy, agreement with a truth, best-of-n), and PPO's
value model and reward whitening absorb a per-prompt offset. Why it is here: the reward is the trained
generator's own next-token log-ratios summed over the reply, so it judges a reply by how that generator would
answer this prompt. A score head on SmolLM2-135M trained on the support store's pairs learned the replies'
wording and ignored the prompt (docs/preferences.md, "Does the reward model read the prompt?"); DPO on the same
pairs learned the decision. Scoring costs two forward passes a reply (policy and reference).

Tokenisation is DPOTrainer's for the run's rows: a chat prompt is the template's rendering with the generation
prompt, the reply the rest of the template's rendering of prompt + reply (its end of turn included); a plain
prompt is its tokens, the reply its tokens and eos.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

from rlft.errors import UserError

IMPLICIT_MARKER = "implicit_reward.json"  # {"beta": float, "reference": path or null (null: the adapter's base)}
BATCH = 16


def is_implicit(path: str | Path) -> bool:
    """Whether the folder at `path` is an implicit (DPO-trained) reward model."""
    return (Path(path) / IMPLICIT_MARKER).is_file()


def write_marker(out: Path, beta: float, reference: str | None) -> None:
    (Path(out) / IMPLICIT_MARKER).write_text(json.dumps({"beta": beta, "reference": reference}, indent=2) + "\n")


def prompt_and_reply_ids(tok, prompt: Any, completion: Any) -> tuple[list[int], list[int]]:
    """(prompt ids, reply ids) as DPOTrainer tokenises a pair's reply (module docstring)."""
    if isinstance(prompt, list):
        answer = completion if isinstance(completion, list) else [{"role": "assistant", "content": completion}]
        head = list(tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True,
                                            return_dict=True)["input_ids"])
        full = list(tok.apply_chat_template(prompt + answer, tokenize=True, return_dict=True)["input_ids"])
        return head, full[len(head):]
    text = completion if isinstance(completion, str) else completion[0]["content"]
    return list(tok(prompt)["input_ids"]), list(tok(text, add_special_tokens=False)["input_ids"]) + [tok.eos_token_id]


def sequence_logps(model, rows: Sequence[tuple[list[int], list[int]]], pad: int,
                   batch_size: int = BATCH) -> list[float]:
    """Summed log-prob of each reply after its prompt under `model`, teacher-forced (rows right-padded, one
    forward a batch); rows are (prompt ids, reply ids). Also what rlft.watch.heldout.completion_logprobs runs."""
    import torch

    device = next(model.parameters()).device
    out: list[float] = []
    for start in range(0, len(rows), batch_size):
        part = rows[start:start + batch_size]
        width = max(len(p) + len(c) for p, c in part)
        ids = torch.full((len(part), width), pad, dtype=torch.long)
        mask = torch.zeros((len(part), width), dtype=torch.long)
        for i, (p, c) in enumerate(part):
            ids[i, :len(p) + len(c)] = torch.tensor(p + c)
            mask[i, :len(p) + len(c)] = 1
        with torch.no_grad():
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()
        logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:].to(device).unsqueeze(-1))[..., 0]
        out += [float(logp[i, len(p) - 1:len(p) + len(c) - 1].sum()) for i, (p, c) in enumerate(part)]
    return out


def same_tokens(a, b) -> bool:
    """Whether two tokenizers give the same ids to the same text and chat (vocabulary and chat template)."""
    return a.get_vocab() == b.get_vocab() and getattr(a, "chat_template", None) == getattr(b, "chat_template", None)


def token_logps(model, args: dict, width: int):
    """Log-probs (temperature 1) of the last `width` tokens of args["input_ids"] under `model`, (B, width)."""
    import torch

    from rlft.speed.decode import last_positions

    ids = args["input_ids"]
    keep = last_positions(model, ids, width + 1)  # the reply's positions only: no prompt logits
    logits = model(**args, use_cache=False, logits_to_keep=keep).logits[:, -width - 1:-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, -width:].unsqueeze(-1))[..., 0]


class ImplicitReward:
    """DPO's implicit reward as a reward function, `(completions, prompts=..., **_) -> list[float]`.

    `reference` None: `policy` is a peft model whose adapter, disabled, gives the reference (a LoRA run in
    memory, at the end of `rlft reward`)."""

    def __init__(self, policy, tok, beta: float, reference=None):
        self.policy, self.tok, self.beta, self.reference = policy, tok, float(beta), reference
        self.__name__ = "implicit_reward"

    @classmethod
    def from_folder(cls, path: str) -> "ImplicitReward":
        from rlft.models import adapter_base, load_for_inference, load_tokenizer

        meta = json.loads((Path(path) / IMPLICIT_MARKER).read_text())
        reference = meta.get("reference") or adapter_base(path)
        if not reference:
            raise UserError(f"the implicit reward model {path} names no reference model and is not an adapter",
                            f"set \"reference\" in {Path(path) / IMPLICIT_MARKER} to the model its DPO run "
                            "started from")
        return cls(load_for_inference(path), load_tokenizer(path), float(meta.get("beta", 0.1)),
                   load_for_inference(reference))

    def to(self, device) -> "ImplicitReward":
        self.policy.to(device)
        if self.reference is not None:
            self.reference.to(device)
        return self

    def _both(self, fn: Callable) -> tuple[Any, Any]:
        """(fn(policy), fn(reference)) with the policy in eval mode; with no reference model the reference is
        the policy with its adapter disabled."""
        was_training = self.policy.training
        self.policy.eval()
        try:
            mine = fn(self.policy)
            if self.reference is not None:
                ref = fn(self.reference)
            else:
                with self.policy.disable_adapter():
                    ref = fn(self.policy)
        finally:
            if was_training:
                self.policy.train()
        return mine, ref

    def logps(self, rows: list[tuple[list[int], list[int]]]) -> tuple[list[float], list[float]]:
        """(policy, reference) summed reply log-probs of `rows`."""
        pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id
        return self._both(lambda model: sequence_logps(model, rows, pad))

    def token_rewards(self, input_ids, attention_mask, position_ids, width: int):
        """beta * (log pi(y_t) - log pi_ref(y_t)) of each of the last `width` tokens of `input_ids` (B, width):
        the implicit reward token by token, on the very tokens a policy sampled (so it needs the policy's
        tokenizer). Summed over a reply it is `__call__`'s score of that reply, up to how the reply's text
        tokenises; rlft ppo's ppo.token_rewards puts it on each token instead of on the reply's last."""
        import torch

        args = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        with torch.no_grad():
            mine, ref = self._both(lambda model: token_logps(model, args, width))
        return self.beta * (mine - ref)

    def same_tokens_as(self, tok) -> bool:
        """Whether a policy with tokenizer `tok` samples the token ids this model reads (token_rewards)."""
        return same_tokens(self.tok, tok)

    def __call__(self, completions: list, prompts: list | None = None, **_: Any) -> list[float]:
        if prompts is None:
            raise ValueError("a reward model needs the prompts it scores completions for")
        rows = [prompt_and_reply_ids(self.tok, p, c) for p, c in zip(prompts, completions)]
        mine, ref = self.logps(rows)
        return [self.beta * (a - b) for a, b in zip(mine, ref)]
