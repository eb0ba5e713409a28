"""The processes of the sandbox: one per case, started directly or by the slot's spawner (with a cgroup),
fed its job on stdin, read back through bounded pipes, killed at the wall timeout. Any failure of this
machinery is an outcome without a report, never an exception out of `spawn`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

from rlft.verifiers.sandbox import harness, isolation, spawner, uids

REPORT_LIMIT = 16 << 20  # bytes of report or stdout ever read, whatever the expected value
STDERR_LIMIT = 4096  # bytes of stderr kept, for the error message


@dataclass(frozen=True)
class Limits:
    """Resource limits for each sandbox (memory and processes: for the whole sandbox where a cgroup exists)."""

    cpu_seconds: int = 2
    wall_seconds: float = 5.0  # cpu_seconds + start (bwrap + interpreter ~0.05 s) + room for code that sleeps
    memory_mb: int = 512  # address space of each process, and the cgroup's memory (no swap)
    file_mb: int = 1  # largest file the code may write
    disk_mb: int = 16  # the tmpfs work dir
    nproc: int = 32  # processes + threads
    nofile: int = 64


@dataclass
class Outcome:
    stdout: bytes
    overflow: bool
    returncode: int | None
    timed_out: bool
    stderr: bytes
    elapsed: float

    def signal(self) -> int:
        rc = self.returncode
        if rc is None:
            return 0
        if rc < 0:
            return -rc
        return rc - 128 if 128 < rc < 160 else 0  # bwrap exits 128 + N when its child dies of signal N


def _rlimits(limits: Limits, in_cgroup: bool) -> dict[str, list[int]]:
    """Per process. Address space: the sandbox's memory where no cgroup holds it (then the process is the
    sandbox); inside a cgroup, which counts the memory really used, only a backstop of 4x, so reserved but
    unused address space (8 MB of stack and, with MALLOC_ARENA_MAX=2, at most 2 x 64 MB of arenas per
    process) never stops honest threads."""
    mb = 1024 * 1024
    space = limits.memory_mb * (4 if in_cgroup else 1)
    return {"RLIMIT_CPU": [limits.cpu_seconds, limits.cpu_seconds + 1],  # soft: SIGXCPU, hard: SIGKILL
            "RLIMIT_AS": [space * mb] * 2, "RLIMIT_FSIZE": [limits.file_mb * mb] * 2,
            "RLIMIT_NPROC": [limits.nproc] * 2, "RLIMIT_NOFILE": [limits.nofile] * 2, "RLIMIT_CORE": [0, 0]}


def spawn(chosen: str, limits: Limits, job: dict, cap: int) -> Outcome:
    """One sandboxed process; any failure of the machinery is an outcome with an error, never a raise."""
    started = time.monotonic()
    try:
        return _run_process(chosen, limits, job, cap, started)
    except Exception as exc:  # noqa: BLE001 - one case's failure must not end the batch
        return Outcome(b"", False, None, False, f"sandbox failed: {type(exc).__name__}: {exc}".encode(),
                        time.monotonic() - started)


_SLOTS = threading.local()
_FREE = set(range(isolation.UID_SLOTS))
_FREE_LOCK = threading.Lock()
_SHARED = iter(range(1 << 62))  # more threads than slots: they share, round robin


class _Slot:
    """A slot held by one thread (its lowest free number, so the next pool reuses the same helpers and
    started-ahead sandboxes); given back when the thread ends."""

    def __init__(self) -> None:
        with _FREE_LOCK:
            self.owned = bool(_FREE)
            self.n = min(_FREE) if _FREE else next(_SHARED) % isolation.UID_SLOTS
            _FREE.discard(self.n)

    def __del__(self) -> None:
        if self.owned:
            with _FREE_LOCK:
                _FREE.add(self.n)


def current_slot() -> int:
    """This worker thread's own slot: its sandbox uid and its cgroup (see `isolation.UID_SLOTS`)."""
    if not hasattr(_SLOTS, "slot"):
        _SLOTS.slot = _Slot()
    return _SLOTS.slot.n


