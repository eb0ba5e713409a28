"""Sandbox uids that belong to one verifier process: allocated from a range under a lock file each.

As root, every sandbox runs as an unprivileged uid of its slot. RLIMIT_NPROC (and the kernel's other
per-user counts) count per uid across the whole host, so two rlft processes whose sandboxes ran as the
same uids would share one process budget: a fork bomb, or just honest threaded code, in one `rlft verify`
would make threads fail in a GRPO run beside it. So a slot's uid is taken from `FIRST` ... `FIRST + COUNT - 1`
by holding an exclusive `flock` on that uid's lock file (in /run/lock, else /dev/shm, else the temp dir),
kept for the life of the process; the kernel drops the lock when the process ends, however it ends, so a
crashed process never leaks its uids. A forked child allocates its own (its parent's locks block it).
Not as root, bubblewrap's user namespace maps the caller's own uid to 65534 and this module is not used.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading

FIRST = 0x6C660000  # 1,818,624,000: far above any login or system uid, below the 32-bit overflow uid
COUNT = 4096
_lock = threading.Lock()
_held: dict[int, tuple[int, int]] = {}  # slot -> (uid, fd of its lock file)
_owner = [os.getpid()]


def lock_dir() -> str:
    """Where the uid lock files live: one folder for every rlft process on the machine."""
    for base in ("/run/lock", "/dev/shm", tempfile.gettempdir()):
        d = os.path.join(base, "rlft-sandbox-uids")
        try:
            os.makedirs(d, mode=0o755, exist_ok=True)
            if os.access(d, os.W_OK):
                return d
        except OSError:
            continue
    raise OSError("no writable folder for the sandbox uid locks")


def uid_for(slot: int) -> int:
    """This process's uid for `slot`, allocated on first use (OSError when the whole range is held)."""
    with _lock:
        if _owner[0] != os.getpid():  # forked: the parent's uids are the parent's
            _held.clear()
            _owner[0] = os.getpid()
        if slot not in _held:
            _held[slot] = _allocate({uid for uid, _ in _held.values()})
        return _held[slot][0]


def held() -> list[int]:
    """The uids this process holds (tests)."""
    with _lock:
        return sorted(uid for uid, _ in _held.values()) if _owner[0] == os.getpid() else []


def _allocate(mine: set[int]) -> tuple[int, int]:
    d = lock_dir()
    start = (os.getpid() * 8) % COUNT  # processes start apart, so they rarely probe each other's locks
    for k in range(COUNT):
        uid = FIRST + (start + k) % COUNT
        if uid in mine:
            continue
        fd = os.open(os.path.join(d, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return uid, fd
    raise OSError(f"all {COUNT} sandbox uids are held by other rlft processes")
