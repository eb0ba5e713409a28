"""The code verifier's third round (issue 46): each finding of the round as a row of its exact shape.

  misread       a test read other than Python reads it paid wrong code: each row's code is wrong, and Python
                fails it (or raises), so it must score 0 (or be refused up front)
  leak          two cases of one row passing each other their argument (an inverse pair: only a `rev` that
                hears the other case's argument passes both) through a channel the sandboxes share
  limit         memory outside the limit (UDP socket buffers), honest threads stopped by the limit
  honest        code Python passes that round 2 scored 0: each must score 1.0
Plus two verifier processes at once (their sandbox uids never overlap, a fork bomb in one does not fail
threads in the other), and cases of one row never running at the same time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlft.verifiers.sandbox import Limits, cgroup, convert, run_many, uids, values

pytestmark = pytest.mark.skipif(os.environ.get("RLFT_CODE_ISOLATION") == "none",
                                reason="RLFT_CODE_ISOLATION=none: isolation explicitly turned off")
LIMITS = Limits(cpu_seconds=2, wall_seconds=5.0)
ROOT = Path(__file__).resolve().parents[1]

MISREAD = {  # name -> (wrong code, tests): Python fails every one of them
    "abs_strict": ("def f(x): return 1.5", ["assert abs(f(1) - 1.0) < 0.5"]),
    "abs_strict_reversed": ("def f(x): return 1.5", ["assert abs(1.0 - f(1)) < 0.5"]),
    "abs_inf": ("def f(x): return float('inf')", ["assert abs(f(1) - float('inf')) < 1"]),
    "abs_nan": ("def f(x): return float('nan')", ["assert abs(f(1) - 1.0) < 1e-6"]),
    "isclose_complex": ("def f(x): return 2 + 0j", ["import math\nassert math.isclose(f(1), 2.0)"]),
    "approx_formula": ("def f(): return 1.0000010000005", ["import pytest\nassert f() == pytest.approx(1.0)"]),
    "approx_bool": ("def f(): return 1", ["import pytest\nassert f() == pytest.approx(True)"]),
    "approx_abs_only": ("def f(): return 1.0000002", ["import pytest\nassert f() == pytest.approx(1.0, abs=1e-7)"]),
    "two_checks": ("def f(x): return 2\ndef g(x): return 2",
                   ["def check(candidate):\n    assert candidate(1) == 1\ncheck(f)\n"
                    "def check2(candidate):\n    assert candidate(1) == 1\ncheck2(g)"]),
    "check_before_def": ("def f(x): return 1", ["check(f)\ndef check(candidate):\n    assert candidate(1) == 1"]),
    "numpy_isclose_asymmetric": ("def f(): return 0.0", ["import numpy as np\nassert np.isclose(f(), 1e-7, atol=0.0)"]),
    "approx_tuple_one_off": ("def f(): return (1.0, 2.1)", ["import pytest\nassert f() == pytest.approx((1.0, 2.0))"]),
    "counter_not_dict": ("from collections import Counter\ndef f(): return Counter({'a': 1, 'b': 0})",
                         ["assert f() == {'a': 1}"]),
    "main_block_only": ("if __name__ == '__main__':\n    def f(x): return 1", ["assert f(1) == 1"]),
    "falsy_object": ("class T:\n    def __bool__(s): return False\ndef f(x): return T()", ["assert f(1)"]),
    "exit_at_import": ("def f(x): return 1\nexit()", ["assert f(1) == 1"]),
    "lcb_token_differs": ("print('1  2 4')", [{"input": "", "output": "1 2 3\n", "testtype": "stdin"}]),
}
# Refused up front (Python would raise at the call: no code can pass)
MISREAD_REFUSED = {"check_before_def"}


def _python_score(code: str, tests) -> float:
    """What plain Python gives a row: exec code + test in one fresh namespace per test (HumanEval's way)."""
    c = convert.convert(tests)
    passed = 0
    items = tests if isinstance(tests, list) else [tests]
    for t in items:
        if not isinstance(t, str):
            return -1.0  # stdin rows: judged by values.same_output, not here
        try:
            subprocess.run([sys.executable, "-c", code + "\n" + t], check=True, capture_output=True, timeout=20)
            passed += 1
        except subprocess.CalledProcessError:
            pass
    return passed / max(1, len(c.tests) + len(c.refusals) if isinstance(tests, str) else len(items))


@pytest.fixture(scope="module")
def misread():
    return dict(zip(MISREAD, run_many(list(MISREAD.values()), LIMITS, workers=4)))


@pytest.mark.parametrize("name", list(MISREAD))
def test_misread_shapes_no_longer_pay_wrong_code(misread, name):
    result = misread[name]
    assert result.error.startswith("refused: ") == (name in MISREAD_REFUSED), result
    code, tests = MISREAD[name]
    python = _python_score(code, tests)
    assert result.fraction <= max(python, 0.0), (result, python)
    if name != "two_checks":
        assert result.fraction == 0.0, result


def test_two_checks_each_bind_their_own_candidate():
    (t1, t2) = convert.convert(MISREAD["two_checks"][1][0].replace("check2(g)", "check2(g)")).tests
    assert (t1.cases[0].fn, t2.cases[0].fn) == ("f", "g")
    ok = run_many([("def f(x): return 1\ndef g(x): return 2",
                    ["def check(candidate):\n    assert candidate(1) == 1\ncheck(f)\n"
                     "def check2(candidate):\n    assert candidate(1) == 2\ncheck2(g)"])], LIMITS)[0]
    assert ok.fraction == 1.0, ok


def test_pytest_approx_is_mirrored_exactly():
    """values.approx_eq against pytest.approx itself on values where the tolerance rules differ."""
    pytest_approx = pytest.approx
    from decimal import Decimal
    from fractions import Fraction
    cases = [(1.0000010000005, 1.0, {}), (1.0000009, 1.0, {}), (1e-13, 0.0, {}), (1e-11, 0.0, {}),
             (1.05, 1.0, {"abs": 0.1}), (1.05, 1.0, {"rel": 0.01}), (1.05, 1.0, {"rel": 0.01, "abs": 0.1}),
             (float("inf"), float("inf"), {}), (float("inf"), 1e308, {}), (float("nan"), float("nan"), {}),
             (float("nan"), float("nan"), {"nan_ok": True}), (1, True, {}), (True, True, {}), (2 + 1e-9j, 2, {}),
             ("a", "a", {}), ("a", "b", {}), ([1.0, 2.0000001], [1.0, 2.0], {}), ((1.0, 2.0), [1.0, 2.0], {}),
             ([1.0], [1.0, 2.0], {}), ({"a": 1.0000001}, {"a": 1.0}, {}), ({"a": 1.0}, {"b": 1.0}, {}),
             (Fraction(1, 3), 0.3333333, {}), (Decimal("1.0000001"), Decimal("1"), {}), (None, None, {}),
             (0.1 + 0.2, 0.3, {"abs": 0.0}), (3, 3.0000000001, {})]
    for actual, expected, kw in cases:
        want = actual == pytest_approx(expected, **kw)
        got = values.approx_eq(actual, expected, kw.get("rel"), kw.get("abs"), kw.get("nan_ok", False))
        assert got == want, (actual, expected, kw)


def test_numpy_close_is_mirrored_exactly():
    np = pytest.importorskip("numpy")
    cases = [(1.0, 1.00001), (0.0, 1e-7), (1e-7, 0.0), (float("inf"), float("inf")), (float("nan"), float("nan")),
             ([1.0, 2.0], [1.0, 2.00001]), ([1.0, 2.0], 1.0), (1 + 1j, 1 + 1.000001j), (True, 1)]
    for a, b in cases:
        assert values.np_close(a, b, whole=True) == bool(np.allclose(a, b)), (a, b)
        if np.size(a) == 1 and np.size(b) == 1:
            assert values.np_close(a, b) == bool(np.isclose(a, b)), (a, b)
    with pytest.raises(ValueError):
        values.np_close([1.0, 2.0], [1.0, 2.0])  # bool() of a two-element array raises in numpy


# ----------------------------------------------------------------------------- leaks between cases


RENDEZVOUS = {  # channel -> code whose `rev` returns the other case's argument when the channel carries it
    "abstract_socket": """
        import socket, time
        def rev(s):
            me = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                me.bind('\\0rlft-rv-' + s)
            except OSError:
                return s
            deadline = time.time() + 1.5
            while time.time() < deadline:
                for other in ('abc', 'cba'):
                    if other != s:
                        try:
                            me.sendto(s.encode(), '\\0rlft-rv-' + other)
                        except OSError:
                            pass
                me.settimeout(0.05)
                try:
                    return me.recv(100).decode()
                except OSError:
                    pass
            return s
        """,
    "dev_shm": """
        import os, time
        def rev(s):
            open('/dev/shm/rv-' + s, 'w').close()
            deadline = time.time() + 1.5
            while time.time() < deadline:
                others = [n[3:] for n in os.listdir('/dev/shm') if n.startswith('rv-') and n[3:] != s]
                if others:
                    return others[0]
                time.sleep(0.02)
            return s
        """,
    "file_locks": """
        import fcntl, os, struct, time
        def rev(s):
            f = open(os.__file__)
            try:
                for i, c in enumerate(s):
                    fcntl.fcntl(f, fcntl.F_SETLK, struct.pack('hhqqi', fcntl.F_RDLCK, 0, 4096 + i * 256 + ord(c), 1, 0))
            except OSError:
                return s
            deadline = time.time() + 1.5
            while time.time() < deadline:
                got = ''
                for i in range(len(s)):
                    q = struct.pack('hhqqi', fcntl.F_WRLCK, 0, 4096 + i * 256, 256, 0)
                    r = struct.unpack('hhqqi', fcntl.fcntl(f, fcntl.F_GETLK, q))
                    if r[0] == fcntl.F_UNLCK:
                        break
                    got += chr(r[2] - 4096 - i * 256)
                if len(got) == len(s) and got != s:
                    return got
                time.sleep(0.02)
            return s
        """,
    "flock_bits": """
        import fcntl, os, time
        def rev(s):
            bits = [os.open(p, os.O_RDONLY) for p in (os.__file__, fcntl.__spec__.origin or os.__file__)]
            try:
                fcntl.flock(bits[0], fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return s
            return s[::-1]  # would only reach here if flock worked (then it could signal)
        """,
}


@pytest.mark.parametrize("channel", list(RENDEZVOUS))
def test_cases_of_one_row_cannot_pass_each_other_their_argument(channel):
    code = textwrap.dedent(RENDEZVOUS[channel])
    tests = ["assert rev('abc') == 'cba'", "assert rev('cba') == 'abc'"]
    results = run_many([(code, tests)] * 2, LIMITS, workers=4)  # two completions of one row, too
    assert [r.fraction for r in results] == [0.0, 0.0], results


def test_cases_of_one_row_never_run_at_the_same_time():
    """The defense for what no filter can close, timing through a file all sandboxes read (the stdlib): the
    cases of one row (and the completions of one GRPO group) never overlap in time. Four cases of one row on four
    workers take four times one case; four rows run side by side."""
    code = "import time\ndef f(x):\n    time.sleep(0.6)\n    return x"
    one_row = [(code, [f"assert f({i}) == {i}" for i in range(4)])]
    four_rows = [(code, [f"assert f({i}) == {i}"]) for i in range(4)]
    started = time.monotonic()
    assert run_many(one_row, LIMITS, workers=4)[0].fraction == 1.0
    serial = time.monotonic() - started
    started = time.monotonic()
    assert [r.fraction for r in run_many(four_rows, LIMITS, workers=4)] == [1.0] * 4
    parallel = time.monotonic() - started
    assert serial >= 4 * 0.6 and parallel < serial, (serial, parallel)


# ----------------------------------------------------------------------------- limits


def test_udp_socket_fill_is_refused():
    """Round 3 held ~600 MB of UDP socket buffers in one sandbox (cgroup v1 does not charge socket memory):
    only unix-domain sockets exist inside now."""
    code = textwrap.dedent("""
        import socket
        def f():
            a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            a.bind(('127.0.0.1', 0))
            b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sent = 0
            while sent < 600 * 1024 * 1024:
                sent += b.sendto(b'x' * 60000, a.getsockname())
            return sent // (1024 * 1024)
        """)
    result = run_many([(code, ["assert f() == 600"])], LIMITS)[0]
    assert result.fraction == 0.0 and "Address family not supported" in result.error, result


THREADS = textwrap.dedent("""
    import threading
    def f(n):
        out = []
        lock = threading.Lock()
        barrier = threading.Barrier(n)
        def work(i):
            data = [i] * 10000
            chunks = [bytearray(1000) for _ in range(200)]  # malloc in every thread: an arena each
            barrier.wait()  # all n alive at once
            with lock:
                out.append(sum(data) + len(chunks) - 200)
        ts = [threading.Thread(target=work, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return sorted(out)
    """)


@pytest.mark.parametrize("where", ["cgroup", "single process"])
def test_sixteen_honest_threads_are_not_stopped_by_the_memory_limit(where, monkeypatch):
    if where == "single process":  # no cgroup: RLIMIT_AS is the sandbox's memory, MALLOC_ARENA_MAX keeps it enough
        monkeypatch.setattr(cgroup, "slot_procs", lambda *a: [])
    elif not cgroup.available():
        pytest.skip("no writable cgroup here")
    want = sorted(i * 10000 for i in range(16))
    result = run_many([(THREADS, [f"assert f(16) == {want}"])], Limits())[0]  # the default 512 MB
    assert result.fraction == 1.0, result


@pytest.mark.skipif(cgroup.available() != "v2", reason="this machine has no cgroup v2 with memory and pids "
                    "delegated (cgroup v1 here): the v2 path is untested on it")
def test_cgroup_v2_caps_memory_and_pids():
    from rlft.verifiers.sandbox import processes
    result = run_many([("def f(): return len(bytearray(400 * 1024 * 1024))", ["assert f() == 419430400"])],
                      Limits(memory_mb=256, wall_seconds=8.0))[0]
    assert result.fraction == 0.0 and "cgroup-v2" in result.protections, result
    procs = cgroup.slot_procs(processes.current_slot(), 256, Limits().nproc)
    d = os.path.dirname(procs[0])
    assert open(os.path.join(d, "memory.max")).read().strip() == str(256 * 1024 * 1024)
    assert open(os.path.join(d, "pids.max")).read().strip() == str(Limits().nproc)


# ----------------------------------------------------------------------------- two verifier processes


_WORKER = textwrap.dedent("""
    import json, sys, time
    from rlft.verifiers.sandbox import Limits, run_many, uids
    kind = sys.argv[1]
    bomb = ("import os, time\\ndef f():\\n    for _ in range(40):\\n        try:\\n"
            "            if os.fork() == 0:\\n                time.sleep(4)\\n                os._exit(0)\\n"
            "        except OSError:\\n            pass\\n"
            "    time.sleep(4)\\n    return 0", ["assert f() == 1"])
    threads = (sys.argv[2], ["import time\\nassert f(16) == " + sys.argv[3]])
    jobs = [bomb] * 4 if kind == "bomb" else [threads] * 8
    time.sleep(0.5 if kind == "threads" else 0)
    out = run_many(jobs, Limits(cpu_seconds=2, wall_seconds=8.0), workers=4)
    print(json.dumps({"uids": uids.held(), "scores": [r.fraction for r in out]}))
    """)


@pytest.mark.skipif(os.geteuid() != 0, reason="uids are per process only as root (else a user namespace)")
def test_two_verifier_processes_never_share_a_sandbox_uid():
    want = json.dumps(sorted(i * 10000 for i in range(16)))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, kind, THREADS, want], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for kind in ("bomb", "threads")]
    outs = [json.loads(p.communicate(timeout=180)[0].strip().splitlines()[-1]) for p in procs]
    bomb, threads = outs
    assert bomb["uids"] and threads["uids"] and not set(bomb["uids"]) & set(threads["uids"]), outs
    assert threads["scores"] == [1.0] * 8 and bomb["scores"] == [0.0] * 4, outs


