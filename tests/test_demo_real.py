"""`make demo-real` (scripts/demo_real.py): its data and its pipeline, on the tiny model (fast)."""

from __future__ import annotations

import json

from helpers import DATA

from rlft.verifiers.math import math_reward
from scripts.demo_real import INSTRUCTION, chat_rows, main


def test_word_problems_become_chat_rows_whose_answers_the_math_verifier_reads():
    rows = chat_rows(DATA / "word_problems/train.jsonl")
    assert len(rows) == 600
    for r in rows:
        assert [m["role"] for m in r["prompt"]] == ["user"] and r["prompt"][0]["content"].endswith(INSTRUCTION)
        assert [m["role"] for m in r["completion"]] == ["assistant"]
    # every worked answer ends "The answer is N." and scores 1 against its gold; another row's gold scores 0
    assert math_reward([r["completion"] for r in rows], answer=[r["answer"] for r in rows]) == [1.0] * 600
    assert math_reward(["7 x 4 = 28. The answer is 28."], answer=["27"]) == [0.0]
    held = chat_rows(DATA / "word_problems/test.jsonl", 5, completion=False)
    assert len(held) == 5 and all(set(r) == {"prompt", "answer"} for r in held)


def test_demo_real_pipeline_on_the_tiny_model(tmp_path):
    out = tmp_path / "demo"
    main(out=str(out), model="tiny", data=str(DATA / "word_problems"), heldout_rows=4, heldout_tokens=4,
         sft_steps=2, sft_batch=2, grpo_steps=0)
    (row,) = json.loads((out / "pipeline.json").read_text())
    assert row["stage"] == "sft" and row["metric"] == "held-out pass@1"
    assert 0.0 <= row["before"] <= 1.0 and 0.0 <= row["after"] <= 1.0
    assert (out / "pipeline.png").stat().st_size > 0 and (out / "sft/adapter_config.json").exists()
    assert len((out / "data/heldout.jsonl").read_text().splitlines()) == 4
