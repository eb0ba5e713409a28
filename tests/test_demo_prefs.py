"""`make demo-prefs` (scripts/demo_prefs.py): every stage as the real `rlft` command, on the tiny model (plumbing:
the tiny model learns no support policy, so the numbers only have to be read and tabled right)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import ROOT

from scripts.demo_prefs import main


@pytest.mark.slow  # about a minute: make test-slow
def test_demo_prefs_tables_every_stage_and_a_ppo_refused_before_training(tmp_path):
    """SFT, DPO, the implicit reward model, best-of-2 and PPO on a small
    store: the table has a row per stage with the truth read by `rlft eval`; PPO's gate refuses a reward model
    whose own policy gains nothing over the start (the tiny model passes no support prompt either way), so its
    row says "refused" with the gate's reason, and nothing is written for it."""
    store, out = tmp_path / "store", tmp_path / "out"
    subprocess.run([sys.executable, str(ROOT / "data/make_store.py"), "--out", str(store), "--seed", "5", "--demos",
                    "8", "--pairs-train", "8", "--pairs-eval", "4", "--test", "4"], check=True, capture_output=True)
    small = ["train.max_steps=2", "train.per_device_train_batch_size=4", "train.logging_steps=1"]
    sets = {"sft": small + ["sft.max_length=320"],
            "dpo": small + ["dpo.max_length=400", "watch.holdout_every=2", "train.eval_steps=2"],
            "reward": small + ["reward.objective=implicit", "reward.max_length=400", "train.eval_steps=2",
                               "reward.truth_prompts=2", "reward.truth_samples=2", "reward.truth_max_new_tokens=4"],
            "ppo": small + ["ppo.verifiers=[]", "ppo.response_length=4", "watch.holdout_max_new_tokens=4",
                            "ppo.agreement_prompts=2", "ppo.agreement_samples=2"]}
    argv = ["--data", str(store), "--out", str(out), "--recipes", "tiny", "--tokens", "4", "--best-of", "2"]
    for stage, values in sets.items():
        argv += [x for v in values for x in (f"--{stage}-set", v)]
    assert main(argv) == 0
    table = json.loads((out / "demo_prefs.json").read_text())
    rows = {r["method"]: r for r in table["rows"]}
    assert list(rows) == ["SFT", "DPO", "reward model", "best-of-2 (RM)", "RM + PPO"], table
    start = rows["SFT"]["after"]
    assert isinstance(start, float) and all(rows[m]["before"] == start for m in ("DPO", "RM + PPO"))
    assert rows["DPO"]["exit"] == 0 and isinstance(rows["DPO"]["after"], float)
    ppo = rows["RM + PPO"]
    assert ppo["exit"] == 3 and ppo["after"] == start, ppo
    assert ppo["note"].startswith("refused: the implicit reward model") and "nothing to gain" in ppo["note"], ppo
    assert not (out / "ppo").exists()
    assert "| RM + PPO |" in (out / "demo_prefs.md").read_text()
