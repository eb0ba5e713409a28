"""Run untrusted Python (model-written code) against tests, isolated by the OS, with verdicts the code cannot write.

Threat model. The code is hostile and knows this file: it may patch builtins, read and write its own
process memory (/proc/self/mem), replace any file descriptor, print anything, exit with any status,
fork, sleep, allocate, fill its disk, and try to reach the host. Nothing inside its process is trusted,
so the defenses are outside it:

1. Isolation (`rlft.verifiers.sandbox_isolation`): every process runs under bubblewrap as uid 65534
   with no capabilities, in its own PID/network/mount/IPC/UTS namespaces, under a seccomp filter,
   seeing only a read-only interpreter + stdlib and a size-capped tmpfs work dir; the verifier and
   every host process are outside its PID namespace (it cannot see or signal them), the host network
   is unreachable, and nothing it writes persists. The parent kills the whole PID namespace at the
   wall-clock timeout. Inside, the harness sets rlimits (CPU, address space, file size, processes,
   fds, no core files); the kernel enforces them and an unprivileged process cannot raise them.
2. Verdicts in the parent (`rlft.verifiers.sandbox_harness`): each test runs in a process of its own
   (test N cannot see test M or its result). A test `assert LHS == RHS` is split: a literal side, or
   a side that evaluates without the solution (in a separate sandboxed process that never sees the
   code), is the expected value and stays in the parent; the solution's process is sent only the other
   side's expression (and the setup lines that expression needs), evaluates it, and reports the value
   as plain data. Names the test sets up (`x = [3, 1, 2]`) are sent as values computed without the
   code, so a setup line that also holds an expected value is not sent. The parent compares. The
   process's report must be exactly one well-formed line from a process that exited 0; anything else
   (a forged second line, junk, `os._exit(0)` before reporting) fails. So the only way to pass such a
   test is to produce its expected value, which is never inside the process: forging the report is as
   hard as solving that test. An object whose `__eq__` always returns True has no plain-data encoding
   and fails. A test given with several top-level asserts is split into parts (one process each; the
   test passes when all do), and a HumanEval-style `def check(candidate)` of plain asserts called as
   `check(fn)` becomes one test per assert (`inline_check`).
3. Limits of the guarantee: an *opaque* test (no side computable without the code, e.g.
   `assert f(2) == f(1) + 1`, an assert inside a loop or branch, or a `check` function with more than
   plain asserts) runs whole in the solution's process, and its pass is that process's own report:
   code that writes a well-formed report and exits forges it. A setup statement that needs the code
   (`r = f(2)`) is sent as source, so one that also assigns the expected value (`r, want = f(2), 4`)
   leaks it. Gold tests should put the expected value on its own side of `==`. A side counts as
   expected when it evaluates without the code, so a test of a function that shadows a builtin
   (`assert max(1, 2) == 2` for a task "write max") is judged against the builtin.
4. A hostile-output parent: it never compiles or runs the code itself, reads only pipes (never files
   the code wrote), keeps a bounded prefix of each, parses the report as JSON into plain data (depth,
   size and hash collisions bounded), strips control characters from the messages it passes on, and
   one process's failure scores that test 0 and never ends the batch.

`RLFT_CODE_ISOLATION=none` drops layer 1 (rlimits and process-group kill only; a loud warning).
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from rlft.verifiers import sandbox_harness as harness
from rlft.verifiers import sandbox_isolation as isolation

REPORT_LIMIT = 1 << 20  # bytes of the report pipe kept: far above any honest test value
REFERENCE_CACHE = 4096  # tests whose solution-free values are kept between calls (GRPO asks every step)
_REFERENCES: dict[tuple[str, tuple[str, ...]], list] = {}  # (setup, expressions) -> values; oldest first
STDERR_LIMIT = 4096  # bytes of stderr kept, for the error message


@dataclass(frozen=True)
class Limits:
    """Resource limits for each sandboxed process."""

    cpu_seconds: int = 2
    wall_seconds: float = 5.0  # cpu_seconds + start (bwrap + interpreter ~0.05 s) + room for code that sleeps
    memory_mb: int = 512  # address space: Python starts at ~20 MB
    file_mb: int = 1  # largest file the code may write
    disk_mb: int = 16  # the tmpfs work dir
    nproc: int = 32  # processes + threads of uid 65534
    nofile: int = 64


@dataclass(frozen=True)
class SandboxResult:
    """What one job did: `passed` when every test (or, without tests, the code itself) passed."""

    passed: bool
    n_tests: int = 0
    n_passed: int = 0
    timed_out: bool = False
    error: str = ""
    elapsed: float = 0.0
    protections: tuple[str, ...] = ()

    @property
    def fraction(self) -> float:
        """Share of tests passed (1.0/0.0 for a run without tests)."""
        return self.n_passed / self.n_tests if self.n_tests else float(self.passed)


def run_tests(code: str, tests: Sequence[str] | str = (), limits: Limits = Limits()) -> SandboxResult:
    """Run `code`, then each test (Python ending in an assert) in its own sandboxed process.

    >>> run_tests("def add(a, b): return a + b", ["assert add(1, 2) == 3", "assert add(2, 2) == 5"]).fraction
    0.5
    """
    return run_many([(code, tests)], limits)[0]


def run_many(jobs: Sequence[tuple[str, Sequence[str] | str]], limits: Limits = Limits(),
             workers: int | None = None) -> list[SandboxResult]:
    """`run_tests` for many (code, tests) jobs; every process of every job shares one thread pool."""
    if not jobs:
        return []
    chosen = isolation.require()
    protections = (("bwrap", "uid-65534", "no-caps", "pidns", "netns", "mountns", "rlimits")
                   if chosen == "bwrap" else ("rlimits",))
    if chosen == "bwrap" and isolation.seccomp_program() is not None:
        protections += ("seccomp",)
    # plans[j][k]: the parts of job j's test k; a test given with several asserts passes when all do
    plans = [[[harness.plan(part) for part in _parts(t)] for t in _cases(tests)] for _, tests in jobs]
    flat = [part for p in plans for test in p for part in test]
    workers = workers or max(1, min(8, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        refs = {r: _REFERENCES.get(r) for t in flat if (r := _ref_key(t)) is not None}
        todo = [k for k, v in refs.items() if v is None]
        for key, outcome in zip(todo, pool.map(lambda k: _spawn(chosen, limits, None, k[0], list(k[1])), todo)):
            if outcome.report and outcome.report[0] == "ok":
                refs[key] = _REFERENCES[key] = outcome.values()
        while len(_REFERENCES) > REFERENCE_CACHE:
            _REFERENCES.pop(next(iter(_REFERENCES)), None)
        for t in flat:
            harness.settle(t, refs.get(_ref_key(t)))
        tasks = []
        for j, ((code, _), p) in enumerate(zip(jobs, plans)):
            if not p:
                tasks.append(((j, -1, 0), code, "", [], {}))
            for k, test in enumerate(p):  # a part with nothing to observe still needs the code to run clean
                for m, t in enumerate(test):
                    observe = [] if t.opaque else [t.sides[i] for i in t.observed()]
                    tasks.append(((j, k, m), code, t.solution_setup(), observe, {} if t.opaque else t.solution_bind()))
        outcomes = list(pool.map(lambda task: _spawn(chosen, limits, *task[1:]), tasks))
    by_job: dict[int, dict[tuple[int, int], _Outcome]] = {}
    for ((j, k, m), *_), outcome in zip(tasks, outcomes):
        by_job.setdefault(j, {})[(k, m)] = outcome
    return [_result(p, by_job.get(j, {}), limits, protections) for j, p in enumerate(plans)]


def _cases(tests: Sequence[str] | str) -> list[str]:
    """The tests: a string's asserts (a `check(candidate)` block gives one test per assert), or the list."""
    if not isinstance(tests, str):
        return [str(t) for t in tests]
    return inline_check(tests) or split_tests(tests)


