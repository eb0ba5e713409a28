"""rlft's side of the tool worker (rlft/tools/worker.py): a long-lived child process per tools file / environment
file, and the stand-ins rlft hands to TRL in place of the user's functions and class.

Sound by construction rather than by rules: the user's file is imported only in the worker (started with
`sys.executable -m rlft.tools.worker`, a fresh interpreter, not a fork of rlft), in its own session (process group),
with stdin at /dev/null and stdout/stderr to a file of its own, in a cwd that is its own (it starts in rlft's cwd, so
relative paths in the tool work, and a chdir there never moves rlft). A request waits at most the call's timeout
for its answer: past it the whole process group is killed (SIGKILL: no `except` or signal handler of the tool's can
outlive it, nor can its forks) and a fresh worker is started on the next request; an environment instance that lived
in the killed worker is lost (its episode's next calls are error results), and is built again at its next reset.
Only data comes back (wire.py: JSON, tagged plain values), turned into capped text here (containment._result_text).

The stand-ins keep what TRL reads from a tool (transformers.utils.get_json_schema: `__name__`, `__doc__`,
the signature and type hints, rebuilt from the worker's description), so the schema the model sees is the one the
user's function gives.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

from rlft.errors import UserError
from rlft.tools import wire
from rlft.tools.containment import ToolError, _result_text

LOAD_TIMEOUT = 120.0  # importing the user's file (it may import numpy, sympy, ...)
_LIVE: weakref.WeakSet = weakref.WeakSet()  # killed at exit; a worker nobody holds is killed when collected


def _close_all() -> None:
    for w in list(_LIVE):
        w.close()


atexit.register(_close_all)


class Worker:
    """One child process serving one user file; `request` restarts it after a timeout or a death."""

    def __init__(self, load: dict, timeout: float, cap: int):
        self.load_req, self.timeout, self.cap = load, timeout, cap
        self.proc: subprocess.Popen | None = None
        self.sock = None
        self.restarts, self.drops, self._next_id = 0, [], 0
        self.lock = threading.Lock()
        self.desc: dict | None = None
        self.log = tempfile.NamedTemporaryFile(prefix="rlft-tool-", suffix=".log", delete=False)  # noqa: SIM115

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _start(self) -> dict:
        parent, child = socket.socketpair()
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # this rlft, ahead of any installed one
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen([sys.executable, "-m", "rlft.tools.worker", str(child.fileno())],
                                     pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True, cwd=os.getcwd(), env=env)
        child.close()
        self.sock = parent
        _LIVE.add(self)
        try:
            wire.send(self.sock, {**self.load_req, "op": "load"})
            resp = wire.recv(self.sock, LOAD_TIMEOUT)
        except TimeoutError:
            self.kill()
            raise UserError(f"loading {self.load_req['path']} took over {LOAD_TIMEOUT:g}s",
                            "make importing the file fast (no work at import time)") from None
        except (wire.Closed, OSError):
            code = self.kill()
            raise UserError(f"loading {self.load_req['path']} ended its process (exit code {code}): "
                            f"{self.output_tail()}", "fix the file (run `python FILE` to see what it does)") from None
        if "user_error" in resp:
            self.kill()
            raise UserError(*resp["user_error"])
        return resp["ok"]

    def output_tail(self, n: int = 300) -> str:
        try:
            data = Path(self.log.name).read_bytes()[-n:].decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return data.replace("\n", " | ") or "no output"

    def describe(self) -> dict:
        with self.lock:
            if self.desc is None:
                self.desc = self._start()
            return self.desc

    def request(self, req: dict, timeout: float | None = None, cap: int | None = None) -> dict:
        """The worker's answer, or {"raised": ...} when it timed out (the worker killed) or died."""
        timeout = self.timeout if timeout is None else timeout
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                if self.proc is not None:
                    self.kill()
                self._start()
            req = {**req, "cap": self.cap if cap is None else cap, "drop": self.drops}
            self.drops = []
            try:
                wire.send(self.sock, req)
                return wire.recv(self.sock, timeout)
            except TimeoutError:
                self.kill()
                self.restarts += 1
                return {"raised": f"timed out after {timeout:g}s (its process was killed)", "kind": "timeout"}
            except (wire.Closed, OSError) as exc:
                code = self.kill()
                self.restarts += 1
                return {"raised": f"its process ended (exit code {code}; {exc})", "kind": "raised"}
            except BaseException:  # Ctrl-C / SIGTERM mid-call: its answer would answer the next request
                self.kill()
                raise

    def kill(self) -> int | None:
        proc, self.proc = self.proc, None
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if proc is None:
            return None
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the tool's forks go with it
        except (ProcessLookupError, PermissionError):
            pass
        try:
            return proc.wait(5)
        except subprocess.TimeoutExpired:
            return None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown
            pass

    def close(self) -> None:
        with self.lock:
            self.kill()
            _LIVE.discard(self)
            try:
                os.unlink(self.log.name)
            except OSError:
                pass


