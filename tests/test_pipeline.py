"""Pipelines: stages run the real commands, held-out scores are measured around each, one table closes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_jsonl

from scripts.pipeline import Pipeline, _alarms

ROOT = Path(__file__).resolve().parent.parent
HELDOUT = ROOT / "data/arith/test.jsonl"


def test_stage_measures_heldout_before_and_after_and_writes_the_table(tmp_path, tiny_dir):
    heldout = write_jsonl(tmp_path / "heldout.jsonl", [json.loads(line) for line in
                                                       HELDOUT.read_text().splitlines()[:20]])
    p = Pipeline(str(tmp_path / "runs"), str(heldout))
    args = ("--recipe", str(ROOT / "recipes/sft_tiny_short.yaml"), "--max-steps", "300",
            "--set", "train.logging_steps=100")
    sft = p.stage("sft", "sft", str(tiny_dir), *args)
    assert Path(sft, "summary.json").exists()
    row = p.rows[0]
    assert (row.stage, row.method, row.metric) == ("sft", "sft", "held-out pass@1")
    assert row.before == 0.0  # the random tiny model never answers a sum
    assert row.after > 0.0, "300 SFT steps should get some of 20 sums right"
    assert row.wall > 0
    p.table("test")
    md = (tmp_path / "runs/pipeline.md").read_text()
    assert "| sft | sft | held-out pass@1 | 0.000 |" in md
    assert (tmp_path / "runs/pipeline.png").stat().st_size > 5000 and "![stages](pipeline.png)" in md
    saved = json.loads((tmp_path / "runs/pipeline.json").read_text())
    assert saved[0]["after"] == row.after
    # reuse=True keeps a completed run of the very same command (the shared SFT of `make demo`) ...
    summary = Path(sft, "summary.json").stat().st_mtime
    p.stage("sft", "sft", str(tiny_dir), *args, reuse=True)
    assert Path(sft, "summary.json").stat().st_mtime == summary
    # ... and reruns when anything differs (another model, data or recipe must not be silently reused)
    p.stage("sft", "sft", str(tiny_dir), *args[:2], "--max-steps", "2", reuse=True)
    assert json.loads(Path(sft, "summary.json").read_text())["global_step"] == 2


def test_alarms_column_lists_each_alarm_with_its_step(tmp_path):
    assert _alarms(tmp_path) == ""
    write_jsonl(tmp_path / "alarms.jsonl", [{"name": "reward_hacking", "step": 100},
                                            {"name": "length_hacking", "step": 150}])
    assert _alarms(tmp_path) == "reward_hacking@100, length_hacking@150"
    with open(tmp_path / "alarms.jsonl", "a") as f:
        f.write('{"name": "kl_bl')  # a run killed mid-write
    assert _alarms(tmp_path) == "reward_hacking@100, length_hacking@150"


@pytest.mark.slow  # over 15 s: make test-slow
def test_failed_stage_stops_the_pipeline_with_its_exit_code(tmp_path):
    r = subprocess.run([sys.executable, "-m", "scripts.pipeline", "dpo", "--model", "tiny", "--out", str(tmp_path),
                        "--sft-data", str(tmp_path / "missing.jsonl")], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "missing.jsonl" in r.stdout + r.stderr
    assert not (tmp_path / "pipeline.md").exists()


@pytest.mark.slow
def test_pipeline_dpo_end_to_end(tmp_path):
    """`make pipeline-dpo` on the tiny model: SFT lifts held-out pass@1 off 0, DPO does not lower it."""
    r = subprocess.run([sys.executable, "-m", "scripts.pipeline", "dpo", "--model", "tiny", "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = {row["stage"]: row for row in json.loads((tmp_path / "pipeline.json").read_text())}
    assert rows["sft"]["before"] == 0.0 and rows["sft"]["after"] >= 0.4
    assert rows["dpo"]["before"] == rows["sft"]["after"]
    assert rows["dpo"]["after"] >= rows["dpo"]["before"]


def test_stage_recipes_can_be_replaced_for_a_real_model(tmp_path, sft_model):
    """--recipe STAGE=FILE (RECIPES= in make) swaps a stage's recipe; the tiny ones stay the default."""
    from scripts.pipeline import TINY_RECIPES, _dpo, _recipes

    recipe = tmp_path / "dpo_short.yaml"
    recipe.write_text((ROOT / "recipes/dpo_tiny.yaml").read_text().replace("num_train_epochs: 5", "max_steps: 3"))
    heldout = write_jsonl(tmp_path / "heldout.jsonl", [json.loads(line) for line in
                                                       HELDOUT.read_text().splitlines()[:10]])
    p = Pipeline(str(tmp_path / "runs"), str(heldout), recipes=_recipes([f"dpo={recipe}"]))
    assert p.recipes == {**TINY_RECIPES, "dpo": str(recipe)}
    _dpo(p, str(sft_model), str(ROOT / "data/arith/pairs_train.jsonl"), str(ROOT / "data/arith/pairs_eval.jsonl"))
    summary = json.loads((tmp_path / "runs/dpo/summary.json").read_text())
    assert summary["status"] == "completed" and summary["global_step"] == 3
    assert p.rows[0].before is not None and p.rows[0].after is not None


