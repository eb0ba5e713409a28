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

from rlft.verifiers.sandbox import Limits, convert, isolation, run_many

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
    forge = ("import os\ndef forge(value):\n    report = repr(['ok', value]).replace(\"'\", '\"')\n"
             "    report = report.replace('True', 'true')\n    os.write(3, report.encode() + b'\\n')\n"
             "    os._exit(0)\n")
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
        "spwd": ("import spwd\ndef f(): return spwd.getspnam('root').sp_pwdp", ["assert f() != ''"]),
        "pwd_root": ("import pwd\ndef f(): return pwd.getpwnam('root').pw_dir", ["assert f() == '/root'"]),
        "list_root_home": ("import os\ndef f(): return len(os.listdir('/root'))", ["assert f() > 1"]),
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
                          f"    return open({VICTIM!r}).read()", ["assert 'hunter2' in f()"]),
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
        # forging the report on the private result fd (3) with a value that fits the comparison, not the task
        "forge_isclose": (forge + "def f(x): forge(['b', True])", ["import math\nassert math.isclose(f(1), 3.5)"]),
        "forge_isclose_no_import": (forge + "def f(x): forge(['b', True])", ["assert math.isclose(f(1), 3.5)"]),
        "forge_abs_tolerance": (forge + "def f(x): forge(['f', '0.0'])", ["assert abs(f(1) - 3.5) < 1e-6"]),
        "forge_abs_tolerance_setup": (forge + "def f(x): forge(['f', '0.0'])",
                                      ["want = 3.5\nassert abs(f(1) - want) <= 1e-6"]),
        "forge_report_bool": (forge + "def f(x): forge(['b', True])", ["assert f(1) == 3.5", "assert f(2) == 'x'"]),
        "forge_report_malformed": (forge + "def f(x): forge(['v', ['i', '37']])", ["assert f(10) == 55"]),
        "forge_or_chain": (forge + "def f(x): forge([['v', ['b', True]]])", ["assert f(1) == 3 or f(1) == 4"]),
        "forge_method_call": (forge + "def f(x): forge([['v', ['b', True]]])", ["assert f(1).startswith('xyz')"]),
        "forge_no_expected_side": (forge + "def f(x): forge([])", ["assert f(2) == f(1) + 1"]),
        "forge_expected_in_setup": (forge + "def f(x): forge([])",
                                    ["want = 55\nresult = f(10)\nassert result == want"]),
        # forging tests of shapes that used to run whole in the code's process (opaque)
        "forge_expected_not_plain": (forge + "def f(x): forge([])",
                                     ["from fractions import Fraction\nassert f(1) == Fraction(1, 3)",
                                      "assert type(f(1)) == int", "assert f(1) == 10 ** 10 ** 8"]),
        "forge_trailing_line": (forge + "def f(x): forge([])", ["assert f(10) == 55\nprint('done')"]),
        "forge_expected_exception": (forge + "def f(x): forge([])",
                                     ["try:\n    f(-1)\nexcept ValueError:\n    pass\nelse:\n    assert False",
                                      "try:\n    f(-1)\n    raise AssertionError('no')\nexcept ValueError:\n    pass",
                                      "import pytest\nwith pytest.raises(ValueError):\n    f(-1)"]),
        "forge_loop": (forge + "def f(x): forge([])",
                       ["for a, b in [(1, 2), (3, 4)]:\n    assert f(a) == b",
                        "def check(candidate):\n    import math\n    for i in range(3):\n"
                        "        assert candidate(i) == i + 7\ncheck(f)"]),
        "forge_loop_over_name": (forge + "def f(x): forge([])",
                                 ["cases = [(1, 2), (3, 4)]\nfor a, b in cases:\n    assert f(a) == b",
                                  "xs = [1, 2]\nassert all(f(i) == i * 3 for i in xs)"]),
        "expected_in_tuple_setup": ("import sys\ndef f(x):\n    consts = sys._getframe(1).f_code.co_consts\n"
                                    "    return [c for c in consts if type(c) is int and c != x][-1]",
                                    ["r, want = f(2), 44\nassert r == want"]),
        "expected_in_input_record": ("import sys\ndef f(x):\n    seen = list(sys._getframe(1).f_globals.values())\n"
                                     "    for o in seen:\n        if isinstance(o, dict) and o.get('in') == x:\n"
                                     "            return o.get('out')\n    return -1",
                                     ["case = {'in': 5, 'out': 11}\nassert f(case['in']) == case['out']",
                                      "cases = [{'in': 1, 'out': 3}]\nfor c in cases:\n"
                                      "    assert f(c['in']) == c['out']"]),
        "forge_all_generator": (forge + "def f(x): forge([['v', ['b', True]]])",
                                ["assert all(f(i) == i * 2 for i in range(3))"]),
        "expected_via_print": ("import builtins\nseen = []\nbuiltins.print = lambda *a, **k: seen.extend(a)\n"
                               "def f(n): return seen[-1] if seen else -1",
                               ["expected = 55\nprint(expected)\nassert f(10) == expected"]),
        "hash_collisions": ("def f(n): return {k * (2 ** 61 - 1) for k in range(1, 3000)}", ["assert f(1) == {1}"]),
        "always_equal": ("class A:\n    def __eq__(s, o): return True\n    def __ne__(s, o): return False\n"
                         "    __hash__ = object.__hash__\ndef f(n): return A()", ["assert f(10) == 55"]),
        "always_equal_negated": ("class A:\n    def __eq__(s, o): return True\n    def __ne__(s, o): return False\n"
                                 "    __hash__ = object.__hash__\ndef f(n): return A()", ["assert not f(1) != 1"]),
        # verdicts the old slicer got wrong (issue 21): each must fail on a wrong answer
        "is_as_equal": ("def f(x): return 1", ["assert f(1) is True"]),
        "ordered_dict_order": ("from collections import OrderedDict\ndef f(): return OrderedDict([('a', 1), ('b', 2)])",
                               ["import collections\nassert f() == collections.OrderedDict([('b', 2), ('a', 1)])"]),
        "counter_is_not_dict": ("from collections import Counter\ndef f(): return Counter({'a': 1, 'b': 0})",
                                ["assert f() == {'a': 1}"]),
        "decimal_cut": ("from decimal import Decimal\ndef f(): return Decimal('0.' + '3' * 1200)",
                        ["from decimal import Decimal\nassert f() == Decimal('0." + "3" * 990 + "')"]),
        "lone_surrogates": ("def f(): return '\\ud83d\\ude00'", ["assert f() == '\\U0001F600'"]),
        "mutates_input": ("def f(xs):\n    xs.clear()\n    return None", ["xs = [1, 2]\nf(xs)\nassert xs == [1, 2]"]),
        "uncalled_test_function": ("def f(x): return 0", ["def test_f():\n    assert f(1) == 2"]),
        "check_without_call": ("def f(x): return 0", ["def check(candidate):\n    assert candidate(1) == 2"]),
        "check_called_on_other": ("def f(x): return 0\ndef g(x): return 2",
                                  ["def check(candidate):\n    assert candidate(1) == 2\ncheck(g)\ncheck(f)"]),
        # the parent: errors confined to their case, bounded work
        "decimal_snan": ("from decimal import Decimal\ndef f(): return Decimal('sNaN')",
                         ["from decimal import Decimal\nassert f() == Decimal('1')"]),
        "overflow_isclose": ("def f(): return 10 ** 400", ["import math\nassert math.isclose(f(), 1.5)"]),
        "fraction_huge": ("from fractions import Fraction\ndef f(): return Fraction(3 ** 20000 + 1, 3 ** 20000)",
                          ["from fractions import Fraction\nassert f() == Fraction(1, 3)"]),
        "huge_report": ("def f(): return 'x' * 10 ** 7", ["assert f() == 'x'"]),
        # host memory and kernel objects outside the process's own limits
        "fork_memory": ("import os, time\ndef f():\n    kids = []\n    for _ in range(5):\n"
                        "        pid = os.fork()\n        if pid == 0:\n            b = bytearray(300 * 1024 * 1024)\n"
                        "            time.sleep(1)\n            os._exit(0)\n        kids.append(pid)\n"
                        "    return sum(os.waitpid(p, 0)[1] == 0 for p in kids)", ["assert f() == 5"]),
        "sysv_shm": ("import ctypes\ndef f():\n    libc = ctypes.CDLL(None, use_errno=True)\n"
                     "    return libc.shmget(0, 1 << 20, 0o1000 | 0o600)", ["assert f() >= 0"]),
        "sysv_msg": ("import ctypes\ndef f():\n    libc = ctypes.CDLL(None, use_errno=True)\n"
                     "    return libc.msgget(0, 0o1000 | 0o600)", ["assert f() >= 0"]),
        "memfd": ("import os\ndef f():\n    os.memfd_create('x')\n    return 1", ["assert f() == 1"]),
        "vsock": ("import socket\ndef f():\n    socket.socket(40, socket.SOCK_STREAM).close()\n    return 1",
                  ["assert f() == 1"]),
        "dist_packages": ("import glob, sys\ndef f():\n    sys.path += glob.glob('/usr/lib/python3*/dist-packages') + "
                          "glob.glob('/usr/local/lib/python3*/dist-packages')\n    import yaml\n    return 1",
                          ["assert f() == 1"]),
        "always_equal_int": ("class I(int):\n    def __eq__(s, o): return True\n    __hash__ = int.__hash__\n"
                             "def f(n): return I(0)", ["assert f(10) == 55"]),
        "always_equal_str": ("class S(str):\n    def __eq__(s, o): return True\n    __hash__ = str.__hash__\n"
                             "def f(n): return S('x')", ["assert f(10) == 'fifty-five'"]),
        "recursive_value": ("def f(n):\n    x = []\n    x.append(x)\n    return x", ["assert f(10) == [[]]"]),
        "patched_sorted": ("import builtins\nbuiltins.sorted = lambda x, **k: [9]\ndef f(n): return [3, 1]",
                           ["assert sorted(f(1)) == [9]"]),
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
        "read_victim": (f"def f(): return open({VICTIM!r}).read()", ["assert 'hunter2' in f()"]),
        "write_stdlib": ("import os\ndef f():\n    open(os.__file__, 'a').write('#')\n    return 1",
                         ["assert f() == 1"]),
        "symlink_shadow": ("import os\ndef f():\n    os.symlink('/etc/shadow', 'link')\n    return open('link').read()",
                           ["assert 'root:' in f()"]),
        "symlink_victim": (f"import os\ndef f():\n    os.symlink({VICTIM!r}, 'v')\n    return open('v').read()",
                           ["assert 'hunter2' in f()"]),
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
        "dev_zero": ("def f(): return len(open('/dev/zero', 'rb').read(10 ** 10))", ["assert f() == 10000000000"]),
        "proc_sys_write": ("def f():\n    open('/proc/sys/kernel/hostname', 'w').write('pwned')\n    return 1",
                           ["assert f() == 1"]),
        "site_packages": ("import os, sys\ndef f():\n"
                          "    d = os.path.join(os.path.dirname(os.__file__), 'site-packages')\n"
                          "    return len(os.listdir(d))", ["assert f() > 0"]),
        # resources
        "infinite_loop": ("def f():\n    while True:\n        pass", ["assert f() == 1"]),
        "sleep_forever": ("import time\ndef f():\n    time.sleep(3600)\n    return 1", ["assert f() == 1"]),
        "alloc_10gb": ("def f(): return len(bytearray(10 * 1024 ** 3))", ["assert f() == 10737418240"]),
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
                       ["assert 'hunter2' in f()"]),
        "env_secret_in_error": ("import os\nraise RuntimeError(repr(dict(os.environ)))", ["assert f() == 1"]),
        "pid1_environ": ("def f(): return open('/proc/1/environ', 'rb').read()", ["assert b'hunter2' in f()"]),
        "parent_environ": (f"def f(): return open('/proc/{os.getpid()}/environ', 'rb').read()",
                           ["assert b'hunter2' in f()"]),
        "victim_in_error": (f"raise RuntimeError(open({VICTIM!r}).read())", ["assert f() == 1"]),
    }
    return {name: (textwrap.dedent(code), tests) for name, (code, tests) in a.items()}