def test_uid_locks_are_exclusive_between_processes():
    if os.geteuid() != 0:
        pytest.skip("uids are per process only as root")
    mine = uids.uid_for(0)
    probe = ("import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDWR)\n"
             "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    print('free')\n"
             "except OSError:\n    print('held')")
    out = subprocess.run([sys.executable, "-c", probe, os.path.join(uids.lock_dir(), str(mine))],
                         capture_output=True, text=True, timeout=30).stdout.strip()
    assert out == "held"


# ----------------------------------------------------------------------------- honest code


HONEST = {  # code Python passes (the benchmarks' harnesses exec it in a fresh namespace): each scores 1.0
    "counter_vs_dict": ("from collections import Counter\ndef f(s): return Counter(s)",
                        ["assert f('aab') == {'a': 2, 'b': 1}"]),
    "ordereddict_vs_dict": ("from collections import OrderedDict\ndef f(): return OrderedDict([('b', 2), ('a', 1)])",
                            ["assert f() == {'a': 1, 'b': 2}"]),
    "fraction_vs_float": ("from fractions import Fraction\ndef f(): return Fraction(1, 2)", ["assert f() == 0.5"]),
    "fraction_vs_int": ("from fractions import Fraction\ndef f(): return Fraction(6, 3)", ["assert f() == 2"]),
    "decimal_vs_float": ("from decimal import Decimal\ndef f(): return Decimal('0.25')", ["assert f() == 0.25"]),
    "memoryview_vs_bytes": ("def f(): return memoryview(b'ab')", ["assert f() == b'ab'"]),
    "match_truth": ("import re\ndef f(s): return re.match('a+', s)", ["assert f('aa')", "assert not f('b')"]),
    "object_is_not_none": ("class P:\n    pass\ndef f(): return P()", ["assert f() is not None"]),
    "main_self_test": ("def f(x): return x + 1\nif __name__ == '__main__':\n    assert f(1) == 99\n    print('ran')",
                       ["assert f(1) == 2"]),
    "exit_in_program": ("print(int(input()) * 2)\nexit()", {"inputs": ["2\n"], "outputs": ["4\n"]}),
    "quit_in_program": ("import sys\nprint('ok')\nquit(0)", {"inputs": [""], "outputs": ["ok"]}),
    "approx_tuple": ("def f(): return (0.1 + 0.2, 1.0)", ["import pytest\nassert f() == pytest.approx((0.3, 1.0))"]),
    "approx_list_vs_tuple": ("def f(): return [0.1 + 0.2]", ["import pytest\nassert f() == pytest.approx((0.3,))"]),
    "approx_dict": ("def f(): return {'a': 0.1 + 0.2}", ["import pytest\nassert f() == pytest.approx({'a': 0.3})"]),
    "numpy_isclose": ("def f(): return 1.000001", ["import numpy as np\nassert np.isclose(f(), 1.0)"]),
    "numpy_allclose": ("def f(): return [1.0, 2.000001]", ["import numpy\nassert numpy.allclose(f(), [1.0, 2.0])"]),
    "lcb_leading_whitespace": ("print('  3 ')\nprint(' 4.0')",
                               [{"input": "", "output": "3\n4\n", "testtype": "stdin"}]),
    "lcb_option_on_io_columns": ("print(' 5')", {"inputs": [""], "outputs": ["5"], "judge": "livecodebench"}),
    "sixteen_threads": (THREADS, [f"assert f(16) == {sorted(i * 10000 for i in range(16))}"]),
    "constant_arithmetic": ("def f(x): return x / 3.0", ["assert abs(f(2.0) - 2.0 / 3.0) < 1e-6",
                                                         "assert f(3 * 19) == 19.0"]),
    "mutation_in_judged_check": ("def f(xs):\n    xs.sort()",
                                 ["def check(candidate):\n    xs = [3, 1, 2]\n    candidate(xs)\n"
                                  "    assert xs == [1, 2, 3]\ncheck(f)"]),
    "exception_type_in_judge": ("def f(x):\n    return 1 // x",
                                ["def check(candidate):\n    for x in (1, 2):\n        assert candidate(x) in (0, 1)\n"
                                 "check(f)"]),
}


