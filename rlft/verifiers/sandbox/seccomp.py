"""The sandbox's seccomp filter, built here as classic BPF (no libseccomp needed), x86_64 only.

Refused with EPERM: what an unprivileged process only needs for kernel attacks or for memory outside its
own limits: new namespaces (unshare, setns, clone with CLONE_NEW*), mount and the new mount API, ptrace,
keyrings, bpf, perf_event_open, userfaultfd, io_uring, module loading, kexec, handle-based opens; SysV
IPC (shmget, msgget, semget and their operations: shared memory and message queues are kernel memory
that no rlimit of the process counts) and memfd_create. Refused too, as channels between sandboxes through
the one kernel object they share (the read-only stdlib files): advisory locks (flock; fcntl's F_GETLK,
F_SETLK(W), the OFD locks, leases and F_NOTIFY), inotify and fanotify (a watch on a shared file sees
another sandbox open it), and the page-cache probes (mincore, fadvise64, readahead, cachestat).
`socket`/`socketpair` accept AF_UNIX only (there is no network; AF_INET/AF_INET6 socket buffers are
memory cgroup v1 does not charge, and AF_VSOCK reaches the host across a network namespace); others get
EAFNOSUPPORT. clone3 gets ENOSYS (glibc then falls back to clone, whose flags the
filter can read), and x32 or foreign-arch syscalls are refused. With `single_process` (no cgroup to count
memory across processes), fork, vfork and a clone without CLONE_THREAD are refused too: threads remain,
and the one process's RLIMIT_AS bounds the sandbox's memory.
"""

from __future__ import annotations

import platform
import struct
import sys
from functools import cache

# x86_64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl)
DENY = {"shmget": 29, "shmat": 30, "shmctl": 31, "semget": 64, "semop": 65, "semctl": 66, "shmdt": 67,
        "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "ptrace": 101, "pivot_root": 155, "chroot": 161,
        "mount": 165, "umount2": 166, "init_module": 175, "delete_module": 176, "semtimedop": 220,
        "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
        "perf_event_open": 298, "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308,
        "finit_module": 313, "memfd_create": 319, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
        "memfd_secret": 447,
        # channels between sandboxes through shared files (locks, watches, page cache state)
        "mincore": 27, "flock": 73, "readahead": 187, "fadvise64": 221, "inotify_init": 253,
        "inotify_add_watch": 254, "inotify_init1": 294, "fanotify_init": 300, "fanotify_mark": 301,
        "cachestat": 451}
FCNTL = 72
FCNTL_DENY = (5, 6, 7, 36, 37, 38, 1024, 1025, 1026)  # F_GETLK F_SETLK F_SETLKW F_OFD_* F_SETLEASE F_GETLEASE F_NOTIFY
SOCKET, SOCKETPAIR, CLONE, FORK, VFORK, CLONE3 = 41, 53, 56, 57, 58, 435
FAMILIES = (1,)  # AF_UNIX
CLONE_NEW = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET (<linux/sched.h>)
CLONE_THREAD = 0x00010000
_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ/JGE/JSET|K, BPF_RET|K
_RETS = {"allow": 0x7FFF0000, "kill": 0x80000000, "eperm": 0x00050000 | 1, "enosys": 0x00050000 | 38,
         "eafnosupport": 0x00050000 | 97}  # SECCOMP_RET_ALLOW / KILL_PROCESS / ERRNO | errno


@cache
def program(single_process: bool = False) -> bytes | None:
    """The filter as `struct sock_filter` records, or None off x86_64 (syscall numbers differ)."""
    if platform.machine() not in ("x86_64", "AMD64") or sys.byteorder != "little":
        return None
    p: list = [(_LD, 0, 0, 4), (_JEQ, 0, "kill", 0xC000003E),  # seccomp_data.arch: AUDIT_ARCH_X86_64
               (_LD, 0, 0, 0),  # seccomp_data.nr
               (_JGE, "eperm", 0, 0x40000000)]  # __X32_SYSCALL_BIT
    p += [(_JEQ, "eperm", 0, nr) for nr in sorted(DENY.values())]
    p += [(_JEQ, "enosys", 0, CLONE3), (_JEQ, "socket", 0, SOCKET), (_JEQ, "socket", 0, SOCKETPAIR),
          (_JEQ, "fcntl", 0, FCNTL)]
    if single_process:
        p += [(_JEQ, "eperm", 0, FORK), (_JEQ, "eperm", 0, VFORK)]
    p += [(_JEQ, 0, "allow", CLONE),
          (_LD, 0, 0, 16),  # seccomp_data.args[0], low 32 bits: the clone flags
          (_JSET, "eperm", 0, CLONE_NEW)]
    if single_process:
        p += [(_JSET, "allow", "eperm", CLONE_THREAD)]
    p += [(_RET, 0, 0, "allow"),
          "socket", (_LD, 0, 0, 16)]  # the address family
    p += [(_JEQ, "allow", 0, family) for family in FAMILIES]
    p += [(_RET, 0, 0, "eafnosupport"),
          "fcntl", (_LD, 0, 0, 24)]  # seccomp_data.args[1], low 32 bits: the command
    p += [(_JEQ, "eperm", 0, cmd) for cmd in FCNTL_DENY]
    p += [(_RET, 0, 0, "allow")]
    for name in ("allow", "eperm", "enosys", "kill"):
        p += [name, (_RET, 0, 0, name)]
    return _assemble(p)


def _assemble(items: list) -> bytes:
    """Resolve label names (strings in the list, and as jump targets) into forward jump offsets."""
    labels, code = {}, []
    for item in items:
        if isinstance(item, str):
            labels[item] = len(code)
        else:
            code.append(item)
    out = []
    for i, (op, jt, jf, k) in enumerate(code):
        jt, jf = (labels[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf))
        if not (0 <= jt < 256 and 0 <= jf < 256):
            raise ValueError(f"BPF jump out of range at {i}")
        out.append(struct.pack("<HBBI", op, jt, jf, _RETS[k] if isinstance(k, str) else k))
    return b"".join(out)
