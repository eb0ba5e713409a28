"""Benchmark: how long `rlft --help` takes next to `trl --help` and next to the floor, `import typer, rich`.

    python bench/bench_cli.py [--n 10]

1. Start-up time: `rlft --help`, `trl --help` (TRL's console script, same venv), the floor
   `python -c "import typer, rich"` (what any Typer + rich CLI pays before its own code) and
   `rlft choose --data data/arith/grpo_prompts.jsonl` (a command that reads 1k rows and prints advice),
   and, for information, `rlft --help` with TYPER_USE_RICH=0 (plain Click help: what Typer's rich
   formatter costs), each run --n times after one warm-up, interleaved round-robin so that load on the machine hits all
   of them alike. Prints median and min of each and the ratios rlft/floor and trl/rlft.
   Goal: median `rlft --help` under 0.3 s (exit 1 when not met).
2. Imports: which modules `import rlft.cli` pulls in beyond the floor (count, and the heaviest by
   cumulative import time from `python -X importtime`), and what rendering `--help` adds. torch,
   transformers, trl, datasets and peft must not be among them (exit 1 when one is).

Every child runs with a working bytecode cache (PYTHONPYCACHEPREFIX in a temporary folder, filled by the
warm-up), as an installed package has: where PYTHONDONTWRITEBYTECODE=1 is set (some sandboxes), rlft's
editable sources would otherwise be recompiled at every start, while site-packages keep their .pyc files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
FORBIDDEN = ("torch", "transformers", "trl", "datasets", "peft")
GOAL_S = 0.3


def console_script(name: str, module_fallback: list[str]) -> list[str]:
    """The venv's console script when installed, else `python -m ...` (same code path)."""
    exe = BIN / name
    if exe.exists():
        return [str(exe)]
    found = shutil.which(name)
    return [found] if found else [sys.executable, *module_fallback]


def trl_help_command() -> list[str]:
    """`trl --help` (trl 1.x ships the `trl` console script, entry point trl.cli:main)."""
    cmd = console_script("trl", ["-m", "trl.cli"])
    probe = subprocess.run([*cmd, "--help"], check=False, capture_output=True, text=True, cwd=ROOT)
    if probe.returncode != 0 or "usage" not in probe.stdout.lower():
        raise SystemExit(f"`{' '.join(cmd)} --help` failed (exit {probe.returncode}): {probe.stderr[-300:]}")
    return cmd


def child_env(pycache: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPYCACHEPREFIX=pycache, COLUMNS="100")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def time_once(cmd: list[str], env: dict[str, str]) -> float:
    if cmd[0].startswith("TYPER_USE_RICH="):  # a variant: the same command with an extra variable
        key, value = cmd[0].split("=", 1)
        env, cmd = dict(env, **{key: value}), cmd[1:]
    start = time.perf_counter()
    proc = subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"`{' '.join(cmd)}` exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    return elapsed


def startup(n: int, env: dict[str, str]) -> dict[str, list[float]]:
    rlft = console_script("rlft", ["-m", "rlft"])
    commands = {
        "rlft --help": [*rlft, "--help"],
        "trl --help": [*trl_help_command(), "--help"],
        "floor (import typer, rich)": [sys.executable, "-c", "import typer, rich"],
        "rlft choose --data (1k rows)": [*rlft, "choose", "--data", "data/arith/grpo_prompts.jsonl"],
        # What Typer's rich help formatter costs: the same help, plain Click formatting (information only).
        "rlft --help, TYPER_USE_RICH=0": ["TYPER_USE_RICH=0", *rlft, "--help"],
    }
    for cmd in commands.values():  # warm-up: page cache, bytecode cache
        time_once(cmd, env)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(n):  # interleaved: a burst of load on the machine hits every command alike
        for name, cmd in commands.items():
            times[name].append(time_once(cmd, env))
    return times