HELPERS = "".join(f"def h{i}(x):\n    return x + {i}\n" for i in range(20))  # > 16 lines
HONEST = {  # honest solutions in the supported shapes: each must score 1.0
    "add": ("def add(a, b):\n    return a + b", ["assert add(1, 2) == 3", "assert add(5, 1) == 6"]),
    "sort": ("def f(xs):\n    return sorted(xs)",
             ["assert f([3, 1, 2]) == [1, 2, 3]", "assert sorted(f([2, 1])) == [1, 2]"]),
    "floats_sets_dicts": ("def f():\n    return {'a': {1, 2}, 'b': (0.5, None)}",
                          ["assert f() == {'a': {2, 1}, 'b': (0.5, None)}", "assert 'a' in f()"]),
    "prints_and_files": ("import tempfile\ndef f():\n    print('noise ' * 10000)\n"
                         "    with tempfile.NamedTemporaryFile('w+') as t:\n        t.write('ok')\n        t.seek(0)\n"
                         "        return t.read()", ["assert f() == 'ok'"]),
    "namedtuple_async": ("import asyncio\nfrom collections import namedtuple\nP = namedtuple('P', 'x y')\n"
                         "async def g(x):\n    await asyncio.sleep(0)\n    return P(x, 2 * x)\n"
                         "def f(x):\n    return asyncio.run(g(x))", ["assert f(2) == (2, 4)"]),
    "tolerances": ("import math\ndef f(x):\n    return math.sqrt(x)",
                   ["assert math.isclose(f(2), 1.4142135623730951)", "assert abs(f(4) - 2) < 1e-9",
                    "import pytest\nassert f(4) == pytest.approx(2.0)", "assert f(9) == 3.0",
                    "assert round(f(2), 3) == 1.414"]),
    "typed_values": ("from fractions import Fraction\nfrom decimal import Decimal\nimport datetime\n"
                     "def third(x): return Fraction(x, 3)\ndef dec(): return Decimal('1.10')\n"
                     "def day(): return datetime.date(2020, 1, 2)\ndef raw(): return bytearray(b'ab')\n"
                     "def keys(): return {'a': 1, 'b': 2}.keys()",
                     ["from fractions import Fraction\nassert third(1) == Fraction(1, 3)",
                      "from decimal import Decimal\nassert dec() == Decimal('1.1')",
                      "import datetime\nassert day() == datetime.date(2020, 1, 2)", "assert raw() == b'ab'",
                      "assert raw() == bytearray(b'ab')", "assert keys() == {'b', 'a'}"]),
    "counter_zero": ("from collections import Counter\ndef f(s):\n    c = Counter(s)\n    c['z'] = 0\n    return c",
                     ["from collections import Counter\nassert f('aab') == Counter({'a': 2, 'b': 1})"]),
    "results_in_a_loop": ("def f(n):\n    out = []\n    for i in range(n):\n        out.append(i * i)\n    return out",
                          ["assert f(4) == [0, 1, 4, 9]", "assert f(0) == []"]),
    "generator": ("def f(n):\n    return (i for i in range(n))", ["assert list(f(3)) == [0, 1, 2]",
                                                                     "assert set(f(2)) == {0, 1}"]),
    "identity": ("def f(x):\n    return x > 0 if x else None",
                 ["assert f(1) is True", "assert f(-1) is False", "assert f(0) is None", "assert f(2) is not None",
                  "assert f(1)", "assert not f(-1)"]),
    "many_helpers": (HELPERS + "def f(x):\n    return h19(h1(x))", ["assert f(1) == 21"]),
    "emoji": ("def f():\n    return '\\U0001F600'", ["assert f() == '\\U0001F600'"]),
    "humaneval_check": ("def total(xs):\n    return sum(xs)",
                        ["METADATA = {'author': 'x'}\n\ndef check(candidate):\n    assert candidate([1, 2]) == 3\n"
                         "    assert abs(candidate([0.5]) - 0.5) < 1e-6, 'floats'\n    assert True\n\ncheck(total)"]),
    "program_stdin": ("import sys\nn = int(sys.stdin.readline())\nprint(n * 2)\nsys.exit(0)",
                      {"inputs": ["2\n", "5\n"], "outputs": ["4\n", "10"]}),
    "program_open0": ("print(sum(map(int, open(0).read().split())))", [{"input": "1 2 3\n", "output": "6\n"}]),
    # round 3: Python's own semantics, so honest (round 2 scored these 0: a typed value the expected value did
    # not hold was refused, and `assert f(x)` needed a plain result)
    "typed_value_not_asked": ("from fractions import Fraction\ndef f(): return Fraction(1, 2)", ["assert f() == 0.5"]),
    "truthy_object": ("class T:\n    def __bool__(s): return True\ndef f(n): return T()", ["assert f(10)"]),
    "json_cases": ("def f(xs, k=1):\n    return tuple(x * k for x in xs)",
                   [{"fn": "f", "args": [[1, 2]], "kwargs": {"k": 3}, "expected": [3, 6]},
                    {"fn": "f", "args": [[0.1]], "expected": [0.1]}]),
}
if isolation.whole_sandbox_limits().startswith("cgroup"):  # without a cgroup the sandbox is one process
    HONEST["multiprocessing"] = ("import multiprocessing\ndef sq(x):\n    return x * x\ndef f():\n"
                                 "    with multiprocessing.get_context('fork').Pool(2) as pool:\n"
                                 "        return pool.map(sq, [1, 2, 3])", ["assert f() == [1, 4, 9]"])
