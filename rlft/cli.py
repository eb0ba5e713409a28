"""The `rlft` command line: builds the Typer app from the command modules in rlft/commands.

Each command is one module with one plain function (options -> RunConfig -> method); this module only
registers them, in the order `rlft --help` lists them. Command modules import rlft.commands.options, never
this module, so there is no way back.

This module is imported for `rlft --help`, so it must stay light: torch, transformers, trl, peft and
datasets are imported inside the commands that need them (a test asserts this).

Errors the user can fix are `rlft.errors.UserError`; `main()` prints them as one line naming the problem
and the fix and exits with code 2. `--debug` (or RLFT_DEBUG=1) shows the traceback instead.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from typing import Annotated

import typer
from typer.core import TyperGroup

from rlft.commands import (
    bootstrap,
    chat,
    choose,
    data,
    distill,
    dpo,
    export,
    grpo,
    init_model,
    kto,
    merge,
    ppo,
    preflight,
    report,
    reward,
    rloo,
    sft,
    sweep,
    verify,
)
from rlft.commands import (
    eval as eval_cmd,
)
from rlft.commands.options import err_console
from rlft.errors import Terminated, UserError, disk_errno, signal_line


class _RootGroup(TyperGroup):
    """The `rlft` group, whose own help (`rlft`, `rlft --help`) is click's plain listing of the commands.

    Typer's rich help imports rich.markdown and markdown_it on every call (typer.rich_utils), about two thirds
    of `rlft --help`'s time here; the commands keep their rich help, panels included (`rlft dpo --help`)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rich_markup_mode = None


app = typer.Typer(
    cls=_RootGroup,
    context_settings={"max_content_width": 120},  # the commands' first help lines, uncut on a wide terminal
    name="rlft",
    help="Fine-tune LLMs with SFT, DPO, KTO, GRPO, RLOO, reward model + PPO or distillation, on Hugging Face TRL.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks (also RLFT_DEBUG=1).")] = False,
) -> None:
    if debug:
        os.environ["RLFT_DEBUG"] = "1"


# ----------------------------------------------------------------------------- commands
# (name on the command line, function): training first, then inspection and tooling.
COMMANDS = (
    ("sft", sft.sft), ("dpo", dpo.dpo), ("kto", kto.kto), ("reward", reward.reward), ("grpo", grpo.grpo),
    ("rloo", rloo.rloo), ("ppo", ppo.ppo), ("distill", distill.distill),
    ("bootstrap", bootstrap.bootstrap),
    ("eval", eval_cmd.eval_), ("preflight", preflight.preflight_), ("choose", choose.choose),
    ("verify", verify.verify), ("report", report.report), ("init-model", init_model.init_model),
    ("merge", merge.merge), ("export", export.export), ("chat", chat.chat), ("sweep", sweep.sweep),
)
for _name, _fn in COMMANDS:
    app.command(_name)(_fn)
app.add_typer(data.data_app, name="data", help="Inspect data files: lint.")


# ----------------------------------------------------------------------------- entry point
def main(argv: list[str] | None = None) -> None:
    """Console-script entry: run the app, turning user errors into one line and exit code 2."""
    debug = os.environ.get("RLFT_DEBUG") == "1" or "--debug" in (argv if argv is not None else sys.argv[1:])
    previous = _on_signals()
    try:
        app(args=argv, prog_name="rlft")
    except UserError as exc:
        if debug:
            raise
        from rich.markup import escape

        err_console.print(f"[bold red]error:[/] {escape(exc.message)}", highlight=False, soft_wrap=True)
        if exc.fix:
            err_console.print(f"  [bold]fix:[/] {escape(exc.fix)}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except (Terminated, KeyboardInterrupt) as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        err_console.print(signal_line(signum), highlight=False)
        sys.exit(128 + signum)
    except OSError as exc:  # a full or read-only disk, a name too long, ...: the user's to fix
        if debug or exc.errno not in DISK_ERRORS:
            _crash(exc, debug)
        from rich.markup import escape

        err_console.print(f"[bold red]error:[/] {escape(exc.strerror or str(exc))}"
                          f"{escape(f': {exc.filename}') if exc.filename else ''}", highlight=False, soft_wrap=True)
        err_console.print(f"  [bold]fix:[/] {DISK_ERRORS[exc.errno]}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except Exception as exc:  # an rlft bug or a library failure: say so in one line
        number = disk_errno(exc)
        if debug or number is None:
            _crash(exc, debug)
        from rich.markup import escape

        err_console.print(f"[bold red]error:[/] {escape(os.strerror(number))} while writing "
                          f"({type(exc).__name__})", highlight=False, soft_wrap=True)
        err_console.print(f"  [bold]fix:[/] {DISK_ERRORS[number]}", highlight=False, soft_wrap=True)
        sys.exit(2)
    finally:
        for signum, handler in (previous or {}).items():
            signal.signal(signum, handler)


# OSErrors that are the machine's state, not rlft's bug, with their fix.
DISK_ERRORS = {
    errno.ENOSPC: "free some disk space (or choose an output on another disk), then run it again",
    errno.EDQUOT: "free some of your disk quota, then run it again",
    errno.EROFS: "choose an output on a writable file system",
    errno.EACCES: "check the permissions of that path, or choose another",
    errno.ENAMETOOLONG: "choose a shorter path (255 bytes a name, 4095 a path)",
    errno.EIO: "check that the disk has free space and works (df -h), then run it again",
}


def _crash(exc: BaseException, debug: bool) -> None:
    """An rlft bug or a library failure: one line, exit 1 (the traceback with --debug)."""
    if debug:
        raise exc
    from rich.markup import escape

    first = str(exc).splitlines()[0] if str(exc) else ""
    err_console.print(f"[bold red]error:[/] {type(exc).__name__}: {escape(first)}", highlight=False, soft_wrap=True)
    err_console.print("  [bold]fix:[/] rerun with --debug for the traceback", highlight=False)
    sys.exit(1)


def _on_signals():
    """Turn SIGTERM and SIGINT into rlft.errors.Terminated (the trainer installs its own checkpointing handler
    while it trains); returns the previous handlers, or None off the main thread where handlers cannot be set."""
    def _raise(signum, frame):
        raise Terminated(signum)

    try:
        return {s: signal.signal(s, _raise) for s in (signal.SIGTERM, signal.SIGINT)}
    except ValueError:
        return None


if __name__ == "__main__":
    main()
