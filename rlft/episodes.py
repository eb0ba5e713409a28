"""Tokens that match the conversation: the check that what GRPO trains on is what the chat template renders.

TRL's tool loop never re-renders an episode: it concatenates the prompt's ids, the generated ids, the ids of the
tool-result suffix (from a dummy conversation, `GRPOTrainer._get_tool_suffix_ids`) and the next generated ids, and
masks the suffix out of the loss (`tool_mask`). Where a template is not prefix-preserving, or a separator at the
assistant -> tool boundary is lost, the trained ids drift from the conversation a deployed model will be shown.
`first_mismatch` compares one episode's ids with the template's rendering of its final conversation (a test runs it
on every episode); `mask_covers_tool_results` checks the masked runs are exactly the tool turns; `watch_rendering`
samples both at run time and raises an alarm line (with the first differing position) instead of staying silent.
Departure from TRL: TRL has no such check.
"""

from __future__ import annotations

from rlft.tools import ToolStats


def first_mismatch(tok, prompt: list, completion: list, prompt_ids: list, completion_ids: list, tools=None,
                   chat_template: str | None = None) -> int | None:
    """None when the ids of one episode (TRL builds them by concatenation: prompt, generated turn, tool-result
    suffix, next generated turn...) equal the chat template's rendering of its final conversation, else the first
    position (from the prompt's start) where they differ. The rendering may go on past the ids (the template's
    newline after the last end-of-turn); a truncated episode is compared on its length."""
    ids = list(prompt_ids) + list(completion_ids)
    rendered = tok.apply_chat_template(prompt + completion, tools=tools or None, chat_template=chat_template,
                                       tokenize=True, return_dict=False)
    if isinstance(rendered, dict):
        rendered = rendered["input_ids"]
    for i, (a, b) in enumerate(zip(ids, rendered)):
        if a != b:
            return i
    return None if len(ids) <= len(rendered) else len(rendered)


def mask_covers_tool_results(tok, completion: list, completion_ids: list, tool_mask: list) -> bool:
    """The tokens kept out of the loss (tool_mask 0) are exactly the tool turns: one masked run per group of
    tool results, holding each result's text, in order, and nothing the model generated."""
    runs, start = [], None
    for i, m in enumerate(list(tool_mask) + [1]):
        if m == 0 and start is None:
            start = i
        elif m != 0 and start is not None:
            runs.append(tok.decode(completion_ids[start:i]))
            start = None
    groups, current = [], []
    for msg in completion:
        if msg.get("role") == "tool":
            current.append(str(msg.get("content", "")))
        elif current:
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return len(runs) == len(groups) and all(all(c in run for c in g) for run, g in zip(runs, groups))


def watch_rendering(trainer, stats: ToolStats, console, every: int = 1) -> None:
    """At run time, check one episode of every `every`-th generation batch (`first_mismatch`, on the trainer's
    own `_generate` output); a mismatch is counted (tools/render_mismatch) and printed as an alarm naming the first
    differing position and the tokens there."""
    original = trainer._generate
    calls = {"n": 0}

    def checked(prompts):
        out = original(prompts)
        calls["n"] += 1
        if calls["n"] % every:
            return out
        prompt_ids, completion_ids, tool_mask, completions = out[0], out[1], out[2], out[3]
        i = 0
        tools = trainer._env_tools[trainer._batch_environments[i]] if trainer.environment_factories else trainer.tools
        try:
            pos = first_mismatch(trainer.processing_class, list(prompts[i]), completions[i], prompt_ids[i],
                                 completion_ids[i], tools, trainer.chat_template)
        except Exception as exc:  # noqa: BLE001 - a check must not end the run
            pos, note = -1, f"the rendering failed: {type(exc).__name__}: {exc}"
        else:
            ids = list(prompt_ids[i]) + list(completion_ids[i])
            note = f"trained on {trainer.processing_class.decode(ids[pos:pos + 12])!r}" if pos is not None else ""
        if pos is None and tool_mask is not None and not mask_covers_tool_results(
                trainer.processing_class, completions[i], completion_ids[i], tool_mask[i]):
            pos, note = -1, "the loss mask does not cover exactly the tool results"
        if pos is not None:
            stats.render_mismatches += 1
            console.print(f"[red]alarm[/] tokens_mismatch: the token ids trained on differ from the chat template's "
                          f"rendering of the episode at position {pos} ({note})", highlight=False)
        return out

    trainer._generate = checked
