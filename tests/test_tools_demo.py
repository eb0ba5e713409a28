"""The tools demo learns (slow): on the tiny model, SFT on data/tools/sft_train.jsonl's mixed demonstrations, then
GRPO with the calculator environment raises held-out task success (whole greedy episodes, `rlft eval --env` on
data/tools/test.jsonl) by >= 15 points. The flags are `make pipeline-tools`'s, with fewer GRPO steps, no
pre-flight and no held-out checks during training (the last model is the one scored)."""

from __future__ import annotations

import json

import pytest
from helpers import DATA

CALC = str(DATA / "tools/calculator.py") + ":Calculator"


def _success(cli, model) -> dict:
    r = cli("eval", "-m", model, "-d", DATA / "tools/test.jsonl", "--env", CALC, "--verifier", "math",
            "--max-new-tokens", "96", "--json")
    assert r.code == 0, r.text
    return json.loads(r.out)


@pytest.mark.slow
def test_grpo_with_the_calculator_raises_held_out_task_success_by_15_points(cli, tmp_path, tiny_dir):
    sft, grpo = tmp_path / "sft", tmp_path / "grpo"
    r = cli("sft", "-d", DATA / "tools/sft_train.jsonl", "-o", sft, "--max-steps", "600", "--batch-size", "32",
            "--lr", "3e-3", "--set", "sft.max_length=200", "--set", "watch.auto_holdout=false")
    assert r.code == 0, r.text
    before = _success(cli, sft)
    r = cli("grpo", "--model", sft, "-d", DATA / "tools/grpo_prompts.jsonl", "--env", CALC, "--verifier", "math",
            "-o", grpo, "--max-steps", "30", "--batch-size", "16", "--lr", "1e-4", "--num-generations", "8",
            "--set", "grpo.max_completion_length=200", "--set", "watch.auto_holdout=false", "--no-preflight")
    assert r.code == 0, r.text
    after = _success(cli, grpo)
    print(f"tools demo: held-out task success {before['task_success']:.2f} -> {after['task_success']:.2f}, "
          f"episodes calling the tool {before['tool_use']:.2f} -> {after['tool_use']:.2f}")
    assert after["task_success"] >= before["task_success"] + 0.15
    assert after["tool_use"] > before["tool_use"]  # it learned to call the tool, not to guess products
