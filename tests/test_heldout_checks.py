"""Held-out checks that check something: a held-out file that is (mostly) the training data warns with the
overlap; --holdout of pairs (dpo) and of thumbs rows (kto) is scored by the metric the rows' shape gives; held-out
prompts of another type than the training prompts (plain strings against messages) are one line, not a
TypeError while scoring."""

from __future__ import annotations

import json

from helpers import DATA, write_jsonl
from test_bad_input_nothing_destroyed import refused

PAIRS = DATA / "arith/pairs_train.jsonl"
THUMBS = DATA / "arith/thumbs_train.jsonl"
SFT = DATA / "arith/sft_train.jsonl"
SHORT = ["--max-steps", "2", "--set", "watch.holdout_max_rows=12", "--set", "watch.holdout_max_new_tokens=4",
         "--set", "watch.holdout_every=2", "--set", "data.max_rows=200"]


def _curve(out):
    return json.loads((out / "summary.json").read_text())["heldout"]


def test_holdout_that_is_the_training_file_warns_with_the_overlap(cli, tmp_path):
    out = tmp_path / "run"
    r = cli("dpo", "--pairs", PAIRS, "--holdout", PAIRS, "-o", out, *SHORT, "--set", "dpo.max_length=32")
    assert r.code == 0, r.text
    text = " ".join(r.text.split())
    assert "share their prompt with training rows" in text and "(100%)" in text
    assert "it is the training file" in text


def test_eval_data_overlapping_the_training_data_warns(cli, tmp_path):
    out = tmp_path / "run"
    r = cli("sft", "--data", SFT, "--eval-data", SFT, "-o", out, *SHORT, "--set", "sft.max_length=24")
    assert r.code == 0, r.text
    assert "share their prompt with training rows" in " ".join(r.text.split())


def test_a_separate_holdout_does_not_warn(cli, tmp_path):
    held = write_jsonl(tmp_path / "held.jsonl", [{"prompt": f"{i}+{i}=", "chosen": str(2 * i),
                                                  "rejected": str(2 * i + 1)} for i in range(300, 312)])
    r = cli("dpo", "--pairs", PAIRS, "--holdout", held, "-o", tmp_path / "run", *SHORT, "--set", "dpo.max_length=32")
    assert r.code == 0, r.text
    assert "share their prompt" not in r.text


def test_dpo_holdout_of_pairs_is_scored_as_pairs(cli, tmp_path):
    held = write_jsonl(tmp_path / "held.jsonl", [{"prompt": f"{i}+{i}=", "chosen": str(2 * i),
                                                  "rejected": str(2 * i + 1)} for i in range(300, 312)])
    out = tmp_path / "run"
    r = cli("dpo", "--pairs", PAIRS, "--holdout", held, "-o", out, *SHORT, "--set", "dpo.max_length=32")
    assert r.code == 0, r.text
    h = _curve(out)
    assert h["curve"] and h["metric"] == "pass_at_1"  # short chosen answers: exact match against the chosen one


def test_kto_holdout_of_thumbs_rows_is_scored_as_thumbs(cli, tmp_path):
    rows = [{"prompt": f"{i}+{i}=", "completion": "a long desirable answer " * 3 + str(2 * i), "label": True}
            for i in range(300, 306)] + [{"prompt": f"{i}+{i}=", "completion": "a long undesirable answer " * 3,
                                          "label": False} for i in range(300, 306)]
    held = write_jsonl(tmp_path / "held.jsonl", rows)
    out = tmp_path / "run"
    r = cli("kto", "--feedback", THUMBS, "--holdout", held, "-o", out, *SHORT, "--set", "kto.max_length=48")
    assert r.code == 0, r.text
    assert _curve(out)["metric"] == "desirable_above_undesirable"


def test_plain_holdout_prompts_with_messages_training_prompts_are_one_line(cli, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [{"prompt": [{"role": "user", "content": f"{i}+1="}],
                                                    "completion": [{"role": "assistant", "content": str(i + 1)}]}
                                                   for i in range(200)])
    held = write_jsonl(tmp_path / "held.jsonl", [{"prompt": f"{i}+2=", "answer": str(i + 2)} for i in range(12)])
    out = tmp_path / "run"
    refused(cli("sft", "--data", train, "--holdout", held, "-o", out, *SHORT), "watch.holdout", "plain strings",
            "messages")
    assert not out.exists()
