"""`train.report_to=tensorboard` reaches every method: event files written offline, read back with tensorboard.

The TRL methods hand report_to to transformers' Trainer (RUN/runs/<date>_<host>/); rlft's PPO sends the
same scalars through accelerate's tracker (RUN/runs/). Each run is 2 steps on the tiny model.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import DATA

pytest.importorskip("tensorboard")

TB = ("--set", "train.report_to=tensorboard", "--set", "train.logging_steps=1", "--max-steps", "2")
RUNS = {
    "sft": (("--data", DATA / "arith/sft_train.jsonl", "--set", "sft.max_length=32", "--batch-size", "8"),
            "train/loss"),
    "dpo": (("--pairs", DATA / "arith/pairs_train.jsonl", "--set", "dpo.max_length=32", "--batch-size", "4",
             "--set", "data.max_rows=16"), "train/loss"),
    "reward": (("--pairs", DATA / "arith/pairs_train.jsonl", "--set", "reward.max_length=32", "--batch-size", "4",
                "--set", "data.max_rows=16"), "train/loss"),
    "grpo": (("--prompts", DATA / "arith/grpo_prompts.jsonl", "--verifier", "math", "--no-preflight",
              "--batch-size", "8", "--num-generations", "4", "--set", "grpo.max_completion_length=4",
              "--set", "data.max_rows=16"), "train/reward"),
    "ppo": (("--prompts", DATA / "arith/grpo_prompts.jsonl", "--verifier", "math", "--batch-size", "4",
             "--set", "ppo.response_length=4", "--set", "data.max_rows=16"), "train/reward"),
}


def scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the run's tensorboard event files: {tag: [(step, value), ...]}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found: dict[str, list[tuple[int, float]]] = {}
    for events in sorted(run.glob("runs/**/events.out.tfevents.*")):
        acc = EventAccumulator(str(events))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            found.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return found


@pytest.mark.parametrize("method", sorted(RUNS))
def test_report_to_tensorboard_writes_event_files(cli, tmp_path, method):
    args, tag = RUNS[method]
    out = tmp_path / method
    r = cli(method, *args, *TB, "-o", out)
    assert r.code == 0, r.text
    found = scalars(out)
    assert tag in found, sorted(found)
    assert [step for step, _ in found[tag]] == [1, 2]
    import json

    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    metric = tag.removeprefix("train/")
    first = next(m[metric] for m in logged if metric in m)
    assert found[tag][0][1] == pytest.approx(first, rel=1e-4, abs=1e-6)  # the value metrics.jsonl has


def test_default_writes_no_event_files_and_a_missing_tracker_is_refused(cli, tmp_path, monkeypatch):
    out = tmp_path / "sft"
    r = cli("sft", *RUNS["sft"][0], "--max-steps", "1", "-o", out)
    assert r.code == 0, r.text
    assert not list(out.glob("runs/**/events.out.tfevents.*"))
    import importlib.util

    real_find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real_find(name, *a))
    for method in ("sft", "ppo"):
        r = cli(method, *RUNS[method][0], "--set", "train.report_to=wandb", "-o", tmp_path / f"w-{method}")
        assert r.code == 2 and "train.report_to=wandb needs the wandb package" in r.err, r.text
        assert not (tmp_path / f"w-{method}").exists()
