"""GRPO, pre-flight and verifier-scored eval on the tiny model, through the CLI."""

from __future__ import annotations

import json

import pytest
from helpers import DATA, ROOT, write_jsonl

from rlft.preflight import verdict_for

PROMPTS = DATA / "arith/grpo_prompts.jsonl"
HELDOUT = DATA / "arith/test.jsonl"
RECIPE = ROOT / "recipes/grpo_math_tiny.yaml"


@pytest.mark.parametrize("pass_rate, mixed, truncated, verdict, advice", [
    (0.0, 0.0, 0.0, "refuse", "SFT it first"),
    (1.0, 0.0, 0.0, "refuse", "harder prompts"),
    (0.2, 0.05, 0.0, "refuse", "partial credit"),
    (0.5, 0.6, 0.0, "go", None),
    (0.5, 0.6, 0.5, "go", "max_completion_length"),
    (0.5, 0.1, 0.0, "go", None),  # exactly at the threshold goes
])
def test_verdict_rules(pass_rate, mixed, truncated, verdict, advice):
    got, lines = verdict_for(pass_rate, mixed, truncated, min_mixed=0.1, num_generations=8)
    assert got == verdict
    if advice:
        assert any(advice in line for line in lines), lines
    else:
        assert lines == []


def test_preflight_refuses_a_random_model(cli, tiny_dir):
    r = cli("preflight", "--model", "tiny", "--prompts", PROMPTS, "--verifier", "math", "--max-prompts", "8",
            "--max-new-tokens", "4", "--json")
    assert r.code == 3, r.text
    result = json.loads(r.out)
    assert result["verdict"] == "refuse" and result["pass_rate"] == 0.0 and result["mixed_fraction"] == 0.0
    assert any("SFT it first" in a for a in result["advice"])


def test_preflight_says_go_on_the_sft_model(cli, sft_short):
    r = cli("preflight", "--model", sft_short, "--prompts", PROMPTS, "--verifier", "math", "--max-prompts", "32",
            "--max-new-tokens", "8", "--json")
    assert r.code == 0, r.text
    result = json.loads(r.out)
    assert result["verdict"] == "go"
    assert result["mixed_fraction"] >= 0.3 and 0.2 < result["pass_rate"] < 0.9, result
    assert result["truncation_rate"] < 0.05


def test_grpo_is_refused_on_a_random_model_and_writes_nothing(cli, tmp_path, tiny_dir):
    out = tmp_path / "grpo"
    r = cli("grpo", "--prompts", PROMPTS, "--verifier", "math", "--model", "tiny", "-o", out,
            "--set", "grpo.max_completion_length=4", "--set", "grpo.preflight_prompts=8")
    assert r.code == 3, r.text
    assert "pre-flight refused" in r.err and "SFT it first" in r.err
    assert not out.exists()


def test_grpo_trains_and_reports_heldout(cli, tmp_path, sft_short):
    out = tmp_path / "grpo"
    r = cli("grpo", "--recipe", RECIPE, "--model", sft_short, "-o", out, "--max-steps", "20",
            "--set", "train.logging_steps=5", "--set", "data.max_rows=200")
    assert r.code == 0, r.text
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logged = [m for m in metrics if "reward" in m]
    assert [m["step"] for m in logged] == [5, 10, 15, 20]
    assert all(0.0 <= m["frac_reward_zero_std"] <= 1.0 for m in logged)
    assert all(0.0 < m["reward"] < 1.0 for m in logged)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert 0.3 < summary["final_metrics"]["heldout_pass_at_1"] <= 1.0
    preflight = json.loads((out / "preflight.json").read_text())
    assert preflight["verdict"] == "go"


def test_grpo_filter_prompts_keeps_only_mixed_groups(cli, tmp_path, sft_short):
    out = tmp_path / "grpo-filter"
    r = cli("grpo", "--recipe", RECIPE, "--model", sft_short, "-o", out, "--max-steps", "2",
            "--filter-prompts", "--set", "data.max_rows=40")
    assert r.code == 0, r.text
    assert "--filter-prompts: kept" in r.err
    kept = int(r.err.split("kept ")[1].split(" of")[0])
    summary = json.loads((out / "summary.json").read_text())
    assert 0 < kept < 40 and summary["train_rows"] == kept


def test_grpo_dry_run_prints_the_plan(cli, tmp_path):
    r = cli("grpo", "--recipe", RECIPE, "-o", tmp_path / "x", "--dry-run")
    assert r.code == 0, r.text
    assert "600 steps x 8 prompts x G=8 = 38,400 sampled completions" in r.out
    assert "at most 307,200" in r.out
    assert not (tmp_path / "x").exists()


