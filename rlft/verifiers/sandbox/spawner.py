"""Start sandboxes inside a cgroup without paying for a cgroup move each time.

Moving a process into a cgroup waits for an RCU grace period: ~10 ms per write here, more than bubblewrap
costs. So each slot gets one small helper process, moved into the slot's cgroup once; every sandbox of the
slot is spawned by it (a child is born in its parent's cgroup: no move). The parent sends the helper, over
a unix socket, the command line, the environment and the sandbox's stdin/stdout/stderr pipe ends plus the
seccomp fd (SCM_RIGHTS); the helper `posix_spawn`s it in a new session, waits on a pidfd with the wall
timeout, kills the sandbox's processes and session when it expires, and answers (exit status, timed out).
The pidfd means a kill never reaches a recycled pid. The helper is a child subreaper and reaps every orphan
at once: a zombie still counts against the cgroup's pids.max, and the host's init may reap it seconds later.

The helper runs the parent's own interpreter as the parent's user, outside bubblewrap (it is trusted code
of this module, shipped as source); it exits when the parent's end of the socket closes. Its socket is
close-on-exec, so no sandbox inherits it; a sandbox sees only the three pipes and the seccomp fd.
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

_REPLY = struct.Struct("<ii")  # exit status (negative: signal), timed out (0/1)


class Helper:
    """One slot's spawner: `run` is synchronous, one sandbox at a time (the slot's worker thread)."""

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

    def run(self, argv: list[str], env: dict[str, str], fds: list[int], wall_seconds: float) -> tuple[int, bool]:
        """(exit status as Popen's returncode, timed out) of `argv` with fds[0..2] as stdin/stdout/stderr and
        fds[3:] at 3, 4, ...; the fds are closed here once sent. RuntimeError when the helper is gone."""
        msg = repr((argv, env, wall_seconds)).encode()
        with self.lock:
            try:
                self.sock.sendmsg([struct.pack("<I", len(msg)) + msg],
                                  [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
            finally:
                for fd in fds:
                    os.close(fd)
            self.sock.settimeout(wall_seconds + 30.0)  # the helper kills at wall_seconds; this is its backstop
            data = b""
            while len(data) < _REPLY.size:
                chunk = self.sock.recv(_REPLY.size - len(data))
                if not chunk:
                    raise RuntimeError("the sandbox spawner exited")
                data += chunk
        status, timed_out = _REPLY.unpack(data)
        return status, bool(timed_out)

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
    """Spawn each requested sandbox, wait for it (pidfd, with the wall timeout), kill on timeout, answer."""
    import array
    import ast
    import os
    import select
    import signal
    import socket
    import struct

    os.set_inheritable(fd, False)  # pass_fds made it inheritable: no sandbox may hold the helper's socket
    sock = socket.socket(fileno=fd)
    import ctypes
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: a sandbox's orphans are reaped here

    def reap():  # zombies count against pids.max until reaped; the host's init may take seconds
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    return
            except ChildProcessError:
                return

    while True:
        reap()
        fds = array.array("i")
        head, ancdata, _, _ = sock.recvmsg(4, socket.CMSG_SPACE(8 * fds.itemsize), socket.MSG_CMSG_CLOEXEC)
        if len(head) < 4:
            return
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
        size, body = struct.unpack("<I", head)[0], b""
        while len(body) < size:
            chunk = sock.recv(size - len(body))
            if not chunk:
                return
            body += chunk
        argv, env, wall = ast.literal_eval(body.decode())
        actions = [(os.POSIX_SPAWN_DUP2, f, i) for i, f in enumerate(fds)]
        status, timed_out = 127 << 8, 0
        try:
            pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)
        except OSError:
            pid = 0
        for f in fds:
            os.close(f)
        if pid:
            pidfd = os.pidfd_open(pid)
            if not select.select([pidfd], [], [], wall)[0]:
                timed_out = 1
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
            try:
                os.killpg(pid, signal.SIGKILL)  # anything left in its session; not reaped yet, so not recycled
            except OSError:
                pass
            _, status = os.waitpid(pid, 0)
            os.close(pidfd)
            reap()
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        sock.sendall(struct.pack("<ii", code, timed_out))


def close_all() -> None:
    """Stop every helper (tests; the helpers also exit with the parent)."""
    with _lock:
        helpers = list(_helpers.values())
        _helpers.clear()
    for h in helpers:
        h.close()