@pytest.mark.parametrize("arg, message", [("dpo", "expected STAGE=FILE"), ("sft=x.yaml", "is --sft-recipe"),
                                          ("grpo=no/such.yaml", "no such recipe file"),
                                          ("grpo=recipes/dpo_tiny.yaml", "is a recipe for `rlft dpo`, not the grpo")])
def test_bad_stage_recipe_is_refused_before_any_stage_runs(tmp_path, arg, message):
    r = subprocess.run([sys.executable, "-m", "scripts.pipeline", "grpo", "--out", str(tmp_path), "--recipe", arg],
                       capture_output=True, text=True, cwd=ROOT, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 2 and message in r.stdout + r.stderr, r.stdout + r.stderr
    assert not any(tmp_path.iterdir())


def test_unknown_verifier_or_unreadable_gold_stops_before_any_stage(tmp_path):
    env = {**os.environ, "COLUMNS": "200"}
    r = subprocess.run([sys.executable, "-m", "scripts.pipeline", "dpo", "--out", str(tmp_path), "--verifier", "maths"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    assert r.returncode == 2 and "maths" in r.stdout + r.stderr, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "scripts.pipeline", "dpo", "--out", str(tmp_path), "--verifier", "json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    assert r.returncode == 2 and "test.jsonl:1" in r.stdout + r.stderr, r.stdout + r.stderr
    assert not any(tmp_path.iterdir())


def test_each_stage_gets_its_recipe_data_and_verifier(tmp_path, monkeypatch):
    """What the pipeline passes to each `rlft` command, without training (the commands are recorded)."""
    import scripts.pipeline as pipeline

    calls = []

    def fake_rlft(*args):
        calls.append(args)
        out = Path(args[args.index("-o") + 1])
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps({"status": "completed", "final_metrics": {}}))

    monkeypatch.setattr(pipeline, "_rlft", fake_rlft)
    monkeypatch.setattr(pipeline, "heldout_pass_at_1", lambda model, heldout, verifier, tokens: 0.5)
    p = Pipeline(str(tmp_path), "held.jsonl", verifier="label", max_new_tokens=32,
                 recipes={"grpo": "recipes/grpo_label_tiny.yaml"})
    pipeline._grpo(p, "m", "prompts.jsonl")
    pipeline._rlhf(p, "m", "pairs.jsonl", "pairs_eval.jsonl", "prompts.jsonl")
    pipeline._dpo(Pipeline(str(tmp_path / "d"), "held.jsonl"), "m", "pairs.jsonl", "pairs_eval.jsonl")
    grpo, reward, ppo, dpo = (" ".join(c) for c in calls)
    assert ("--recipe recipes/grpo_label_tiny.yaml --prompts prompts.jsonl --verifier label "
            "--eval-data held.jsonl") in grpo
    assert "--recipe recipes/reward_tiny.yaml --pairs pairs.jsonl --eval-data pairs_eval.jsonl" in reward
    assert f"--reward-model {tmp_path / 'reward'} --eval-data held.jsonl --holdout-verifier label" in ppo
    assert "--recipe recipes/dpo_tiny.yaml --pairs pairs.jsonl --eval-data pairs_eval.jsonl" in dpo
    p2 = Pipeline(str(tmp_path / "g"), "held.jsonl")
    pipeline._grpo(p2, "m", "prompts.jsonl")  # no --verifier: the GRPO recipe keeps its own reward
    assert "--verifier" not in calls[-1] and p2.verifier == "math"


def test_kto_rloo_and_distill_stages_get_their_recipe_and_data(tmp_path, monkeypatch):
    """KTO reads the thumbs file, RLOO the prompts with the held-out rows, distill a teacher SFT'd first."""
    import scripts.pipeline as pipeline

    calls = []

    def fake_rlft(*args):
        calls.append(args)
        out = Path(args[args.index("-o") + 1])
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps({"status": "completed", "final_metrics": {}}))

    monkeypatch.setattr(pipeline, "_rlft", fake_rlft)
    monkeypatch.setattr(pipeline, "heldout_pass_at_1", lambda model, heldout, verifier, tokens: 0.5)
    p = Pipeline(str(tmp_path), "held.jsonl")
    pipeline._kto(p, "m", "thumbs.jsonl")
    pipeline._rloo(p, "m", "prompts.jsonl")
    pipeline._distill(p, "m", "base", "demos.jsonl", "recipes/sft_tiny.yaml", "prompts.jsonl")
    kto, rloo, teacher, distill = (" ".join(c) for c in calls)
    assert kto.startswith("kto --model m --recipe recipes/kto_tiny.yaml --feedback thumbs.jsonl")
    assert "rloo --model m --recipe recipes/rloo_math_tiny.yaml --prompts prompts.jsonl --eval-data held.jsonl" in rloo
    assert teacher.startswith("sft --model base --recipe recipes/sft_tiny.yaml --data demos.jsonl")
    assert (f"distill --model m --recipe recipes/distill_tiny.yaml --teacher {tmp_path / 'teacher'} "
            "--prompts prompts.jsonl --eval-data held.jsonl") in distill
    assert [r.stage for r in p.rows] == ["kto", "rloo", "teacher", "distill"]
