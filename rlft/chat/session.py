"""`rlft chat`: talk to a model or run in the terminal, or get one answer for a script (the command's logic;
rlft/chat/templates.py holds the chat-template helpers it shares with training and evaluation).

A prompt is rendered the way the model was trained. `format="auto"` looks at the run's `config.yaml`:
when the first training row it names has plain-string prompts (TRL's non-conversational format, e.g. the
tiny arithmetic SFT), the text is fed as is; otherwise (chat rows, a plain model folder, a hub id) the
tokenizer's chat template renders the conversation with the generation prompt. `chat` and `text` force one.

Generation is transformers' `generate` with a `TextStreamer` printing tokens as they come, stopping at eos
or the template's end-of-turn token (rlft.chat.templates.stop_token_ids, as `rlft eval` does); temperature 0 is
greedy decoding. In text mode every turn is a fresh prompt (there are no roles to hold a history).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rlft.errors import UserError

FORMATS = ("auto", "chat", "text")
HELP = ("commands: /system TEXT (set the system prompt, clears the history), /reset (clear the history), "
        "/exit; end a line with \\ to continue it, or put the message between lines holding only \"\"\"")


def trained_on_text(source: str) -> bool | None:
    """True when the run at `source` trained on plain-string prompts, False for chats, None when unknown."""
    cfg_path = Path(source) / "config.yaml"
    if not cfg_path.is_file():
        return None
    import yaml

    try:
        files = (yaml.safe_load(cfg_path.read_text()) or {}).get("data", {}).get("train") or []
        first = Path(files[0])
        if first.suffix != ".jsonl" or not first.is_file():
            return None
        with first.open() as fh:
            row = json.loads(fh.readline())
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    if "messages" in row or isinstance(row.get("prompt"), list):
        return False
    return isinstance(row.get("prompt"), str) or isinstance(row.get("text"), str)


def pick_format(source: str, tok, fmt: str) -> str:
    """`chat` or `text` for `source` (see the module docstring)."""
    if fmt not in FORMATS:
        raise UserError(f"unknown format '{fmt}'", f"use one of {', '.join(FORMATS)}")
    if fmt == "chat" and not tok.chat_template:
        raise UserError(f"'{source}' has no chat template", "use --format text")
    if fmt != "auto":
        return fmt
    if not tok.chat_template or trained_on_text(source):
        return "text"
    return "chat"


@dataclass
class Chat:
    """One conversation: the model, its tokenizer, the format, and the messages so far."""

    model: Any
    tok: Any
    fmt: str
    max_new_tokens: int = 256
    temperature: float = 0.0
    system: str | None = None
    history: list[dict] = field(default_factory=list)

    def render(self, text: str) -> str:
        if self.fmt == "text":
            return text
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + self.history
        messages = messages + [{"role": "user", "content": text}]
        try:
            return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # jinja TemplateError: e.g. a template that refuses the system role
            raise UserError(f"the chat template refused this conversation: {str(exc).splitlines()[0]}",
                            "drop the /system prompt, or use --format text") from exc

    def reply(self, text: str, out: TextIO | None = None) -> str:
        """Answer `text` (streamed to `out` when given) and add the turn to the history in chat mode."""
        import torch

        from rlft.chat.templates import stop_token_ids

        prompt = self.render(text)
        batch = self.tok(prompt, return_tensors="pt", add_special_tokens=False).to(self.model.device)
        budget = self.max_new_tokens
        positions = getattr(self.model.config, "max_position_embeddings", None)
        if positions:  # the answer stops where the model's positions end, whatever the budget
            used = batch["input_ids"].shape[1]
            if used >= positions:
                raise UserError(f"the conversation ({used} tokens) fills the model's {positions} positions",
                                "/reset the history, or send a shorter message")
            budget = min(budget, positions - used)
        kwargs: dict[str, Any] = dict(max_new_tokens=budget, pad_token_id=self.tok.pad_token_id,
                                      eos_token_id=stop_token_ids(self.tok, self.model),  # eos + end of turn
                                      do_sample=self.temperature > 0)
        if self.temperature > 0:
            kwargs.update(temperature=self.temperature, top_k=0, top_p=1.0)
        else:  # greedy: clear sampling defaults a generation_config may carry, so generate does not warn
            kwargs.update(temperature=None, top_k=None, top_p=None)
        if out is not None:
            kwargs["streamer"] = make_streamer(self.tok, out)
        with torch.no_grad():
            ids = self.model.generate(**batch, **kwargs)
        answer = self.tok.decode(ids[0, batch["input_ids"].shape[1]:], skip_special_tokens=True)
        if self.fmt == "chat":
            self.history += [{"role": "user", "content": text}, {"role": "assistant", "content": answer}]
        return answer


def make_streamer(tok, out: TextIO):
    """transformers' TextStreamer, writing the answer's text to `out` as tokens arrive."""
    from transformers import TextStreamer

    class ToStream(TextStreamer):
        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            out.write(text + ("\n" if stream_end else ""))
            out.flush()

    return ToStream(tok, skip_prompt=True, skip_special_tokens=True)


def load_chat(source: str, fmt: str = "auto", max_new_tokens: int = 256, temperature: float = 0.0,
              system: str | None = None) -> Chat:
    """Load a model, run folder (adapters merged into their base) or built-in for chatting."""
    if temperature < 0:
        raise UserError(f"--temperature {temperature} is negative", "use 0 for greedy decoding, or a value > 0")
    from rlft.checks import check_budget, check_language_model, probe_model
    from rlft.models import load_for_inference, load_tokenizer

    config = probe_model(source, flag="model")  # reads no weights
    check_language_model(source, config, "model")
    if not isinstance(config, dict):  # a model folder: its positions are known before any weight loads
        check_budget(source, max_new_tokens, config)
    tok = load_tokenizer(source)
    chosen = pick_format(source, tok, fmt)
    model = load_for_inference(source)
    check_budget(source, max_new_tokens, model.config)
    return Chat(model, tok, chosen, max_new_tokens, temperature, system)



def read_message(lines, prompt, err: TextIO) -> str | None:
    """The next message from `lines`: a line, lines joined by a trailing backslash, or a \"\"\" block.
    None at end of input."""
    err.write(prompt)
    err.flush()
    line = next(lines, None)
    if line is None:
        return None
    line = line.rstrip("\n")
    if line.strip() == '"""':
        block = []
        for more in lines:
            if more.rstrip("\n").strip() == '"""':
                break
            block.append(more.rstrip("\n"))
        return "\n".join(block)
    parts = []
    while line.endswith("\\"):
        parts.append(line[:-1])
        err.write("... ")
        err.flush()
        nxt = next(lines, None)
        if nxt is None:
            break
        line = nxt.rstrip("\n")
    else:
        parts.append(line)
    return "\n".join(parts)


