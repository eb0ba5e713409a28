"""`make demo-real` (scripts/demo_real.py): its data and its pipeline, on the tiny model (fast)."""

from __future__ import annotations

import json
import time
from contextlib import closing

import pytest
from helpers import DATA, ROOT

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
         sft_steps=2, sft_batch=2, rl_steps=0)
    (row,) = json.loads((out / "pipeline.json").read_text())
    assert row["stage"] == "sft" and row["metric"] == "held-out pass@1"
    assert 0.0 <= row["before"] <= 1.0 and 0.0 <= row["after"] <= 1.0
    assert (out / "pipeline.png").stat().st_size > 0 and (out / "sft/adapter_config.json").exists()
    assert len((out / "data/heldout.jsonl").read_text().splitlines()) == 4


def test_demo_real_refuses_a_folder_without_its_files(tmp_path):
    import pytest

    from rlft.errors import UserError

    with pytest.raises(UserError, match="test.jsonl does not exist"):
        main(out=str(tmp_path / "o"), model="tiny", data=str(tmp_path), rl_steps=0)
    (tmp_path / "test.jsonl").write_text('{"prompt": "1+1?"}\n')
    with pytest.raises(UserError, match="test.jsonl:1: needs prompt, answer"):
        main(out=str(tmp_path / "o"), model="tiny", data=str(tmp_path), rl_steps=0)
    with pytest.raises(UserError, match="not a multiple"):
        main(out=str(tmp_path / "o"), model="tiny", data=str(DATA / "word_problems"), rl_batch=6, generations=4)
    for seeds in ("1,1", ","):
        with pytest.raises(UserError, match="needs one or more different seeds"):
            main(out=str(tmp_path / "o"), model="tiny", data=str(DATA / "word_problems"), seeds=seeds)
    assert not (tmp_path / "o").exists()


@pytest.mark.slow  # over 15 s: make test-slow
def test_rl_seeds_side_by_side_train_as_each_would_alone(tmp_path, sft_short, one_thread, monkeypatch):
    """Two GRPO seeds as two processes at once (what demo-real does with --seeds 1,2) give the rows, command
    records and training of each seed run on its own in-process; each row starts from the SFT model's score.
    One thread on both sides: MKL's packed layouts differ by thread count (rlft.speed.packed_linear)."""
    from scripts.pipeline import Pipeline

    monkeypatch.setenv("OMP_NUM_THREADS", "1")

    args = ["--recipe", str(ROOT / "recipes/grpo_math_tiny.yaml"), "--prompts",
            str(DATA / "arith/grpo_prompts.jsonl"), "--max-steps", "3", "--set", "train.logging_steps=1"]
    both = Pipeline(str(tmp_path / "both"), str(DATA / "arith/test.jsonl"), "math")
    with closing(both):
        both.side_by_side([(f"grpo-seed{s}", "grpo", str(sft_short), [*args, "--seed", str(s)]) for s in (1, 2)],
                          2)
    alone = Pipeline(str(tmp_path / "alone"), str(DATA / "arith/test.jsonl"), "math")
    alone.stage("grpo-seed2", "grpo", str(sft_short), *args, "--seed", "2")
    assert [r.stage for r in both.rows] == ["grpo-seed1", "grpo-seed2"]
    assert both.rows[0].before == both.rows[1].before == alone.rows[0].before
    assert both.rows[1].after == alone.rows[0].after
    for seed in (1, 2):
        command = json.loads((tmp_path / f"both/grpo-seed{seed}.command.json").read_text())
        assert command[command.index("--seed") + 1] == str(seed)
        assert "Traceback" not in (tmp_path / f"both/grpo-seed{seed}.log").read_text()
    losses = [[json.loads(line).get("loss") for line in (d / "grpo-seed2/metrics.jsonl").read_text().splitlines()]
              for d in (tmp_path / "both", tmp_path / "alone")]
    assert losses[0] == losses[1] and sum(v is not None for v in losses[0]) == 3


