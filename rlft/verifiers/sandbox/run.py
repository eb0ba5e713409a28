"""Run untrusted Python (model-written code) on test cases, isolated by the OS; the parent alone judges.

Threat model. The code is hostile and knows this file: it may patch builtins, read and write its own
process memory, replace any file descriptor, print anything, exit with any status, fork, sleep, allocate,
fill its disk, and try to reach the host. Nothing inside its process is trusted, so the defenses are
outside it:

1. Isolation (`isolation`, `seccomp`, `cgroup`): every process runs under bubblewrap as an unprivileged
   uid with no capabilities, in its own PID/network/mount/IPC/UTS namespaces, under a seccomp filter,
   seeing only the interpreter and its stdlib (read-only) and a size-capped tmpfs work dir; memory (with
   tmpfs and kernel memory) and processes are capped for the whole sandbox by a cgroup, or, where none can
   be made, the sandbox is one process whose RLIMIT_AS is the cap; the parent kills the PID namespace at
   the wall-clock timeout.
2. Verdicts by construction (`cases`, `values`): a test is data, a function call with literal arguments
   and a literal expected value, or a program's stdin and expected stdout. The code's process receives
   the arguments or the stdin only, and sends back the returned value (bounded, strictly typed, see
   `values`) or its stdout; the parent compares with one fixed equality. The expected value never enters
   the process, and the process never reports a verdict, so the only way to pass is to produce the
   expected output: forging a report is as hard as solving the case. Each case runs in a process of its
   own. A HumanEval `check` with setup, loops or random inputs runs as written in a judge sandbox that
   holds no model code (`cases.JudgeCase`): each call of the code's functions crosses to a fresh code
   sandbox as data, and the judge's exit status is the verdict. Tests that cannot be put in these
   shapes are refused before training by the gold check.
   Cases that cannot see each other: two cases with the same tests (one row, or the completions of one
   GRPO group) never run at the same time (`_pool`), and seccomp refuses the channels through the files
   all sandboxes share (locks, inotify, page-cache probes); each sandbox has its own /dev/shm, /work,
   IPC and network namespace (abstract unix sockets are per network namespace).
3. The forgeable mode (`run_forgeable`, opt-in): code and test run in one sandboxed process and the exit
   status is the verdict. Layer 1 holds (the host is safe), layer 2 does not: the code can exit 0 without
   passing. Every result of this mode is marked `forgeable`.
4. A parent that cannot be hurt: it never runs the code itself, reads only pipes with a byte cap per case
   (a few times the expected value's size), decodes under node/depth/digit/hash-collision bounds, and
   turns every failure of one case (a crash of the machinery, a comparison that raises) into that case's
   0, never the batch's. Messages from the code are cut short and have control characters escaped.
Not protected against: a kernel exploit reachable from the syscalls seccomp allows; CPU time the
sandboxes take from the host (each is capped by RLIMIT_CPU and the wall clock, not by a cgroup); timing
side channels between concurrent sandboxes. A sandbox shares its slot's cgroup with the slot's helper and
the sandbox started ahead for the next case (~10 MB, 3 processes, unreachable from it: other PID, network,
IPC and mount namespaces); filling the cgroup can get them OOM-killed, which fails that case's successor
start-up, never its verdict (both are started afresh).

`RLFT_CODE_ISOLATION=none` drops layer 1 (rlimits and process-group kill only; a loud warning).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlft.verifiers.sandbox import convert as convert_
from rlft.verifiers.sandbox import harness, isolation, processes
from rlft.verifiers.sandbox import values as values_
from rlft.verifiers.sandbox.cases import CallCase, JudgeCase, ProgramCase, Test, explain, short
from rlft.verifiers.sandbox.processes import REPORT_LIMIT, STDERR_LIMIT, Limits, Outcome

REPORT_FLOOR = 64 * 1024  # bytes of report or stdout always accepted; more only when the expected value is big
REPORT_FACTOR = 8  # x the expected value's own encoded size


@dataclass(frozen=True)
class SandboxResult:
    """What one job did: `passed` when every test passed; `forgeable` when the code could have faked it."""

    passed: bool
    n_tests: int = 0
    n_passed: int = 0
    timed_out: bool = False
    error: str = ""
    elapsed: float = 0.0
    protections: tuple[str, ...] = ()
    forgeable: bool = False

    @property
    def fraction(self) -> float:
        """Share of tests passed."""
        return self.n_passed / self.n_tests if self.n_tests else 0.0


def run_tests(code: str, tests: Any, limits: Limits = Limits()) -> SandboxResult:
    """Convert `tests` (any format `cases.convert` reads) and run `code` on each case in its own sandbox.

    >>> run_tests("def add(a, b): return a + b", ["assert add(1, 2) == 3", "assert add(2, 2) == 5"]).fraction
    0.5
    """
    return run_many([(code, tests)], limits)[0]


def run_many(jobs: Sequence[tuple[str, Any]], limits: Limits = Limits(),
             workers: int | None = None) -> list[SandboxResult]:
    """`run_tests` for many (code, tests) jobs, all cases in one thread pool. A job whose tests do not all
    convert is not run: its result carries the first refusal as `error`."""
    converted = [convert_.convert(tests) for _, tests in jobs]
    todo = [(j, code, c.tests) for j, ((code, _), c) in enumerate(zip(jobs, converted)) if not c.refusals]
    results = [SandboxResult(False, len(c.tests) + len(c.refusals), 0, error="refused: " + c.refusals[0].line())
               if c.refusals else None for c in converted]
    for (j, _, _), result in zip(todo, run_cases([(code, tests) for _, code, tests in todo], limits, workers)):
        results[j] = result
    return results  # type: ignore[return-value]


def run_cases(jobs: Sequence[tuple[str, Sequence[Test]]], limits: Limits = Limits(),
              workers: int | None = None) -> list[SandboxResult]:
    """Run each job's code on each case of each of its tests; the parent judges every case."""
    chosen = isolation.require()
    tasks = [(j, k, case, _job(code, case)) for j, (code, tests) in enumerate(jobs)
             for k, test in enumerate(tests) for case in test.cases]  # cases from `convert` always encode
    keys = {j: _row_key(tests) for j, (_, tests) in enumerate(jobs)}
    verdicts = _pool(chosen, limits, workers, [(t[3], _cap(t[2])) for t in tasks], [t[2] for t in tasks],
                     [keys[t[0]] for t in tasks])
    by_job: dict[int, dict[int, list]] = {}
    for (j, k, _, _), v in zip(tasks, verdicts):
        by_job.setdefault(j, {}).setdefault(k, []).append(v)
    protections = _protections(chosen)
    return [_result(len(tests), by_job.get(j, {}), protections) for j, (_, tests) in enumerate(jobs)]


