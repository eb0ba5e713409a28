"""`rlft chat`: an interactive chat in the terminal, or one answer to stdout with --prompt."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Optional

import typer


class Format(str, Enum):
    auto = "auto"
    chat = "chat"
    text = "text"


def chat(
    source: Annotated[str, typer.Argument(help="Run folder (LoRA runs are merged into their base), model "
                                          "folder, hub id, or a built-in name (tiny, smollm2).")],
    prompt: Annotated[Optional[str], typer.Option("--prompt", "-p", help="Answer this one message on "
                                                  "stdout and exit (for scripts).")] = None,
    system: Annotated[Optional[str], typer.Option("--system", help="System prompt (chat format).")] = None,
    max_new_tokens: Annotated[int, typer.Option(help="Generation budget per answer.", min=1)] = 256,
    temperature: Annotated[float, typer.Option(help="Sampling temperature; 0 = greedy.", min=0.0)] = 0.0,
    fmt: Annotated[Format, typer.Option("--format", help="auto: plain text for runs trained on plain-string "
                                        "prompts, else the chat template; chat or text force one.")] = Format.auto,
) -> None:
    """Chat with a model in the terminal, or answer --prompt once on stdout.

    Answers stream as they are generated. In the chat: /system TEXT, /reset, /exit; a line ending in a
    backslash continues on the next line, and lines between two \"\"\" lines are one message.
    """
    from rlft.errors import UserError

    if prompt is not None and not prompt.strip():
        raise UserError("--prompt is empty: there is nothing to answer", "pass the message, e.g. --prompt 'Hi'")
    if prompt is None and (sys.stdin is None or sys.stdin.closed):
        raise UserError("no --prompt and stdin is closed: there is nothing to chat with",
                        "run `rlft chat` in a terminal, pipe the messages in, or pass --prompt TEXT")
    from rlft.quiet import quiet_libraries

    quiet_libraries()
    from rlft.chat.session import chat_loop, load_chat

    session = load_chat(source, fmt.value, max_new_tokens=max_new_tokens, temperature=temperature,
                        system=system)
    if prompt is not None:
        print(session.reply(prompt), flush=True)
        return
    chat_loop(session, sys.stdin, sys.stdout, sys.stderr)
