"""rlft sweep: bad grids are one error with nothing written; a sweep runs every trial, prunes through Optuna,
and writes a table, a plot and a best recipe that `rlft <method> --recipe` loads."""

from __future__ import annotations

import json

import pytest
from helpers import DATA, ROOT

from rlft.errors import UserError
from rlft.sweep import parse_space


@pytest.mark.parametrize("grid, rng, says", [
    (["learning_rate=1e-5,1e-4"], [], "SECTION.KEY=V1,V2"),
    (["train.learning_rate"], [], "SECTION.KEY=V1,V2"),
    ([], ["train.learning_rate=1e-3:1e-5"], "LOW:HIGH"),
    ([], ["train.learning_rate=0:1e-3:log"], "0 < LOW"),
    ([], [], "needs something to vary"),
    (["train.learning_rate=1e-5"], ["train.learning_rate=1e-5:1e-3"], "both a --grid and a --range"),
])
def test_bad_spaces_are_one_error(grid, rng, says):
    with pytest.raises(UserError) as exc:
        parse_space(grid, rng)
    assert says in exc.value.message


def test_grid_values_are_numbers():
    space = parse_space(["train.learning_rate=1e-5,3e-5", "kto.loss_type=kto,apo_zero_unpaired"], [])
    assert space.grid["train.learning_rate"] == [1e-5, 3e-5] and space.size() == 4
    assert space.grid["kto.loss_type"] == ["kto", "apo_zero_unpaired"]


def test_unknown_key_is_refused_before_any_trial(cli, tmp_path):
    out = tmp_path / "sweep"
    r = cli("sweep", "kto", "--recipe", ROOT / "recipes/kto_tiny.yaml", "--grid", "train.learnin_rate=1e-5,1e-4",
            "-o", out)
    assert r.code == 2 and "learnin_rate" in r.text and not out.exists()


def test_sweep_writes_a_recipe_that_runs(cli, sft_model, tmp_path):
    rows = (DATA / "arith/thumbs_train.jsonl").read_text().splitlines()[:600]
    data = tmp_path / "thumbs.jsonl"
    data.write_text("\n".join(rows) + "\n")
    out = tmp_path / "sweep"
    r = cli("sweep", "kto", "--recipe", ROOT / "recipes/kto_tiny.yaml", "-d", data, "-m", sft_model, "-o", out,
            "--grid", "train.learning_rate=1e-5,1e-3", "--trial-steps", "6", "--set", "watch.holdout_max_new_tokens=4")
    assert r.code == 0, r.text
    result = json.loads((out / "trials.json").read_text())
    assert len(result["trials"]) == 2 and (out / "trials.png").stat().st_size > 0
    assert {t["params"]["train.learning_rate"] for t in result["trials"]} == {1e-5, 1e-3}
    best = result["best"]
    done = [t for t in result["trials"] if t["status"] != "pruned"]
    # the best among the trials that kept a trained model (beat their start clearly), else among all
    assert best["value"] == max(t["value"] for t in done if t["beat_start"] == best["beat_start"])
    assert best["beat_start"] or not any(t["beat_start"] for t in done)
    assert best["beat_start"] or "no trial beat its start clearly" in r.text
    recipe = out / "best_recipe.yaml"
    assert recipe.read_text().startswith("# Found by rlft sweep")
    p = cli("kto", "--recipe", recipe, "--print-config")
    assert p.code == 0, p.text
    assert f"learning_rate: {best['params']['train.learning_rate']}" in p.out
    assert "max_steps: -1" in p.out and "num_train_epochs: 5" in p.out  # the recipe's own length, not the trial's


def test_ppo_sweep_needs_held_out_rows(cli, tmp_path):
    """Without data.eval, data.eval_fraction or watch.holdout a PPO trial has nothing to be judged by."""
    out = tmp_path / "sweep"
    r = cli("sweep", "ppo", "--recipe", ROOT / "recipes/ppo_tiny.yaml", "--set", "data.eval=null",
            "--grid", "train.learning_rate=1e-5,1e-4", "-o", out)
    assert r.code == 2 and "needs held-out rows" in r.err and "data.eval=FILE" in r.err.replace("\n", " ")
    assert not out.exists()


def test_ppo_sweep_judges_trials_on_its_checks(cli, sft_model, tmp_path):
    """rlft's PPO is swept like the TRL methods: every trial's checks reach Optuna, best_recipe.yaml runs."""
    heldout = tmp_path / "heldout.jsonl"
    heldout.write_text("\n".join((DATA / "arith/test.jsonl").read_text().splitlines()[:12]) + "\n")
    out = tmp_path / "sweep"
    r = cli("sweep", "ppo", "--recipe", ROOT / "recipes/ppo_tiny.yaml", "-m", sft_model, "-o", out,
            "--grid", "train.learning_rate=1e-5,3e-4", "--trial-steps", "5", "--set", f"data.eval={heldout}",
            "--set", "train.per_device_train_batch_size=8")
    assert r.code == 0, r.text
    result = json.loads((out / "trials.json").read_text())
    assert {t["params"]["train.learning_rate"] for t in result["trials"]} == {1e-5, 3e-4}
    for t in result["trials"]:
        curve = json.loads((out / f"trial-{t['trial']}/summary.json").read_text())["heldout"]["curve"]
        # the recipe's eval_steps (50) is past the trial budget: the sweep checks every 5 // 5 = 1 step
        assert [c["step"] for c in curve] == [0, 1, 2, 3, 4, 5]
        assert t["value"] == max(c["score"] for c in curve[1:])
    p = cli("ppo", "--recipe", out / "best_recipe.yaml", "--print-config")
    assert p.code == 0 and "max_steps: 150" in p.out, p.text  # the recipe's own length, not the trial's


def test_ppo_stops_where_the_pruner_says(sft_model, tmp_path):
    from rich.console import Console

    from rlft.config import resolve
    from rlft.methods import ppo

    heldout = tmp_path / "heldout.jsonl"
    heldout.write_text("\n".join((DATA / "arith/test.jsonl").read_text().splitlines()[:8]) + "\n")
    heard = []
    cfg = resolve("ppo", ROOT / "recipes/ppo_tiny.yaml", {"model.name_or_path": (str(sft_model), "--model")},
                  [f"data.eval={heldout}", "train.per_device_train_batch_size=8", "train.max_steps=6",
                   "train.eval_steps=1", f"train.output_dir={tmp_path / 'ppo'}"])
    result = ppo.run(cfg, overwrite=True, console=Console(file=open(tmp_path / "log", "w")),  # noqa: SIM115
                     on_check=lambda step, score: heard.append(step) or step == 2)
    summary = json.loads((tmp_path / "ppo/summary.json").read_text())
    assert heard == [0, 1, 2] and summary["global_step"] == 2 and summary["status"] == "completed", result