def value(resp: dict, cap: int, what: str = "the tool") -> Any:
    """The worker's answer as a Python value (str, int, float, bool, None), or a ToolError for that call."""
    if "raised" in resp:
        raise ToolError(resp.get("kind", "raised"), resp["raised"])
    if "lost" in resp:
        raise ToolError("raised", "the environment was lost: its process was restarted after another call timed out")
    v = resp["ok"]
    if "longstr" in v:
        raise ToolError("too_long", f"{what} returned {v['longstr']:,} characters, over the cap of {cap:,}")
    if "bigint" in v:
        raise ToolError("too_long", f"{what} returned an integer of about {int(v['bigint'] * 0.30103):,} digits, "
                                    f"over the cap of {cap:,} characters")
    if "type" in v:
        raise ToolError("not_string", f"{what} returned {v['type']}, not a string")
    if "none" in v:
        return None
    if "int" in v:
        return int(v["int"])
    return next(iter(v.values()))


def call_text(resp: dict, cap: int) -> str:
    """A tool call's result as the text TRL appends (capped, UTF-8), or a ToolError."""
    return _result_text(value(resp, cap), cap)


# --------------------------------------------------------------------------- stand-ins for TRL


def _signature(desc: dict, method: bool) -> inspect.Signature:
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] if method else []
    for p in desc["params"]:
        kw: dict[str, Any] = {}
        if p["hint"] is not None:
            kw["annotation"] = wire.decode_hint(p["hint"])
        if p["default"]:
            kw["default"] = None
        params.append(inspect.Parameter(p["name"], inspect._ParameterKind(p["kind"]), **kw))
    ret = wire.decode_hint(desc["ret"]) if desc.get("ret") else inspect.Signature.empty
    return inspect.Signature(params, return_annotation=ret, __validate_parameters__=False)


def stand_in(desc: dict, body, method: bool = False):
    """A function named and documented as the user's tool, with its signature and hints, calling `body`."""
    def tool(*args, **kwargs):
        return body(*args, **kwargs)

    tool.__name__ = tool.__qualname__ = desc["name"]
    tool.__doc__ = desc["doc"] or None
    tool.__signature__ = _signature(desc, method)
    tool.__annotations__ = {p["name"]: wire.decode_hint(p["hint"]) for p in desc["params"] if p["hint"] is not None}
    if desc.get("ret"):
        tool.__annotations__["return"] = wire.decode_hint(desc["ret"])
    tool.__wrapped__ = None
    del tool.__wrapped__
    tool._rlft_desc = desc
    return tool