def run_forgeable(jobs: Sequence[tuple[str, Sequence[str]]], limits: Limits = Limits(),
                  workers: int | None = None) -> list[SandboxResult]:
    """The opt-in mode: each test (Python source) runs after the code in one sandboxed process, and passes
    when that process exits 0. FORGEABLE: the code can exit 0 itself; every result says so."""
    chosen = isolation.require()
    tasks = [(j, {"mode": "whole", "code": code, "test": test}) for j, (code, tests) in enumerate(jobs)
             for test in tests]
    verdicts = _pool(chosen, limits, workers, [(t[1], 4096) for t in tasks], [None] * len(tasks))
    by_job: dict[int, dict[int, list]] = {}
    for k, ((j, _), v) in enumerate(zip(tasks, verdicts)):
        by_job.setdefault(j, {})[k] = [v]
    protections = _protections(chosen)
    return [_result(len(tests), by_job.get(j, {}), protections, forgeable=True)
            for j, (_, tests) in enumerate(jobs)]


# ----------------------------------------------------------------------------- verdicts


def _row_key(tests: Sequence[Test]) -> Any:
    """Cases with equal keys never run at the same time: the row's tests, whichever completion is judged."""
    return tuple(t.source for t in tests)


def _job(code: str, case: Any) -> dict:
    if isinstance(case, ProgramCase):
        return {"mode": "stdin", "code": code, "input": case.stdin}
    if isinstance(case, JudgeCase):
        return {"mode": "judge", "code": code}  # the parent's: the judge itself never gets the code
    job = {"mode": "call", "code": code, "fn": case.fn, "args": values_.encode(list(case.args)),
           "kwargs": values_.encode(case.kwargs),
           "materialize": any(w[0] in convert_.ITERATING for w in case.wrappers)}
    if not case.wrappers and case.op == "truth":
        job["probe"] = "truth"
    elif not case.wrappers and _is_probe(case):
        job["probe"] = values_.encode(case.expected)
    return job


