"""Supervised fine-tuning with TRL's SFTTrainer.

Rows are prompt/completion (loss on the completion only, TRL's default for that shape) or chat
`messages`. For chats, rlft turns on TRL's assistant-only loss when the chat template marks assistant
turns with `{% generation %}` (the tiny model's does); otherwise the whole conversation is learned, as in
TRL's default.
"""

from __future__ import annotations

from pathlib import Path

from rlft.config import RunConfig
from rlft.errors import UserError
from rlft.methods.common import RunResult, build_trl_config, clamp_max_length, train_with

KIND = "sft"


def sft_columns(rows) -> tuple[str, ...]:
    """The one row shape shared by all rows; mixed shapes are a data error."""
    shapes = {"messages" if "messages" in r.data else "text" if "text" in r.data and "prompt" not in r.data
              else "prompt" for r in rows}
    if len(shapes) > 1:
        raise UserError(f"training rows mix shapes ({', '.join(sorted(shapes))})",
                        "use one shape per run: prompt/completion, or messages")
    shape = shapes.pop()
    return {"messages": ("messages",), "text": ("text",), "prompt": ("prompt", "completion")}[shape]


def build(cfg: RunConfig, out: Path, train_rows, eval_rows):
    from trl import SFTConfig, SFTTrainer

    from rlft.data import to_dataset
    from rlft.models import load_model, load_tokenizer

    columns = sft_columns(train_rows + eval_rows)
    tok = load_tokenizer(cfg.model.name_or_path, cfg.model.revision, cfg.model.trust_remote_code)
    model = load_model(cfg.model)
    overrides = {"max_length": clamp_max_length(cfg.sft.max_length, model)}
    if columns == ("messages",) and cfg.sft.get("assistant_only_loss") is None:
        overrides["assistant_only_loss"] = "{% generation %}" in (tok.chat_template or "")
    args = build_trl_config(cfg, SFTConfig, out, bool(eval_rows), **overrides)
    trainer = SFTTrainer(model=model, args=args, processing_class=tok,
                         train_dataset=to_dataset(train_rows, columns),
                         eval_dataset=to_dataset(eval_rows, columns) if eval_rows else None)
    if len(trainer.train_dataset) == 0:
        raise UserError(f"all {len(train_rows)} training rows were dropped: after truncation to "
                        f"sft.max_length={args.max_length} tokens no completion token is left to learn",
                        "raise sft.max_length (or shorten prompts / system messages)")
    return trainer


def run(cfg: RunConfig, **kwargs) -> RunResult:
    return train_with(cfg, KIND, build, **kwargs)
