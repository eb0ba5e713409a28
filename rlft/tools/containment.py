"""How rlft checks and counts a tool call (rlft/tools/__init__.py loads and checks the tools; docs/tools.md): the
arguments bound and type-checked, the result turned into capped text (`_result_text`), the counts (`ToolStats`,
`EnvFailures`). `guard`, `contained` and `guarded_env_class` are the in-process guard rlft used before the tool
worker (rlft/tools/process.py): a SIGALRM timeout, output captured, cwd restored; a bare `except:` loop, a fork or a
non-daemon thread of the tool's outlive them, which is why tool code now runs in the worker. They are kept for
bench/bench_tool_boundary.py (the in-process side of the comparison) and for plain functions handed to `guard`."""

from __future__ import annotations

import functools
import inspect
import math
import signal
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# Types a tool argument may be declared with: what JSON carries (get_json_schema maps them).
_JSON_TYPES = {int: (int,), float: (int, float), str: (str,), bool: (bool,), list: (list,), dict: (dict,)}


class ToolError(Exception):
    """A bad tool call: its message becomes the episode's tool result (TRL: `{"error": message}`)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class _Timeout(BaseException):
    """Raised by SIGALRM inside a tool; a BaseException so a tool's `except Exception` cannot swallow it."""


@dataclass
class ToolStats:
    """Calls that reached a guarded tool and the bad ones by kind (raised, timeout, too_long, not_string,
    bad_arguments); `since_last()` gives the counts since the previous call (per logged step)."""

    calls: int = 0
    errors: Counter = field(default_factory=Counter)
    render_mismatches: int = 0  # episodes whose trained ids differed from the template's rendering (sampled)
    env: Any = None  # EnvFailures: episodes a failing reset / get_reward cost
    _seen: tuple = (0, 0)

    def __post_init__(self):
        if self.env is None:
            self.env = EnvFailures()

    def as_dict(self) -> dict[str, Any]:
        return {"tool_calls": self.calls, "tool_errors": sum(self.errors.values()), "by_kind": dict(self.errors),
                "render_mismatches": self.render_mismatches,
                "env_failed_episodes": dict(self.env.counts), "env_last_failure": self.env.last}

    def since_last(self) -> dict[str, int]:
        calls, errors = self.calls, sum(self.errors.values())
        out = {"tools/calls": calls - self._seen[0], "tools/errors": errors - self._seen[1],
               "tools/render_mismatches": self.render_mismatches}
        self._seen = (calls, errors)
        return out


@dataclass(frozen=True)
class Limits:
    timeout: float = 5.0
    output_chars: int = 2000