def job_line(job: dict, limits: Limits, in_cgroup: bool) -> bytes:
    """The job as the harness reads it: one line of ascii()."""
    return ascii({**job, "rlimits": _rlimits(limits, in_cgroup)}).encode("ascii") + b"\n"


def sandbox_uid(slot: int) -> int:
    """The uid a sandbox of this slot runs as: as root, one this process holds the lock of (`uids`)."""
    return uids.uid_for(slot) if os.geteuid() == 0 else isolation.SANDBOX_UID


def _run_process(chosen: str, limits: Limits, job_: dict, cap: int, started: float) -> Outcome:
    slot = current_slot()
    h = spawner.helper(slot, limits.memory_mb, limits.nproc) if chosen == "bwrap" else None
    if h is not None:
        return _run_spawned(h, slot, limits, job_line(job_, limits, True), cap, started)
    job = job_line(job_, limits, False)
    argv, work, env, fds = isolation.command(chosen, limits.disk_mb, harness.child_source(), sandbox_uid(slot))
    try:
        proc = start(argv, work, env, fds)
        out, err = _Reader(proc.stdout, cap + 1), _Reader(proc.stderr, STDERR_LIMIT)
        threading.Thread(target=_feed, args=(proc.stdin, job), daemon=True).start()
        expired = threading.Event()  # a timer, not wait(timeout=): that polls, adding up to 50 ms per process
        timer = threading.Timer(limits.wall_seconds, lambda: (expired.set(), _kill_tree(proc, wait=False)))
        timer.start()
        proc.wait()
        timer.cancel()
        _kill_tree(proc)
        data, stderr = out.data(), err.data()
    finally:
        isolation.remove_work(work)
    return Outcome(data[:cap], len(data) > cap, proc.returncode, expired.is_set(), stderr,
                    time.monotonic() - started)


@dataclass
class _Started:
    """A sandbox the slot's helper started ahead: its interpreter waits for a job on `stdin`."""

    token: int
    key: tuple
    owner: int
    stdin: int
    out: _Reader
    err: _Reader
    status: _Reader

    def usable(self, key: tuple) -> bool:
        return self.key == key and self.owner == os.getpid() and self.status.is_alive()

    def discard(self) -> None:
        if self.owner == os.getpid():
            os.close(self.stdin)  # the harness reads an empty job and exits


_AHEAD: dict[int, _Started] = {}
_AHEAD_LOCK = threading.Lock()
_TOKENS = iter(range(1, 1 << 62))


def _start(h: spawner.Helper, slot: int, limits: Limits) -> _Started:
    argv, _, env, fds = isolation.command("bwrap", limits.disk_mb, harness.child_source(), sandbox_uid(slot), True, 3)
    pipes = [os.pipe() for _ in range(4)]  # stdin, stdout, stderr, bwrap's status
    at = argv.index("--seccomp") if "--seccomp" in argv else 1
    argv = [*argv[:at], "--json-status-fd", str(3 + len(fds)), *argv[at:]]
    token = next(_TOKENS)
    started = _Started(token, _key(limits), os.getpid(), pipes[0][1],
                       _Reader(os.fdopen(pipes[1][0], "rb", buffering=0), REPORT_LIMIT + 1),
                       _Reader(os.fdopen(pipes[2][0], "rb", buffering=0), STDERR_LIMIT),
                       _Reader(os.fdopen(pipes[3][0], "rb", buffering=0), 4096))
    try:
        h.spawn(token, argv, env, [pipes[0][0], pipes[1][1], pipes[2][1], *fds, pipes[3][1]])
    except OSError:
        started.discard()
        raise
    return started


def _key(limits: Limits) -> tuple:
    return (limits.disk_mb, limits.memory_mb, limits.nproc)