@pytest.fixture(scope="module")
def honest():
    return dict(zip(HONEST, run_many(list(HONEST.values()), Limits(), workers=4)))


@pytest.mark.parametrize("name", list(HONEST))
def test_honest_code_scores_one(honest, name):
    assert honest[name].fraction == 1.0, honest[name]


def test_lcb_rule_is_livecodebench_grade_stdio():
    same = values.same_output
    assert same(b"  1 2\n3\n", "1 2\n3", "livecodebench") and not same(b"  1 2\n3\n", "1 2\n3")
    assert same(b"1.50 2\n", "1.5 2.0\n", "livecodebench")  # equal as Decimal tokens
    assert not same(b"1 2\n\n3\n", "1 2\n3\n", "livecodebench")  # an inner blank line is a line
    assert not same(b"nan\n", "NaN\n", "livecodebench") and not same(b"3\n", "3\n4\n", "livecodebench")
    assert same(b"x\n", "x\n", "exact") and not same(b"x \n", "x\n", "exact")


JUDGED = "def check(candidate):\n    import random\n    for _ in range(20):\n        x = random.randint(0, 99)\n" \
         "        assert candidate(x) == x * 3\ncheck(f)"
FORGE = ("import os\ndef forge(value):\n    report = repr(value).replace(\"'\", '\"').replace('True', 'true')\n"
         "    os.write(3, report.encode() + b'\\n')\n    os._exit(0)\n")
