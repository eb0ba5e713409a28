"""The code sandbox: what the process sees, how tests become parent-side verdicts, the opt-out and the refusal.

The attack table (hostile code, host effects) is tests/test_sandbox_security.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from rlft.errors import UserError
from rlft.verifiers import sandbox, sandbox_harness, sandbox_isolation
from rlft.verifiers.sandbox import Limits, run_many, run_tests, split_tests

LIMITS = Limits(cpu_seconds=1, wall_seconds=3.0)
needs_bwrap = pytest.mark.skipif(os.environ.get("RLFT_CODE_ISOLATION") == "none",
                                 reason="RLFT_CODE_ISOLATION=none: isolation explicitly turned off")


@needs_bwrap
def test_process_is_unprivileged_and_alone():
    code = textwrap.dedent("""
        import os, socket, sys
        def status(key):
            for line in open('/proc/self/status'):
                if line.startswith(key + ':'):
                    return line.split()[1]
        def uids():
            return os.getuid(), os.geteuid(), os.getgid(), os.getgroups()
        def pids():
            return sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
        """)
    tests = ["assert uids() == (65534, 65534, 65534, [])",
             *(f"assert status({k!r}) == '0000000000000000'" for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb")),
             "assert status('NoNewPrivs') == '1'",
             "assert socket.if_nameindex() == [(1, 'lo')]",  # own network namespace
             "assert pids() == [1, 2]",  # own PID namespace: bwrap's init and this process
             "assert not any('site-packages' in p or 'rlft' in p for p in sys.path)",
             "assert not os.path.exists('/etc') and not os.path.exists('/home') and os.getcwd() == '/work'",
             "assert sorted(os.environ) == ['HOME', 'LC_CTYPE', 'PATH', 'PWD', 'TMPDIR']"]
    if sandbox_isolation.seccomp_program() is not None:
        tests.append("assert status('Seccomp') == '2'")  # SECCOMP_MODE_FILTER
    result = run_tests(code, tests, LIMITS)
    assert result.passed, result
    assert result.n_tests == len(tests) and "bwrap" in result.protections


@needs_bwrap
def test_seccomp_refuses_kernel_attack_surface_not_threads_or_processes():
    if sandbox_isolation.seccomp_program() is None:
        pytest.skip("the seccomp filter is built for x86_64 only")
    code = textwrap.dedent("""
        import ctypes, os, subprocess, sys, threading
        libc = ctypes.CDLL(None, use_errno=True)
        def call(fn, *args):
            return fn(*args), ctypes.get_errno()
        def thread():
            out = []
            t = threading.Thread(target=lambda: out.append(1))
            t.start()
            t.join()
            return out
        def child():
            return subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True).stdout
        """)
    tests = ["assert call(libc.unshare, 0x10000000) == (-1, 1)",  # CLONE_NEWUSER: EPERM
             "assert call(libc.mount, b'none', b'/work', b'tmpfs', 0, None) == (-1, 1)",
             "assert call(libc.syscall, 250, 0, -4, 0, 0, 0) == (-1, 1)",  # keyctl
             "assert call(libc.syscall, 425, 8, 0) == (-1, 1)",  # io_uring_setup
             "assert call(libc.syscall, 101, 16, 1, 0, 0) == (-1, 1)",  # ptrace(PTRACE_ATTACH, 1)
             "assert thread() == [1]", "assert child() == b'42\\n'"]
    result = run_tests(code, tests, LIMITS)
    assert result.passed and "seccomp" in result.protections, result


def test_correct_code_scores_one_and_half_right_scores_half():
    code = "def add(a, b):\n    return a + b"
    assert run_tests(code, ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"], LIMITS).fraction == 1.0
    half = run_tests("def add(a, b):\n    return a * b", ["assert add(2, 2) == 4", "assert add(1, 2) == 3"],
                     LIMITS)
    assert half.fraction == 0.5 and not half.passed and half.error.startswith("test 2")


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
        """)
    tests = ["assert run(2) == 4", "assert point() == (1, 2)", "assert counts() == {'a': 1}",
             "assert write_read() == 'ok'", "assert 0 < run(1) <= 2", "assert 3 in [run(1), 3]",
             "assert D(1) == D(1)", "assert Color.RED.value == 1", "assert half() == fractions.Fraction(2, 4)",
             "assert math.isclose(run(1) / 3, 0.6666666, rel_tol=1e-6)", "assert run(1) is not None",
             "assert not run(0)", "assert run(3) in {6, 7}", "assert run(1) != 3"]
    result = run_tests(code, tests, LIMITS)
    assert result.fraction == 1.0, result