def test_grpo_rejects_gold_the_verifier_cannot_parse(cli, tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "1+1=", "answer": "2"}, {"prompt": "hi", "answer": "billing"},
                                               {"prompt": "2+2="}])
    r = cli("grpo", "--prompts", bad, "--verifier", "math", "-o", tmp_path / "o")
    assert r.code == 2
    assert f"{bad}:2: field 'answer'" in r.err
    assert f"{bad}:3: field 'answer': missing" in r.err
    assert not (tmp_path / "o").exists()


def test_grpo_unknown_verifier_did_you_mean(cli, tmp_path):
    r = cli("grpo", "--prompts", PROMPTS, "--verifier", "maths", "-o", tmp_path / "o")
    assert r.code == 2 and "unknown verifier 'maths'" in r.err and "did you mean 'math'" in r.err


def test_eval_with_verifier_and_samples(cli, sft_short):
    r = cli("eval", "--model", sft_short, "--data", HELDOUT, "--verifier", "math", "--samples", "4",
            "--limit", "40", "--json")
    assert r.code == 0, r.text
    result = json.loads(r.out)
    assert result["n"] == 40 and result["samples"] == 4
    assert 0.0 < result["pass_at_1"] < 1.0 and 0.0 < result["pass_rate_at_k_samples"] < 1.0


@pytest.mark.slow
def test_grpo_raises_heldout_pass_at_1_by_15_points(cli, tmp_path, sft_short):
    import time

    before = json.loads(cli("eval", "--model", sft_short, "--data", HELDOUT, "--verifier", "math", "--json").out)
    start = time.time()
    out = tmp_path / "grpo-full"
    r = cli("grpo", "--recipe", RECIPE, "--model", sft_short, "-o", out)
    assert r.code == 0, r.text
    elapsed = time.time() - start
    after = json.loads(cli("eval", "--model", out, "--data", HELDOUT, "--verifier", "math", "--json").out)
    print(f"GRPO: held-out pass@1 {before['pass_at_1']:.3f} -> {after['pass_at_1']:.3f} in {elapsed:.0f}s")
    assert after["pass_at_1"] >= before["pass_at_1"] + 0.15
    assert elapsed < 300


@pytest.mark.slow
def test_preflight_refuses_prompts_the_model_always_solves(cli, tmp_path):
    out = tmp_path / "sft-full"
    assert cli("sft", "--recipe", ROOT / "recipes/sft_tiny.yaml", "-o", out).code == 0
    r = cli("preflight", "--model", out, "--prompts", HELDOUT, "--verifier", "math", "--max-new-tokens", "8",
            "--temperature", "0.7", "--json")
    result = json.loads(r.out)
    assert r.code == 3 and result["verdict"] == "refuse" and result["pass_rate"] > 0.95, result
    assert any("harder prompts" in a for a in result["advice"])


def test_choose_with_a_model_bases_its_advice_on_a_real_preflight(cli, tiny_dir, sft_short):
    r = cli("choose", "--data", PROMPTS, "--model", "tiny", "--max-prompts", "8", "--json")
    advice = json.loads(r.out)
    assert advice["method"] == "sft" and advice["then"] == "grpo" and not advice["ready"]
    assert any(w["code"] == "never_passes" for w in advice["warnings"])
    r = cli("choose", "--data", PROMPTS, "--model", sft_short, "--max-prompts", "16", "--json")
    advice = json.loads(r.out)
    # passes sometimes, a 0/1 reward: bootstrap first (rlft/choose/pricing.py), priced against GRPO
    assert advice["method"] == "bootstrap" and advice["ready"], advice["warnings"]
    assert advice["rollout_estimate"]["grpo_rollouts"] > 0


def test_a_seeded_lora_grpo_run_repeats(cli, tmp_path, sft_short):
    """GRPO loads its model before the trainer seeds itself (the pre-flight samples from it), and LoRA's A
    matrices are drawn at that load: from train.seed, so two runs with one seed end with the same adapter (before,
    A came from whatever state the process's RNG was in, and two such runs' step-1 gradients differed by more
    than their size), and another seed gives another one."""
    from safetensors.torch import load_file

    def adapter(name: str, seed: int) -> dict:
        out = tmp_path / name
        r = cli("grpo", "--model", sft_short, "--lora", "--prompts", DATA / "arith/grpo_prompts.jsonl",
                "--verifier", "math", "--max-steps", "1", "--batch-size", "8", "--num-generations", "4",
                "--no-preflight", "--seed", str(seed), "-o", out, "--set", "grpo.max_completion_length=8",
                "--set", "data.max_rows=32", "--set", "watch.auto_holdout=false")
        assert r.code == 0, r.text
        return load_file(out / "adapter_model.safetensors")

    first, again, other = adapter("a", 1), adapter("b", 1), adapter("c", 2)
    assert first.keys() == again.keys() and any("lora_A" in k for k in first)
    assert all(torch_equal(first[k], again[k]) for k in first)
    assert not all(torch_equal(first[k], other[k]) for k in first if "lora_A" in k)


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a, b)