def hint_problem(desc: dict, where: str) -> UserError | None:
    """A hint the worker could not describe (or resolve): the tool is refused with one line."""
    if desc.get("hint_error"):
        return UserError(f"tool {where}: its type hints do not resolve ({desc['hint_error']})",
                         "use int, float, str, bool")
    for p in desc["params"]:
        if p["hinted"] and p["hint"] is None:
            return UserError(f"tool {where}: argument '{p['name']}' has the type hint {p['hint_text']}, which rlft "
                             "cannot pass to a tool's process", "use int, float, str, bool, list[...], dict[...], "
                                                                "Optional[...] or Literal[...]")
    return None


# --------------------------------------------------------------------------- the user's file, behind the worker


def remote_tools(path: str, timeout: float = 5.0, cap: int = 2000) -> list:
    """The tools of a file as stand-ins calling its worker (each returns the plain value or raises ToolError);
    `guard_remote` adds the argument checks, the caps and the counts."""
    worker = Worker({"path": str(Path(path).resolve()), "kind": "tools"}, timeout, cap)
    out = []
    for desc in worker.describe()["tools"]:
        def body(_name=desc["name"], **kwargs):
            return value(worker.request({"op": "call", "name": _name, "kwargs": kwargs}), worker.cap)

        fn = stand_in(desc, body)
        fn._rlft_worker = worker
        out.append(fn)
    return out


def guard_remote(fn, limits, stats):
    """A worker's tool as TRL calls it: the arguments bound and type-checked here, the call in the worker under
    `limits.timeout`, its result turned into capped text (`call_text`); a bad call raises ToolError, counted."""
    from rlft.tools.containment import _check_arguments

    desc, worker = fn._rlft_desc, fn._rlft_worker

    def body(**kwargs):
        stats.calls += 1
        try:
            _check_arguments(fn, fn, kwargs)
            resp = worker.request({"op": "call", "name": desc["name"], "kwargs": kwargs}, limits.timeout,
                                  limits.output_chars)
            return call_text(resp, limits.output_chars)
        except ToolError as exc:
            stats.errors[exc.kind] += 1
            raise

    g = stand_in(desc, body)
    g._rlft_worker = worker
    g.__wrapped__ = fn
    return g


RLFT_KEYS = ("rlft_",)
OBSERVATION_CHARS = 100_000  # reset()'s string, appended to the prompt


def remote_env(spec: str, path: str, name: str, timeout: float = 5.0, cap: int = 2000) -> type:
    """An environment class as a stand-in whose instances live in the worker: unguarded (a failing call raises
    ToolError); `guarded_remote_env` is what TRL gets."""
    worker = Worker({"path": str(Path(path).resolve()), "kind": "env", "spec": spec, "name": name}, timeout, cap)
    desc = worker.describe()
    return _env_class(desc, worker, None, None)


def guarded_remote_env(cls: type, limits, stats) -> type:
    """The stand-in class TRL builds environments from (environment_factory): tools guarded as `guard_remote`;
    a reset that raises, times out, returns neither None nor a string, or kills its process marks its episode
    failed (its tools then return an error, its get_reward 0.0); a get_reward that fails or returns a non-number
    or NaN gives 0.0. Each is counted by method in `stats.env`."""
    return _env_class(cls._rlft_desc, cls._rlft_worker, limits, stats)


