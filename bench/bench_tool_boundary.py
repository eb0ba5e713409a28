"""What the tool process boundary costs per call (rlft/tools/process.py), beside the in-process guard it replaced.

The shipped calculator environment (data/tools/calculator.py), one expression, called:
  bare        the method itself, in this process
  in-process  rlft.tools.containment.guard: argument check, SIGALRM timeout, output captured, cwd restored, capped
              (what rlft did before the worker; kept here for the comparison)
  worker      what rlft does now: the argument check here, the call in the environment's worker process (one
              round trip over a socket, JSON), the result capped here
  reset       the worker's reset of one episode (a round trip too; one per episode)
Prints the CPU model and flags, the load average before and after, and microseconds per call.
Usage: python bench/bench_tool_boundary.py [calls]
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rlft.tools import Limits, ToolStats, guarded_env_class, load_env  # noqa: E402
from rlft.tools.containment import guard as in_process_guard  # noqa: E402
from rlft.user_code import load_python_file  # noqa: E402


def _cpu() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    model = next((x.split(":", 1)[1].strip() for x in info.splitlines() if x.startswith("model name")), "?")
    flags = next((x.split(":", 1)[1].split() for x in info.splitlines() if x.startswith("flags")), [])
    keep = [f for f in flags if f.startswith(("avx", "amx", "fma", "sse4"))]
    return f"{model}, {os.cpu_count()} CPUs, flags {' '.join(keep)}"


def _time(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main(calls: int = 2000) -> int:
    print(f"cpu: {_cpu()}")
    print(f"load before: {os.getloadavg()}")
    path = ROOT / "data/tools/calculator.py"
    module = load_python_file(path, "env", prefix="bench")
    local = module.Calculator()
    local.reset()
    inproc = in_process_guard(module.Calculator.calculate, Limits(), ToolStats())
    cls = guarded_env_class(load_env(f"{path}:Calculator"), Limits(), ToolStats())
    env = cls()
    env.reset(prompt=[], answer="")
    out = {"bare": _time(lambda: local.calculate(expression="(23*47)-1"), calls),
           "in-process": _time(lambda: inproc(local, expression="(23*47)-1"), calls),
           "worker": _time(lambda: env.calculate(expression="(23*47)-1"), calls),
           "reset": _time(lambda: env.reset(prompt=[{"role": "user", "content": "23*47="}], answer="1081"), calls)}
    assert env.calculate(expression="(23*47)-1") == "1080"
    for name, us in out.items():
        print(f"{name:10s} {us:9.1f} us/call  ({us / out['bare']:.0f}x bare, {us / out['in-process']:.2f}x in-process)")
    print(f"load after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000))
