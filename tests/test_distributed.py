"""Multi-process runs (torchrun / accelerate launch): two CPU processes under gloo DDP.

Every process runs the same command; only the main one (RANK 0) checks, creates and writes the run folder.
Before that rule, the second process found the folder the first had just created "not empty" and exited 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def torchrun(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "rlft", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


def check_run(r: subprocess.CompletedProcess, out: Path, steps: int) -> dict:
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["global_step"] == steps
    assert (out / "model.safetensors").exists() and (out / "report/report.md").exists()
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logged = [r["step"] for r in records  # training logs only: eval, held-out and the closing summary share a step
              if not any(k.startswith(("eval_", "heldout/")) or k == "train_runtime" for k in r)]
    assert len(logged) == len(set(logged)), "each step is logged once, by the main process only"
    assert (r.stdout + r.stderr).count("done: ") == 1, "the closing line is printed once"
    return summary


@pytest.mark.slow  # over 15 s: make test-slow
def test_sft_under_two_process_ddp(tmp_path, tiny_dir):
    out = tmp_path / "sft"
    r = torchrun("sft", "--recipe", "recipes/sft_tiny_short.yaml", "--model", str(tiny_dir), "--max-steps", "20",
                 "--set", "train.logging_steps=5", "-o", str(out))
    summary = check_run(r, out, 20)
    # Real data parallelism: 400 rows in batches of 2 processes x 32 = 7 steps per epoch, so 20 steps are 20/7
    # epochs (one process alone: 13 steps per epoch, 20/13).
    assert summary["final_metrics"]["epoch"] == pytest.approx(20 / 7, abs=0.01)


@pytest.mark.slow  # over 15 s: make test-slow
def test_busy_output_dir_is_still_refused_under_ddp(tmp_path, tiny_dir):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    r = torchrun("sft", "--recipe", "recipes/sft_tiny_short.yaml", "--model", str(tiny_dir), "--max-steps", "5",
                 "-o", str(out))
    assert r.returncode != 0
    assert "is not empty" in r.stdout + r.stderr
    assert (out / "notes.txt").read_text() == "mine" and len(list(out.iterdir())) == 1
    # The second process, waiting for the main one to join, dies at torchrun's SIGTERM: not 30 s later by SIGKILL.
    assert "SIGKILL" not in r.stdout + r.stderr and "(SIGTERM)" in r.stdout + r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("method, extra", [
    ("dpo", ["--recipe", "recipes/dpo_tiny.yaml"]),
    ("reward", ["--recipe", "recipes/reward_tiny.yaml"]),
    ("grpo", ["--recipe", "recipes/grpo_math_tiny.yaml", "--eval-data", "data/arith/test.jsonl"]),
    ("ppo", ["--recipe", "recipes/ppo_tiny.yaml"]),
])
def test_methods_under_two_process_ddp(tmp_path, sft_short, method, extra):
    out = tmp_path / method
    r = torchrun(method, *extra, "--model", str(sft_short), "--max-steps", "20", "-o", str(out))
    summary = check_run(r, out, 20)
    if method == "ppo":  # rlft's own loop shards the prompts: 2 processes x 64 prompts x 20 updates
        assert summary["final_metrics"]["episodes"] == 2 * 64 * 20
    if method == "grpo":
        assert summary["final_metrics"]["heldout_pass_at_1"] > 0.3
        assert (out / "preflight.json").exists()
    assert (r.stdout + r.stderr).count("pre-flight: pass rate") == (1 if method == "grpo" else 0)
