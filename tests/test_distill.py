"""On-policy distillation (rlft distill): the tokenizer check, self-distillation's zero loss, and the gain (slow)."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import DATA, ROOT

PROMPTS = DATA / "arith/grpo_prompts.jsonl"
HELDOUT = DATA / "arith/test.jsonl"
RECIPE = ROOT / "recipes/distill_tiny.yaml"
FAST = ["--max-steps", "2", "--batch-size", "8", "--set", "train.logging_steps=1",
        "--set", "distill.max_completion_length=6", "--set", "data.max_rows=32"]


def other_tokenizer_model(src, dst):
    """A copy of `src` whose tokenizer swaps the ids of '1' and '2': same size, different vocabulary."""
    shutil.copytree(src, dst)
    doc = json.loads((dst / "tokenizer.json").read_text())
    vocab = doc["model"]["vocab"]
    vocab["1"], vocab["2"] = vocab["2"], vocab["1"]
    (dst / "tokenizer.json").write_text(json.dumps(doc))
    return dst


def test_teacher_with_another_tokenizer_is_refused_and_nothing_is_written(cli, tmp_path, sft_model):
    teacher = other_tokenizer_model(sft_model, tmp_path / "teacher")
    out = tmp_path / "distill"
    r = cli("distill", "--teacher", teacher, "--prompts", PROMPTS, "--model", sft_model, "-o", out, *FAST)
    assert r.code == 2, r.text
    assert "has a different tokenizer" in r.err and "2 token ids differ" in r.err
    lines = r.err.strip().splitlines()  # one line: the problem, one line: the fix (after any earlier notes)
    assert lines[-2].startswith("error: teacher") and lines[-1].strip().startswith("fix:"), r.err
    assert sum(line.startswith("error:") for line in lines) == 1, r.err
    assert not out.exists()


def test_distill_config_errors_exit_2(cli, tmp_path):
    r = cli("distill", "--prompts", PROMPTS, "-o", tmp_path / "d")
    assert r.code == 2 and "--teacher" in r.err, r.text
    r = cli("distill", "--teacher", "tiny", "--prompts", PROMPTS, "--set", "distill.beta=2", "-o", tmp_path / "d")
    assert r.code == 2 and "distill.beta" in r.err and "<= 1.0" in r.err, r.text
    assert not (tmp_path / "d").exists()


def test_self_distillation_has_zero_loss_and_writes_metrics(cli, tmp_path, sft_model):
    # teacher == student: the two next-token distributions are identical, so the divergence is exactly 0
    out = tmp_path / "distill"
    r = cli("distill", "--teacher", sft_model, "--prompts", PROMPTS, "--model", sft_model, "-o", out,
            "--eval-data", HELDOUT, "--set", "distill.heldout_max_new_tokens=4", *FAST)
    assert r.code == 0, r.text
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in logged if "loss" in m]
    assert [m["step"] for m in steps] == [1, 2] and all(m["loss"] == 0.0 for m in steps)
    assert all(m["completions/mean_length"] > 0 for m in steps)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and 0.0 <= summary["final_metrics"]["heldout_pass_at_1"] <= 1.0


def test_distill_from_another_teacher_has_positive_loss(cli, tmp_path, sft_model, tiny_dir):
    out = tmp_path / "distill"
    r = cli("distill", "--teacher", tiny_dir, "--prompts", PROMPTS, "--model", sft_model, "-o", out, *FAST)
    assert r.code == 0, r.text
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps[0]["loss"] > 0.1  # an untrained teacher: far from the SFT'd student


@pytest.mark.slow
def test_distill_from_the_sft_teacher_raises_heldout_pass_at_1_by_10_points(cli, tmp_path, sft_short):
    import time

    teacher = tmp_path / "teacher"
    assert cli("sft", "--recipe", ROOT / "recipes/sft_tiny.yaml", "-o", teacher).code == 0
    before = json.loads(cli("eval", "--model", sft_short, "--data", HELDOUT, "--verifier", "math", "--json").out)
    start = time.time()
    out = tmp_path / "distill-full"
    r = cli("distill", "--recipe", RECIPE, "--teacher", teacher, "--prompts", PROMPTS, "--model", sft_short,
            "-o", out)
    assert r.code == 0, r.text
    elapsed = time.time() - start
    after = json.loads(cli("eval", "--model", out, "--data", HELDOUT, "--verifier", "math", "--json").out)
    print(f"distill: held-out pass@1 {before['pass_at_1']:.3f} -> {after['pass_at_1']:.3f} in {elapsed:.0f}s")
    assert after["pass_at_1"] >= before["pass_at_1"] + 0.10
