"""The OS-level isolation of the code sandbox: a bubblewrap (`bwrap`) command line, and its startup probe.

Each sandboxed process is `bwrap ... python -I -S -B -c <harness>` with
- its own PID, network (no route out, not even to the host's 127.0.0.1), mount, IPC, UTS and cgroup
  namespaces; `--die-with-parent` and `--new-session` (no terminal to push input into);
- a root file system that is an empty read-only tmpfs holding only: the interpreter binary, libpython,
  the stdlib (its site-packages hidden under an empty tmpfs), the system library folders
  (/usr/lib, /lib, ...) with every dist-packages/site-packages folder of any Python in them hidden the same
  way (third-party C extensions are not the stdlib), /usr/bin/setpriv (root mode), /proc of its own PID
  namespace, a minimal /dev, and a writable tmpfs work dir /work (also HOME and TMPDIR) capped at
  `Limits.disk_mb`, plus a small /dev/shm.
  No /etc, /home, /root (beyond the interpreter's own path), /tmp of the host, site-packages, or rlft;
- an unprivileged uid/gid: as root, each worker slot's own, allocated to this process under a lock
  (`rlft.verifiers.sandbox.uids`: no two rlft processes share one, `UID_SLOTS` per process); not as
  root, 65534 (`nobody`) in a user namespace; with no
  capabilities (effective, permitted, inheritable, ambient and bounding sets empty) and no_new_privs.
  As root, bwrap sets up the namespaces without a user namespace and
  util-linux's `setpriv` switches to the slot's uid before the interpreter starts, so that is the real uid
  on the host too (a user namespace would map it back to host root). Not as root, bwrap's `--unshare-user`
  maps the caller's own uid to 65534;
- an empty environment except PATH, HOME, TMPDIR and LC_CTYPE;
- on x86_64, a seccomp filter (`rlft.verifiers.sandbox.seccomp`): kernel attack surface, SysV IPC,
  memfd and socket families other than unix/inet/netlink refused;
- limits for the whole sandbox, not per process: a memory (no swap) + pids cgroup per worker slot
  (`rlft.verifiers.sandbox.cgroup`), which every sandbox of the slot is born in (spawned by the slot's
  helper, `rlft.verifiers.sandbox.spawner`); where no cgroup can be made, seccomp refuses new processes
  (threads stay), so the one process's RLIMIT_AS is the sandbox's memory.

bubblewrap 0.5 or newer is needed (`--perms`, `--size`). When bwrap is missing or fails the probe
(run once per process: uid must be 65534 and CapEff 0), the code verifier refuses with a UserError naming
the package. `RLFT_CODE_ISOLATION=none` opts out: the harness then runs as a plain child process with the
rlimits only, in a temporary work dir, and a loud warning is printed.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from functools import cache

from rlft.errors import UserError
from rlft.verifiers.sandbox import cgroup, seccomp

ENV_VAR = "RLFT_CODE_ISOLATION"
SANDBOX_UID = 65534  # nobody
UID_SLOTS = 8  # as root, concurrent sandboxes run as this process's slot uids (`uids`): RLIMIT_NPROC counts per uid on
# the host, so one sandbox's fork bomb must not use up the processes (threads) of the others running beside it
WORK = "/work"
INSTALL_HINT = "install bubblewrap (apt-get install bubblewrap)"
_SYSTEM_LIB_DIRS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib")
_ENV = {"PATH": "/usr/bin:/bin", "HOME": WORK, "TMPDIR": WORK, "LC_CTYPE": "C.UTF-8",
        "MALLOC_ARENA_MAX": "2"}  # glibc reserves 64 MB of address space per arena, one per thread up to 8 x cores


def mode() -> str:
    """'bwrap' (the default) or 'none' (the opt-out), from RLFT_CODE_ISOLATION."""
    value = os.environ.get(ENV_VAR, "").strip().lower() or "bwrap"
    if value not in ("bwrap", "none"):
        raise UserError(f"{ENV_VAR}={value!r} is not a sandbox mode",
                        f"unset it (bubblewrap isolation) or set {ENV_VAR}=none (resource limits only)")
    return value


def require() -> str:
    """The mode to run in; UserError when bwrap isolation is wanted but not available."""
    chosen = mode()
    if chosen == "none":
        _warn_once()
        return chosen
    problem = _probe()
    if problem:
        remedy = INSTALL_HINT if "not on PATH" in problem else (
            "run where bubblewrap 0.5+ may create namespaces (a container needs e.g. --privileged, or a seccomp "
            "profile allowing unshare)")
        raise UserError(f"the code verifier cannot isolate model-written code: {problem}",
                        f"{remedy}; or set {ENV_VAR}=none to run it with resource limits only (unsafe)")
    return chosen


@cache
def _warn_once() -> None:
    print(f"WARNING: {ENV_VAR}=none: model-written code runs WITHOUT isolation (resource limits only); it can "
          "read and write your files, use the network and signal your processes", file=sys.stderr, flush=True)


@cache
def _probe() -> str:
    """'' when bwrap gives a process uid 65534 with no capabilities; else what went wrong."""
    if _bwrap() is None:
        return "bubblewrap (bwrap) is not on PATH"
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not on PATH, needed to drop root"
    src = ("import os\nst = open('/proc/self/status').read().split('\\n')\n"
           "caps = [l.split()[1] for l in st if l.startswith(('CapEff', 'CapPrm', 'CapBnd'))]\n"
           "print(os.getuid(), os.getgid(), *caps)")
    argv, _, env, fds = command("bwrap", 16, src)
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env, pass_fds=fds)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not start: {exc}"
    finally:
        for fd in fds:
            os.close(fd)
    want = f"{SANDBOX_UID} {SANDBOX_UID} " + " ".join(["0000000000000000"] * 3)
    if out.returncode != 0 or out.stdout.strip() != want:
        why = (out.stderr.strip().splitlines() or [out.stdout.strip()])[-1:] or ["no output"]
        return f"bwrap failed its startup probe (exit {out.returncode}: {why[0][:200]})"
    return ""


@cache
def _bwrap() -> str | None:
    """bwrap's absolute path on the user's PATH (the sandbox's own PATH is not the user's)."""
    return shutil.which("bwrap")


@cache
def _layout() -> tuple[str, list[tuple[str, str]], list[str]]:
    """(interpreter, read-only binds (src, dest), folders to hide) for the base Python install."""
    python = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix,
            "installed_base": sys.base_prefix, "installed_platbase": sys.base_exec_prefix}
    paths = sysconfig.get_paths(vars=base)
    binds = [(python, python)]
    for key in ("stdlib", "platstdlib"):
        p = os.path.realpath(paths[key])
        if (p, p) not in binds:
            binds.append((p, p))
    libdir, soname = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    if libdir and soname and os.path.isfile(os.path.join(libdir, soname)):
        lib = os.path.join(libdir, soname)
        binds.append((os.path.realpath(lib), lib))
    hide = {os.path.realpath(paths[k]) for k in ("purelib", "platlib") if os.path.isdir(paths[k])}
    for lib in _SYSTEM_LIB_DIRS:  # Debian's /usr/lib/python3/dist-packages, /usr/local/lib/python3.X/...
        for pattern in ("python3", "python3*/dist-packages", "python3*/site-packages"):
            hide.update(p for p in glob.glob(os.path.join(lib, pattern))
                        if os.path.isdir(p) and not os.path.islink(p) and p != paths["stdlib"])
    return python, binds, sorted(hide)


def _ancestors(paths: list[str]) -> list[str]:
    """Every folder above `paths`, parents first (bwrap would copy a 0700 /root's mode otherwise)."""
    out: list[str] = []
    for p in paths:
        parts = p.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/" + "/".join(parts[:i])
            if d not in out:
                out.append(d)
    return sorted(out, key=lambda d: d.count("/"))


def bwrap_argv(disk_mb: int, seccomp_fd: int | None = None, uid: int = SANDBOX_UID) -> list[str]:
    """The command line up to and including the interpreter and its flags; append `-c SOURCE`."""
    python, binds, hide = _layout()
    argv = [_bwrap() or "bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv"]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    for k, v in _ENV.items():
        argv += ["--setenv", k, v]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    root = os.geteuid() == 0
    system = [d for d in _SYSTEM_LIB_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    binds = [*((d, d) for d in system), *binds]
    if root:
        binds.append((shutil.which("setpriv") or "/usr/bin/setpriv", "/usr/bin/setpriv"))
    for d in _ancestors([dest for _, dest in binds]):
        argv += ["--perms", "0755", "--dir", d]  # bwrap would give them the host's mode (0700 /root)
    for src, dest in binds:
        argv += ["--ro-bind", src, dest]
    for d in _SYSTEM_LIB_DIRS:
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
    for d in hide:
        argv += ["--tmpfs", d]  # site-packages: an empty folder
    size = str(disk_mb * 1024 * 1024)
    argv += ["--size", size, "--perms", "1777", "--tmpfs", WORK,
             "--size", str(1024 * 1024), "--perms", "1777", "--tmpfs", "/dev/shm",  # 1 MB: semaphores, not data
             "--remount-ro", "/", "--chdir", WORK]
    if root:
        argv += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    else:
        argv[1:1] = ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--cap-drop", "ALL"]
    return [*argv, python, "-I", "-S", "-B"]


def command(chosen: str, disk_mb: int, source: str, uid: int = SANDBOX_UID, in_cgroup: bool = False,
            seccomp_at: int | None = None) -> tuple[list[str], str | None, dict[str, str], tuple[int, ...]]:
    """(argv, host work dir to remove afterwards or None, environment, fds to pass and then close) for one
    sandboxed process. Without `in_cgroup` (no cgroup holds the sandbox) seccomp also refuses new processes.
    `seccomp_at`: the fd number the filter will have in bwrap (when a spawner passes it on), else its own."""
    if chosen == "bwrap":
        program = seccomp.program(single_process=not in_cgroup)
        if program is None:
            return [*bwrap_argv(disk_mb, None, uid), "-c", source], None, dict(_ENV), ()
        read_fd, write_fd = os.pipe()  # bwrap reads the filter from it; 8 bytes an instruction, < 1 KB
        try:
            os.write(write_fd, program)
        finally:
            os.close(write_fd)
        at = read_fd if seccomp_at is None else seccomp_at
        return [*bwrap_argv(disk_mb, at, uid), "-c", source], None, dict(_ENV), (read_fd,)
    work = os.path.realpath(tempfile.mkdtemp(prefix="rlft-code-"))
    env = {**_ENV, "HOME": work, "TMPDIR": work}
    return [sys.executable, "-I", "-S", "-B", "-c", source], work, env, ()


def whole_sandbox_limits() -> str:
    """How memory and processes are bounded across a sandbox: 'cgroup v1', 'cgroup v2' or 'single process'."""
    kind = cgroup.available()
    return f"cgroup {kind}" if kind else "single process"


def remove_work(work: str | None) -> None:
    """Delete an opt-out work dir without following links or recursing in Python (`rm -rf` walks
    iteratively, so a 1,500-deep chain cannot raise RecursionError here)."""
    if work and os.path.isdir(work) and not os.path.islink(work):
        for tool, *args in (("chmod", "-R", "u+rwx"), ("rm", "-rf", "--one-file-system")):
            path = shutil.which(tool, path=_ENV["PATH"]) or tool  # coreutils, whatever the user's PATH
            subprocess.run([path, *args, "--", work], capture_output=True, check=False)
