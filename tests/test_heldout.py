"""The held-out signal every run gets by default: the slice, the metric per kind of rows, the budget warning,
and what a run folder keeps."""

from __future__ import annotations

import json
import random
from pathlib import Path

from helpers import DATA, ROOT

from rlft.watch.heldout import measure, metric_for, slice_size, split_by_prompt

THUMBS = [json.loads(line) for line in (DATA / "arith/thumbs_train.jsonl").read_text().splitlines()[:600]]
PAIRS = [json.loads(line) for line in (DATA / "arith/pairs_train.jsonl").read_text().splitlines()[:300]]


def test_slice_has_a_floor_a_ceiling_and_a_share_cap():
    assert slice_size(2000) == 100  # 5% of 2,000 prompts, at the ceiling
    assert slice_size(300) == 50    # the floor: 5% would be 15
    assert slice_size(100) == 20    # never more than 20% of the prompts
    assert slice_size(20000, ceiling=200) == 200


def test_split_keeps_each_prompt_on_one_side_and_is_seeded():
    train, held = split_by_prompt(THUMBS, 50, seed=42)
    assert len(train) + len(held) == len(THUMBS) and len(held) == 100  # 50 prompts, true and false rows each
    assert not {r["prompt"] for r in held} & {r["prompt"] for r in train}
    assert split_by_prompt(THUMBS, 50, seed=42)[1] == held and split_by_prompt(THUMBS, 50, seed=7)[1] != held


def test_metric_follows_the_rows():
    assert metric_for("pairs", PAIRS) == "pass_at_1"  # short chosen answers are gold answers
    assert metric_for("pairs", [{"prompt": "p", "chosen": "x" * 200, "rejected": "y"}]) == "pair_accuracy"
    assert metric_for("thumbs", [{"prompt": "p", "completion": "a long answer " * 5, "label": True}]) \
        == "desirable_above_undesirable"
    assert metric_for("demonstrations", []) == "neg_token_loss"


def test_measures_on_the_sft_model(sft_model):
    from rlft.models import load_for_inference, load_tokenizer

    tok, net = load_tokenizer(str(sft_model)), load_for_inference(str(sft_model))
    long_pairs = [{"prompt": p["prompt"], "chosen": p["chosen"] + " " * 40, "rejected": p["rejected"] + " " * 40}
                  for p in PAIRS[:40]]
    acc = measure("pairs", net, tok, long_pairs)
    assert acc.metric == "pair_accuracy" and acc.n == 40 and acc.per_row == [float(x >= 1) for x in acc.per_row]
    assert abs(acc.stderr - (acc.value * (1 - acc.value) / 40) ** 0.5) < 1e-9 and len(acc.per_row) == 40
    assert acc.value == sum(acc.per_row) / 40
    loss = measure("demonstrations", net, tok, [{"prompt": p["prompt"], "completion": p["chosen"]} for p in PAIRS[:40]])
    wrong = measure("demonstrations", net, tok, [{"prompt": p["prompt"], "completion": p["rejected"]}
                                                 for p in PAIRS[:40]])
    assert loss.value > wrong.value  # the right sums cost fewer nats than the slips
    p1 = measure("pairs", net, tok, PAIRS[:40], max_new_tokens=4)
    assert p1.metric == "pass_at_1" and p1.n == 40 and p1.samples


def _kto(cli, sft_model, tmp_path, steps: str, lr: str):
    """The shipped KTO recipe on THUMBS from the SFT model, with the held-out check on; returns (result, run)."""
    thumbs = tmp_path / "thumbs.jsonl"
    thumbs.write_text("".join(json.dumps(r) + "\n" for r in THUMBS))
    out = tmp_path / "kto"
    r = cli("kto", "--recipe", ROOT / "recipes/kto_tiny.yaml", "--feedback", thumbs, "--model", sft_model, "-o", out,
            "--max-steps", steps, "--lr", lr, "--set", "watch.holdout_max_new_tokens=4")
    assert r.code == 0, r.text
    return r, out


