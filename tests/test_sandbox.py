"""The sandbox that runs model-written code: hostile code scores 0 in bounded time, the host is unharmed.

The hostile jobs run once, together, on a thread pool (`run_many`), as the code verifier runs them;
each test then checks one job's result and the host afterwards.
"""

from __future__ import annotations

import os
import secrets
import socket
import textwrap
import threading
import time

import pytest

from rlft.verifiers.sandbox import Limits, run_many, run_tests, split_tests, strict_source

LIMITS = Limits(cpu_seconds=1, wall_seconds=3.0)
BOUND_S = LIMITS.wall_seconds + 2.0  # wall timeout + interpreter start + kill and cleanup
SECRET = "hunter2-" + secrets.token_hex(4)
ESCAPE = f"/tmp/rlft_sandbox_escape_{secrets.token_hex(6)}"


@pytest.fixture(scope="module")
def listener():
    """A TCP server on 127.0.0.1 that the sandboxed code tries to reach."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.setblocking(False)
    yield server
    server.close()


def _hostile(port: int) -> dict[str, tuple[str, list[str]]]:
    """name -> (code, tests): each test passes only if the attack worked."""
    jobs = {
        "infinite_loop": ("""
            def f():
                while True:
                    pass""", ["assert f() == 1"]),
        "sleep_forever": ("""
            import time
            def f():
                time.sleep(3600)
                return 1""", ["assert f() == 1"]),
        "alloc_10gb": ("""
            def f():
                return len(bytearray(10 * 1024 ** 3))""", ["assert f() == 10 * 1024 ** 3"]),
        "alloc_list": ("""
            x = [0] * (10 ** 10)
            def f():
                return 1""", ["assert f() == 1"]),
        "fork_bomb": ("""
            import os
            def f():
                while True:
                    os.fork()""", ["assert f() == 1"]),
        "fork_subprocess": ("""
            import subprocess
            def f():
                return subprocess.run(["sh", "-c", "echo hi"], capture_output=True).stdout""",
                            ["assert f() == b'hi\\n'"]),
        "fork_multiprocessing": ("""
            import multiprocessing
            def f():
                p = multiprocessing.Process(target=print)
                p.start()
                p.join()
                return p.exitcode""", ["assert f() == 0"]),
        "socket_localhost": (f"""
            import socket
            def f():
                socket.create_connection(("127.0.0.1", {port}), timeout=1).close()
                return 1""", ["assert f() == 1"]),
        "write_outside": (f"""
            def f():
                with open({ESCAPE!r}, "w") as out:
                    out.write("escaped")
                return 1""", ["assert f() == 1"]),
        "write_outside_os": (f"""
            import os
            def f():
                os.close(os.open({ESCAPE!r}, os.O_CREAT | os.O_WRONLY))
                return 1""", ["assert f() == 1"]),
        "read_env_secret": ("""
            import os
            def f():
                return os.environ.get("RLFT_TEST_SECRET")""", [f"assert f() == {SECRET!r}"]),
        "read_parent_environ": (f"""
            def f():
                return open("/proc/{os.getpid()}/environ", "rb").read()""",
                                [f"assert {SECRET.encode()!r} in f()"]),
        "exit_zero_early": ("""
            import os
            os._exit(0)""", ["assert False"]),
        "system_exit": ("raise SystemExit(0)", ["assert False"]),
        "always_equal": ("""
            class A:
                def __eq__(self, other):
                    return True
                def __ne__(self, other):
                    return False
                __hash__ = object.__hash__
            def f():
                return A()""", ["assert f() == 3", "assert f() == [1, 2]", "assert not f() != 3"]),
        "always_equal_int": ("""
            class I(int):
                def __eq__(self, other):
                    return True
                __hash__ = int.__hash__
            def f():
                return I(0)""", ["assert f() == 3"]),
        "steal_frames": ("""
            import sys
            def f():
                return sys._getframe(1).f_globals""", ["assert f()"]),
        "signal_frames": ("""
            import signal
            def f():
                signal.signal(signal.SIGALRM, lambda signum, frame: None)
                return 1""", ["assert f() == 1"]),
        "ctypes": ("""
            import ctypes
            def f():
                return 1""", ["assert f() == 1"]),
        "kill_parent": ("""
            import os, signal
            def f():
                os.kill(os.getppid(), signal.SIGTERM)
                return 1""", ["assert f() == 1"]),
    }
    return {name: (textwrap.dedent(code).strip(), tests) for name, (code, tests) in jobs.items()}


@pytest.fixture(scope="module")
def hostile(listener):
    os.environ["RLFT_TEST_SECRET"] = SECRET
    try:
        jobs = _hostile(listener.getsockname()[1])
        started = time.monotonic()
        results = run_many(list(jobs.values()), LIMITS, workers=4)
        elapsed = time.monotonic() - started
    finally:
        del os.environ["RLFT_TEST_SECRET"]
    return dict(zip(jobs, results)), elapsed


@pytest.mark.parametrize("name", list(_hostile(0)))
def test_hostile_code_scores_zero(hostile, name):
    result = hostile[0][name]
    assert result.fraction == 0.0, result
    assert not result.passed
    assert result.error
    assert result.elapsed < BOUND_S


def test_hostile_runs_are_bounded_and_host_unharmed(hostile, listener):
    results, elapsed = hostile
    assert elapsed < 4 * BOUND_S  # 20 jobs on 4 workers; the slow ones: the loop (1 s CPU), the sleep (3 s)
    assert results["infinite_loop"].error.startswith("CPU time limit")
    assert results["sleep_forever"].timed_out
    assert "MemoryError" in results["alloc_10gb"].error
    assert "not allowed" in results["fork_bomb"].error
    assert not os.path.exists(ESCAPE)
    with pytest.raises(BlockingIOError):
        listener.accept()  # nobody connected
    assert threading.main_thread().is_alive()  # and this process was not signalled


def test_protections_reported():
    result = run_tests("x = 1", [], LIMITS)
    assert result.passed and "rlimits" in result.protections
    if os.geteuid() == 0:
        assert "netns" in result.protections


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
        """)
    tests = ["assert run(2) == 4", "assert point() == (1, 2)", "assert counts() == {'a': 1}",
             "assert write_read() == 'ok'", "assert 0 < run(1) <= 2", "assert 3 in [run(1), 3]",
             "assert D(1) == D(1)", "assert Color.RED.value == 1"]
    result = run_tests(code, tests, LIMITS)
    assert result.fraction == 1.0, result


def test_tests_split_and_comparisons_rewritten():
    assert split_tests("x = f(2)\nassert x == 4\nassert f(0) == 0\ny = 1") == ["x = f(2)\nassert x == 4",
                                                                                "assert f(0) == 0\ny = 1"]
    assert strict_source("assert f(1) == 2") == "assert __rlft_cmp__(('==',), (f(1), 2))"
    assert strict_source("assert 0 < f(1) <= 3") == "assert __rlft_cmp__(('<', '<='), (0, f(1), 3))"


def test_drop_to_nobody_when_forced():
    if os.geteuid() != 0:
        pytest.skip("only root can switch to nobody")
    result = run_tests("import os\ndef uid(): return os.getuid()", ["assert uid() != 0"],
                       Limits(cpu_seconds=1, wall_seconds=3.0, drop_privileges=True))
    assert result.passed and "nobody" in result.protections, result