def _run_spawned(h: spawner.Helper, slot: int, limits: Limits, job: bytes, cap: int, started: float) -> Outcome:
    """The same, through the slot's spawner (already inside the slot's cgroup): the sandbox was started ahead
    (or is started now), the next one is started before this one gets its job, bwrap writes the exit status to
    a pipe of ours (`--json-status-fd`), and the helper kills the sandbox at the wall timeout."""
    key = _key(limits)
    with _AHEAD_LOCK:
        s = _AHEAD.pop(slot, None)
    try:
        if s is None or not s.usable(key):
            if s is not None:
                s.discard()
            s = _start(h, slot, limits)
        try:
            ahead = _start(h, slot, limits)  # starts up while this case runs
        except OSError:
            ahead = None
        with _AHEAD_LOCK:
            old = _AHEAD.pop(slot, None)
            if ahead is not None:
                _AHEAD[slot] = ahead
        if old is not None:
            old.discard()
        s.out.limit = cap + 1
        h.go(s.token, limits.wall_seconds)
    except OSError:
        spawner.forget(slot, limits.memory_mb, limits.nproc)
        raise
    threading.Thread(target=_feed, args=(os.fdopen(s.stdin, "wb", buffering=0), job), daemon=True).start()
    s.status.join(timeout=limits.wall_seconds + 10.0)  # EOF when bwrap exits; the helper kills it at the wall
    elapsed = time.monotonic() - started
    code = _exit_code(s.status.data())
    timed_out = (code is None or code >= 128) and elapsed >= limits.wall_seconds  # killed at the deadline
    if s.status.is_alive():  # the helper is stuck or gone: never wait on it again
        spawner.forget(slot, limits.memory_mb, limits.nproc)
    return Outcome(*_capped(s.out.data(), cap), code, timed_out, s.err.data(), elapsed)


def discard_started() -> None:
    """Stop the sandboxes started ahead (tests; they also end with the parent)."""
    with _AHEAD_LOCK:
        items = list(_AHEAD.values())
        _AHEAD.clear()
    for s in items:
        s.discard()


def _exit_code(status: bytes) -> int | None:
    """The exit code in bwrap's status lines (`{ "exit-code": N }`), None when it has none (killed, not started)."""
    for line in reversed(status.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("exit-code"), int):
            return value["exit-code"]
    return None


def _capped(data: bytes, cap: int) -> tuple[bytes, bool]:
    return data[:cap], len(data) > cap


def _feed(stdin: Any, job: bytes) -> None:
    try:
        stdin.write(job)
        stdin.close()
    except OSError:
        pass  # the process died before reading: its exit status tells why


def _kill_tree(proc: subprocess.Popen, wait: bool = True) -> None:
    """Kill the sandbox's PID 1 (its whole namespace dies with it, before bwrap can exit), then the group."""
    if proc.returncode is None:
        try:
            with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
                children = [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            children = []
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not wait:  # the timer: bwrap exits once its namespace is gone; the group kill is the backstop
            time.sleep(0.5)
            if proc.returncode is not None:
                return  # reaped: its pid (the group id) may belong to someone else by now
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # --die-with-parent takes the namespace down with bwrap
    except OSError:
        pass
    if wait:
        proc.wait()


class _Reader(threading.Thread):
    """Reads a pipe to its end; keeps the first `limit` bytes, discards the rest."""

    def __init__(self, pipe: Any, limit: int):
        super().__init__(daemon=True)
        self.pipe, self.limit, self.chunks, self.size = pipe, limit, [], 0
        self.start()

    def run(self) -> None:
        fd = self.pipe.fileno()
        try:
            while chunk := os.read(fd, 65536):
                if self.size < self.limit:
                    self.chunks.append(chunk[:self.limit - self.size])
                    self.size += len(self.chunks[-1])
        except OSError:
            pass
        finally:
            self.pipe.close()

    def data(self) -> bytes:
        self.join(timeout=2.0)  # every writer is dead by now, so EOF is immediate
        return b"".join(self.chunks)


def start(argv: list[str], work: str | None, env: dict, fds: list[int]) -> subprocess.Popen:
    """Start one sandbox process (isolation.command's argv) in a session of its own, handing it `fds` and
    closing them here whether or not it started."""
    try:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=work or "/", env=env, start_new_session=True, close_fds=True, pass_fds=fds)
    finally:
        for fd in fds:
            os.close(fd)
