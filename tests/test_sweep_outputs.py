"""rlft sweep obeys the output rule and destroys nothing: -o is never an input, inside one or holding one; it is
refused before anything is created; trials are staged, so a failed --overwrite sweep leaves the earlier sweep as it
was; a failure or Ctrl-C after some trials keeps a best recipe of those (marked partial); --range is typed by the
key's schema type; a --grid over a key the sweep sets itself is refused."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import DATA
from test_bad_input_nothing_destroyed import refused, snapshot

SFT = DATA / "arith/sft_train.jsonl"
FAST = ["--trial-steps", "2", "--set", "watch.holdout_max_rows=10", "--set", "watch.holdout_max_new_tokens=2",
        "--set", "sft.max_length=24", "--set", "data.max_rows=300", "--set", "train.per_device_train_batch_size=4"]


def _sweep(cli, out, *extra, grid=("train.learning_rate=1e-4,1e-3",)):
    args = ["sweep", "sft", "-d", SFT, "-o", out, *FAST, *extra]
    for g in grid:
        args += ["--grid", g]
    return cli(*args)


@pytest.fixture
def old_sweep(tmp_path):
    """A folder as an earlier sweep left it: a trial holding a model, trials.json, best_recipe.yaml."""
    out = tmp_path / "sweep"
    (out / "trial-0").mkdir(parents=True)
    (out / "trial-0" / "config.json").write_text("{}")
    (out / "trial-0" / "model.safetensors").write_bytes(b"weights")
    (out / "trial-0" / "summary.json").write_text("{}")
    (out / "trials.json").write_text("{}")
    (out / "best_recipe.yaml").write_text("# old\n")
    return out


def test_a_model_inside_the_sweep_being_overwritten_is_refused_and_kept(cli, old_sweep):
    before = snapshot(old_sweep)
    refused(_sweep(cli, old_sweep, "-m", old_sweep / "trial-0", "--overwrite"), "--output-dir", "holds the input",
            "model.name_or_path")
    assert snapshot(old_sweep) == before


def test_output_inside_the_model_folder_is_refused(cli, tmp_path, tiny_dir):
    model = shutil.copytree(tiny_dir, tmp_path / "model")
    before = snapshot(model)
    refused(_sweep(cli, model / "sweeps", "-m", model), "--output-dir", "is inside the input")
    assert snapshot(model) == before and not (model / "sweeps").exists()


def test_output_that_is_a_file_is_one_line(cli, tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    refused(_sweep(cli, f), "--output-dir", "is a file")
    assert f.read_text() == "mine"


def test_a_typo_in_data_creates_nothing(cli, tmp_path):
    out = tmp_path / "new" / "sweep"
    r = cli("sweep", "sft", "-d", tmp_path / "trian.jsonl", "-o", out, "--grid", "train.learning_rate=1e-4,1e-3")
    refused(r, "does not exist")
    assert not (tmp_path / "new").exists()


def test_too_few_rows_for_the_held_out_slice_is_refused_before_any_trial(cli, tmp_path):
    out = tmp_path / "sweep"
    r = cli("sweep", "sft", "-d", SFT, "-o", out, "--set", "data.max_rows=30", "--grid",
            "train.learning_rate=1e-4,1e-3")
    refused(r, "too few to hold out")
    assert not out.exists() and not list(tmp_path.glob(".sweep*"))


def test_overwrite_of_a_folder_that_is_not_a_sweep_is_refused(cli, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("x")
    refused(_sweep(cli, out, "--overwrite"), "not an rlft sweep folder")
    assert (out / "thesis.tex").read_text() == "x"


@pytest.mark.parametrize("grid, says", [
    ("train.max_steps=5,10", "--trial-steps"),
    ("train.output_dir=a,b", "sets it"),
])
def test_a_grid_over_a_key_the_sweep_sets_is_refused(cli, tmp_path, grid, says):
    out = tmp_path / "sweep"
    refused(_sweep(cli, out, grid=(grid,)), grid.split("=")[0], says)
    assert not out.exists()


@pytest.mark.parametrize("rng, says", [
    ("train.learning_rate=1e-5:inf", "finite"),
    ("train.learning_rate=-inf:1", "finite"),
    ("train.per_device_train_batch_size=1.5:4", "integer"),
    ("train.report_to=1:2", "not a numeric setting"),
])
def test_bad_ranges_are_one_line_before_anything(cli, tmp_path, rng, says):
    out = tmp_path / "sweep"
    r = cli("sweep", "sft", "-d", SFT, "-o", out, "--range", rng)
    refused(r, says)
    assert not out.exists()


def test_an_integer_range_samples_integers(cli, tmp_path):
    out = tmp_path / "sweep"
    r = cli("sweep", "sft", "-d", SFT, "-o", out, *FAST, "--trials", "2",
            "--range", "train.gradient_accumulation_steps=1:3")
    assert r.code == 0, r.text
    trials = json.loads((out / "trials.json").read_text())["trials"]
    assert all(isinstance(t["params"]["train.gradient_accumulation_steps"], int) for t in trials)
    assert not list(tmp_path.glob(".sweep.*"))  # the staging folder became the sweep


def test_a_failed_overwrite_sweep_leaves_the_earlier_sweep(cli, old_sweep):
    """The first trial cannot train (no such LoRA target): nothing ran, so the earlier sweep stays as it was."""
    before = snapshot(old_sweep)
    r = _sweep(cli, old_sweep, "--overwrite", "--set", "model.lora.enabled=true",
               grid=("model.lora.target_modules=no_such_module",))
    assert r.code != 0 and "Traceback" not in r.text
    assert snapshot(old_sweep) == before
    assert not list(old_sweep.parent.glob(".sweep.*"))


def _second_trial_raises(monkeypatch, exc):
    import rlft.commands.sweep as command

    real, calls = command.run_trial, []

    def run_trial(cfg, console, on_check):
        calls.append(cfg)
        if len(calls) == 2:
            raise exc
        return real(cfg, console, on_check)

    monkeypatch.setattr(command, "run_trial", run_trial)


def test_a_trial_that_cannot_train_keeps_a_partial_best_recipe(cli, old_sweep, monkeypatch):
    _second_trial_raises(monkeypatch, RuntimeError("cannot train"))
    line = refused(_sweep(cli, old_sweep, "--overwrite"), "trial 1 failed", "cannot train", "best_recipe.yaml")
    assert "partial" in line
    recipe = (old_sweep / "best_recipe.yaml").read_text()
    assert "PARTIAL" in recipe and "# old" not in recipe
    result = json.loads((old_sweep / "trials.json").read_text())
    assert result["partial"] and [t["trial"] for t in result["trials"]] == [0]
    assert (old_sweep / "trial-0" / "config.yaml").is_file()  # the new trial-0, not the old one
    assert not list(old_sweep.parent.glob(".sweep.*"))


def test_ctrl_c_during_a_trial_keeps_a_partial_best_recipe(cli, tmp_path, monkeypatch):
    _second_trial_raises(monkeypatch, KeyboardInterrupt())
    out = tmp_path / "sweep"
    r = _sweep(cli, out)
    assert r.code == 130, r.text
    assert "PARTIAL" in (out / "best_recipe.yaml").read_text()
    assert "partial" in r.err
