"""bench/gpu_check.sh, the prepared device check (docs/gpu.md): its CPU dry run end to end (every step on tiny
sizes, so the script cannot rot between lent GPU machines), and the arithmetic and judgements it reports."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import time

import pytest
from helpers import ROOT

SPEED = ("sft", "dpo", "reward", "ppo", "grpo")


def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_config_is_qwen2_5_0_5b_shape():
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    raw = {k: v for k, v in json.loads((ROOT / "bench/qwen2.5-0.5b.json").read_text()).items()
           if not k.startswith("_")}
    assert (raw["hidden_size"], raw["num_hidden_layers"], raw["num_attention_heads"], raw["num_key_value_heads"],
            raw["intermediate_size"], raw["vocab_size"], raw["tie_word_embeddings"]) == (
        896, 24, 14, 2, 4864, 151936, True)
    with torch.device("meta"):  # no memory: the shape only
        model = AutoModelForCausalLM.from_config(Qwen2Config(**raw))
    # Qwen2.5-0.5B's published count: 0.49B parameters, 0.36B without the (tied) embedding.
    assert sum(p.numel() for p in model.parameters()) == 494_032_768
    assert model.get_input_embeddings().weight.numel() == 151936 * 896


def test_dry_run_runs_every_step_and_reports_numbers(tmp_path, rlft_cache):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "RLFT_CACHE": str(rlft_cache),
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    r = subprocess.run(["bash", str(ROOT / "bench/gpu_check.sh"), "--dry-run", "--work", str(tmp_path / "work")],
                       env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["dry_run"] and report["failures"] == []
    assert report["install"]["status"] == "skipped"
    steps = report["steps"]
    help_text = subprocess.run([sys.executable, "-m", "rlft", "--help"], capture_output=True, text=True,
                               env=env, cwd=ROOT).stdout
    expected = {"env", "tiny-sft-learns", "tiny-dpo-ln2", "build-qwen", *SPEED, "bootstrap", "tiny-sft-short",
                "tiny-grpo-rises"}
    assert set(steps) == expected
    for name, res in steps.items():
        if name == "bootstrap" and " bootstrap " not in help_text:
            assert res["status"] == "skipped" and "not on this branch" in res["why"]
        else:
            assert res["status"] == "ok", (name, res)
        assert f"] {name}" in r.stdout  # one line per step
    assert steps["env"]["cuda_available"] is False and steps["env"]["rlft_from"] == str(ROOT / "rlft")
    assert steps["build-qwen"]["shape"]["num_hidden_layers"] == 2 and steps["build-qwen"]["params"] > 0
    for name in SPEED:  # every speed step measured its steps and the tokens it trained on
        res = steps[name]
        assert res["rlft_steps"] == 2 and res["optimizer_steps"] >= 2, (name, res)
        assert res["s_per_step"] > 0 and res["train_tokens_per_s"] > 0 and res["train_tokens_per_step"] > 0
        assert "peak_allocated_gib" not in res  # a CPU: no GPU memory to report
    assert steps["grpo"]["other_tokens_per_s"] > 0 and steps["ppo"]["other_tokens_per_s"] > 0  # generation
    assert abs(steps["tiny-dpo-ln2"]["check_numbers"]["first_loss"] - math.log(2)) < 1e-3
    assert steps["tiny-sft-learns"]["check_passed"]
    assert "check" not in steps["tiny-grpo-rises"]  # too few steps to judge at the dry run's size
    assert "| sft | ok |" in r.stdout and "0 failure(s)" in r.stdout
    log = (out / "gpu_check.log").read_text()
    assert "==== tiny-dpo-ln2: ok" in log
    print(f"dry run: {time.perf_counter() - t0:.0f} s")


def test_a_step_past_its_timeout_is_killed_and_reported(tmp_path, rlft_cache, monkeypatch):
    g = gpu_check()
    monkeypatch.setenv("RLFT_CACHE", str(rlft_cache))
    monkeypatch.chdir(ROOT)
    step = next(s for s in g.plan(tmp_path, dry=True) if s.name == "tiny-sft-learns")
    logs = tmp_path / "logs"
    logs.mkdir()
    t0 = time.perf_counter()
    res = g.run_isolated(step, tmp_path, logs, True, timeout=2.0, isolation="spawn")
    assert res["status"] == "timeout" and "timed out after 2 s" in res["error"]
    assert time.perf_counter() - t0 < 15
    assert not (tmp_path / "tiny-sft" / "summary.json").exists()  # killed before it finished


def test_budget_skips_what_would_not_fit_and_unknown_steps_are_refused(tmp_path, capsys, monkeypatch):
    g = gpu_check()
    monkeypatch.chdir(tmp_path)  # main() moves to the repository; the environment it sets is restored after
    for name in ("CUDA_VISIBLE_DEVICES", "RLFT_CACHE", "TOKENIZERS_PARALLELISM", "PYTHONUNBUFFERED", "MPLBACKEND"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
    monkeypatch.setenv("RLFT_CACHE", str(tmp_path / "cache"))
    code = g.main(["--dry-run", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "w"), "--budget", "1",
                   "--only", "tiny-dpo-ln2", "--isolation", "spawn"])
    report = json.loads((tmp_path / "out/gpu_check.json").read_text())
    assert code == 0 and set(report["steps"]) == {"env", "tiny-sft-learns", "tiny-dpo-ln2"}  # its dependency
    assert report["steps"]["env"]["status"] == "skipped" and "of the budget left" in report["steps"]["env"]["why"]
    assert "needs tiny-sft-learns" in report["steps"]["tiny-dpo-ln2"]["why"]
    assert g.main(["--dry-run", "--out", str(tmp_path / "o2"), "--only", "sft,ppx"]) == 2
    assert "unknown step(s) ppx in --only" in capsys.readouterr().err
    assert not (tmp_path / "o2").exists()  # refused before anything is written


def test_speed_numbers_leave_out_the_first_step_and_use_6_n_t():
    g = gpu_check()
    # 4 rlft steps, one optimizer step each: (seconds, training tokens, other tokens) after each.
    marks = [(10.0, 1000, 50), (12.0, 2000, 100), (14.0, 3000, 150), (16.0, 4000, 200)]
    nums = g.speed_numbers({"marks": marks}, params=1_000_000_000, global_steps=4, peak_tflops=1000.0,
                           measured_tflops=800.0)
    assert nums["s_per_step"] == 2.0 and nums["train_tokens_per_s"] == 500.0 and nums["other_tokens_per_s"] == 25.0
    assert nums["train_tflops"] == 3.0  # 6 x 1e9 x 500 tokens/s
    assert nums["share_of_bf16_peak"] == 0.003 and nums["share_of_measured_matmul"] == 0.0037
    # Two optimizer steps per rlft step: the window still starts after the first rlft step.
    two = [(1.0, 10, 0), (2.0, 20, 0), (5.0, 30, 0), (6.0, 40, 0)]
    assert g.speed_numbers({"marks": two}, None, 2, None, None)["s_per_step"] == 4.0
    one = g.speed_numbers({"marks": [(3.0, 30, 0)]}, None, 1, None, None)
    assert one["warmup_included"] and one["s_per_step"] == 3.0
    assert "s_per_step" not in g.speed_numbers({"marks": []}, None, 3, None, None)


@pytest.mark.parametrize("kind, rows, passed", [
    ("sft_learns", [{"loss": 3.0}, {"loss": 2.0}], True),
    ("sft_learns", [{"loss": 3.0}, {"loss": 2.9}], False),
    ("dpo_ln2", [{"loss": 0.6931, "rewards/margins": 0.0}, {"loss": 0.5, "rewards/margins": 1.0}], True),
    ("dpo_ln2", [{"loss": 0.70, "rewards/margins": 0.0}], False),  # policy != reference at step 1
    ("grpo_rises", [{"reward": r} for r in (0.4, 0.45, 0.5, 0.5, 0.6, 0.6, 0.65, 0.7)], True),
    ("grpo_rises", [{"reward": r} for r in (0.5, 0.5, 0.52, 0.5, 0.5, 0.51, 0.5, 0.52)], False),
    ("grpo_rises", [{"reward": 0.5}], False),
])
def test_learning_judgements(kind, rows, passed):
    assert gpu_check().judge(kind, rows)[0] is passed


def test_failure_line_prefers_rlft_error_then_the_exception():
    g = gpu_check()
    assert g.failure_line(["x", "error: dpo.beta = -1: must be >= 0.0", "Traceback"], "fb") == \
        "error: dpo.beta = -1: must be >= 0.0"
    assert g.failure_line(["Traceback (most recent call last):", "  File ...",
                           "torch.OutOfMemoryError: CUDA out of memory."], "fb") == \
        "torch.OutOfMemoryError: CUDA out of memory."
    assert g.failure_line(["all fine"], "exit code 3") == "exit code 3"


def test_peaks_by_gpu_name(monkeypatch):
    g = gpu_check()
    monkeypatch.delenv("PEAK_TFLOPS", raising=False)
    assert g.peaks("NVIDIA H200") == (989.0, 790.0)
    assert g.peaks(None) == (None, None) and g.peaks("Some GPU") == (None, None)
    monkeypatch.setenv("PEAK_TFLOPS", "100")
    assert g.peaks("NVIDIA H200") == (100.0, None)