def test_background_scores_equal_scores_taken_in_process(tmp_path, sft_short, one_thread, monkeypatch):
    """Pipeline.prefetch scores in spawned processes with the same function: the same numbers; only scores
    taken in-process are timed (the RL budget reads the SFT model's); a scorer's error comes back as one
    line, one that dies is named, and close() stops the scorers still running."""
    import pytest

    from rlft.errors import UserError
    from scripts.pipeline import Pipeline

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    held = str(DATA / "arith/test.jsonl")
    here, there = Pipeline(str(tmp_path / "a"), held, "math"), Pipeline(str(tmp_path / "b"), held, "math")
    with closing(there):
        there.prefetch(str(sft_short), "tiny")
        assert there.score(str(sft_short)) == here.score(str(sft_short)) > 0.2
        assert there.score("tiny") == here.score("tiny")
        assert set(here.score_seconds) == {str(sft_short), "tiny"} and there.score_seconds == {}
        there.prefetch(str(tmp_path / "missing"))
        with pytest.raises(UserError, match="missing"):
            there.score(str(tmp_path / "missing"))
        there.prefetch(str(sft_short) + "/", "tiny/")
        proc, _ = there._pending[str(sft_short) + "/"]
        proc.kill()
        with pytest.raises(RuntimeError, match="died"):
            there.score(str(sft_short) + "/")
        (slow, _), = [there._pending["tiny/"]]
    assert there._pending == {} and not slow.is_alive()


def test_the_rl_budget_leaves_room_for_loading_scoring_and_saving():
    from scripts.demo_real import rl_minutes

    # 29 min, 5 min used, scoring takes 100 s: 1740 - 300 - 160 (closing scores) - 30 - 130 (load) = 1120 s
    assert abs(rl_minutes(29, 300, 100) - 1120 / 60) < 1e-9
    # three seeds on two cores: two rounds of stages, two rounds of closing scores
    assert abs(rl_minutes(29, 300, 100, waves=2, closing=2) - ((1740 - 300 - 320 - 30) / 2 - 130) / 60) < 1e-9
    assert rl_minutes(29, 1800, 90) == 0.5  # past the budget already: a floor, the stage still ends checked
    assert rl_minutes(0, 300, 90) is None


@pytest.mark.slow  # over 15 s: make test-slow
def test_a_failed_side_by_side_stage_stops_the_others_and_the_pipeline_with_its_exit_code(tmp_path, sft_short):
    import pytest
    import typer

    from scripts.pipeline import Pipeline

    p = Pipeline(str(tmp_path), str(DATA / "arith/test.jsonl"), "math")
    bad = ["--prompts", str(tmp_path / "missing.jsonl"), "--max-steps", "1"]
    long = ["--recipe", str(ROOT / "recipes/grpo_math_tiny.yaml"), "--prompts", str(DATA / "arith/grpo_prompts.jsonl"),
            "--max-steps", "100000", "--no-preflight"]
    start = time.time()
    with pytest.raises(typer.Exit) as exc:
        p.side_by_side([("bad", "grpo", str(sft_short), bad), ("long", "grpo", str(sft_short), long)], 2)
    assert exc.value.exit_code == 2 and p.rows == [] and time.time() - start < 200
    assert "missing.jsonl" in (tmp_path / "bad.log").read_text()
    summary = tmp_path / "long/summary.json"  # stopped: not completed (or not started)
    assert not summary.exists() or json.loads(summary.read_text())["status"] != "completed"
    assert not (tmp_path / "long.command.json").exists() and not (tmp_path / "pipeline.json").exists()
    with pytest.raises(ValueError, match="names must differ"):
        p.side_by_side([("a", "grpo", "m", []), ("a", "grpo", "m", [])], 2)


def test_the_rl_stages_get_the_time_left(tmp_path, monkeypatch):
    """--minutes reaches each RL stage as train.max_minutes, from the time the SFT stage left (the stages
    themselves are captured here; tests/test_time_limit.py runs a stage past its limit)."""
    from scripts.pipeline import Pipeline

    seen = []
    monkeypatch.setattr(Pipeline, "side_by_side", lambda self, stages, jobs: seen.extend(stages))
    main(out=str(tmp_path / "demo"), model="tiny", data=str(DATA / "word_problems"), heldout_rows=4,
         heldout_tokens=4, sft_steps=2, sft_batch=2, rl_steps=3, seeds="1,2,3", jobs=2, minutes=20)
    assert [name for name, *_ in seen] == ["grpo-seed1", "grpo-seed2", "grpo-seed3"]
    limits = {a for *_, args in seen for a in args if a.startswith("train.max_minutes=")}
    (limit,) = limits  # the same for every seed
    # three seeds, two at a time: two rounds share what is left of 20 minutes
    assert 4.0 < float(limit.split("=")[1]) < 9.8
    seen.clear()
    main(out=str(tmp_path / "demo"), model="tiny", data=str(DATA / "word_problems"), heldout_rows=4,
         heldout_tokens=4, sft_steps=2, sft_batch=2, rl_steps=3, seeds="1", minutes=0)
    assert not any(a.startswith("train.max_minutes") for *_, args in seen for a in args)
