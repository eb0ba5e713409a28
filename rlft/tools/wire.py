"""What crosses the process boundary between rlft and a tool worker (rlft/tools/worker.py, rlft/tools/process.py):
length-prefixed JSON frames (never pickle: the parent decodes data, never objects or code of the user's), type hints
as a small structured description, results as tagged plain values. Both sides import only this and the standard
library."""

from __future__ import annotations

import json
import os
import select
import struct
import time
import types
import typing
from typing import Any

MAX_FRAME = 64 * 1024 * 1024  # a frame larger than this is a broken worker, not a result


class Closed(Exception):
    """The other side closed the socket (the worker died) or sent a frame that is not one."""


def send(sock, obj: Any) -> None:
    data = json.dumps(obj, default=str).encode()  # ensure_ascii: a lone surrogate travels as \udxxx
    sock.sendall(struct.pack(">I", len(data)) + data)


def _read(sock, n: int, deadline: float | None) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([sock], [], [], left)[0]:
                raise TimeoutError
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise Closed("the worker closed its end")
        buf += chunk
    return bytes(buf)


def recv(sock, timeout: float | None = None) -> Any:
    """One frame; TimeoutError when the whole frame has not come within `timeout` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    (n,) = struct.unpack(">I", _read(sock, 4, deadline))
    if n > MAX_FRAME:
        raise Closed(f"a frame of {n:,} bytes")
    try:
        return json.loads(_read(sock, n, deadline))
    except ValueError as exc:
        raise Closed(f"a frame that is not JSON ({exc})") from None


# --------------------------------------------------------------------------- type hints

_BUILTIN = {"int": int, "float": float, "str": str, "bool": bool, "list": list, "dict": dict, "tuple": tuple,
            "None": type(None), "Any": Any}
_NAMES = {v: k for k, v in _BUILTIN.items()}


def encode_hint(t) -> Any:
    """A type hint as data: {"b": name} | {"o": origin, "a": [...]} | {"lit": [values]}; None when rlft cannot carry
    it (the tool is refused with one line naming the hint)."""
    if t is None:
        t = type(None)
    if t in _NAMES:
        return {"b": _NAMES[t]}
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is typing.Literal:
        return {"lit": list(args)} if all(isinstance(a, (str, int, float, bool)) for a in args) else None
    name = {list: "list", dict: "dict", tuple: "tuple", typing.Union: "Union", types.UnionType: "Union"}.get(origin)
    if name is None:
        return None
    enc = [encode_hint(a) if a is not Ellipsis else {"b": "..."} for a in args]
    return None if any(e is None for e in enc) else {"o": name, "a": enc}


def decode_hint(d) -> Any:
    if "b" in d:
        return Ellipsis if d["b"] == "..." else _BUILTIN[d["b"]]
    if "lit" in d:
        return typing.Literal[tuple(d["lit"])]
    args = tuple(decode_hint(a) for a in d["a"])
    if d["o"] == "Union":
        return typing.Union[args]
    origin = {"list": list, "dict": dict, "tuple": tuple}[d["o"]]
    return origin[args] if args else origin


def null_fd() -> int:
    return os.open(os.devnull, os.O_RDWR)