def _call_with_timeout(fn, kwargs: dict, seconds: float):
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        def on_alarm(signum, frame):
            raise _Timeout()

        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return fn(**kwargs)
        except _Timeout:
            raise ToolError("timeout", f"timed out after {seconds:g}s") from None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    box: dict[str, Any] = {}

    def target():
        try:
            box["value"] = fn(**kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller below
            box["error"] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise ToolError("timeout", f"timed out after {seconds:g}s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _check_arguments(target, fn, kwargs: dict) -> None:
    try:
        bound = inspect.signature(target).bind(**kwargs)
    except TypeError as exc:
        raise ToolError("bad_arguments", f"bad arguments: {exc}") from None
    try:
        hints = _type_hints(fn)
    except Exception:  # noqa: BLE001 - checked before training; no hint, no check
        hints = {}
    for name, value in bound.arguments.items():
        allowed = _JSON_TYPES.get(hints.get(name))
        if allowed and (not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed)):
            raise ToolError("bad_arguments", f"bad arguments: '{name}' must be {hints[name].__name__}, "
                                             f"got {type(value).__name__}")


def _type_hints(fn) -> dict:
    import typing

    return typing.get_type_hints(fn)


def _result_text(result: Any, cap: int) -> str:
    """The tool's result as text the tokenizer can take, or a ToolError for that call: numbers become their
    text (an int past Python's 4300-digit str limit, or past the cap, is an error result), a string with a
    lone surrogate (not UTF-8) is an error result, anything else is."""
    if isinstance(result, int) and not isinstance(result, bool) and result.bit_length() > cap * 3.33 + 64:
        raise ToolError("too_long", f"the tool returned an integer of about {int(result.bit_length() * 0.30103):,} "
                                    f"digits, over the cap of {cap:,} characters")
    if isinstance(result, (int, float)):  # bool is an int
        try:
            result = str(result)
        except ValueError as exc:  # int of more digits than sys.get_int_max_str_digits()
            raise ToolError("too_long", f"the tool returned a number that cannot be written out ({exc})") from None
    if not isinstance(result, str):
        raise ToolError("not_string", f"the tool returned {type(result).__name__}, not a string")
    if len(result) > cap:
        raise ToolError("too_long", f"the tool returned {len(result):,} characters, over the cap of {cap:,}")
    try:
        result.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError("not_string", f"the tool returned text that is not UTF-8 ({exc.reason} at {exc.start})") \
            from None
    return result


def guard(fn, limits: Limits, stats: ToolStats):
    """`fn` as a tool TRL can call safely: same name, signature, hints and docstring (TRL builds the schema from
    them); a bad call raises ToolError (counted) instead of hanging, crashing or flooding the context."""

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        stats.calls += 1
        target = functools.partial(fn, *args)  # args: `self` for an environment's method
        try:
            _check_arguments(target, fn, kwargs)
            result = contained(target, kwargs, limits.timeout)
            return _result_text(result, limits.output_chars)
        except ToolError as exc:
            stats.errors[exc.kind] += 1
            raise

    return guarded


def contained(fn, kwargs: dict, seconds: float):
    """Call the user's `fn(**kwargs)` with what rlft can contain in its own process: the timeout
    (`_call_with_timeout`), what it prints to stdout/stderr captured (`rlft eval --json` stays JSON), the working
    directory restored (the run's files never land in the tool's folder), and any exception, SystemExit and
    asyncio.CancelledError included (Ctrl-C aside), turned into a ToolError for that call. Not contained in
    process: a tool that swallows the timeout in a bare `except:` loop, forks, or starts non-daemon threads
    (docs/tools.md)."""
    import contextlib
    import io
    import os

    cwd = os.getcwd()
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            return _call_with_timeout(fn, kwargs, seconds)
    except (ToolError, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001 - the user's code failed: that call's (or episode's) error
        raise ToolError("raised", f"{type(exc).__name__}: {str(exc)[:200]}") from None
    finally:
        if os.getcwd() != cwd:
            os.chdir(cwd)


@dataclass
class EnvFailures:
    """Episodes an environment method cost (reset or get_reward raised, timed out, returned the wrong kind or
    NaN): counted by method, the last message and row kept for the report."""

    counts: Counter = field(default_factory=Counter)
    last: dict = field(default_factory=dict)
    outside: Counter = field(default_factory=Counter)  # those of episodes rlft played itself (held-out, eval)

    def add(self, method: str, message: str, row: dict | None) -> None:
        self.counts[method] += 1
        self.last[method] = {"error": message, "row": {k: str(v)[:80] for k, v in (row or {}).items()}}


RLFT_KEYS = ("rlft_",)  # columns rlft adds to the rows (rlft.methods.prompt_sampler.INDEX): never passed to reset


def guarded_env_class(cls: type, limits: Limits, stats: ToolStats) -> type:
    """A subclass of the environment whose tool methods are guarded (TRL lists tools on the class), and whose
    reset and get_reward cost their episode, never the run: a reset that raises, hangs past the tool timeout
    or returns neither None nor a string marks the episode failed (its tools then return an error and its
    get_reward 0.0); a get_reward that raises, hangs or returns a non-number or NaN gives 0.0. Each is counted
    in `stats.env` (tools.json)."""
    body = {name: guard(member, limits, stats) for name, member in tool_methods(cls).items()}
    user_reset, user_reward = cls.reset, getattr(cls, "get_reward", None)

    def reset(self, **row):
        self._rlft_failed = None
        row = {k: v for k, v in row.items() if not k.startswith(RLFT_KEYS)}
        try:
            obs = contained(functools.partial(user_reset, self), row, limits.timeout)
            if obs is not None and not isinstance(obs, str):
                raise ToolError("raised", f"reset returned {type(obs).__name__}, not None or a string")
            return obs
        except ToolError as exc:
            self._rlft_failed = f"reset failed: {exc}"
            stats.env.add("reset", str(exc), row)
            return None

    body["reset"] = functools.wraps(user_reset)(reset)
    if user_reward is not None:
        def get_reward(self):
            if getattr(self, "_rlft_failed", None):
                return 0.0
            try:
                r = contained(functools.partial(user_reward, self), {}, limits.timeout)
                if isinstance(r, bool) or not isinstance(r, (int, float)):
                    raise ToolError("raised", f"get_reward returned {type(r).__name__}, not a number")
                if not math.isfinite(r):
                    raise ToolError("raised", f"get_reward returned {r}")
                return float(r)
            except ToolError as exc:
                stats.env.add("get_reward", str(exc), None)
                return 0.0

        body["get_reward"] = functools.wraps(user_reward)(get_reward)
    for name, tool in list(tool_methods(cls).items()):
        def env_tool(self, *args, _tool=body[name], **kwargs):
            if getattr(self, "_rlft_failed", None):
                stats.errors["env_failed"] += 1
                raise ToolError("env_failed", self._rlft_failed)
            return _tool(self, *args, **kwargs)

        wrapped = functools.wraps(tool)(env_tool)
        wrapped.__signature__ = inspect.signature(tool)
        body[name] = wrapped
    return type(cls.__name__, (cls,), {**body, "__module__": cls.__module__, "__qualname__": cls.__qualname__})


def tool_methods(cls: type) -> dict[str, Any]:
    """The environment's tools, as TRL finds them: public functions on the class but reset and get_reward."""
    return {n: m for n, m in inspect.getmembers(cls, predicate=inspect.isfunction)
            if not n.startswith("_") and n not in ("reset", "get_reward")}
