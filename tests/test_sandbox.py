"""The code sandbox: what the process sees, whole-sandbox limits, the parent's bounds, the opt-out and the refusal.

How tests convert is tests/test_code_cases.py; the attack table (hostile code, host effects) is
tests/test_sandbox_security.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from rlft.errors import UserError
from rlft.verifiers.sandbox import Limits, cgroup, isolation, processes, run, run_many, run_tests, seccomp, values

LIMITS = Limits(cpu_seconds=1, wall_seconds=3.0)
needs_bwrap = pytest.mark.skipif(os.environ.get("RLFT_CODE_ISOLATION") == "none",
                                 reason="RLFT_CODE_ISOLATION=none: isolation explicitly turned off")
WHOLE = isolation.whole_sandbox_limits()


@needs_bwrap
def test_process_is_unprivileged_and_alone():
    code = textwrap.dedent("""
        import os, socket, sys
        def status(key):
            for line in open('/proc/self/status'):
                if line.startswith(key + ':'):
                    return line.split()[1]
        def ids():
            return os.getuid(), os.geteuid(), os.getgid(), os.getgroups()
        def pids():
            return sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
        def links():
            return [line.split(':')[0].strip() for line in open('/proc/self/net/dev').readlines()[2:]]
        def clean_path():
            return not any('site-packages' in p or 'dist-packages' in p or 'rlft' in p for p in sys.path)
        def host_dirs():
            return [d for d in ('/etc', '/home', '/usr/lib/python3/dist-packages')
                    if os.path.exists(d) and os.listdir(d)]
        def env():
            return sorted(os.environ), os.getcwd()
        """)
    own = [processes.sandbox_uid(s) for s in range(isolation.UID_SLOTS)]  # this process's, under locks
    slots = [[u, u, u, []] for u in own]  # a uid of its own per worker slot
    tests = [f"assert list(ids()) in {slots}",
             *(f"assert status({k!r}) == '0000000000000000'" for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb")),
             "assert status('NoNewPrivs') == '1'",
             "assert links() == ['lo']",  # own network namespace
             "assert pids() == [1, 2]",  # own PID namespace: bwrap's init and this process
             "assert clean_path()", "assert host_dirs() == []",
             "assert env() == (['HOME', 'LC_CTYPE', 'MALLOC_ARENA_MAX', 'PATH', 'PWD', 'TMPDIR'], '/work')"]
    if seccomp.program() is not None:
        tests.append("assert status('Seccomp') == '2'")  # SECCOMP_MODE_FILTER
    result = run_tests(code, tests, LIMITS)
    assert result.passed, result
    assert result.n_tests == len(tests) and "bwrap" in result.protections


@needs_bwrap
def test_seccomp_refuses_kernel_surface_sysv_ipc_and_vsock_not_threads():
    if seccomp.program() is None:
        pytest.skip("the seccomp filter is built for x86_64 only")
    code = textwrap.dedent("""
        import ctypes, os, socket, subprocess, sys, threading
        libc = ctypes.CDLL(None, use_errno=True)
        def call(fn, *args):
            return fn(*args), ctypes.get_errno()
        def unshare(): return call(libc.unshare, 0x10000000)
        def mount(): return call(libc.mount, b'none', b'/work', b'tmpfs', 0, None)
        def syscall(*args): return call(libc.syscall, *args)
        def shmget(): return call(libc.shmget, 0, 1 << 20, 0o1000 | 0o600)
        def msgget(): return call(libc.msgget, 0, 0o1000 | 0o600)
        def semget(): return call(libc.semget, 0, 1, 0o1000 | 0o600)
        def sock(family):
            try:
                socket.socket(family, socket.SOCK_STREAM).close()
                return 0
            except OSError as e:
                return e.errno
        def thread():
            out = []
            t = threading.Thread(target=lambda: out.append(1))
            t.start()
            t.join()
            return out
        def child():
            return subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True).stdout
        def flock():
            import fcntl
            try:
                fcntl.flock(open(os.__file__), fcntl.LOCK_SH)
                return 0
            except OSError as e:
                return e.errno
        def lockf():
            import fcntl, struct
            try:
                fcntl.fcntl(open(os.__file__), fcntl.F_SETLK, struct.pack('hhqqi', fcntl.F_RDLCK, 0, 0, 0, 0))
                return 0
            except OSError as e:
                return e.errno
        def inotify(): return call(libc.inotify_init)
        def mincore(): return syscall(27, 0, 4096, 0)
        """)
    tests = ["assert unshare() == (-1, 1)", "assert mount() == (-1, 1)",  # EPERM
             "assert syscall(250, 0, -4, 0, 0, 0) == (-1, 1)",  # keyctl
             "assert syscall(425, 8, 0) == (-1, 1)",  # io_uring_setup
             "assert syscall(101, 16, 1, 0, 0) == (-1, 1)",  # ptrace(PTRACE_ATTACH, 1)
             "assert syscall(319, b'x', 0) == (-1, 1)",  # memfd_create
             "assert shmget() == (-1, 1)", "assert msgget() == (-1, 1)", "assert semget() == (-1, 1)",
             "assert sock(40) == 97", "assert sock(38) == 97",  # AF_VSOCK, AF_ALG: EAFNOSUPPORT
             "assert sock(1) == 0",  # unix sockets are fine
             "assert sock(2) == 97", "assert sock(10) == 97", "assert sock(16) == 97",  # no inet, inet6, netlink
             "assert flock() == 1", "assert lockf() == 1", "assert inotify() == (-1, 1)",  # no shared-file channels
             "assert mincore() == (-1, 1)",
             "assert thread() == [1]"]
    # a child process: inside a cgroup it is counted; without one, seccomp refuses it
    tests.append("assert child() == b'42\\n'" if WHOLE.startswith("cgroup") else "assert child() == b''")
    result = run_tests(code, tests, LIMITS)
    assert result.passed and "seccomp" in result.protections, result


@needs_bwrap
@pytest.mark.skipif(not WHOLE.startswith("cgroup"), reason="no writable cgroup here: one process per sandbox")
def test_memory_limit_holds_for_the_whole_sandbox():
    """Four children of 200 MB each would hold 800 MB with a per-process RLIMIT_AS of 256 MB; the slot's
    cgroup caps the sandbox at 256 MB: the children are killed, and the cgroup never went over."""
    code = textwrap.dedent("""
        import os, time
        def f(mb):
            kids = []
            for _ in range(4):
                pid = os.fork()
                if pid == 0:
                    b = bytearray(mb * 1024 * 1024)
                    time.sleep(0.5)
                    os._exit(0)
                kids.append(pid)
            return sum(os.waitpid(p, 0)[1] == 0 for p in kids)
        """)
    limits = Limits(cpu_seconds=2, wall_seconds=8.0, memory_mb=256)
    result = run_many([(code, ["assert f(200) == 4"]), (code, ["assert f(20) == 4"])], limits, workers=1)
    assert [r.fraction for r in result] == [0.0, 1.0], result  # 4 x 20 MB fits: forking itself is fine
    assert f"cgroup-{cgroup.available()}" in result[0].protections
    if cgroup.available() == "v1":
        procs = cgroup.slot_procs(processes.current_slot(), 256, limits.nproc)
        with open(os.path.join(os.path.dirname(procs[0]), "memory.max_usage_in_bytes")) as f:
            assert int(f.read()) <= 256 * 1024 * 1024


@needs_bwrap
def test_without_a_cgroup_the_sandbox_is_one_process(monkeypatch):
    """Where no cgroup can be made, seccomp refuses new processes (threads stay): the one process's RLIMIT_AS
    is then the memory of the whole sandbox."""
    if seccomp.program(single_process=True) is None:
        pytest.skip("the seccomp filter is built for x86_64 only")
    monkeypatch.setattr(cgroup, "slot_procs", lambda *a: [])
    code = textwrap.dedent("""
        import os, threading
        def fork():
            try:
                pid = os.fork()
            except OSError as e:
                return e.errno
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            return 0
        def thread():
            out = []
            t = threading.Thread(target=lambda: out.append(1))
            t.start()
            t.join()
            return out
        """)
    result = run_tests(code, ["assert fork() == 1", "assert thread() == [1]"], LIMITS)
    assert result.passed, result


def test_correct_code_scores_one_and_half_right_scores_half():
    code = "def add(a, b):\n    return a + b"
    assert run_tests(code, ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"], LIMITS).fraction == 1.0
    half = run_tests("def add(a, b):\n    return a * b", ["assert add(2, 2) == 4", "assert add(1, 2) == 3"], LIMITS)
    assert half.fraction == 0.5 and not half.passed and half.error == "test 2: got 2, which fails `result == 3`"


def test_legitimate_code_still_works():
    code = textwrap.dedent("""
        import asyncio, collections, dataclasses, enum, fractions, functools, heapq, itertools, json, math, re
        import typing, warnings
        from collections import OrderedDict, defaultdict, namedtuple
        P = namedtuple("P", "x y")
        class Color(enum.Enum):
            RED = 1
        @dataclasses.dataclass
        class D:
            x: int
        warnings.warn("fine")
        async def twice(x):
            await asyncio.sleep(0)
            return 2 * x
        def run(x):
            return asyncio.run(twice(x))
        def point():
            return P(1, 2)
        def counts():
            return defaultdict(int, a=1)
        def write_read():
            with open("scratch.txt", "w") as f:
                f.write("ok")
            return open("scratch.txt").read()
        def half():
            return fractions.Fraction(1, 2)
        def color():
            return Color.RED.value
        """)
    tests = ["assert run(2) == 4", "assert point() == (1, 2)", "assert counts() == {'a': 1}",
             "assert write_read() == 'ok'", "assert 0 < run(1)", "assert run(1) in [2, 3]", "assert color() == 1",
             "import fractions\nassert half() == fractions.Fraction(2, 4)",
             "assert math.isclose(run(1), 2.0000001, rel_tol=1e-6)", "assert run(1) is not None",
             "assert not run(0)", "assert run(3) in {6, 7}", "assert run(1) != 3"]
    result = run_tests(code, tests, LIMITS)
    assert result.fraction == 1.0, result


def test_values_round_trip():
    weird = "a\"b\\c\u00e9\U0001F600\udc80\x00\n"  # quotes, backslash, non-ASCII, astral, lone surrogate, NUL
    code = (f"def f(): return {weird!a}\ndef g(): return [1.5, -0.0, 2 ** 70, 1j, b'\\x00', None, (1,), {{1: {{2}}}}]\n"
            "import math\ndef big(): return -math.factorial(1000)\ndef echo(*a, **k): return [list(a), k]")
    tests = [f"assert f() == {weird!a}", "assert f() != 'a'",
             f"assert g() == [1.5, 0.0, {2 ** 70}, 1j, b'\\x00', None, (1,), {{1: {{2}}}}]",
             f"assert big() == -{__import__('math').factorial(1000)}",  # 2,568 digits, sent as hex
             f"assert echo({weird!a}, (1, 2), {{3}}, x=frozenset()) == "
             f"[[{weird!a}, (1, 2), {{3}}], {{'x': frozenset()}}]",
             "assert f() == 'x'"]
    result = run_tests(code, tests, LIMITS)
    assert result.n_passed == len(tests) - 1 and result.error.startswith(f"test {len(tests)}: got"), result


def test_one_cases_failure_never_ends_the_batch(monkeypatch):
    real, calls = processes._run_process, []

    def flaky(*args):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("simulated: the sandbox could not start")
        return real(*args)

    monkeypatch.setattr(processes, "_run_process", flaky)
    ok = "def f(): return 1"
    results = run_many([(ok, ["assert f() == 1"]), (ok, ["assert f() == 1"]), ("def f(:", ["assert f() == 1"]),
                        (ok, ["assert f() == 1"])], LIMITS, workers=1)
    assert [r.fraction for r in results] == [1.0, 0.0, 0.0, 1.0]
    assert "simulated" in results[1].error and results[2].error.startswith("test 1: code: SyntaxError")


def test_errors_in_the_comparison_stay_in_their_case():
    """decimal.InvalidOperation (sNaN), OverflowError (isclose of a huge int), a TypeError (`<` between types)
    used to end the whole batch; each now fails its own case."""
    code = ("from decimal import Decimal\ndef nan(): return Decimal('sNaN')\ndef big(): return 10 ** 400\n"
            "def s(): return 'x'\ndef one(): return 1")
    tests = ["from decimal import Decimal\nassert nan() == Decimal('1')",
             "import math\nassert math.isclose(big(), 1.5)",
             "assert s() < 3", "assert round(s(), 2) == 1.0", "assert one() == 1"]
    result = run_tests(code, tests, LIMITS)
    assert result.n_passed == 1 and result.n_tests == 5, result


@pytest.mark.parametrize("enc,extras,why", [
    (["Q", ["1" + "0" * 400, "3"]], "Q", "Fraction parts far larger"),
    (["D", "1.5"], "", "a Decimal where the expected value has none"),
    (["K", []], "", "a Counter where the expected value has none"),
    (["l", [["i", "1"]] * (values.MAX_NODES + 1)], "", "too large"),
    (["S", [["i", format(k * (2 ** 61 - 1), "x")] for k in range(1, 200)]], "", "equal hashes"),
    (["z", 1], "", "unknown"), (["i"], "", "malformed"), ("x", "", "malformed"),
])
def test_decoding_is_bounded_and_strict(enc, extras, why):
    with pytest.raises(values.Refused, match=why):
        values.decode(enc, frozenset(extras), digits=1)


def test_parent_keeps_a_bounded_prefix_of_each_report():
    started = time.monotonic()
    result = run_tests("def f(): return list(range(10 ** 5))", ["assert f() == [0]"], LIMITS)
    assert "output larger than the expected value allows" in result.error
    assert run._cap(run.convert_.convert(["assert f() == [0]"]).tests[0].cases[0]) == run.REPORT_FLOOR
    assert time.monotonic() - started < 10


def test_bad_isolation_mode(monkeypatch):
    monkeypatch.setenv("RLFT_CODE_ISOLATION", "maybe")
    with pytest.raises(UserError, match="RLFT_CODE_ISOLATION"):
        run_tests("x = 1", ["assert f() == 1"], LIMITS)


def _verify(tmp_path, env, verifier="code", completion="def add(a, b): return a + b"):
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"tests": "assert add(1, 2) == 3", "completion": completion}) + "\n")
    cmd = [sys.executable, "-m", "rlft", "verify", verifier, "--data", str(data), "--json"]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=120)


def test_refuses_without_bubblewrap(tmp_path):
    out = _verify(tmp_path, {"PATH": str(tmp_path), "RLFT_CODE_ISOLATION": ""})  # no bwrap on PATH
    assert out.returncode == 2, out.stderr
    assert "apt-get install bubblewrap" in out.stderr and "RLFT_CODE_ISOLATION=none" in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_refuses_when_bubblewrap_cannot_isolate(tmp_path):
    fake = tmp_path / "bwrap"  # what bwrap says in a container that may not create namespaces
    fake.write_text("#!/bin/sh\necho 'bwrap: Creating new namespace failed: Operation not permitted' >&2\nexit 1\n")
    fake.chmod(0o755)
    for tool in ("setpriv",):
        (tmp_path / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    out = _verify(tmp_path, {"PATH": str(tmp_path), "RLFT_CODE_ISOLATION": ""})
    assert out.returncode == 2, out.stderr
    assert "failed its startup probe" in out.stderr and "Operation not permitted" in out.stderr
    assert "RLFT_CODE_ISOLATION=none" in out.stderr and out.stdout == ""


def test_opt_out_runs_with_a_loud_warning(tmp_path):
    out = _verify(tmp_path, {"PATH": str(tmp_path), "RLFT_CODE_ISOLATION": "none"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"line": 1, "reward": 1.0}]
    assert "WARNING: RLFT_CODE_ISOLATION=none" in out.stderr and "WITHOUT isolation" in out.stderr


def test_forgeable_mode_is_opt_in_and_says_so(tmp_path):
    """`code_forgeable` runs code and test in one process: `os._exit(0)` scores 1.0. That is what the mode
    is, so every use warns and every report is marked."""
    out = _verify(tmp_path, {}, "code_forgeable", "import os\nos._exit(0)")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"line": 1, "reward": 1.0, "forgeable": True}]
    assert "WARNING: code_forgeable" in out.stderr
    results = run.run_forgeable([("def add(a, b): return a - b", ["assert add(1, 2) == 3", "x = 2\nassert x == 2"])],
                                LIMITS)
    assert results[0].forgeable and results[0].fraction == 0.5


def test_opt_out_keeps_limits_and_cleans_up(monkeypatch):
    monkeypatch.setenv("RLFT_CODE_ISOLATION", "none")
    deep = "import os\nfor _ in range(1500):\n    os.mkdir('d')\n    os.chdir('d')\ndef f(): return 1"
    before = {p for p in os.listdir("/tmp") if p.startswith("rlft-code-")}
    results = run_many([("while True: pass", ["assert f() == 1"]), (deep, ["assert f() == 1"])], LIMITS)
    assert results[0].fraction == 0.0 and results[0].protections == ("rlimits",)
    assert results[1].fraction == 1.0  # the 1,500-deep chain is scored, then removed without recursion
    assert {p for p in os.listdir("/tmp") if p.startswith("rlft-code-")} == before
    assert isolation.mode() == "none"


@needs_bwrap
@pytest.mark.skipif(not WHOLE.startswith("cgroup"), reason="no cgroup: sandboxes are started directly")
def test_spawners_survive_a_long_batch_and_leave_no_zombies():
    """The helper reaps orphans but never a sandbox before its pidfd is handled (it crashed with ECHILD)."""
    from rlft.verifiers.sandbox import spawner

    jobs = [("def f(x): return x + 1", [f"assert f({i}) == {i + 1}", f"assert f({i}) != {i}"]) for i in range(40)]
    assert all(r.passed for r in run_many(jobs, Limits(), workers=2))
    helpers = list(spawner._helpers.values())
    assert helpers and all(h.proc.poll() is None for h in helpers)
    for procs in (cgroup.slot_procs(processes.current_slot(), 512, 32),):
        pids = os.path.join(os.path.dirname(procs[-1]), "pids.current")
        if cgroup.available() == "v1" and os.path.exists(pids):
            with open(pids) as f:
                assert int(f.read()) <= 6  # the helper, the sandbox started ahead (3) and a zombie or two