def _parts(test: str) -> list[str]:
    """One test's parts, each ending in one assert, all of which must pass."""
    return inline_check(test) or split_tests(test)


def inline_check(tests: str) -> list[str] | None:
    """HumanEval-style `def check(candidate): assert ...` plus `check(fn)`: one test per assert, with
    `candidate = fn` as setup (so each assert's expected side stays in the parent); None for anything else.

    >>> inline_check("def check(candidate):\\n    assert candidate(1) == 2\\n    assert candidate(0) == 1\\ncheck(inc)")
    ['candidate = inc\\nassert candidate(1) == 2', 'candidate = inc\\nassert candidate(0) == 1']
    """
    try:
        body = ast.parse(tests).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    defs = {n.name: n for n in body if isinstance(n, ast.FunctionDef)}
    calls = [n for n in body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
             and isinstance(n.value.func, ast.Name) and n.value.func.id in defs and len(n.value.args) == 1
             and not n.value.keywords and isinstance(n.value.args[0], ast.Name)]
    if len(calls) != 1:
        return None
    fn, arg = defs[calls[0].value.func.id], calls[0].value.args[0].id
    a = fn.args
    if len(a.args) != 1 or a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg or fn.decorator_list:
        return None
    stmts = fn.body[1:] if ast.get_docstring(fn) is not None else fn.body
    if not stmts or not all(isinstance(n, ast.Assert) for n in stmts):
        return None
    rest = [n for n in body if n is not fn and n is not calls[0]]
    if any(isinstance(n, ast.Assert) for n in ast.walk(ast.Module(body=rest, type_ignores=[]))):
        return None
    alias = ast.Assign([ast.Name(a.args[0].arg, ast.Store())], ast.Name(arg, ast.Load()), lineno=0)
    setup = ast.unparse(ast.Module(body=[*rest, alias], type_ignores=[]))
    return [f"{setup}\n{ast.unparse(n)}" for n in stmts]