def report_startup(times: dict[str, list[float]], n: int) -> bool:
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"start-up time, {n} interleaved runs each after 1 warm-up (seconds):")
    print(f"  {'command':30s} {'median':>8s} {'min':>8s}")
    for name, values in times.items():
        print(f"  {name:30s} {med[name]:8.3f} {min(values):8.3f}")
    rlft, trl, floor = med["rlft --help"], med["trl --help"], med["floor (import typer, rich)"]
    print(f"  rlft --help / floor:  {rlft / floor:6.2f}x  (rlft --help - floor: {(rlft - floor) * 1000:.0f} ms: "
          f"rich.console, Click parsing and help rendering, rlft's modules)")
    print(f"  trl --help / rlft --help: {trl / rlft:6.2f}x")
    plain = med["rlft --help, TYPER_USE_RICH=0"]
    print(f"  Typer's rich help formatter costs {(rlft - plain) * 1000:.0f} ms of rlft --help "
          f"({rlft:.3f} s with it, {plain:.3f} s with plain Click help)")
    ok = rlft < GOAL_S
    print(f"  goal: rlft --help median under {GOAL_S} s: {'met' if ok else 'NOT met'} ({rlft:.3f} s)")
    return ok


IMPORT_PROBE = """
import json, sys
before = set(sys.modules)
{code}
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def modules_after(code: str, env: dict[str, str]) -> set[str]:
    out = subprocess.run([sys.executable, "-c", IMPORT_PROBE.format(code=code)], capture_output=True,
                         text=True, env=env, cwd=ROOT, check=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def import_times(code: str, env: dict[str, str]) -> list[tuple[int, int, str]]:
    """(depth, cumulative microseconds, module) from `python -X importtime`, for one fresh process."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], check=False, capture_output=True,
                          text=True, env=env, cwd=ROOT)
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|")
        stripped = name.lstrip(" ")
        rows.append(((len(name) - len(stripped) - 1) // 2, int(cumulative), stripped.strip()))
    return rows


HELP_CODE = """
from rlft.cli import main
try:
    main(["--help"])
except SystemExit:
    pass
"""


def imports(env: dict[str, str]) -> bool:
    floor = modules_after("import typer, rich", env)
    cli = modules_after("import rlft.cli", env)
    helped = modules_after(HELP_CODE, env)
    heavy = sorted(m for m in cli | helped if m.split(".")[0] in FORBIDDEN)
    extra = cli - floor
    top = sorted({m.split(".")[0] for m in extra if not m.startswith("_")})
    print(f"imports of `import rlft.cli`: {len(cli)} modules (floor `import typer, rich`: {len(floor)}; "
          f"{len(extra)} more, in {len(top)} top-level packages: {', '.join(top)})")
    with_console = modules_after("import typer, rich, rich.console, rich.markup", env)
    own = sorted(cli - with_console)
    print(f"  of these, rich.console (the Console objects rlft.cli creates) brings {len(with_console - floor)}; "
          f"the other {len(own)}: {', '.join(own)}")
    print(f"  rendering `rlft --help` loads {len(helped - cli)} more (typer's rich help formatter: "
          f"{', '.join(sorted({m.split('.')[0] for m in helped - cli if not m.startswith('_')})) or 'none'})")
    rows = import_times(HELP_CODE, env)
    ranked = sorted(((cum, name) for depth, cum, name in rows if depth <= 1 and cum >= 3000), reverse=True)
    print("  heaviest imports of `rlft --help` (cumulative ms, one process):")
    for cum, name in ranked[:10]:
        print(f"    {cum / 1000:7.1f}  {name}")
    print(f"  forbidden ({', '.join(FORBIDDEN)}): {', '.join(heavy) if heavy else 'none imported'}")
    return not heavy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10, help="timed runs of each command")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="rlft-bench-pyc-") as pycache:
        env = child_env(pycache)
        ok_time = report_startup(startup(args.n, env), args.n)
        ok_imports = imports(env)
    print(f"load average (1 min) {load:.2f} at start, {os.getloadavg()[0]:.2f} at end, on {os.cpu_count()} CPUs")
    return 0 if ok_time and ok_imports else 1


if __name__ == "__main__":
    sys.exit(main())
