"""One scoring path for reward models: what `rlft reward` trains on is what PPO and GRPO score.

TRL's RewardTrainer builds each training text as prompt + answer and, for plain (non-chat) text, appends
the eos token; for chat rows it applies the chat template to prompt + answer messages. A reward model
scored on decoded prompt+completion *without* that eos reads a sequence shape it never saw (on the tiny
model, pair accuracy fell from 0.81 to 0.46 that way). `reward_input_ids` reproduces the trainer's
tokenisation exactly (a test compares the two), and every consumer scores through `score`.
"""

from __future__ import annotations

from typing import Any, Sequence


def reward_input_ids(tok, prompt: Any, completion: Any) -> list[int]:
    """Token ids of (prompt, completion) exactly as RewardTrainer tokenises a chosen/rejected answer."""
    if isinstance(prompt, list):  # chat rows: the template renders prompt + answer messages
        answer = completion if isinstance(completion, list) else [{"role": "assistant", "content": completion}]
        return list(tok.apply_chat_template(prompt + answer, tokenize=True, return_dict=True)["input_ids"])
    text = prompt + (completion if isinstance(completion, str) else completion[0]["content"])
    if not text.endswith(tok.eos_token):
        text += tok.eos_token
    return list(tok(text)["input_ids"])


def score(model, tok, prompts: Sequence[Any], completions: Sequence[Any], batch_size: int = 64) -> list[float]:
    """Reward-model scores of completions (one float each), through `reward_input_ids`."""
    import torch

    device = next(model.parameters()).device
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    out: list[float] = []
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(prompts), batch_size):
            ids = [reward_input_ids(tok, p, c) for p, c in zip(prompts[start:start + batch_size],
                                                               completions[start:start + batch_size])]
            width = max(len(x) for x in ids)
            input_ids = torch.full((len(ids), width), pad, dtype=torch.long)
            mask = torch.zeros((len(ids), width), dtype=torch.long)
            for i, x in enumerate(ids):  # right padding, as in training; the head reads the last real token
                input_ids[i, : len(x)] = torch.tensor(x)
                mask[i, : len(x)] = 1
            with torch.no_grad():
                logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits
            out += logits[:, 0].float().tolist()
    finally:
        if was_training:
            model.train()
    return out


def pair_accuracy(reward, rows: Sequence[dict]) -> float:
    """Share of preference rows where `reward` (a reward function, `(completions, prompts=...) -> scores`: ScoredBy,
    RewardModelReward, rlft.reward_model.implicit.ImplicitReward) scores chosen above rejected."""
    prompts = [r["prompt"] for r in rows]
    chosen = reward([r["chosen"] for r in rows], prompts=prompts)
    rejected = reward([r["rejected"] for r in rows], prompts=prompts)
    return sum(c > r for c, r in zip(chosen, rejected)) / max(len(rows), 1)


def swapped_prompt_rows(rows: Sequence[dict]) -> list[dict]:
    """The pairs with each one's prompt swapped for another's (row i gets row i + n // 2's prompt); [] when
    fewer than two rows or every prompt is the same."""
    n = len(rows)
    if n < 2 or len({str(r["prompt"]) for r in rows}) < 2:
        return []
    return [{**r, "prompt": rows[(i + n // 2) % n]["prompt"]} for i, r in enumerate(rows)]


def prompt_swapped_accuracy(reward, rows: Sequence[dict]) -> float | None:
    """Pair accuracy with each pair's prompt swapped for another's (swapped_prompt_rows).

    A reward model that judges a reply by its fit to the prompt falls toward 0.5 on the pairs whose right reply
    depends on the prompt (the right decision for *this* customer); one that orders the pairs as well under a
    wrong prompt tells chosen from rejected by the replies' wording alone, and on the policy's own replies, worded
    otherwise, it has nothing to go on (docs/preferences.md, "Does the reward model read the prompt?")."""
    swapped = swapped_prompt_rows(rows)
    return pair_accuracy(reward, swapped) if swapped else None


def reads_the_prompt_line(own: float, swapped: float, pairs: int) -> str:
    """One line on pair accuracy with own vs swapped prompts; a warning when swapping costs (almost) nothing."""
    line = f"pair accuracy with each pair's prompt swapped for another's: {swapped:.3f} ({own:.3f} with its own, " \
           f"{pairs} pairs)"
    if swapped >= own - 0.02:
        line += (": the reward model orders these pairs as well without their prompt, so it reads the replies' "
                 "wording, not whether they answer the prompt right; PPO against it learns that wording (pairs "
                 "whose rejected replies are worded like the chosen ones, or on-policy pairs, teach the prompt)")
    return line


class ScoredBy:
    """An in-memory score-head reward model (model, tokenizer) as a reward function `(completions, prompts=...)`."""

    def __init__(self, model, tok):
        self.model, self.tok = model, tok

    def to(self, device) -> "ScoredBy":
        self.model.to(device)
        return self

    def __call__(self, completions: list, prompts: list | None = None, **_: Any) -> list[float]:
        return score(self.model, self.tok, prompts or [], completions)


class RewardModelReward:
    """A reward model folder as a TRL-style reward function, `(completions, prompts=..., **_) -> list[float]`.

    Usable as a GRPO reward (`rlft grpo --reward-model DIR`) and by rlft's PPO. A score-head reward model
    (`rlft reward`) is scored through `score`; a folder written by `rlft reward` with reward.objective implicit
    (rlft.reward_model.implicit) by DPO's implicit reward. The model is loaded once on first use.
    """

    def __init__(self, path: str):
        self.path = str(path)
        self.__name__ = "reward_model"
        self._scorer = None

    def load(self):
        """The loaded scorer (a ScoredBy or an ImplicitReward)."""
        if self._scorer is None:
            from rlft.models import load_for_inference, load_tokenizer, resolve_model_path
            from rlft.reward_model.implicit import ImplicitReward, is_implicit

            path = resolve_model_path(self.path)
            # through rlft's loader: a LoRA reward run (an adapter folder) gets its base with a one-output head
            # (a plain from_pretrained builds two) and the adapter merged in; pad id set when the base has none
            try:
                if is_implicit(path):
                    self._scorer = ImplicitReward.from_folder(path)
                else:
                    self._scorer = ScoredBy(load_for_inference(path, head="score"), load_tokenizer(path))
            except (OSError, ValueError, RuntimeError) as exc:
                from rlft.loadable import load_problem

                raise load_problem(self.path, exc, "--reward-model") from exc
        return self._scorer

    def __call__(self, completions: list, prompts: list | None = None, **_: Any) -> list[float]:
        scorer = self.load()
        if prompts is None:
            raise ValueError("a reward model needs the prompts it scores completions for")
        return scorer(completions, prompts=prompts)