def split_tests(tests: str) -> list[str]:
    """Split a block of test code into tests: each ends at an `assert`, setup lines join the next one.

    >>> split_tests("x = 2\\nassert x == 2\\nassert x != 3")
    ['x = 2\\nassert x == 2', 'assert x != 3']
    """
    try:
        body = ast.parse(tests).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: NUL bytes, surrogates
        return [tests]
    chunks: list[list[ast.stmt]] = [[]]
    for node in body:
        chunks[-1].append(node)
        if isinstance(node, ast.Assert):
            chunks.append([])
    if not chunks[-1]:
        chunks.pop()
    elif len(chunks) > 1:  # trailing statements after the last assert belong to it
        chunks[-2].extend(chunks.pop())
    return [ast.unparse(ast.Module(body=c, type_ignores=[])) for c in chunks if c]


# ----------------------------------------------------------------------------- verdicts


def _ref_key(t: harness.TestPlan) -> tuple[str, tuple[str, ...]] | None:
    job = harness.reference_job(t)
    return (job[0], tuple(job[1])) if job else None


def _result(plans: list[list[harness.TestPlan]], outcomes: dict, limits: Limits,
            protections: tuple[str, ...]) -> SandboxResult:
    elapsed = max([o.elapsed for o in outcomes.values()] or [0.0])
    timed_out = any(o.timed_out for o in outcomes.values())
    if not plans:
        ok, why = _judge(None, outcomes.get((-1, 0)), limits)
        return SandboxResult(ok, 0, 0, timed_out, _printable(why), round(elapsed, 3), protections)
    n_passed, errors = 0, []
    for k, test in enumerate(plans):
        verdicts = [_judge(t, outcomes.get((k, m)), limits) for m, t in enumerate(test)]
        why = next((w for ok, w in verdicts if not ok), "")
        if all(ok for ok, _ in verdicts) and verdicts:
            n_passed += 1
        else:
            why = why or "no assert"
            errors.append(why if why.startswith("code:") else f"test {k + 1}: {why}")
    code_errors = [e for e in errors if e.startswith("code:")]
    error = _printable((code_errors or errors or [""])[0])
    return SandboxResult(n_passed == len(plans), len(plans), n_passed, timed_out, error, round(elapsed, 3),
                         protections)


def _judge(t: harness.TestPlan | None, o: _Outcome | None, limits: Limits) -> tuple[bool, str]:
    """(passed, why not) for one test from what its process did."""
    if o is None:
        return False, "not run"
    if o.timed_out:
        return False, f"timed out after {limits.wall_seconds:g} s"
    if o.report is None or o.returncode != 0:
        sig = o.signal()
        if sig:
            why = _SIGNALS.get(sig, f"killed by signal {sig}")
            return False, why + (f" ({limits.cpu_seconds} s)" if sig == signal.SIGXCPU else "")
        why = "no well-formed report" if o.returncode == 0 else f"exited with status {o.returncode}"
        tail = o.stderr.decode("utf-8", "replace").strip()[-300:]
        return False, why + (f": {tail}" if tail else "")
    tag, payload = o.report
    if tag == "code-error":
        return False, f"code: {str(payload)[:300]}"
    if tag == "error":
        return False, str(payload)[:300]
    if not isinstance(payload, list):
        return False, "malformed report"
    if t is None or t.opaque:
        return True, ""
    if len(payload) != len(t.observed()) or not all(isinstance(x, list) and len(x) == 2 for x in payload):
        return False, "malformed report"
    return harness.verdict(t, payload)


def _printable(text: str) -> str:
    """The code writes these messages: no terminal escapes or control characters reach the user's screen."""
    return "".join(c if c.isprintable() or c == " " else "?" for c in text)


_SIGNALS = {signal.SIGXCPU: "CPU time limit exceeded", signal.SIGKILL: "killed",
            signal.SIGXFSZ: "file size limit exceeded", signal.SIGSEGV: "crashed (segmentation fault)"}


