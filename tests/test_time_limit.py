"""train.max_minutes (rlft.time_limit): a run ends within its limit, checked and saved as at max_steps."""

from __future__ import annotations

import json

import pytest
from helpers import DATA, ROOT, write_jsonl

from rlft.time_limit import TimeLimit

PROMPTS = DATA / "arith/grpo_prompts.jsonl"
HELDOUT = DATA / "arith/test.jsonl"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_stops_when_a_step_and_a_check_would_pass_the_limit():
    clock = Clock()
    limit = TimeLimit(1.0, clock)  # 60 s
    limit.begin()
    clock.now += 8.0  # the opening held-out check
    limit.checked(8.0)
    for step in range(1, 5):  # 10 s steps: after step 4, 48 s used; one more step (10) + a check (8) = 66 > 60
        clock.now += 10.0
        limit.step_done()
        assert limit.out_of_time(step) == (step == 4), step
    assert limit.steps == [10.0, 10.0, 10.0] and limit.stopped_at == 4
    assert "after step 4 of 9" in limit.line(9) and "train.max_minutes 1" in limit.line(9)


def test_check_time_is_not_step_time_and_a_due_check_counts_twice():
    clock = Clock()
    limit = TimeLimit(1.0, clock)
    limit.begin()
    clock.now += 10.0  # a step
    limit.step_done()
    clock.now += 20.0  # a check after it: not part of the next step's time
    limit.checked(20.0)
    clock.now += 5.0
    limit.step_done()
    assert limit.steps == [10.0, 5.0]
    # 35 s used; the slowest recent step 10 + one check 20 = 65 > 60; without the check 45 fits
    assert limit.out_of_time(2, checks=1)
    limit2 = TimeLimit(1.0, clock)
    limit2.begin()
    clock.now += 10.0
    limit2.step_done()
    limit2.checked(15.0)  # a check due at this step: 10 + 10 + 2 x 15 = 50 fits, 3 x 15 would not
    assert not limit2.out_of_time(1, checks=2) and limit2.out_of_time(1, checks=3)


def test_no_limit_never_stops():
    clock = Clock()
    limit = TimeLimit(None, clock)
    limit.begin()
    clock.now += 1e9
    limit.step_done()
    assert not limit.out_of_time(1)


def test_max_minutes_is_rlft_only_and_must_be_positive(cli, tmp_path):
    from rlft.config import resolve, trl_kwargs

    cfg = resolve("grpo", sets=["train.max_minutes=2.5"])
    assert cfg.train.max_minutes == 2.5 and "max_minutes" not in trl_kwargs(cfg, "grpo")
    r = cli("grpo", "--prompts", PROMPTS, "--verifier", "math", "-o", tmp_path / "o", "--set",
            "train.max_minutes=-1")
    assert r.code == 2 and "train.max_minutes" in r.err and not (tmp_path / "o").exists()


@pytest.mark.parametrize("method", ["grpo", "ppo"])
def test_a_run_past_its_limit_ends_checked_and_saved(cli, tmp_path, sft_short, method):
    """The opening held-out check alone takes longer than the 0.3 s limit, so the run stops after its first
    step, with a last check there, and completes as at max_steps."""
    held = write_jsonl(tmp_path / "held.jsonl", [json.loads(line) for line in HELDOUT.read_text().splitlines()][:20])
    out = tmp_path / method
    common = ["--model", sft_short, "--prompts", PROMPTS, "--verifier", "math", "-o", out, "--max-steps", "30",
              "--holdout", held, "--set", "watch.holdout_every=10", "--set", "watch.holdout_max_new_tokens=4",
              "--set", "train.max_minutes=0.005", "--set", "data.max_rows=200", "--set", "train.logging_steps=10"]
    if method == "grpo":
        r = cli("grpo", "--recipe", ROOT / "recipes/grpo_math_tiny.yaml", *common, "--no-preflight")
    else:
        r = cli("ppo", *common, "--batch-size", "16", "--set", "ppo.response_length=8")
    assert r.code == 0, r.text
    assert "training stopped after step 1 of 30" in r.text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["global_step"] == 1
    assert [c["step"] for c in summary["heldout"]["curve"]] == [0, 1]
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any(m["step"] == 1 and "loss" in m or "reward" in m for m in logged)  # the last step is logged
