"""Errors that the CLI turns into one line and an exit code instead of a traceback.

A `UserError` is a mistake the user can fix (bad flag, bad file, bad row). Its message names the problem,
its `fix` names the remedy. The CLI prints `error: <message>` and `  fix: <fix>` and exits with code 2.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem in the user's input; `fix` says what to do about it."""

    exit_code = 2

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return self.message


class DataError(UserError):
    """One or more bad rows. Each problem names file, line (1-based) and field."""

    def __init__(self, problems: list[str], fix: str | None = None):
        self.problems = problems
        head = problems[0] if len(problems) == 1 else f"{len(problems)} data problems:\n  " + "\n  ".join(problems[:20])
        if len(problems) > 20:
            head += f"\n  ... and {len(problems) - 20} more"
        super().__init__(head, fix)


class Terminated(BaseException):
    """SIGTERM or SIGINT (Ctrl-C) outside the trainer's own handler (loading data, building the model, merge,
    export, chat): unwinds the stack, so an open run record is marked interrupted and the CLI prints one line
    (exit 128 + signum: 143 or 130). Not a KeyboardInterrupt: click would turn that into its own Abort."""

    def __init__(self, signum: int = 15):
        super().__init__(signum)
        self.signum = signum


def signal_line(signum: int) -> str:
    """The one line the CLI prints for SIGTERM or SIGINT outside a training step."""
    import signal

    name = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted (SIGINT)"
    return f"{name} outside a training step: no checkpoint saved by it"


def exit_on_signals() -> None:
    """Until the CLI's own handlers are set (while `rlft.cli` imports) and after they are restored (while the
    interpreter shuts down), SIGINT and SIGTERM print `signal_line` and exit 128 + signum at once: nothing is
    being written then, and Python's default would print a KeyboardInterrupt traceback, or nothing at all."""
    import os
    import signal
    import sys

    def _exit(signum, frame):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os.write(2, (signal_line(signum) + "\n").encode())
        os._exit(128 + signum)

    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup / a background job keeps ignoring it
                signal.signal(signum, _exit)
    except ValueError:  # not the main thread: handlers cannot be set there
        pass


# errno values that are the machine's state (a full or read-only disk), not rlft's bug.
DISK_ERRNOS = {28: "ENOSPC", 122: "EDQUOT", 30: "EROFS", 5: "EIO"}
# torch.save's writer reports a short write (a disk that filled up) without an errno; counted as EIO.
_TORCH_WRITE_FAILED = ("PytorchStreamWriter failed writing", "file write failed", "unexpected pos")


def disk_errno(exc: BaseException | None) -> int | None:
    """The errno of a full or read-only disk behind `exc`, or None: an OSError's errno, or the `os error N`
    that libraries written in Rust or C++ put in their message (safetensors' SafetensorError), or EIO for
    torch.save's failed write (a RuntimeError without an errno), along the exception's cause and context."""
    import re

    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
            return exc.errno
        found = re.search(r"os error (\d+)|No space left on device|Read-only file system|quota exceeded", str(exc))
        if found:
            number = int(found.group(1)) if found.group(1) else {"N": 28, "R": 30, "q": 122}[found.group(0)[0]]
            if number in DISK_ERRNOS:
                return number
        if isinstance(exc, RuntimeError) and any(words in str(exc) for words in _TORCH_WRITE_FAILED):
            return 5
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def row_problem(path: str, line: int | None, field: str | None, what: str) -> str:
    """Format one data problem as `file:line: field 'x': what`."""
    where = f"{path}:{line}" if line is not None else str(path)
    return f"{where}: field '{field}': {what}" if field else f"{where}: {what}"