def test_a_run_gets_a_held_out_check_and_keeps_the_best_model(cli, sft_model, tmp_path):
    r, out = _kto(cli, sft_model, tmp_path, "40", "1e-3")
    assert "held-out check: pass_at_1 on 100 rows" in r.text
    assert "budget: 40 steps x 32 rows = 2.6 passes" not in r.text  # under 3 passes: no warning
    summary = json.loads((out / "summary.json").read_text())
    curve = summary["heldout"]["curve"]
    assert summary["train_rows"] == 500 and summary["heldout"]["metric"] == "pass_at_1" and len(curve) >= 5
    kept = summary["kept"]
    best = max(c["score"] for c in curve)
    best_step = max(c["step"] for c in curve if c["score"] == best)
    # the start unless a trained check clearly beat it; then the best check's model, or the last one when it
    # is within noise of the best (rlft.watch.overfit.kept_check)
    assert (kept["step"], kept["score"]) in ((best_step, best), (curve[-1]["step"], curve[-1]["score"]),
                                             (0, curve[0]["score"])), kept
    if kept["step"] == 0:  # the start kept: an alarm says so (overfitting, as the training loss fell)
        assert "overfitting" in summary["alarms"], summary["alarms"]
        assert "overfitting" in (out / "alarms.jsonl").read_text()
    assert not (out / "start").exists()
    # a better check's model stays in best/ only beside a kept last model
    beside = kept.get("best_beside")
    assert (out / "best").is_dir() == (beside is not None)
    if beside is not None:
        assert kept["step"] == summary["global_step"] and beside["score"] > kept["score"]
        assert (beside["step"], beside["score"]) == (best_step, best)
        assert f"the best check's model (step {best_step}" in r.text
    assert (out / "last").is_dir() == (kept["step"] != summary["global_step"])
    rows = [json.loads(line) for line in (out / "heldout_rows.jsonl").read_text().splitlines()]
    assert [x["step"] for x in rows] == [c["step"] for c in curve] and len(rows[0]["per_row"]) == 50
    if (out / "last").is_dir():  # the folder's model is the kept one, not the last
        assert (out / "model.safetensors").read_bytes() != (out / "last/model.safetensors").read_bytes()


def test_budget_warns_past_three_passes_and_auto_holdout_can_be_turned_off(cli, sft_model, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in PAIRS[:100]))
    r = cli("dpo", "--pairs", pairs, "--model", sft_model, "-o", tmp_path / "dpo", "--max-steps", "2",
            "--batch-size", "200", "--set", "watch.auto_holdout=false", "--set", "dpo.max_length=32")
    assert r.code == 0, r.text
    assert "budget: 2 steps x 200 rows = 4.0 passes over 100 training rows, more than 3 for dpo" in r.text
    assert "1-2 passes is 1-1 steps" in r.text or "1-2 passes is 1-" in r.text
    assert "no held-out check (watch.auto_holdout=false)" in r.text
    assert not (tmp_path / "dpo/heldout_rows.jsonl").exists()


def test_a_run_that_does_not_beat_its_start_keeps_it_and_says_so(cli, sft_model, tmp_path):
    # learning rate 0: every check scores what the start scores, so nothing beat it
    _, out = _kto(cli, sft_model, tmp_path, "20", "0")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["kept"]["step"] == 0, summary["kept"]
    fired = [json.loads(line) for line in (out / "alarms.jsonl").read_text().splitlines()]
    assert [a["name"] for a in fired if a["name"] in ("overfitting", "no_gain")] == summary["alarms"][-1:]
    assert "no held-out check beat the start clearly" in fired[-1]["message"] and fired[-1]["action"] == "warn"
    assert (out / "last").is_dir() and not (out / "start").exists()


def test_a_kept_last_model_keeps_the_better_checks_model_beside_it(tmp_path):
    """rlft.methods.keep.KeptModels: when the last model is kept within noise of a better check, that check's
    model stays in best/ (so `rlft eval` can read both) and summary.json names it; when the better check is the
    one kept, best/ goes (its model is the run folder's)."""
    from types import SimpleNamespace

    from rich.console import Console

    from rlft.methods.keep import KeptModels
    from rlft.watch.overfit import Check

    def run(scores: list[float], n: int = 150):
        out = tmp_path / "-".join(map(str, scores))
        watcher = SimpleNamespace(checks=[], alarm_names=set(), end_checks=lambda keep_start: None)

        def save(path):
            Path(path).mkdir(parents=True, exist_ok=True)
            (Path(path) / "weights.bin").write_text(f"step {watcher.checks[-1].step}")

        keep = KeptModels(out, watcher, save)
        for step, score in enumerate(scores):
            right = set(random.Random(step).sample(range(n), round(score * n)))  # checks that churn, as real ones
            watcher.checks.append(Check(step * 10, score, [float(i in right) for i in range(n)], "pass_at_1", 0.04))
            keep.after_check()
        return out, keep.finish(10 * (len(scores) - 1), Console(quiet=True))

    out, info = run([0.30, 0.45, 0.42])  # the last within noise of step 10: kept, step 10's model beside it
    assert info["kept"]["step"] == 20 and info["kept"]["best_beside"] == {"step": 10, "score": 0.45,
                                                                          "folder": "best"}
    assert (out / "best/weights.bin").read_text() == "step 10" and (out / "weights.bin").read_text() == "step 20"
    assert not (out / "start").exists()
    out, info = run([0.30, 0.45, 0.30])  # the last fell clearly: step 10 kept, nothing beside it
    assert info["kept"]["step"] == 10 and "best_beside" not in info["kept"]
    assert not (out / "best").exists() and (out / "weights.bin").read_text() == "step 10"