def _env_class(desc: dict, worker: Worker, limits, stats) -> type:
    import math

    timeout = None if limits is None else limits.timeout
    cap = None if limits is None else limits.output_chars

    def __init__(self):
        self._rlft_id = worker.new_id()
        self._rlft_failed = None

    def __del__(self):
        worker.drops.append(self._rlft_id)

    def fail(method, message, row):
        if stats is None:
            raise ToolError("raised", message)
        stats.env.add(method, message, row)

    def reset(self, **row):
        self._rlft_failed = None
        row = {k: v for k, v in row.items() if not k.startswith(RLFT_KEYS)}
        try:
            obs = value(worker.request({"op": "reset", "id": self._rlft_id, "kwargs": row}, timeout,
                                       OBSERVATION_CHARS), OBSERVATION_CHARS, "reset")
            if obs is not None and not isinstance(obs, str):
                raise ToolError("raised", f"reset returned {type(obs).__name__}, not None or a string")
            if obs is not None:
                _result_text(obs, OBSERVATION_CHARS)
            return obs
        except ToolError as exc:
            self._rlft_failed = f"reset failed: {exc}"
            fail("reset", str(exc), row)
            return None

    body: dict[str, Any] = {"__init__": __init__, "__del__": __del__, "reset": stand_in(desc["reset"], reset, True),
                            "__module__": __name__, "_rlft_desc": desc, "_rlft_worker": worker}
    if desc["has_reward"]:
        def get_reward(self):
            if getattr(self, "_rlft_failed", None):
                return 0.0
            try:
                r = value(worker.request({"op": "reward", "id": self._rlft_id}, timeout), 2000, "get_reward")
                if isinstance(r, bool) or not isinstance(r, (int, float)):
                    raise ToolError("raised", f"get_reward returned {type(r).__name__}, not a number")
                if not math.isfinite(r):
                    raise ToolError("raised", f"get_reward returned {r}")
                return float(r)
            except ToolError as exc:
                fail("get_reward", str(exc), None)
                return 0.0

        body["get_reward"] = get_reward
    for d in desc["tools"]:
        def method(self, _name=d["name"], _d=d, **kwargs):
            from rlft.tools.containment import _check_arguments

            if stats is None:
                return value(worker.request({"op": "method", "id": self._rlft_id, "name": _name, "kwargs": kwargs}),
                             worker.cap)
            if getattr(self, "_rlft_failed", None):
                stats.errors["env_failed"] += 1
                raise ToolError("env_failed", self._rlft_failed)
            stats.calls += 1
            try:
                _check_arguments(functools.partial(body[_name], self), body[_name], kwargs)
                resp = worker.request({"op": "method", "id": self._rlft_id, "name": _name, "kwargs": kwargs},
                                      timeout, cap)
                return call_text(resp, cap)
            except ToolError as exc:
                stats.errors[exc.kind] += 1
                raise

        body[d["name"]] = stand_in(d, method, method=True)
    return type(desc["class"], (), body)


def all_failed(stats, what: str) -> UserError:
    """Every episode of a batch failed in the environment: one line naming the method and a row it failed on."""
    method = max(stats.env.counts, key=stats.env.counts.get)
    last = stats.env.last[method]
    row = ", ".join(f"{k}={v}" for k, v in list(last["row"].items())[:3]) or "the episode"
    return UserError(f"{what} failed in the environment's {method}: {last['error']} (row: {row:.200})",
                     f"fix {method} in the environment file (each episode calls it; run it on that row)")


def watch_batches(trainer, stats) -> None:
    """In a GRPO run, a batch whose every episode failed in reset (checked before its generation) or in
    get_reward (after its rewards) ends the run with `all_failed`'s line: nothing would be learned from it. Fewer
    failures cost their episodes only (counted in tools.json and the report)."""
    generate, rewards = trainer._generate, trainer._calculate_rewards
    mark = {"reset": 0, "get_reward": 0}

    def checked_generate(prompts, *args, **kwargs):
        now = stats.env.counts["reset"] - stats.env.outside["reset"]  # training episodes only
        n, mark["reset"] = now - mark["reset"], now
        if prompts and n >= len(prompts):
            raise all_failed(stats, f"every episode of a batch ({len(prompts)})")
        return generate(prompts, *args, **kwargs)

    def checked_rewards(inputs, *args, **kwargs):
        out = rewards(inputs, *args, **kwargs)
        now = stats.env.counts["get_reward"] - stats.env.outside["get_reward"]
        n, mark["get_reward"] = now - mark["get_reward"], now
        if inputs and n >= len(inputs):
            raise all_failed(stats, f"every episode of a batch ({len(inputs)})")
        return out

    trainer._generate, trainer._calculate_rewards = checked_generate, checked_rewards
