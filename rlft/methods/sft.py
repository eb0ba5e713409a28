"""Supervised fine-tuning with TRL's SFTTrainer.

Rows are prompt/completion (loss on the completion only, TRL's default for that shape) or chat
`messages`. For chats, rlft turns on TRL's assistant-only loss when the chat template marks assistant
turns with `{% generation %}` (the tiny model's does) or TRL has a training variant of it (Qwen2.5, Llama 3,
...); otherwise, unlike TRL (which then learns the whole chat), each chat's last assistant turn is learned
as a completion (rlft.chat.templates.sft_chat_loss), and the run says so before it starts.
`sft.assistant_only_loss=false` learns whole chats.
"""

from __future__ import annotations

from pathlib import Path

from rlft.config import RunConfig
from rlft.errors import UserError
from rlft.methods.common import Prepared, build_trl_config, clamp_max_length, load_run_tokenizer

KIND = "demonstrations"


def sft_columns(rows) -> tuple[str, ...]:
    """The one row shape shared by all rows; mixed shapes are a data error."""
    shapes = {"messages" if "messages" in r.data else "text" if "text" in r.data and "prompt" not in r.data
              else "prompt" for r in rows}
    if len(shapes) > 1:
        raise UserError(f"training rows mix shapes ({', '.join(sorted(shapes))})",
                        "use one shape per run: prompt/completion, or messages")
    shape = shapes.pop()
    return {"messages": ("messages",), "text": ("text",), "prompt": ("prompt", "completion")}[shape]


def prepare(cfg: RunConfig, train_rows, eval_rows, console) -> Prepared:
    """The tokenizer; for chats, say before the run folder exists which loss the run will use."""
    tok = load_run_tokenizer(cfg)
    if any(_has_tool_turns(r.data) for r in train_rows):  # tool-call demonstrations: a template that renders them
        from rlft.tools import tool_tokenizer

        tok = tool_tokenizer(tok, cfg.model.name_or_path)
    if sft_columns(train_rows + eval_rows) == ("messages",):
        from rlft.chat.templates import sft_chat_loss

        _, note = sft_chat_loss(tok, cfg.sft.get("assistant_only_loss"))
        if note:
            console.print(f"[yellow]note[/]: {note}")
    return Prepared(train_rows, eval_rows, tok=tok)


def _has_tool_turns(row: dict) -> bool:
    messages = row.get("messages")
    return isinstance(messages, list) and any(isinstance(m, dict) and (m.get("tool_calls") or m.get("role") == "tool")
                                              for m in messages)


def build(cfg: RunConfig, out: Path, prepared: Prepared):
    from trl import SFTConfig, SFTTrainer

    from rlft import speed
    from rlft.chat.templates import ASSISTANT_ONLY, LAST_TURN, last_turn_rows, sft_chat_loss
    from rlft.data.table import to_dataset
    from rlft.models import load_model

    train_rows, eval_rows, tok = prepared.train_rows, prepared.eval_rows, prepared.tok
    columns = sft_columns(train_rows + eval_rows)
    model = load_model(cfg.model)
    overrides = {"max_length": clamp_max_length(cfg.sft.max_length, model)}
    if columns == ("messages",):
        mode, _ = sft_chat_loss(tok, cfg.sft.get("assistant_only_loss"))
        if mode == ASSISTANT_ONLY:
            overrides["assistant_only_loss"] = True  # TRL swaps in the training template when it needs one
        elif mode == LAST_TURN:
            train_rows, eval_rows = last_turn_rows(train_rows), last_turn_rows(eval_rows)
            columns = ("prompt", "completion")
    args = build_trl_config(cfg, SFTConfig, out, bool(eval_rows), **overrides)
    trainer = speed.trainer_class(SFTTrainer)(model=model, args=args, processing_class=tok,
                                              train_dataset=to_dataset(train_rows, columns),
                                              eval_dataset=to_dataset(eval_rows, columns) if eval_rows else None)
    if len(trainer.train_dataset) == 0:
        raise UserError(f"all {len(train_rows)} training rows were dropped: after truncation to "
                        f"sft.max_length={args.max_length} tokens no completion token is left to learn",
                        "raise sft.max_length (or shorten prompts / system messages)")
    return trainer


def after(cfg: RunConfig, trainer, prepared: Prepared, console) -> dict:
    return {}