JUDGE_ATTACKS = {  # a judged check (loop, random inputs): the code never sees the test, its forgeries earn nothing
    "forge_ok": (FORGE + "def f(x): forge(['ok', ['i', '0']])", [JUDGED]),
    "forge_echo": (FORGE + "def f(x): forge(['echo', [['i', '0'], ['n'], ['n']]])", [JUDGED]),
    "exit_zero": ("import os\ndef f(x): os._exit(0)", [JUDGED]),
    "sleep": ("import time\ndef f(x): time.sleep(60)", [JUDGED]),
    "raise_assertion_ok": ("def f(x): raise SystemExit(0)", [JUDGED]),
    "read_the_test": ("import gc\ndef f(x):\n    return [o for o in gc.get_objects() if isinstance(o, str) and "
                      "'x * 3' in o][:1]", [JUDGED]),
    "mutate_to_pass": ("def f(x): return -1", ["def check(candidate):\n    xs = [1, 2]\n    r = candidate(xs)\n"
                                              "    assert r == sum(xs) * 2\ncheck(f)"]),
}


def test_judged_checks_pay_nothing_for_forgeries_and_end_at_the_first_failure():
    started = time.monotonic()
    results = run_many(list(JUDGE_ATTACKS.values()), LIMITS, workers=4)
    assert [r.fraction for r in results] == [0.0] * len(JUDGE_ATTACKS), results
    assert all(r.error and not r.error.startswith("refused") for r in results), results
    assert time.monotonic() - started < 60  # `sleep` costs one call's timeout, not twenty
    honest = run_many([("def f(x): return x * 3", [JUDGED])], LIMITS)[0]
    assert honest.fraction == 1.0, honest