def chat_loop(chat: Chat, stdin: TextIO = sys.stdin, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """The interactive loop: answers stream to `out`; prompts and notices go to `err`. Returns turns answered."""
    decoding = "greedy" if chat.temperature == 0 else f"temperature {chat.temperature}"
    err.write(f"chatting ({chat.fmt} format, {decoding}). {HELP}\n")
    lines = iter(stdin)
    turns = 0
    while True:
        text = read_message(lines, "you> ", err)
        if text is None or text.strip() in ("/exit", "/quit"):
            break
        command, _, arg = text.strip().partition(" ")
        if command == "/reset":
            chat.history.clear()
            err.write("history cleared\n")
        elif command == "/system":
            if chat.fmt == "text":
                err.write("this model takes plain text prompts: no system prompt (--format chat forces the "
                          "template)\n")
                continue
            chat.system = arg.strip() or None
            chat.history.clear()
            err.write(f"system prompt {'set' if chat.system else 'cleared'}; history cleared\n")
        elif command in ("/help", "/?"):
            err.write(HELP + "\n")
        elif command.startswith("/") and command.isascii() and command[1:].isalpha():
            err.write(f"unknown command {command}; {HELP}\n")
        elif text.strip():
            try:
                chat.reply(text, out)
                turns += 1
            except UserError as exc:
                err.write(f"error: {exc.message}\n  fix: {exc.fix}\n")
    return turns
