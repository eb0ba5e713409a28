"""Start sandboxes inside a cgroup without paying for a cgroup move each time.

Moving a process into a cgroup waits for an RCU grace period: ~10 ms per write here, more than bubblewrap
costs. So each slot gets one small helper process, moved into the slot's cgroup once; every sandbox of the
slot is spawned by it (a child is born in its parent's cgroup: no move). The parent sends the helper, over
a unix socket, the command line, the environment and the sandbox's pipe ends (stdin, stdout, stderr, the
seccomp filter, bwrap's `--json-status-fd`) by SCM_RIGHTS, and never waits for an answer: it learns the
exit status from bwrap's status pipe. The parent keeps one sandbox per slot started ahead (its interpreter
waits for the job on stdin, having run nothing), so a case's start-up overlaps the case before it; `go`
starts a sandbox's wall clock when its job is sent. The helper `posix_spawn`s each sandbox in a new
session, watches a pidfd per sandbox, kills the sandbox's processes at its deadline, and reaps it (and,
as a child subreaper, every orphan: a zombie still counts against the cgroup's pids.max, and the host's
init may reap it seconds later). The pidfd means a kill never reaches a recycled pid.

The helper runs the parent's own interpreter as the parent's user, outside bubblewrap (it is trusted code
of this module, shipped as source); it exits when the parent's end of the socket closes. Its socket is
close-on-exec, so no sandbox inherits it; a sandbox sees only its three pipes (bwrap keeps the seccomp and
status fds to itself).
"""

from __future__ import annotations

import array
import atexit
import inspect
import os
import socket
import struct
import subprocess
import sys
import threading
from functools import cache

from rlft.verifiers.sandbox import cgroup


class Helper:
    """One slot's spawner (the slot's worker thread starts one sandbox at a time)."""

    def __init__(self, procs: list[str]):
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            argv = [*cgroup.enter_argv(procs), sys.executable, "-I", "-S", "-c", _source(), str(child.fileno())]
            self.proc = subprocess.Popen(argv, pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL,
                                         start_new_session=True, close_fds=True)
        finally:
            child.close()
        self.sock = parent
        self.lock = threading.Lock()
        self.owner = os.getpid()  # a forked copy of the parent must not share this socket: it starts its own

    def spawn(self, token: int, argv: list[str], env: dict[str, str], fds: list[int]) -> None:
        """Have `argv` spawned (its clock not yet running) with fds[0..2] as stdin/stdout/stderr and fds[3:] at
        3, 4, ...; the fds are closed here once sent. OSError when the helper is gone."""
        self._send((token, argv, env, None), fds)

    def go(self, token: int, wall_seconds: float) -> None:
        """Start the sandbox's clock: the helper kills it `wall_seconds` from now."""
        self._send((token, None, None, wall_seconds), [])

    def _send(self, message: tuple, fds: list[int]) -> None:
        msg = repr(message).encode()
        with self.lock:
            try:
                ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
                self.sock.sendmsg([struct.pack("<I", len(msg)) + msg], ancillary)
            finally:
                for fd in fds:
                    os.close(fd)

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_helpers: dict[tuple, Helper] = {}
_lock = threading.Lock()


def helper(slot: int, memory_mb: int, nproc: int) -> Helper | None:
    """The slot's helper, started (inside the slot's cgroup) on first use; None where there is no cgroup."""
    procs = cgroup.slot_procs(slot, memory_mb, nproc)
    if not procs:
        return None
    key = (slot, memory_mb, nproc)
    with _lock:
        h = _helpers.get(key)
        if h is None or h.owner != os.getpid() or h.proc.poll() is not None:
            if not _helpers:
                atexit.register(close_all)  # after cgroup's own atexit, so it runs first: then rmdir works
            h = _helpers[key] = Helper(procs)
    return h


def forget(slot: int, memory_mb: int, nproc: int) -> None:
    """Drop a slot's helper after it failed (the next call starts a fresh one)."""
    with _lock:
        h = _helpers.pop((slot, memory_mb, nproc), None)
    if h is not None:
        h.close()


@cache
def _source() -> str:
    return inspect.getsource(_serve) + "\nimport sys\n_serve(int(sys.argv[1]))\n"


def _serve(fd: int) -> None:  # pragma: no cover - runs in the helper process, shipped as source text
    """Spawn each requested sandbox; kill it at its deadline; reap it and every orphan."""
    import array
    import ast
    import ctypes
    import os
    import select
    import signal
    import socket
    import struct
    import time

    os.set_inheritable(fd, False)  # pass_fds made it inheritable: no sandbox may hold the helper's socket
    sock = socket.socket(fileno=fd)
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: a sandbox's orphans are reaped here
    live: dict[int, tuple[int, float, int]] = {}  # pidfd -> (pid, deadline, token)
    tokens: dict[int, int] = {}  # token -> pidfd

    def kill(pid, pidfd):
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                children = [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            children = []
        for child in children:  # the sandbox's PID 1: its whole namespace dies with it
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)

    def reap():  # orphans' zombies count against pids.max until reaped; a sandbox's own is reaped via its pidfd
        tracked = {pid for pid, _, _ in live.values()}
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)  # look, do not reap yet
            except ChildProcessError:
                return
            if info is None or info.si_pid in tracked:
                return  # a sandbox: its pidfd is ready, the loop reaps it (then its pid may be reused)
            os.waitpid(info.si_pid, 0)

    def request():
        fds = array.array("i")
        head, ancdata, _, _ = sock.recvmsg(4, socket.CMSG_SPACE(8 * fds.itemsize), socket.MSG_CMSG_CLOEXEC)
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
        try:
            if len(head) < 4:
                return False
            size, body = struct.unpack("<I", head)[0], b""
            while len(body) < size:
                chunk = sock.recv(size - len(body))
                if not chunk:
                    return False
                body += chunk
            token, argv, env, wall = ast.literal_eval(body.decode())
            if argv is None:  # go: the sandbox has its job; its clock starts now
                pidfd = tokens.get(token)
                if pidfd in live:
                    live[pidfd] = (live[pidfd][0], time.monotonic() + wall, token)
                return True
            actions = [(os.POSIX_SPAWN_DUP2, f, i) for i, f in enumerate(fds)]
            try:
                pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)
            except OSError:
                return True  # the status pipe closes with no exit code: the parent reports the failure
            pidfd = os.pidfd_open(pid)
            live[pidfd] = (pid, time.monotonic() + 10 ** 9, token)  # waits for its job, then for `go`
            tokens[token] = pidfd
            return True
        finally:
            for f in fds:
                os.close(f)

    while True:
        reap()
        now = time.monotonic()
        wait = max(0.0, min([d for _, d, _ in live.values()], default=now + 3600) - now)
        ready = select.select([sock, *live], [], [], min(wait, 3600))[0]
        for pidfd in [p for p in live if p in ready]:
            pid, _, token = live.pop(pidfd)
            tokens.pop(token, None)
            try:
                os.killpg(pid, signal.SIGKILL)  # anything left in its session; not reaped yet, so not recycled
            except OSError:
                pass
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            os.close(pidfd)
            reap()
        now = time.monotonic()
        for pidfd, (pid, deadline, token) in list(live.items()):
            if deadline <= now:
                kill(pid, pidfd)
                live[pidfd] = (pid, now + 3600, token)  # reaped when its pidfd turns readable
        if sock in ready and not request():
            return


def close_all() -> None:
    """Stop every helper (tests; the helpers also exit with the parent)."""
    with _lock:
        helpers = list(_helpers.values())
        _helpers.clear()
    for h in helpers:
        h.close()

