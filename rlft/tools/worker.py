"""The tool worker: the child process that imports a user's tools file or environment and runs every call of it
(`python -m rlft.tools.worker FD`; started and killed by rlft/tools/process.py).

It serves one socket, one request at a time (wire.py frames): `load` imports the file and describes its tools
(name, docstring, parameters, type hints as data), `call` runs a tool, `reset` / `method` / `reward` run an
environment instance's methods (an instance is built on its first reset, and again after the worker was
replaced). Anything the user's code raises, BaseException included (SystemExit, KeyboardInterrupt,
asyncio.CancelledError), is that request's error. Results go back as plain tagged values, never objects: a string
or an int past the cap is sent as its size only. The worker's stdout and stderr are a file of its own (fd 1 and 2,
so C-level writes too), its cwd is its own, and when rlft's end closes it exits with os._exit, so neither a
non-daemon thread nor anything else of the user's keeps it, or rlft, alive; the parent kills its whole process
group (the tool's forks) when it times out or closes.
"""

from __future__ import annotations

import inspect
import os
import socket
import sys
import typing

from rlft.tools import wire


def _tagged(v, cap: int) -> dict:
    if v is None:
        return {"none": 1}
    if isinstance(v, bool):
        return {"bool": bool(v)}
    if isinstance(v, int):
        v = int.__index__(v)
        if v.bit_length() > cap * 3.33 + 64 or v.bit_length() > 14000:
            return {"bigint": v.bit_length()}
        return {"int": str(v)}
    if isinstance(v, float):
        return {"float": float.__float__(v)}
    if isinstance(v, str):
        v = str.__str__(v)
        return {"longstr": len(v)} if len(v) > cap else {"str": v}
    return {"type": type(v).__name__}


def _describe(fn, method: bool) -> dict:
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1 if method else 0:]
    try:
        hints = typing.get_type_hints(fn)
        hint_error = None
    except Exception as exc:  # noqa: BLE001 - the parent refuses the tool with this message
        hints, hint_error = {}, str(exc)
    out = []
    for p in params:
        enc = wire.encode_hint(hints[p.name]) if p.name in hints else None
        out.append({"name": p.name, "kind": int(p.kind), "hinted": p.name in hints, "hint": enc,
                    "hint_text": str(hints.get(p.name, "")), "default": p.default is not p.empty})
    ret = wire.encode_hint(hints["return"]) if "return" in hints else None
    return {"name": getattr(fn, "__name__", str(fn)), "doc": fn.__doc__ or "", "params": out, "ret": ret,
            "async": inspect.iscoroutinefunction(fn), "hint_error": hint_error}


def _user_error(msg: str, fix: str) -> dict:
    return {"user_error": [msg, fix]}


class Server:
    def __init__(self, sock):
        self.sock, self.tools, self.cls, self.envs = sock, {}, None, {}

    def load(self, req: dict) -> dict:
        from pathlib import Path

        from rlft.errors import UserError
        from rlft.user_code import load_python_file

        try:
            module = load_python_file(Path(req["path"]), req["kind"])
        except UserError as exc:
            return _user_error(str(exc), exc.fix)
        if req["kind"] == "tools":
            listed = getattr(module, "TOOLS", None)
            fns = list(listed) if listed is not None else [
                v for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_")
                and v.__module__ == module.__name__]
            descs = []
            for fn in fns:
                if not callable(fn) or isinstance(fn, type):
                    return _user_error(f"{req['path']}:{fn!r:.60} is not a function", "list functions in TOOLS")
                if isinstance(fn, (staticmethod, classmethod)):
                    fn = fn.__func__
                descs.append(_describe(fn, method=False))
                self.tools.setdefault(descs[-1]["name"], fn)
            return {"ok": {"tools": descs}}
        spec, name = req["spec"], req["name"]
        cls = getattr(module, name, None)
        if not inspect.isclass(cls):
            return _user_error(f"{req['path']} has no class '{name}'",
                               "point --env at a class with reset() and tool methods")
        if not callable(getattr(cls, "reset", None)):
            return _user_error(f"{spec} has no reset() method", "TRL's environment contract: def reset(self, **row) "
                                                                "-> str | None (the string is appended to the prompt)")
        for n, member in vars(cls).items():
            if not n.startswith("_") and isinstance(member, (staticmethod, classmethod)):
                return _user_error(f"{spec}.{n} is a {type(member).__name__}; TRL calls an environment's tools on "
                                   "its instance (self first)", f"make {n} a plain method (def {n}(self, ...))")
        self.cls = cls
        methods = {n: m for n, m in inspect.getmembers(cls, predicate=inspect.isfunction)
                   if not n.startswith("_") and n not in ("reset", "get_reward")}
        reward = getattr(cls, "get_reward", None)
        return {"ok": {"class": cls.__name__, "tools": [_describe(m, method=True) for m in methods.values()],
                       "reset": _describe(cls.reset, method=inspect.isfunction(cls.reset)),
                       "has_reward": callable(reward),
                       "reward_async": inspect.iscoroutinefunction(reward) if reward else False}}

    def run(self, req: dict) -> dict:
        op, cap = req["op"], int(req.get("cap", 2000))
        if op == "call":
            fn = self.tools[req["name"]]
        elif op in ("reset", "method", "reward"):
            env = self.envs.get(req["id"])
            if env is None:
                if op != "reset":
                    return {"lost": 1}
                try:
                    env = self.envs[req["id"]] = self.cls()
                except BaseException as exc:  # noqa: BLE001 - named as the constructor's
                    return {"raised": f"the constructor raised {type(exc).__name__}: {str(exc)[:200]}"}
            fn = {"reset": env.reset, "reward": getattr(env, "get_reward", None)}.get(op) \
                or getattr(env, req["name"])
        else:
            return {"raised": f"unknown request {op}"}
        return {"ok": _tagged(fn(**req.get("kwargs", {})), cap)}

    def serve(self) -> None:
        while True:
            try:
                req = wire.recv(self.sock)
            except (wire.Closed, OSError):
                os._exit(0)
            for i in req.get("drop", ()):
                self.envs.pop(i, None)
            try:
                resp = self.load(req) if req["op"] == "load" else self.run(req)
            except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt, CancelledError: that call's
                try:
                    resp = {"raised": f"{type(exc).__name__}: {str(exc)[:200]}"}
                except BaseException:  # noqa: BLE001 - an exception whose str() raises
                    resp = {"raised": type(exc).__name__}
            try:
                wire.send(self.sock, resp)
            except (OSError, ValueError):
                os._exit(0)


def main() -> None:
    fd = int(sys.argv[1])
    sock = socket.socket(fileno=fd)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the worker's whole life
    Server(sock).serve()


if __name__ == "__main__":
    main()