def _is_probe(case: CallCase) -> bool:
    """`is` / `is not` None, True or False: the sandbox answers the identity itself, as one bit."""
    return case.op in ("is", "is not") and not case.wrappers and (
        case.expected is None or case.expected is True or case.expected is False)


def _cap(case: Any) -> int:
    """Bytes of report (or stdout) read for this case: a few times what the expected value takes."""
    if isinstance(case, ProgramCase):
        size = len(case.stdout.encode("utf-8", "surrogatepass"))
    elif isinstance(case, JudgeCase):
        size = 0
    else:
        try:
            size = len(json.dumps(values_.encode(case.expected)))
        except (values_.Refused, TypeError, ValueError):
            size = 0
    return min(REPORT_LIMIT, max(REPORT_FLOOR, REPORT_FACTOR * size))


def _pool(chosen: str, limits: Limits, workers: int | None, jobs: list[tuple[dict, int]], cases: list,
          keys: list | None = None) -> list:
    """(passed, why not, timed out, elapsed) per job; never raises. Jobs with equal `keys` run one at a time."""
    if not jobs:
        return []
    workers = workers or max(1, min(8, os.cpu_count() or 1))
    keys = keys if keys is not None else list(range(len(jobs)))

    def one(item: tuple[tuple[dict, int], Any]) -> tuple[bool, str, bool, float]:
        (job, cap), case = item
        started = time.monotonic()
        try:
            if isinstance(case, JudgeCase):
                return _run_judge(chosen, limits, job["code"], case)
            outcome = processes.spawn(chosen, limits, job, cap)
            ok, why = _judge(case, outcome, limits)
            return ok, why, outcome.timed_out, outcome.elapsed
        except Exception as exc:  # noqa: BLE001 - one case's failure must never end the batch
            return False, f"{type(exc).__name__}: {short(str(exc), 200)}", False, time.monotonic() - started

    results: list = [None] * len(jobs)
    pending = deque(range(len(jobs)))
    running: set = set()
    cond = threading.Condition()

    def worker() -> None:
        while True:
            with cond:
                while True:
                    if not pending:
                        return
                    i = next((i for i in pending if keys[i] not in running), None)
                    if i is not None:
                        break
                    cond.wait()
                pending.remove(i)
                running.add(keys[i])
            try:
                results[i] = one((jobs[i], cases[i]))
            finally:
                with cond:
                    running.discard(keys[i])
                    cond.notify_all()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(workers, len(jobs)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# ----------------------------------------------------------------------------- the judge


MAX_JUDGE_CALLS = 2000  # calls of the code's functions by one test
JUDGE_TOTAL_S = 300.0  # wall clock of one judged test, its calls included
CALL_CAP = 1 << 20  # bytes of one call's report (no expected value to size it by)


def _run_judge(chosen: str, limits: Limits, code: str, case: JudgeCase) -> tuple[bool, str, bool, float]:
    """Run the test in a judge sandbox (no model code); each call it makes runs the code in a fresh sandbox."""
    started = time.monotonic()
    line = processes.job_line({"mode": "judge", "test": case.test, "proxies": list(case.names)}, limits, False)
    argv, work, env, fds = isolation.command(chosen, limits.disk_mb, harness.child_source(),
                                             processes.sandbox_uid(processes.current_slot()))
    try:
        proc = processes.start(argv, work, env, fds)
        err = processes._Reader(proc.stderr, STDERR_LIMIT)
        lines: queue.Queue = queue.Queue()

        def read() -> None:
            try:
                while True:
                    got = proc.stdout.readline(REPORT_LIMIT)
                    lines.put(got if got.endswith(b"\n") else None)
                    if not got.endswith(b"\n"):
                        return
            except (OSError, ValueError):
                lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        own, calls, why, timed_out = 0.0, 0, "", False
        try:
            proc.stdin.write(line)
            proc.stdin.flush()
            while True:
                waited = time.monotonic()
                budget = min(limits.wall_seconds - own, JUDGE_TOTAL_S - (waited - started))
                try:
                    request = lines.get(timeout=max(0.0, budget))
                except queue.Empty:
                    timed_out, why = True, f"timed out after {limits.wall_seconds:g} s"
                    break
                own += time.monotonic() - waited
                if request is None:
                    break
                calls += 1
                if calls > MAX_JUDGE_CALLS:
                    why = f"the test calls the code more than {MAX_JUDGE_CALLS} times"
                    break
                reply = _call_for_judge(chosen, limits, code, case, request)
                proc.stdin.write(ascii(reply).encode("ascii") + b"\n")
                proc.stdin.flush()
        except (OSError, ValueError):
            pass  # the judge exited (a failed assert) while a reply was on its way
        if why:
            processes._kill_tree(proc)
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            processes._kill_tree(proc)
        processes._kill_tree(proc)
        stderr = err.data()
    finally:
        isolation.remove_work(work)
    elapsed = time.monotonic() - started
    if why:
        return False, why, timed_out, elapsed
    if proc.returncode != 0:
        tail = stderr.decode("utf-8", "replace").strip()[-200:]
        return False, "the test failed" + (f": {short(tail, 200)}" if tail else ""), False, elapsed
    return True, "", False, elapsed


def _call_for_judge(chosen: str, limits: Limits, code: str, case: JudgeCase, request: bytes) -> list:
    """One call the judge asks for: run it on the code in a fresh sandbox; the reply the judge reads."""
    try:
        req = json.loads(request)
        kind, name, args, kwargs = req
        if kind != "call" or name not in case.names:
            raise ValueError("not a call of the code")
        args_v, kwargs_v = values_.decode(args), values_.decode(kwargs)  # bounded, plain
        if not isinstance(args_v, list) or not isinstance(kwargs_v, dict):
            raise ValueError("malformed call")
    except (ValueError, TypeError, RecursionError) as exc:
        return ["raised", "RuntimeError", f"bad request from the test: {short(str(exc), 100)}"]
    job = {"mode": "call", "code": code, "fn": name, "args": values_.encode(args_v),
           "kwargs": values_.encode(kwargs_v), "materialize": False, "echo": True}
    o = processes.spawn(chosen, limits, job, CALL_CAP)
    if o.timed_out or o.signal() or o.overflow or o.returncode != 0:
        why = "timed out" if o.timed_out else _SIGNALS.get(o.signal(), "") or (
            "output too large" if o.overflow else f"exited with status {o.returncode}")
        return ["raised", "RuntimeError", f"{name}(): {why}"]
    report = _parse(o.stdout)
    if report is None:
        return ["raised", "RuntimeError", f"{name}(): no well-formed report"]
    tag, payload = report
    if tag == "echo":
        try:
            value, after_args, after_kwargs = payload
            out = values_.encode(values_.decode(value))
            a = values_.decode(after_args)
            k = values_.decode(after_kwargs)
            restore = (values_.encode(a), values_.encode(k)) if isinstance(a, list) and isinstance(k, dict) else (
                None, None)
            return ["ok", out, *restore]
        except (values_.Refused, ValueError, TypeError, RecursionError) as exc:
            return ["raised", "TypeError", f"{name}() returned what is not plain data ({short(str(exc), 80)})"]
    text = str(payload)
    if tag == "raised":
        kind = text.split(":", 1)[0].strip()
        return ["raised", kind if kind.isidentifier() else "RuntimeError", short(text.partition(": ")[2], 200)]
    if tag == "missing":
        return ["raised", "NameError", short(text, 200)]
    return ["raised", "TypeError" if tag == "error" else "RuntimeError", short(text, 200)]


def _result(n_tests: int, by_test: dict[int, list], protections: tuple[str, ...],
            forgeable: bool = False) -> SandboxResult:
    verdicts = [v for vs in by_test.values() for v in vs]
    elapsed = max([v[3] for v in verdicts] or [0.0])
    timed_out = any(v[2] for v in verdicts)
    n_passed, errors = 0, []
    for k in range(n_tests):
        vs = by_test.get(k, [])
        if vs and all(v[0] for v in vs):
            n_passed += 1
        else:
            errors.append(f"test {k + 1}: " + next((v[1] for v in vs if not v[0]), "not run"))
    code_errors = [e for e in errors if "code: " in e]
    error = short((code_errors or errors or [""])[0], 300)
    return SandboxResult(n_tests > 0 and n_passed == n_tests, n_tests, n_passed, timed_out, error,
                         round(elapsed, 3), protections, forgeable)


def _judge(case: Any, o: Outcome, limits: Limits) -> tuple[bool, str]:
    """(passed, why not) for one case from what its process did; the parent's comparison."""
    if o.timed_out:
        return False, f"timed out after {limits.wall_seconds:g} s"
    sig = o.signal()
    if sig:
        why = _SIGNALS.get(sig, f"killed by signal {sig}")
        return False, why + (f" ({limits.cpu_seconds} s)" if sig == signal.SIGXCPU else "")
    if o.overflow:
        return False, "output larger than the expected value allows"
    if o.returncode != 0:
        tail = o.stderr.decode("utf-8", "replace").strip()[-200:]
        why = "no exit status" if o.returncode is None else f"exited with status {o.returncode}"
        return False, why + (f": {short(tail, 200)}" if tail else "")
    if case is None:  # forgeable: the exit status is the verdict
        return True, ""
    if isinstance(case, ProgramCase):
        ok = values_.same_output(o.stdout, case.stdout, case.rule)
        return ok, "" if ok else "stdout differs from the expected output"
    report = _parse(o.stdout)
    if report is None:
        return False, "no well-formed report"
    tag, payload = report
    if tag == "echo":
        return False, "no well-formed report"
    if tag != "ok":
        prefix = "code: " if tag in ("code-error", "missing") else ""
        return False, prefix + short(str(payload), 200)
    return _compare(case, payload)


def _compare(case: CallCase, payload: Any) -> tuple[bool, str]:
    try:
        value = values_.decode(payload, values_.ALL_EXTRAS, values_.digits_of(case.expected))
        for w in case.wrappers:
            if w[0] == "round":
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    return False, "round() of a result that is not a number"
                value = round(value, w[1])
            else:
                if w[0] in ("set", "frozenset") and isinstance(value, (list, tuple)):
                    values_.few_collisions(list(value))  # a set of crafted keys is quadratic to build
                value = values_.WRAPPERS[w[0]](value)
        if case.json:
            value = _as_json(value)
        if _is_probe(case):  # the sandbox's bit: result is expected
            if value is not True and value is not False:
                return False, "no well-formed report"
            ok = value if case.op == "is" else not value
            return ok, "" if ok else f"the result fails `{_rule(case)}`"
        ok = values_.matches(value, case.op, case.expected, case.result_first, case.tol, case.extra)
    except Exception as exc:  # noqa: BLE001 - Refused, InvalidOperation, TypeError of `<`: this case fails
        return False, f"result not comparable ({type(exc).__name__}: {short(str(exc), 120)})"
    return ok, "" if ok else f"got {_preview(value)}, which fails `{_rule(case)}`"


def _preview(value: Any) -> str:
    try:
        return short(repr(value), 60)
    except ValueError:  # an int past the 4,300-digit str limit
        return f"an {type(value).__name__} too long to show"


def _rule(case: CallCase) -> str:
    return explain(case).split("; pass when ", 1)[-1]


def _as_json(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_as_json(x) for x in v]
    if isinstance(v, dict):
        return {k: _as_json(x) for k, x in v.items()}
    return v


def _parse(data: bytes) -> tuple[str, Any] | None:
    """The harness's one JSON line, or None for anything else (two lines, junk, nothing)."""
    if not data.endswith(b"\n") or data.count(b"\n") != 1:
        return None
    try:
        report = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if isinstance(report, list) and len(report) == 2 and report[0] in _TAGS:
        return report[0], report[1]
    return None


_TAGS = ("ok", "echo", "code-error", "missing", "raised", "error")
_SIGNALS = {signal.SIGXCPU: "CPU time limit exceeded", signal.SIGKILL: "killed (memory or process limit, or "
            "the timeout)", signal.SIGXFSZ: "file size limit exceeded", signal.SIGSEGV: "crashed (segmentation fault)"}


def _protections(chosen: str) -> tuple[str, ...]:
    if chosen != "bwrap":
        return ("rlimits",)
    uid = "uid-own" if os.geteuid() == 0 else "uid-65534"
    out = ("bwrap", uid, "no-caps", "pidns", "netns", "mountns", "ipcns", "rlimits")
    if isolation.seccomp.program() is not None:
        out += ("seccomp",)
    return out + (isolation.whole_sandbox_limits().replace(" ", "-"),)
