"""The benchmarks' exit codes: a benchmark that could not measure what its goal is about must not exit 0
(`make bench` says "every goal met" only when every script exits 0)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT


def bench(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


OK = {"status": "completed"}
FAILED = {"status": "failed", "error": "UserError: train.learning_rate = -1 must be > 0"}


@pytest.mark.parametrize("results, goals, skip_trl, missing, code", [
    ({"rlft": [FAILED]}, None, True, None, 1),                    # the issue's --skip-trl --lr -1 run
    ({"rlft": [OK, FAILED], "trl": [OK, OK]}, {"speed >= 1.5x": True}, False, None, 1),  # one seed failed
    ({"rlft": [OK], "trl": [FAILED]}, None, False, None, 1),
    ({"rlft": [{"status": "stopped"}]}, None, True, None, 1),     # an alarm stopped the run: not measured
    ({"rlft": [OK]}, None, False, "pip install trl==1.12.0 failed", 1),  # TRL side could not be installed
    ({"rlft": [OK]}, None, True, None, 3),                        # nothing compared, on request
    ({"rlft": [OK], "trl": [OK]}, {}, False, None, 1),              # an empty goal dict is not "all met"
    ({"rlft": [OK], "trl": [OK]}, {"speed >= 1.5x": True, "accuracy gain >= TRL": False}, False, None, 1),
    ({"rlft": [OK], "trl": [OK]}, {"speed >= 1.5x": True, "accuracy gain >= TRL": True}, False, None, 0),
    ({}, None, True, None, 1),
])
def test_bench_ppo_verdict(results, goals, skip_trl, missing, code):
    seeds = [42, 43][:max((len(v) for v in results.values()), default=1)]
    report = {"seeds": seeds, "missing": missing}
    if goals is not None:
        report["goals"] = goals
    got, line = bench("bench_ppo").verdict(report, results, skip_trl)
    assert got == code, line
    assert ("FAILED" in line or "NOT" in line) == (code == 1), line


def test_bench_overhead_flags_a_comparison_it_could_not_make():
    m = bench("bench_overhead")
    good = m.Run(10.0, 8.0, 0.5, Path("x"))
    assert m.unmeasured([m.Pair("sft", 10, [good], [good], {})]) == []
    assert m.unmeasured([]) == ["no method was run"]
    no_runtime = m.Run(10.0, None, 0.5, Path("x"))
    assert "sft: TRL reported no train_runtime/train_loss" in m.unmeasured([m.Pair("sft", 10, [good], [no_runtime])])
    diff = m.unmeasured([m.Pair("dpo", 10, [good], [good], {"beta": [0.1, 0.2]})])
    assert diff == ["dpo: TrainingArguments differ (beta)"]


def test_bench_overhead_refuses_unknown_methods_before_running_anything():
    proc = subprocess.run([sys.executable, str(ROOT / "bench/bench_overhead.py"), "--methods", "ppo"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "nothing to measure" in proc.stdout, proc.stdout + proc.stderr


def test_draws_are_seeded_pairs_of_the_shipped_kind_off_the_held_out_problems():
    draws = bench("draws")
    pairs = draws.draw(7, 300)
    test = {line.split('"')[3] for line in (ROOT / "data/arith/test.jsonl").read_text().splitlines()}
    assert len(pairs) == 300 and not {p["prompt"] for p in pairs} & test
    for p in pairs:
        a, b = map(int, p["prompt"][:-1].split("+"))
        assert p["chosen"] == str(a + b) and p["rejected"] != p["chosen"]
    assert draws.draw(7, 300) == pairs and draws.draw(11, 300) != pairs
