"""`rlft report`: plots and report.md of a real short run, alarms marked on the steps where they fired."""

from __future__ import annotations

import json

import pytest
import typer
from helpers import DATA, write_jsonl
from typer.testing import CliRunner

from rlft.commands.report import report
from rlft.errors import UserError
from rlft.report import PANELS, _draw, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def short_run(tmp_path_factory, tiny_dir):
    """A real 40-step SFT of the tiny model with eval loss and a held-out check every 20 steps."""
    from rlft.cli import main

    out = tmp_path_factory.mktemp("report") / "sft"
    try:
        main(["sft", "--data", str(DATA / "arith/sft_train.jsonl"), "--set", "data.eval_fraction=0.05",
              "-o", str(out), "--max-steps", "40", "--lr", "3e-3", "--batch-size", "32",
              "--set", "train.logging_steps=5", "--set", "train.eval_steps=20", "--set", "train.save_steps=20",
              "--set", "sft.max_length=32", "--set", "data.max_rows=800",
              "--holdout", str(DATA / "arith/test.jsonl"), "--set", "watch.holdout_every=20",
              "--set", "watch.holdout_max_rows=40", "--set", "watch.holdout_max_new_tokens=5"])
    except SystemExit as exc:
        assert exc.code == 0, f"short SFT failed with exit code {exc.code}"
    return out


def test_training_writes_the_report_with_plots(short_run):
    rep = short_run / "report"
    for name in ("report.md", "overview.png", "loss.png", "heldout.png", "entropy.png"):
        assert (rep / name).exists(), name
    for png in rep.glob("*.png"):
        data = png.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, (png.name, len(data))
    md = (rep / "report.md").read_text()
    summary = json.loads((short_run / "summary.json").read_text())
    assert "method: **sft**" in md and "status: **completed** after 40 steps" in md
    assert "sft_train.jsonl" in md and "No alarm fired." in md
    assert f"train_loss {summary['final_metrics']['train_loss']:.4g}" in md  # final metrics
    assert "| loss |" in md and "| heldout/pass_at_1 |" in md
    assert "![overview](overview.png)" in md and "![Loss](loss.png)" in md
    assert "## Samples" in md and "heldout (math)" in md  # SFT has no rollouts: held-out samples


def test_heldout_check_ran_at_start_every_k_steps_and_end(short_run):
    metrics = [json.loads(line) for line in (short_run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "heldout/pass_at_1" in m] == [0, 20, 40]
    samples = [json.loads(line) for line in (short_run / "samples.jsonl").read_text().splitlines()]
    assert [s["step"] for s in samples] == [20, 40]  # at each save/eval


def test_report_command_rewrites_and_prints_the_path(short_run):
    app = typer.Typer()
    app.command()(report)
    (short_run / "report" / "loss.png").unlink()
    r = CliRunner().invoke(app, [str(short_run)])
    assert r.exit_code == 0, r.output
    assert r.output.strip() == str(short_run / "report/report.md")
    assert (short_run / "report" / "loss.png").exists()
    r = CliRunner().invoke(app, [str(short_run), "--json"])
    out = json.loads(r.output)
    assert out["status"] == "completed" and out["alarms"] == [] and len(out["plots"]) >= 4


def test_report_command_refuses_a_folder_that_is_not_a_run(tmp_path):
    app = typer.Typer()
    app.command()(report)
    r = CliRunner().invoke(app, [str(tmp_path)])
    assert isinstance(r.exception, UserError) and "not an rlft run folder" in str(r.exception)
    r = CliRunner().invoke(app, [str(tmp_path / "missing")])
    assert isinstance(r.exception, UserError) and "does not exist" in str(r.exception)


def synthetic_run(tmp_path):
    """A GRPO run folder as the watcher writes it, with a zero-signal alarm at step 30."""
    run = tmp_path / "run"
    run.mkdir()
    metrics = [{"step": s, "loss": 0.01, "reward": 0.9 + s / 1000, "reward_std": 0.1, "entropy": 0.2,
                "frac_reward_zero_std": f} for s, f in [(10, 0.85), (20, 0.9), (30, 0.95), (40, 0.9)]]
    write_jsonl(run / "metrics.jsonl", metrics)
    alarm = {"name": "zero_signal", "step": 30, "message": "90% of GRPO groups had all-equal rewards",
             "evidence": {"steps": [10, 20, 30], "frac_reward_zero_std": [0.85, 0.9, 0.95]},
             "fix": "use harder prompts", "action": "warn"}
    write_jsonl(run / "alarms.jsonl", [alarm])
    (run / "summary.json").write_text(json.dumps({"method": "grpo", "status": "interrupted", "global_step": 40,
                                                  "data": ["p.jsonl"], "train_rows": 8}))
    return run


def test_alarms_are_marked_in_the_report_and_on_the_plots(tmp_path):
    run = synthetic_run(tmp_path)
    md = write_report(run).read_text()
    assert "**ALARM zero_signal** at step 30" in md and "fix: use harder prompts" in md
    assert "status: **interrupted**" in md and '"steps": [10, 20, 30]' in md
    assert (run / "report/zero_signal.png").stat().st_size > 10_000

    from matplotlib.figure import Figure

    panel = next(p for p in PANELS if p.name == "zero_signal")
    ax = Figure().add_subplot()
    _draw(ax, panel, [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()],
          [json.loads((run / "alarms.jsonl").read_text())])
    vlines = [ln for ln in ax.lines if list(ln.get_xdata()) == [30, 30]]
    assert vlines and vlines[0].get_color() == "red"  # the alarm, at the step it fired
    dots = ax.collections[0].get_offsets().tolist()
    assert dots == [[10, 0.85], [20, 0.9], [30, 0.95]]  # the logged values that tripped it
    assert any(t.get_text() == "zero_signal" for t in ax.texts)
    assert len([ln for ln in ax.lines if ln.get_linestyle() == "--"]) == 1


def test_report_of_a_run_with_nan_loss_and_no_summary(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "metrics.jsonl", [{"step": 1, "loss": 2.0}, {"step": 2, "loss": "nan"}, '{"step": 3, "lo'])
    md = write_report(run).read_text()
    assert "| loss | 2 | 2 | 1-1 |" in md and (run / "report/loss.png").exists()


def test_the_report_names_the_better_check_kept_beside_the_last(tmp_path):
    run = synthetic_run(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    summary["kept"] = {"step": 40, "score": 0.42, "why": "the last check, within noise of the best",
                       "best_beside": {"step": 20, "score": 0.45, "folder": "best"}}
    (run / "summary.json").write_text(json.dumps(summary))
    md = write_report(run).read_text()
    assert "- model kept in the run folder: step 40" in md
    assert "- the best check's model (step 20, 0.45) is beside it in best/" in md
