"""The code verifier's sandbox: test cases as data, converted from the usual formats, run on model-written
code under OS isolation and judged by the parent (threat model: `rlft.verifiers.sandbox.run`).

  cases      CallCase / ProgramCase / JudgeCase / Test / Refusal, and `explain`
  convert    MBPP asserts, HumanEval `check`, I/O pairs, JSON cases -> cases, or refusals
  literals   literal values of tests (constructors, folded arithmetic); judged: what the judge may run
  values     the wire format, bounded decoding, the equality and the tests' tolerance forms
  harness    the program each sandboxed process runs
  run        cases to processes to verdicts, the forgeable mode (threat model)
  processes  one sandboxed process per case: spawn, feed, read bounded, kill; spawner (cgroup helper)
  isolation  bubblewrap; seccomp (syscall filter); cgroup (memory + pids for the whole sandbox);
             uids (sandbox uids per verifier process, under locks)
"""

from rlft.verifiers.sandbox.cases import CallCase, JudgeCase, ProgramCase, Refusal, Test, explain
from rlft.verifiers.sandbox.run import Limits, SandboxResult, run_cases, run_forgeable, run_many, run_tests

__all__ = ["CallCase", "JudgeCase", "Limits", "ProgramCase", "Refusal", "SandboxResult", "Test", "explain",
           "run_cases", "run_forgeable", "run_many", "run_tests"]