def test_values_round_trip():
    weird = "a\"b\\c\u00e9\U0001F600\udc80\x00\n"  # quotes, backslash, non-ASCII, astral, lone surrogate, NUL
    code = (f"def f(): return {weird!a}\ndef g(): return [1.5, -0.0, 2 ** 70, 1j, b'\\x00', None, (1,), {{1: {{2}}}}]\n"
            "import math\ndef big(): return -math.factorial(2000)")  # 5,736 digits: past int's str limit
    tests = [f"assert f() == {weird!a}", "assert len(f()) == 10", "assert f() != 'a'",
             "assert g() == [1.5, 0.0, 2 ** 70, 1j, b'\\x00', None, (1,), {1: {2}}]", "assert g()[1] is not None",
             "assert float('nan') != float('nan')", "import math\nassert big() == -math.factorial(2000)",
             "assert f() == 'x'"]
    result = run_tests(code, tests, LIMITS)
    assert (result.n_passed, result.error) == (7, "test 8: AssertionError: assert f() == 'x'"), result


def test_a_test_with_several_asserts_passes_when_all_do():
    tests = ["assert f(1) == 1\nassert f(2) == 4", "x = 3\nassert f(x) == 9\nassert f(0) == 0"]
    assert run_tests("def f(x): return x * x", tests, LIMITS).fraction == 1.0
    half = run_tests("def f(x): return x if x < 3 else x * x", tests, LIMITS)
    assert (half.n_tests, half.n_passed) == (2, 1) and half.error == "test 1: AssertionError: assert f(2) == 4"


def test_check_function_becomes_one_test_per_assert():
    tests = textwrap.dedent("""
        METADATA = {"author": "x"}
        def check(candidate):
            \"\"\"HumanEval style.\"\"\"
            assert candidate(1) == 2
            assert candidate(-1) == 0, "negative"
            assert abs(candidate(0.5) - 1.5) < 1e-9
        check(inc)
        """)
    assert run_tests("def inc(x):\n    return x + 1", tests, LIMITS).fraction == 1.0
    wrong = run_tests("def inc(x):\n    return 2 if x == 1 else x", tests, LIMITS)
    assert (wrong.n_tests, wrong.n_passed) == (3, 1)
    forged = run_tests("import os\nos.write(1, b'[\"ok\", []]\\n')\nos._exit(0)", tests, LIMITS)
    assert forged.n_passed == 0  # each assert's expected side stays in the parent: no report can forge it
    # anything else stays one opaque test (a loop in check, no call of check)
    loop = "def check(candidate):\n    for i in range(3):\n        assert candidate(i) == i + 1\ncheck(inc)"
    assert sandbox.inline_check(loop) is None and sandbox.inline_check(tests.replace("check(inc)", "")) is None


def test_tests_split():
    assert split_tests("x = f(2)\nassert x == 4\nassert f(0) == 0\ny = 1") == ["x = f(2)\nassert x == 4",
                                                                                "assert f(0) == 0\ny = 1"]


