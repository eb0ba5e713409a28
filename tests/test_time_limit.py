"""train.max_minutes (rlft.run.time_limit): a run ends within its limit, checked and saved as at max_steps."""

from __future__ import annotations

import json

import pytest
from helpers import DATA, ROOT, write_jsonl

from rlft.run.time_limit import TimeLimit

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
    assert limit.steps == [10.0] * 4 and limit.stopped_at == 4
    assert limit.record(9) == {"max_minutes": 1.0, "stopped_at": 4, "max_steps": 9}
    assert "after step 4 of 9" in limit.line(9) and "train.max_minutes 1" in limit.line(9)
    # without held-out checks the same run takes one step more: 48 + 10 = 58 fits
    quiet = TimeLimit(1.0, clock)
    quiet.begin()
    for step in range(1, 7):
        clock.now += 10.0
        quiet.step_done()
        assert quiet.out_of_time(step, checks=False) == (step == 6), step


def test_check_time_is_not_step_time_and_an_untimed_check_costs_a_step():
    clock = Clock()
    limit = TimeLimit(1.0, clock)
    limit.begin()
    clock.now += 10.0  # a step
    limit.step_done()
    clock.now += 20.0  # a check after it (and its save): not part of the next step's time
    limit.checked(20.0)
    clock.now += 5.0
    limit.step_done()
    assert limit.steps == [10.0, 5.0]
    assert limit.out_of_time(2)  # 35 s used; the slowest recent step 10 + the check 20 = 65 > 60
    resumed = TimeLimit(1.0, clock)  # after --resume no check has been timed: one counts as a step
    resumed.begin()
    clock.now += 25.0
    resumed.step_done()
    assert resumed.out_of_time(1) and not resumed.out_of_time(1, checks=False)  # 25 + 25 + 25 > 60 >= 50


def test_the_slowest_of_the_last_eight_steps_is_the_estimate():
    clock = Clock()
    limit = TimeLimit(10.0, clock)
    limit.begin()
    for seconds in [30.0] + [1.0] * 8:  # the slow first step leaves the window after eight more
        clock.now += seconds
        limit.step_done()
    assert len(limit.steps) == 8 and max(limit.steps) == 1.0


def test_no_limit_never_stops():
    clock = Clock()
    limit = TimeLimit(None, clock)
    limit.begin()
    clock.now += 1e9
    limit.step_done()
    assert not limit.on and not limit.out_of_time(1)


def test_max_minutes_is_rlft_only_and_must_be_positive(cli, tmp_path):
    from rlft.config import resolve, trl_kwargs

    cfg = resolve("grpo", sets=["train.max_minutes=2.5"])
    assert cfg.train.max_minutes == 2.5 and "max_minutes" not in trl_kwargs(cfg, "grpo")
    for bad in ("-1", "0"):
        r = cli("grpo", "--prompts", PROMPTS, "--verifier", "math", "-o", tmp_path / "o", "--set",
                f"train.max_minutes={bad}")
        assert r.code == 2 and f"train.max_minutes = {bad}" in r.err and not (tmp_path / "o").exists(), r.err


@pytest.mark.parametrize("method", ["grpo", "ppo"])
def test_a_run_past_its_limit_ends_checked_and_saved(cli, tmp_path, sft_short, method):
    """A limit of 6 ms is past after the first step (and the opening check), so the run stops there, with a
    closing check, logs that step and completes as at max_steps, its summary saying why."""
    held = write_jsonl(tmp_path / "held.jsonl", [json.loads(line) for line in HELDOUT.read_text().splitlines()][:20])
    out = tmp_path / method
    common = ["--model", sft_short, "--prompts", PROMPTS, "--verifier", "math", "-o", out, "--max-steps", "30",
              "--holdout", held, "--set", "watch.holdout_every=10", "--set", "watch.holdout_max_new_tokens=4",
              "--set", "train.max_minutes=0.0001", "--set", "data.max_rows=200", "--set", "train.logging_steps=10"]
    own = (["--recipe", ROOT / "recipes/grpo_math_tiny.yaml", "--no-preflight"] if method == "grpo" else
           ["--batch-size", "16", "--set", "ppo.response_length=8"])
    r = cli(method, *common, *own)
    assert r.code == 0, r.text
    assert "training stopped after step 1 of 30" in r.text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["global_step"] == 1
    assert summary["time_limit"] == {"max_minutes": 0.0001, "stopped_at": 1, "max_steps": 30}
    assert [c["step"] for c in summary["heldout"]["curve"]] == [0, 1]
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any(m["step"] == 1 and "reward" in m for m in logged), logged  # logging_steps 10: logged for the stop
    # it saved a checkpoint where it stopped, and resumes to its planned end (here 3 steps, without the limit)
    r = cli(method, *common, *own, "--resume", "--max-steps", "3", "--set", "train.max_minutes=30")
    assert r.code == 0, r.text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["global_step"] == 3 and "time_limit" not in summary
