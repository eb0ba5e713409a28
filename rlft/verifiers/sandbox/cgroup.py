"""A memory + pids cgroup per sandbox slot, where the machine lets us make one.

RLIMIT_AS bounds one process; a sandbox that forks five children, or fills SysV shared memory, a tmpfs
or pipes, holds more. A cgroup counts all of it (the pages, tmpfs and kernel memory of every process in
it) and caps the process count. Each worker thread of the parent owns one slot: a cgroup made once
(under the parent's own cgroup, so the host's limits on the parent still hold), with `memory` (no swap)
and `pids` limits set, reused by every sandbox that slot runs (one at a time). A sandbox enters it before
bubblewrap starts: `sh -c 'echo 0 > .../cgroup.procs ... exec bwrap ...'`, so every process the code
makes is born inside.

cgroup v2 is used where the parent's cgroup delegates `memory` and `pids` (`cgroup.subtree_control`);
else cgroup v1's `memory` and `pids` hierarchies where they are mounted and writable (as root);
else `available()` is False and the isolation falls back to one process per sandbox (seccomp).
"""

from __future__ import annotations

import atexit
import os
import threading
from functools import cache

_MB = 1024 * 1024
_made: list[str] = []
_lock = threading.Lock()


def _mounts() -> dict[str, str]:
    """controller ('memory', 'pids', or '' for the v2 unified hierarchy) -> mount point."""
    out: dict[str, str] = {}
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, rest = left.split(), right.split()
                if len(fields) < 5 or len(rest) < 3:
                    continue
                if rest[0] == "cgroup2":
                    out.setdefault("", fields[4])
                elif rest[0] == "cgroup":
                    for opt in rest[2].split(","):
                        if opt in ("memory", "pids"):
                            out[opt] = fields[4]
    except OSError:
        pass
    return out


def _own() -> dict[str, str]:
    """controller ('' for v2) -> this process's cgroup path within that hierarchy."""
    out: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for c in controllers.split(",") if controllers else [""]:
                    out[c] = path
    except (OSError, ValueError):
        pass
    return out


@cache
def _bases() -> tuple[str, tuple[str, ...]] | None:
    """('v2', (dir,)) or ('v1', (memory dir, pids dir)) under which slots are made; None when neither works."""
    mounts, own = _mounts(), _own()
    if "" in mounts and "" in own:
        base = os.path.join(mounts[""], own[""].lstrip("/"))
        try:
            with open(os.path.join(base, "cgroup.subtree_control")) as f:
                delegated = set(f.read().split())
        except OSError:
            delegated = set()
        if {"memory", "pids"} <= delegated and _writable(base):
            return "v2", (base,)
    if "memory" in mounts and "pids" in mounts:
        dirs = tuple(os.path.join(mounts[c], own.get(c, "/").lstrip("/")) for c in ("memory", "pids"))
        if all(_writable(d) for d in dirs):
            return "v1", dirs
    return None


def _writable(base: str) -> bool:
    probe = os.path.join(base, f"rlft-probe-{os.getpid()}")
    try:
        os.mkdir(probe)
        os.rmdir(probe)
        return True
    except OSError:
        return False


def available() -> str | None:
    """'v1' or 'v2' when sandboxes get a cgroup each, else None."""
    b = _bases()
    return b[0] if b else None


def slot_procs(slot: int, memory_mb: int, pids: int) -> list[str]:
    """The `cgroup.procs` files a sandbox of this slot enters (the slot's cgroups made on first use)."""
    b = _bases()
    if b is None:
        return []
    kind, bases = b
    name = f"rlft-{os.getpid()}-{slot}-{memory_mb}-{pids}"
    dirs = [os.path.join(base, name) for base in bases]
    with _lock:
        if dirs[0] not in _made:
            for d in dirs:
                os.makedirs(d, exist_ok=True)
            if kind == "v2":
                _write(dirs[0], "memory.max", memory_mb * _MB)
                _write(dirs[0], "memory.swap.max", 0, optional=True)
                _write(dirs[0], "pids.max", pids)
            else:
                _write(dirs[0], "memory.limit_in_bytes", memory_mb * _MB)
                _write(dirs[0], "memory.memsw.limit_in_bytes", memory_mb * _MB, optional=True)  # no swap
                _write(dirs[1], "pids.max", pids)
            if not _made:
                atexit.register(_remove_all)
                _remove_stale(bases)
            _made.extend(dirs)
    return [os.path.join(d, "cgroup.procs") for d in dirs]


def _write(d: str, name: str, value: int, optional: bool = False) -> None:
    try:
        with open(os.path.join(d, name), "w") as f:
            f.write(str(value))
    except OSError:
        if not optional:
            raise


def enter_argv(procs: list[str]) -> list[str]:
    """A prefix that moves the command into the cgroups, then execs it (exit 125 when it cannot)."""
    if not procs:
        return []
    script = 'for f; do [ "$f" = -- ] && break; echo 0 > "$f" || exit 125; shift; done; shift; exec "$@"'
    return ["/bin/sh", "-c", script, "sh", *procs, "--"]


def _remove_stale(bases: tuple[str, ...]) -> None:
    """Empty slot cgroups left by rlft processes that are gone (killed before their atexit ran)."""
    for base in bases:
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            parts = name.split("-")
            mine = parts[0] == "rlft" and len(parts) == 5 and parts[1].isdigit()
            if mine and not os.path.exists(f"/proc/{parts[1]}"):
                try:
                    os.rmdir(os.path.join(base, name))
                except OSError:
                    pass


def _remove_all() -> None:
    for d in reversed(_made):
        try:
            os.rmdir(d)
        except OSError:
            pass