# Honest code whose tests are not in a supported shape: refused before anything runs (never a silent 0).
REFUSED_HONEST = {
    "class_based": ("class Solution:\n    def two_sum(self, xs, t):\n        return [0, 1]",
                    ["s = Solution()\nassert s.two_sum([2, 7, 11], 9) == [0, 1]"]),
    "custom_class": ("class D:\n    def __init__(s, v): s.v = v\n    def __eq__(s, o): return s.v == o.v\n"
                     "def f(v): return D(v)", ["assert f(1) == f(1)"]),
    "setup_lines": ("def f(x): return 2 * x", ["x = 2\nassert f(x) == 4"]),
    "expected_exception": ("def f(x):\n    raise ValueError(x)",
                           ["import pytest\nwith pytest.raises(ValueError):\n    f(-1)"]),
    "loop": ("def f(x): return 2 * x", ["for a, b in [(1, 2), (3, 6)]:\n    assert f(a) == b"]),
    "random_inputs": ("def f(x): return 2 * x", ["import random\nx = random.randint(0, 9)\nassert f(x) == 2 * x"]),
    "mutation_after_call": ("def f(xs): xs.sort()", ["xs = [3, 1]\nf(xs)\nassert xs == [1, 3]"]),
    "type_check": ("def f(x): return 1", ["assert type(f(1)) == int"]),
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
# Attacks whose tests are shapes the verifier no longer judges (the old slicer's forgeries and leaks): the gold
# check refuses them before training and `run_many` does not run them.
REFUSED_ATTACKS = {
    "read_expected_setup", "forge_abs_tolerance_setup", "forge_or_chain", "forge_method_call", "forge_no_expected_side",
    "forge_expected_in_setup", "forge_expected_not_plain", "forge_trailing_line", "forge_expected_exception",
    "forge_loop", "forge_loop_over_name", "expected_in_tuple_setup", "expected_in_input_record",
    "forge_all_generator", "expected_via_print", "always_equal_negated", "mutates_input", "uncalled_test_function",
    "check_without_call", "check_called_on_other"}


def test_table_size():
    assert len(ATTACK_NAMES) >= 100


def test_which_attacks_are_refused_up_front():
    refused = {name for name, (_, tests) in _attacks(0, 0).items() if convert.convert(tests).refusals}
    assert refused == REFUSED_ATTACKS


@pytest.mark.parametrize("name", ATTACK_NAMES)
def test_attack_scores_zero(batch, name):
    result = batch[0][name]
    assert result.fraction == 0.0 and not result.passed, result
    assert result.error, result
    assert result.error.startswith("refused: ") == (name in REFUSED_ATTACKS), result
    assert result.elapsed < BOUND_S, result
    assert SECRET not in result.error


@pytest.mark.parametrize("name", list(HONEST))
def test_honest_code_scores_one(batch, name):
    result = batch[0][f"honest_{name}"]
    assert result.fraction == 1.0 and result.passed, result


@pytest.mark.parametrize("name", list(REFUSED_HONEST))
def test_unsupported_honest_shapes_are_refused_not_scored(name):
    code, tests = REFUSED_HONEST[name]
    (refusal,) = convert.convert(tests).refusals
    assert "rewrite as" in refusal.line() and "\n" not in refusal.line()
    assert run_many([(code, tests)], LIMITS)[0].error.startswith("refused: ")


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
    assert "output larger than" in results["huge_report"].error  # never parsed
    assert "output larger than" in results["hash_collisions"].error
    assert "Fraction parts far larger" in results["fraction_huge"].error  # no quadratic gcd in the parent
    assert "InvalidOperation" in results["decimal_snan"].error  # confined to its case
    assert "OverflowError" in results["overflow_isclose"].error
    assert "Operation not permitted" in results["sysv_shm"].error or "got -1" in results["sysv_shm"].error
    assert "Address family not supported" in results["vsock"].error
    assert "No module named 'yaml'" in results["dist_packages"].error


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


def test_a_fork_bomb_does_not_starve_other_rows():
    """RLIMIT_NPROC counts per uid on the host: each concurrent sandbox gets its own uid, so processes held by
    one row do not make threads fail in the rows running beside it."""
    bomb = ("import os, time\ndef f():\n    for _ in range(40):\n        try:\n            if os.fork() == 0:\n"
            "                time.sleep(3)\n                os._exit(0)\n        except OSError:\n            pass\n"
            "    time.sleep(3)\n    return 0", ["assert f() == 1"])
    threads = ("import threading, time\ndef g():\n    time.sleep(0.5)\n    out = []\n"
               "    t = threading.Thread(target=lambda: out.append(1))\n    t.start()\n    t.join()\n    return out",
               ["assert g() == [1]"])
    results = run_many([bomb, bomb, *[threads] * 6], Limits(cpu_seconds=2, wall_seconds=5.0), workers=8)
    assert [r.fraction for r in results] == [0.0, 0.0] + [1.0] * 6, results