def test_expected_value_stays_in_the_parent():
    p = sandbox_harness.plan("assert f(2) == 4")
    assert p.known == {1: 4} and p.observed() == [0] and not p.needs_reference
    assert p.solution_setup() == "" and [p.sides[i] for i in p.observed()] == ["f(2)"]
    # an expected value computed in setup is evaluated without the code; the code gets only what it needs
    p = sandbox_harness.plan("expected = sorted([9, 7])\nx, y = 2, 3\nrandom.seed(y)\nassert f(x) == expected")
    setup = "expected = sorted([9, 7])\nx, y = (2, 3)\nrandom.seed(y)"  # as ast.unparse writes it
    assert sandbox_harness.reference_job(p) == (setup, ["f(x)", "expected", "expected", "x"])
    seven_nine = ["l", [["i", "7"], ["i", "9"]]]
    sandbox_harness.settle(p, [["x", "NameError: name 'f' is not defined"], ["v", seven_nine], ["v", seven_nine],
                               ["v", ["i", "2"]]])
    assert p.known == {1: [7, 9]} and not p.opaque
    # x arrives as a value; `x, y = (2, 3)` is sent only because random.seed(y) (kept: it assigns nothing) reads y
    assert p.solution_bind() == {"x": ["i", "2"]} and p.solution_setup() == "x, y = (2, 3)\nrandom.seed(y)"
    q = sandbox_harness.settle(sandbox_harness.plan("want, x = [1, 2], [2, 1]\nassert f(x) == want"),
                               [["x", "NameError"], ["v", ["l", [["i", "1"], ["i", "2"]]]],
                               ["v", ["l", [["i", "1"], ["i", "2"]]]], ["v", ["l", [["i", "2"], ["i", "1"]]]]])
    assert q.solution_setup() == "" and q.solution_bind() == {"x": ["l", [["i", "2"], ["i", "1"]]]}  # no `want`
    assert sandbox_harness.verdict(p, [["v", ["l", [["i", "7"], ["i", "9"]]]]]) == (True, "")
    assert sandbox_harness.verdict(p, [["v", ["t", [["i", "7"], ["i", "9"]]]]])[0] is False  # (7, 9) != [7, 9]
    # no side computable without the code: the test runs whole (opaque)
    p = sandbox_harness.settle(sandbox_harness.plan("assert f(2) == f(1) + 1"), [["x", "NameError"]] * 2)
    assert p.opaque and p.solution_setup() == "assert f(2) == f(1) + 1"


def test_parent_refuses_values_built_to_be_slow():
    collide = ["S", [["i", f"{k * (2 ** 61 - 1):x}"] for k in range(1, 2000)]]  # every element hashes to 0
    with pytest.raises(ValueError, match="equal hashes"):
        sandbox_harness.decode(collide)
    with pytest.raises(ValueError, match="too deep"):
        sandbox_harness.decode(["l", [["l", [["l", []]]]]], depth=sandbox_harness.MAX_DEPTH - 1)
    assert sandbox_harness.decode(["S", [["i", f"{k:x}"] for k in range(2000)]]) == set(range(2000))


@pytest.mark.parametrize("data", [b"", b"junk\n", b'["ok", []]', b'["ok", []]\n["ok", []]\n', b'["pass", 1]\n',
                                  b'{"ok": 1}\n', b"[" * 100000 + b"\n"])
def test_only_one_well_formed_report_counts(data):
    assert sandbox_harness.parse_report(data) is None


def test_one_rows_failure_never_ends_the_batch(monkeypatch):
    real, calls = sandbox_isolation.command, []

    def flaky(*args):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("simulated: the sandbox could not start")
        return real(*args)

    monkeypatch.setattr(sandbox_isolation, "command", flaky)
    ok = "def f(): return 1"
    results = run_many([(ok, ["assert f() == 1"]), (ok, ["assert f() == 1"]), ("def f(:", ["assert f() == 1"]),
                        (ok, ["assert f() == 1"])], LIMITS, workers=1)
    assert [r.fraction for r in results] == [1.0, 0.0, 0.0, 1.0]
    assert "simulated" in results[1].error and results[2].error.startswith("code: SyntaxError")


def test_bad_isolation_mode(monkeypatch):
    monkeypatch.setenv("RLFT_CODE_ISOLATION", "maybe")
    with pytest.raises(UserError, match="RLFT_CODE_ISOLATION"):
        run_tests("x = 1", [], LIMITS)


def _verify(tmp_path, env):
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"tests": "assert add(1, 2) == 3", "completion": "def add(a, b): return a + b"}) + "\n")
    cmd = [sys.executable, "-m", "rlft", "verify", "code", "--data", str(data), "--json"]
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


def test_opt_out_keeps_limits_and_cleans_up(monkeypatch):
    monkeypatch.setenv("RLFT_CODE_ISOLATION", "none")
    deep = "import os\nfor _ in range(1500):\n    os.mkdir('d')\n    os.chdir('d')\ndef f(): return 1"
    before = {p for p in os.listdir("/tmp") if p.startswith("rlft-code-")}
    results = run_many([("while True: pass", ["assert f() == 1"]), (deep, ["assert f() == 1"])], LIMITS)
    assert results[0].fraction == 0.0 and results[0].protections == ("rlimits",)
    assert results[1].fraction == 1.0  # the 1,500-deep chain is scored, then removed without recursion
    assert {p for p in os.listdir("/tmp") if p.startswith("rlft-code-")} == before
    assert sandbox.isolation.mode() == "none"
