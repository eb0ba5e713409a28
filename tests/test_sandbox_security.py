"""Security table for the code sandbox: each attack must score 0 and leave the host untouched.

Every attack is a (code, tests) job whose tests pass only if the attack worked. All of them run once,
together, through `run_many` (as the code verifier runs them); then each is checked for reward 0, and
the host for effects: files unchanged or absent, no process left (a marker in /proc/*/cmdline), a
loopback TCP listener and an abstract unix socket with no connection, a sentinel process alive, and a
secret (environment variable and file) in no output. Honest solutions run in the same batch and must
score 1, so the table cannot pass by scoring everything 0.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from rlft.verifiers.sandbox import Limits, run_many

# Not skipped when bwrap is missing (the table would then pass vacuously): it fails, naming the package.
pytestmark = pytest.mark.skipif(os.environ.get("RLFT_CODE_ISOLATION") == "none",
                                reason="RLFT_CODE_ISOLATION=none: isolation explicitly turned off")

LIMITS = Limits(cpu_seconds=1, wall_seconds=3.0)
BOUND_S = LIMITS.wall_seconds + 3.0  # wall timeout + start + teardown of the namespace
TAG = secrets.token_hex(6)
SECRET = f"hunter2-{TAG}"
MARKER = f"rlft-attack-{TAG}"  # in the command line of every process an attack starts
VICTIM = f"/tmp/rlft_victim_{TAG}"  # a host file holding SECRET; must stay unchanged
ESCAPE = f"/tmp/rlft_escape_{TAG}"  # must never exist
ABSTRACT = f"rlft-abstract-{TAG}"  # an abstract unix socket on the host


def _attacks(port: int, sentinel: int) -> dict[str, tuple[str, list[str]]]:
    """name -> (code, tests); each test would pass only if the attack worked."""
    spawn = (f"os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', '{MARKER}'])")
    a = {
        # privilege
        "uid_root": ("import os\ndef f(): return os.getuid()", ["assert f() == 0"]),
        "gid_root": ("import os\ndef f(): return (os.getgid(), os.getgroups())", ["assert f() == (0, [])"]),
        "caps": ("def f():\n    for l in open('/proc/self/status'):\n        if l.startswith('CapEff'):\n"
                 "            return l.split()[1]", ["assert f() != '0000000000000000'"]),
        "cap_bounding": ("def f():\n    for l in open('/proc/self/status'):\n        if l.startswith('CapBnd'):\n"
                         "            return l.split()[1]", ["assert f() != '0000000000000000'"]),
        "setuid_0": ("import os\ndef f():\n    os.setuid(0)\n    return os.getuid()", ["assert f() == 0"]),
        "etc_shadow": ("def f(): return open('/etc/shadow').read()", ["assert 'root:' in f()"]),
        "spwd": ("import spwd\ndef f(): return spwd.getspnam('root').sp_pwdp", ["assert len(f()) > 1"]),
        "pwd_root": ("import pwd\ndef f(): return pwd.getpwnam('root').pw_dir", ["assert f() == '/root'"]),
        "list_root_home": ("import os\ndef f(): return sorted(os.listdir('/root'))", ["assert len(f()) > 1"]),
        "unshare_user": ("import ctypes\ndef f():\n    libc = ctypes.CDLL(None, use_errno=True)\n"
                         "    libc.unshare(0x10000000 | 0x20000)\n    return open('/etc/shadow').read()",
                         ["assert 'root:' in f()"]),
        "keyring_shared": ("import ctypes\ndef f():\n    libc = ctypes.CDLL(None, use_errno=True)\n"  # add_key
                           "    return libc.syscall(248, b'user', b'rlft', b'x', 1, -4)", ["assert f() > 0"]),
        "io_uring": ("import ctypes\ndef f():\n    libc = ctypes.CDLL(None, use_errno=True)\n"
                     "    params = ctypes.create_string_buffer(120)\n    return libc.syscall(425, 8, params)",
                     ["assert f() >= 0"]),
        "mount_proc": ("import ctypes\ndef f():\n    libc = ctypes.CDLL(None, use_errno=True)\n"
                       "    return libc.mount(b'none', b'/work', b'tmpfs', 0, None)", ["assert f() == 0"]),
        # escaping a Python-level guard
        "builtins_any": ("import builtins\nbuiltins.any = lambda it: True\ndef f(): return open('/etc/shadow').read()",
                         ["assert 'root:' in f()"]),
        "proc_self_mem": ("def f():\n    with open('/proc/self/mem', 'r+b', buffering=0):\n        pass\n"
                          f"    return open({VICTIM!r}).read()", ["assert f().startswith('hunter2')"]),
        "ptrace_pid1": ("import ctypes\ndef f():\n    libc = ctypes.CDLL(None, use_errno=True)\n"
                        "    return libc.ptrace(16, 1, 0, 0)", ["assert f() == 0"]),  # PTRACE_ATTACH
        # forging the verdict
        "exit_zero_early": ("import os\nos._exit(0)", ["assert f(10) == 55"]),
        "system_exit": ("raise SystemExit(0)", ["assert f(10) == 55"]),
        "fake_report": ("import os, json\nos.write(1, (json.dumps(['ok', [['v', ['i', '56']]]]) + '\\n').encode())\n"
                        "os._exit(0)", ["assert f(10) == 55"]),
        "fake_report_multi_assert": ("import os\nos.write(1, b'[\"ok\", []]\\n')\nos._exit(0)",
                                     ["assert f(1) == 1\nassert f(2) == 4"]),  # each assert is its own part
        "fake_reports_all_fds": ("import os, json\nfor n in range(100):\n"
                                 "    line = (json.dumps(['ok', [['v', ['i', str(n)]]]]) + '\\n').encode()\n"
                                 "    for fd in range(64):\n        try:\n            os.write(fd, line)\n"
                                 "        except OSError:\n            pass\nos._exit(0)", ["assert f(10) == 55"]),
        "dup2_over_report": ("import os\ndef f(n):\n    r, w = os.pipe()\n    for fd in range(1, 64):\n"
                             "        try:\n            os.dup2(w, fd)\n        except OSError:\n            pass\n"
                             "    return 56", ["assert f(10) == 55"]),
        "read_expected_gc": ("import gc, ast\ndef f(n):\n    for o in gc.get_objects():\n"
                             "        if isinstance(o, str) and '==' in o:\n"
                             "            return ast.literal_eval(o.split('==')[1].strip())\n    return -1",
                             ["assert f(10) == 55"]),
        "read_expected_memory": ("import re\ndef f(n):\n    data = open('/proc/self/cmdline', 'rb').read()\n"
                                 "    data += open('/proc/1/cmdline', 'rb').read()\n"
                                 "    m = re.search(rb'== *(\\d+)', data)\n    return int(m.group(1)) if m else -1",
                                 ["assert f(10) == 55"]),
        "read_expected_setup": ("import gc, re, sys\ndef f(x):\n    texts, frame = [], sys._getframe()\n"
                                "    while frame:\n        texts += [repr(v) for v in frame.f_locals.values()]\n"
                                "        frame = frame.f_back\n"
                                "    texts += [repr(o) for o in gc.get_objects() if isinstance(o, (dict, list))]\n"
                                "    for t in texts:\n        m = re.search(r'want\\D*(\\d+)', t)\n"
                                "        if m:\n            return int(m.group(1))\n    return -1",
                                ["want, x = 55, 10\nassert f(x) == want"]),
        "hash_collisions": ("def f(n): return {k * (2 ** 61 - 1) for k in range(1, 3000)}", ["assert f(1) == {1}"]),
        "always_equal": ("class A:\n    def __eq__(s, o): return True\n    def __ne__(s, o): return False\n"
                         "    __hash__ = object.__hash__\ndef f(n): return A()",
                         ["assert f(10) == 55", "assert not f(1) != 1"]),
        "always_equal_int": ("class I(int):\n    def __eq__(s, o): return True\n    __hash__ = int.__hash__\n"
                             "def f(n): return I(0)", ["assert f(10) == 55"]),
        "always_equal_str": ("class S(str):\n    def __eq__(s, o): return True\n    __hash__ = str.__hash__\n"
                             "def f(n): return S('x')", ["assert f(10) == 'fifty-five'"]),
        "truthy_object": ("class T:\n    def __bool__(s): return True\ndef f(n): return T()", ["assert f(10)"]),
        "recursive_value": ("def f(n):\n    x = []\n    x.append(x)\n    return x", ["assert f(10) == [[]]"]),
        "patched_sorted": ("import builtins\nbuiltins.sorted = lambda x, **k: [9]\ndef f(n): return [3, 1]",
                           ["assert sorted(f(1)) == [1, 3]"]),
        "kill_self": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", ["assert f(10) == 55"]),
        # processes
        "fork_bomb": ("import os\ndef f():\n    while True:\n        os.fork()", ["assert f() == 1"]),
        "thread_bomb": ("import threading, time\ndef f():\n    for _ in range(10000):\n"
                        "        threading.Thread(target=time.sleep, args=(30,)).start()\n    return 1",
                        ["assert f() == 2"]),
        "setsid_survivor": (f"import os, sys\nif os.fork() == 0:\n    os.setsid()\n    {spawn}\n"
                            "def f(): return 1", ["assert f() == 2"]),
        "double_fork_daemon": (f"import os, sys\nif os.fork() == 0:\n    if os.fork() == 0:\n        os.setsid()\n"
                               f"        {spawn}\n    os._exit(0)\ndef f(): return 1", ["assert f() == 2"]),
        "kill_parent": ("import os, signal\ndef f():\n    os.kill(os.getppid(), signal.SIGKILL)\n    return 1",
                        ["assert f() == 1"]),
        "kill_all": ("import os, signal\ndef f():\n    os.kill(-1, signal.SIGKILL)\n    return 1", ["assert f() == 1"]),
        "kill_host_pid": (f"import os, signal\ndef f():\n    os.kill({sentinel}, signal.SIGKILL)\n    return 1",
                          ["assert f() == 1"]),
        "pidfd_host_pid": (f"import os, signal\ndef f():\n    fd = os.pidfd_open({sentinel})\n"
                           "    signal.pidfd_send_signal(fd, signal.SIGKILL)\n    return 1", ["assert f() == 1"]),
        "nsenter": ("import subprocess\ndef f():\n"
                    "    return subprocess.run(['nsenter', '--net=/proc/1/ns/net', 'true']).returncode",
                    ["assert f() == 0"]),
        "setns_pid1_net": ("import os\ndef f():\n    fd = os.open('/proc/1/ns/net', os.O_RDONLY)\n"
                           "    os.setns(fd, 0)\n    return 1", ["assert f() == 1"]),
        "shell": ("import os\ndef f(): return os.system('echo hi')", ["assert f() == 0"]),
        # network
        "tcp_host_loopback": (f"import socket\ndef f():\n    socket.create_connection(('127.0.0.1', {port}), "
                              "timeout=1).close()\n    return 1", ["assert f() == 1"]),
        "tcp_outside": ("import socket\ndef f():\n    socket.create_connection(('1.1.1.1', 53), timeout=1).close()\n"
                        "    return 1", ["assert f() == 1"]),
        "unix_abstract_host": (f"import socket\ndef f():\n    s = socket.socket(socket.AF_UNIX)\n"
                               f"    s.connect('\\0{ABSTRACT}')\n    return 1", ["assert f() == 1"]),
        # filesystem
        "write_tmp": (f"def f():\n    open({ESCAPE!r}, 'w').write('x')\n    return 1", ["assert f() == 1"]),
        "overwrite_victim": (f"def f():\n    open({VICTIM!r}, 'w').write('pwned')\n    return 1", ["assert f() == 1"]),
        "read_victim": (f"def f(): return open({VICTIM!r}).read()", ["assert f().startswith('hunter2')"]),
        "write_stdlib": ("import os\ndef f():\n    open(os.__file__, 'a').write('#')\n    return 1",
                         ["assert f() == 1"]),
        "symlink_shadow": ("import os\ndef f():\n    os.symlink('/etc/shadow', 'link')\n    return open('link').read()",
                           ["assert 'root:' in f()"]),
        "symlink_victim": (f"import os\ndef f():\n    os.symlink({VICTIM!r}, 'v')\n    return open('v').read()",
                           ["assert f().startswith('hunter2')"]),
        "hardlink_stdlib": ("import os\ndef f():\n    os.link(os.__file__, 'os_copy.py')\n"
                            "    open('os_copy.py', 'a').write('#')\n    return 1", ["assert f() == 1"]),
        "deep_dirs": ("import os\ndef f():\n    for _ in range(1500):\n        os.mkdir('d')\n        os.chdir('d')\n"
                      "    return 1500", ["assert f() == -1"]),
        "fill_disk": ("def f():\n    with open('big', 'wb') as out:\n        for _ in range(100):\n"
                      "            out.write(b'x' * 1024 * 1024)\n    return 100", ["assert f() == 100"]),
        "fill_disk_many_files": ("def f():\n    for i in range(200):\n"
                                 "        open(f'f{i}', 'wb').write(b'x' * 1000000)\n    return 200",
                                 ["assert f() == 200"]),
        "fill_dev_shm": ("def f():\n    for i in range(100):\n"
                         "        open(f'/dev/shm/f{i}', 'wb').write(b'x' * 1000000)\n    return 100",
                         ["assert f() == 100"]),
        "dev_zero": ("def f(): return len(open('/dev/zero', 'rb').read(10 ** 10))", ["assert f() == 10 ** 10"]),
        "proc_sys_write": ("def f():\n    open('/proc/sys/kernel/hostname', 'w').write('pwned')\n    return 1",
                           ["assert f() == 1"]),
        "site_packages": ("import os, sys\ndef f():\n"
                          "    d = os.path.join(os.path.dirname(os.__file__), 'site-packages')\n"
                          "    return len(os.listdir(d))", ["assert f() > 0"]),
        # resources
        "infinite_loop": ("def f():\n    while True:\n        pass", ["assert f() == 1"]),
        "sleep_forever": ("import time\ndef f():\n    time.sleep(3600)\n    return 1", ["assert f() == 1"]),
        "alloc_10gb": ("def f(): return len(bytearray(10 * 1024 ** 3))", ["assert f() == 10 * 1024 ** 3"]),
        "fd_exhaustion": ("def f():\n    return len([open('/dev/null') for _ in range(100000)])",
                          ["assert f() == 100000"]),
        "stdout_flood": ("import os\nwhile True:\n    os.write(1, b'x' * 65536)", ["assert f() == 1"]),
        "stderr_flood": ("import sys\ndef f():\n    while True:\n        sys.stderr.write('y' * 65536)",
                         ["assert f() == 1"]),
        "huge_value": ("def f(n): return list(range(10 ** 7))", ["assert f(1) == [0]"]),
        "deep_recursion": ("import sys\nsys.setrecursionlimit(10 ** 7)\ndef f(n): return f(n + 1)",
                           ["assert f(0) == 1"]),
        # environment secrets
        "env_secret": ("import os\ndef f(): return os.environ.get('RLFT_TEST_SECRET', '')",
                       ["assert f().startswith('hunter2')"]),
        "env_secret_in_error": ("import os\nraise RuntimeError(repr(dict(os.environ)))", ["assert f() == 1"]),
        "pid1_environ": ("def f(): return open('/proc/1/environ', 'rb').read()", ["assert b'hunter2' in f()"]),
        "parent_environ": (f"def f(): return open('/proc/{os.getpid()}/environ', 'rb').read()",
                           ["assert b'hunter2' in f()"]),
        "victim_in_error": (f"raise RuntimeError(open({VICTIM!r}).read())", ["assert f() == 1"]),
    }
    return {name: (textwrap.dedent(code), tests) for name, (code, tests) in a.items()}


HONEST = {
    "add": ("def add(a, b):\n    return a + b", ["assert add(1, 2) == 3", "x = 5\nassert add(x, 1) == 6"]),
    "sort": ("def f(xs):\n    return sorted(xs)", ["assert f([3, 1, 2]) == sorted([2, 3, 1])",
                                                     "expected = [1, 2]\nassert f([2, 1]) == expected"]),
    "floats_sets_dicts": ("def f():\n    return {'a': {1, 2}, 'b': (0.5, None)}",
                          ["assert f() == {'a': {2, 1}, 'b': (0.5, None)}", "assert 'a' in f()",
                           "assert f()['b'][1] is None", "assert 0 < f()['b'][0] <= 1"]),
    "prints_and_files": ("import tempfile\ndef f():\n    print('noise ' * 10000)\n"
                         "    with tempfile.NamedTemporaryFile('w+') as t:\n        t.write('ok')\n        t.seek(0)\n"
                         "        return t.read()", ["assert f() == 'ok'"]),
    "namedtuple_async": ("import asyncio\nfrom collections import namedtuple\nP = namedtuple('P', 'x y')\n"
                         "async def g(x):\n    await asyncio.sleep(0)\n    return P(x, 2 * x)\n"
                         "def f(x):\n    return asyncio.run(g(x))", ["assert f(2) == (2, 4)", "assert f(1).y == 2"]),
    "multiprocessing": ("import multiprocessing\ndef sq(x):\n    return x * x\ndef f():\n"
                        "    with multiprocessing.get_context('fork').Pool(2) as pool:\n"
                        "        return pool.map(sq, [1, 2, 3])", ["assert f() == [1, 4, 9]"]),
    "custom_class": ("class D:\n    def __init__(s, v): s.v = v\n    def __eq__(s, o): return s.v == o.v\n"
                     "def f(v): return D(v)", ["assert f(1) == f(1)", "assert not f(1) == f(2)"]),
}


@pytest.fixture(scope="module")
def host():
    """Host-side bait: a TCP listener, an abstract unix socket, a victim file, a sentinel process."""
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(5)
    tcp.setblocking(False)
    unix = socket.socket(socket.AF_UNIX)
    unix.bind("\0" + ABSTRACT)
    unix.listen(5)
    unix.setblocking(False)
    with open(VICTIM, "w") as f:
        f.write(SECRET)
    sentinel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "sentinel-" + TAG])
    try:
        yield tcp, unix, sentinel
    finally:
        sentinel.kill()
        sentinel.wait()
        tcp.close()
        unix.close()
        for path in (VICTIM, ESCAPE):
            if os.path.lexists(path):
                os.remove(path)


@pytest.fixture(scope="module")
def batch(host):
    tcp, _, sentinel = host
    attacks = _attacks(tcp.getsockname()[1], sentinel.pid)
    jobs = {**attacks, **{f"honest_{k}": v for k, v in HONEST.items()}}
    victim_before = os.stat(VICTIM)
    tmp_before = set(os.listdir("/tmp"))
    os.environ["RLFT_TEST_SECRET"] = SECRET
    try:
        started = time.monotonic()
        results = run_many(list(jobs.values()), LIMITS, workers=4)
        elapsed = time.monotonic() - started
    finally:
        del os.environ["RLFT_TEST_SECRET"]
    return dict(zip(jobs, results)), elapsed, victim_before, set(os.listdir("/tmp")) - tmp_before


ATTACK_NAMES = list(_attacks(0, 0))


def test_table_size():
    assert len(ATTACK_NAMES) >= 40


@pytest.mark.parametrize("name", ATTACK_NAMES)
def test_attack_scores_zero(batch, name):
    result = batch[0][name]
    assert result.fraction == 0.0 and not result.passed, result
    assert result.error, result
    assert result.elapsed < BOUND_S, result
    assert SECRET not in result.error


@pytest.mark.parametrize("name", list(HONEST))
def test_honest_code_scores_one(batch, name):
    result = batch[0][f"honest_{name}"]
    assert result.fraction == 1.0 and result.passed, result


def test_host_unharmed(batch, host):
    results, elapsed, victim_before, new_in_tmp = batch
    tcp, unix, sentinel = host
    assert elapsed < 60, elapsed  # the whole table, on 4 workers
    with open(VICTIM) as f:
        assert f.read() == SECRET
    after = os.stat(VICTIM)
    assert (after.st_mtime_ns, after.st_size, after.st_ino) == (victim_before.st_mtime_ns, victim_before.st_size,
                                                                victim_before.st_ino)
    assert not os.path.lexists(ESCAPE)
    for server in (tcp, unix):
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
    assert sentinel.poll() is None  # the host process the attacks tried to kill is alive
    assert _marked_processes() == []  # nothing the attacks started survived the call
    assert all(SECRET not in r.error for r in results.values())
    assert not [p for p in new_in_tmp if p.startswith("rlft-code-")]  # no work dir on the host


def test_bounded_and_diagnosed(batch):
    results = batch[0]
    # 1 s of CPU; on a loaded machine the 3 s wall clock can come first
    assert results["infinite_loop"].error.endswith(("CPU time limit exceeded (1 s)", "timed out after 3 s"))
    assert results["sleep_forever"].timed_out
    assert results["fake_reports_all_fds"].error.startswith("test 1: no well-formed report")
    assert "not plain data" in results["always_equal"].error
    assert "not plain data (ValueError)" in results["hash_collisions"].error  # refused before building the set


def _marked_processes() -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if MARKER.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                pass
    return found
