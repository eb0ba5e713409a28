"""Chat templates: which tokens SFT learns, where generation stops, and plain prompts for chat models.

Shared by every method and by eval / pre-flight (generation goes through rlft.evaluate, which uses
`stop_token_ids`). Light at import; TRL's chat template utilities are imported inside the functions.

- `sft_chat_loss(tok)`: for chat `messages` rows, assistant-only loss needs a template with `{% generation %}`
  markers. Templates that have them are used as they are; for the ones TRL ships a training variant of
  (`trl.chat_template_utils.get_training_chat_template`: Qwen2.5, Qwen3, Llama 3, Gemma, Phi-3, ...) TRL swaps
  it in; for the rest (SmolLM2's ChatML with a default system prompt among them) rlft falls back to
  completion-only loss on the last assistant turn (each chat becomes prompt = the turns before it,
  completion = that turn), rather than TRL's default of learning the whole chat.
- `stop_token_ids(tok)`: eos plus the template's end-of-turn token (found by rendering a chat), so generation
  for chat prompts stops at `<|im_end|>` / `<|eot_id|>` even when the tokenizer's eos is another token.
- `plain_prompt_note(tok, rows)`: the one-line advice when string prompts meet a model with a chat template;
  `wrap_as_chat(rows)` (`data.as_chat`, `--as-chat`) turns such prompts into user messages.
- `last_turn_rows(rows)`: chats as prompt = earlier turns, completion = the last assistant turn.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

ASSISTANT_ONLY = "assistant_only"  # template with generation markers (own or TRL's training variant)
LAST_TURN = "last_turn"  # no training template: completion-only loss on the last assistant turn
_PROBE = "rlft-probe-7f3a"  # a reply whose end shows where the template closes an assistant turn


def training_template(tok) -> str | None:
    """A chat template that marks assistant turns with `{% generation %}`: the tokenizer's own when it has the
    markers, else TRL's training variant of it; None when neither exists (or there is no template)."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    template = tok.chat_template
    if not template:
        return None
    if has_generation_markers(template):
        return template if isinstance(template, str) else template["default"]
    try:
        return get_training_chat_template(tok)
    except ValueError:  # TRL has no training variant of this template
        return None


def sft_chat_loss(tok, setting: bool | None) -> tuple[str, str | None]:
    """How SFT learns `messages` rows: (mode, note to print). `setting` is sft.assistant_only_loss as given
    (None = decide here). Raises UserError when assistant-only loss is asked for and cannot be done."""
    from rlft.errors import UserError

    if setting is False:
        return "whole", None
    if training_template(tok) is not None:
        return ASSISTANT_ONLY, None
    why = ("the model has no chat template" if not tok.chat_template else
           "its chat template has no {% generation %} markers and TRL has no training variant of it")
    if setting:
        raise UserError(f"sft.assistant_only_loss=true cannot be done: {why}",
                        "drop the setting (rlft then learns each chat's last assistant turn), or set it to false")
    return LAST_TURN, (f"assistant-only loss is not available ({why}); learning each chat's last assistant turn "
                       "only (completion-only loss). Set sft.assistant_only_loss=false to learn whole chats.")


def end_of_turn_token(tok) -> str | None:
    """The special token the chat template puts right after an assistant reply (`<|im_end|>`, `<|eot_id|>`)."""
    if not tok.chat_template:
        return None
    try:
        text = tok.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": _PROBE}],
                                       tokenize=False)
    except Exception:  # noqa: BLE001 - a template that cannot render a plain chat has no end-of-turn to find
        return None
    tail = text[text.rfind(_PROBE) + len(_PROBE):]
    for special in sorted(tok.all_special_tokens + list(tok.get_added_vocab()), key=len, reverse=True):
        if special and tail.lstrip(" ").startswith(special):
            return special
    return None


def stop_token_ids(tok, model: Any = None) -> list[int]:
    """Token ids that end a generation: the tokenizer's eos, the template's end-of-turn token, and the model's
    generation_config eos ids (a list for Llama 3 instruct), without duplicates."""
    ids: list[int] = []
    eot = end_of_turn_token(tok)
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    candidates = [tok.eos_token_id, tok.convert_tokens_to_ids(eot) if eot else None]
    candidates += gen_eos if isinstance(gen_eos, list) else [gen_eos]
    for i in candidates:
        if isinstance(i, int) and i >= 0 and i not in ids and i != tok.unk_token_id:
            ids.append(i)
    return ids


def has_plain_prompts(rows: list[Any]) -> bool:
    """Whether any row's prompt is a plain string (rows are dicts or rlft.data.Row)."""
    for r in rows:
        data = getattr(r, "data", r)
        if isinstance(data.get("prompt"), str):
            return True
    return False


def plain_prompt_note(tok, rows: list[Any], switch: str = "--set data.as_chat=true") -> str | None:
    """Advice when prompts are plain strings but the model has a chat template: they reach the model
    without it (TRL's non-conversational format), which an instruct model was not trained on."""
    if not tok.chat_template or not has_plain_prompts(rows):
        return None
    return (f"prompts are plain strings but the model has a chat template, so it is not applied; {switch} wraps "
            "each prompt as a user message (and answers as assistant messages)")


def wrap_as_chat(rows: list[Any]) -> list[Any]:
    """`data.as_chat` / `--as-chat`: each plain-string prompt becomes one user message, and the string answers
    beside it (completion, chosen, rejected) assistant messages, so the model's chat template is applied.
    Rows whose prompt is already a message list are left as they are."""
    out = []
    for r in rows:
        d = r.data
        if not isinstance(d.get("prompt"), str):
            out.append(r)
            continue
        new = dict(d, prompt=[{"role": "user", "content": d["prompt"]}])
        for key in ("completion", "chosen", "rejected"):
            if isinstance(d.get(key), str):
                new[key] = [{"role": "assistant", "content": d[key]}]
        out.append(replace(r, data=new))
    return out


def last_turn_rows(rows: list[Any]) -> list[Any]:
    """Chats as conversational prompt/completion: prompt = the turns before the last assistant turn,
    completion = that turn (SFT's completion-only fallback when the template has no training variant)."""
    out = []
    for r in rows:
        msgs = r.data.get("messages")
        if msgs is None:
            out.append(r)
            continue
        last = max(i for i, m in enumerate(msgs) if m["role"] == "assistant")
        out.append(replace(r, data={"prompt": msgs[:last], "completion": [msgs[last]]}))
    return out