# ----------------------------------------------------------------------------- processes


@dataclass
class _Outcome:
    report: list | None
    returncode: int | None
    timed_out: bool
    stderr: bytes
    elapsed: float

    def values(self) -> list:
        payload = self.report[1] if self.report else None
        return payload if isinstance(payload, list) else []

    def signal(self) -> int:
        rc = self.returncode
        if rc is None:
            return 0
        if rc < 0:
            return -rc
        return rc - 128 if 128 < rc < 160 else 0  # bwrap exits 128 + N when its child dies of signal N


def _rlimits(limits: Limits) -> dict[str, list[int]]:
    mb = 1024 * 1024
    return {"RLIMIT_CPU": [limits.cpu_seconds, limits.cpu_seconds + 1],  # soft: SIGXCPU, hard: SIGKILL
            "RLIMIT_AS": [limits.memory_mb * mb] * 2, "RLIMIT_FSIZE": [limits.file_mb * mb] * 2,
            "RLIMIT_NPROC": [limits.nproc] * 2, "RLIMIT_NOFILE": [limits.nofile] * 2, "RLIMIT_CORE": [0, 0]}


def _spawn(chosen: str, limits: Limits, code: str | None, setup: str, exprs: list[str],
           bind: dict | None = None) -> _Outcome:
    """One sandboxed process; any failure of the machinery is an outcome without a report, never a raise."""
    started = time.monotonic()
    try:
        job = ascii({"code": code, "setup": setup, "exprs": exprs, "bind": bind or {}, "rlimits": _rlimits(limits)})
        return _run_process(chosen, limits, job.encode("ascii"), started)
    except Exception as exc:  # noqa: BLE001 - one test's failure must not end the batch
        return _Outcome(None, None, False, f"sandbox failed: {type(exc).__name__}: {exc}".encode(),
                        time.monotonic() - started)


def _run_process(chosen: str, limits: Limits, job: bytes, started: float) -> _Outcome:
    argv, work, env, fds = isolation.command(chosen, limits.disk_mb, harness.child_source())
    try:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    cwd=work or "/", env=env, start_new_session=True, close_fds=True, pass_fds=fds)
        finally:
            for fd in fds:
                os.close(fd)
        out, err = _Reader(proc.stdout, REPORT_LIMIT), _Reader(proc.stderr, STDERR_LIMIT)
        threading.Thread(target=_feed, args=(proc.stdin, job), daemon=True).start()
        expired = threading.Event()  # a timer, not wait(timeout=): that polls, adding up to 50 ms per process
        timer = threading.Timer(limits.wall_seconds, lambda: (expired.set(), _kill_tree(proc, wait=False)))
        timer.start()
        proc.wait()
        timer.cancel()
        timed_out = expired.is_set()
        _kill_tree(proc)
        data, stderr = out.data(), err.data()
    finally:
        isolation.remove_work(work)
    report = harness.parse_report(data) if not timed_out else None
    return _Outcome(report, proc.returncode, timed_out, stderr, time.monotonic() - started)


def _feed(stdin, job: bytes) -> None:
    try:
        stdin.write(job)
        stdin.close()
    except OSError:
        pass  # the process died before reading: its exit status tells why


def _kill_tree(proc: subprocess.Popen, wait: bool = True) -> None:
    """Kill the sandbox's PID 1 (its whole namespace dies with it, before bwrap can exit), then the group."""
    if proc.returncode is None:
        try:
            with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
                children = [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            children = []
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not wait:  # the timer: bwrap exits once its namespace is gone; the group kill is the backstop
            time.sleep(0.5)
            if proc.returncode is not None:
                return  # reaped: its pid (the group id) may belong to someone else by now
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # --die-with-parent takes the namespace down with bwrap
    except OSError:
        pass
    if wait:
        proc.wait()


class _Reader(threading.Thread):
    """Reads a pipe to its end; keeps the first `limit` bytes, discards the rest."""

    def __init__(self, pipe, limit: int):
        super().__init__(daemon=True)
        self.pipe, self.limit, self.chunks, self.size = pipe, limit, [], 0
        self.start()

    def run(self) -> None:
        fd = self.pipe.fileno()
        try:
            while chunk := os.read(fd, 65536):
                if self.size < self.limit:
                    self.chunks.append(chunk[:self.limit - self.size])
                    self.size += len(self.chunks[-1])
        except OSError:
            pass
        finally:
            self.pipe.close()

    def data(self) -> bytes:
        self.join(timeout=2.0)  # every writer is dead by now, so EOF is immediate
        return b"".join(self.chunks)
