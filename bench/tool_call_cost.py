"""What rlft's containment of one tool call costs, per call, beside the bare call and a child process.

Three ways to call the shipped calculator tool (data/tools/calculator.py) on one expression:
  bare       the function itself
  guarded    rlft.tools.guard: argument check, SIGALRM timeout, stdout/stderr captured, cwd restored, result capped
  process    one call in a fresh child process per call (multiprocessing, fork): the process boundary the issue
             weighs (a hard kill an `except` cannot swallow), not what rlft does today
Prints microseconds per call for each and the ratios. Usage: python bench/tool_call_cost.py [calls]
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlft.tools import Limits, ToolStats, guard, load_env  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


_ENV = {}


def _child(q, expression):
    """The call in a forked child: the environment was loaded in the parent (fork shares it)."""
    q.put(_ENV["cls"].calculate(_ENV["env"], expression=expression))


def main(calls: int = 2000) -> int:
    cls = load_env(str(ROOT / "data/tools/calculator.py") + ":Calculator")
    env = cls()
    env.reset(prompt=[], answer="")
    _ENV.update(cls=cls, env=env)
    bare = cls.calculate
    guarded = guard(cls.calculate, Limits(), ToolStats())
    out = {}
    for name, fn in (("bare", bare), ("guarded", guarded)):
        start = time.perf_counter()
        for _ in range(calls):
            fn(env, expression="(23*47)-1")
        out[name] = (time.perf_counter() - start) / calls * 1e6
    ctx = mp.get_context("fork")
    n = max(20, calls // 50)
    start = time.perf_counter()
    for _ in range(n):
        q = ctx.Queue()
        p = ctx.Process(target=_child, args=(q, "(23*47)-1"))
        p.start()
        q.get()
        p.join()
    out["process"] = (time.perf_counter() - start) / n * 1e6
    for name, us in out.items():
        print(f"{name:8s} {us:10.1f} us/call  ({us / out['bare']:.1f}x bare)")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000))
