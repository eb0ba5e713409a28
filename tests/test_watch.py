"""The watch end to end through the CLI: alarms on real GRPO runs of the tiny model, --on-alarm stop,
held-out checks and samples."""

from __future__ import annotations

import json

import pytest
from helpers import DATA, ROOT, write_jsonl

RECIPE = ROOT / "recipes/grpo_math_tiny.yaml"
HELDOUT = DATA / "arith/test.jsonl"


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_recorder_wraps_a_reward_function_transparently():
    from rlft.watch.monitor import RolloutRecorder, best_and_worst

    def math_reward(completions, answer, **_):
        return [float(c == a) for c, a in zip(completions, answer)]

    rec = RolloutRecorder()
    wrapped = rec.wrap(math_reward)
    prompts = ["1+1="] * 3 + ["2+2="] * 3
    completions = ["2", "3", "2", "4", "4", "4"]
    out = wrapped(prompts=prompts, completions=completions, answer=["2"] * 3 + ["4"] * 3, trainer_state=None)
    assert out == [1.0, 0.0, 1.0, 1.0, 1.0, 1.0] and wrapped.__name__ == "math_reward"
    groups = best_and_worst(rec.latest(), 2)
    assert groups[0]["prompt"] == "1+1=" and groups[0]["worst"] == {"completion": "3", "reward": 0.0}
    assert groups[1]["best"] == groups[1]["worst"] == {"completion": "4", "reward": 1.0}
    assert rec.take_repetition() == 0.0 and rec.take_repetition() is None


def test_watcher_stops_once_and_writes_alarms(tmp_path):
    import io

    from rich.console import Console

    from rlft.alarms import Thresholds
    from rlft.watch.monitor import Watcher
    from rlft.watch.setup import WatchSetup

    console = Console(file=io.StringIO(), width=200)
    w = Watcher(tmp_path, console, WatchSetup(Thresholds(zero_signal_logs=2), on_alarm="stop"))
    assert w.log({"step": 1, "frac_reward_zero_std": 0.9, "loss": 0.1}) == []
    assert [a.name for a in w.log({"step": 2, "frac_reward_zero_std": 1.0, "loss": "nan"})] == [
        "nan_loss", "zero_signal"]
    assert w.stopped_by.name == "nan_loss"  # the first alarm decides the stop
    assert w.log({"step": 3, "frac_reward_zero_std": 1.0}) == []  # each rule fires once per run
    w.close()
    alarms = read_jsonl(tmp_path / "alarms.jsonl")
    assert [(a["name"], a["action"]) for a in alarms] == [("nan_loss", "stop"), ("zero_signal", "warn")]
    assert len(read_jsonl(tmp_path / "metrics.jsonl")) == 3
    resumed = Watcher(tmp_path, console)  # --resume: the history and the fired alarms carry over
    assert len(resumed.history) == 3 and resumed.alarm_names == ["nan_loss", "zero_signal"]
    resumed.close()
    assert "ALARM nan_loss at step 2" in console.file.getvalue()


@pytest.fixture(scope="module")
def solved_prompts(tmp_path_factory):
    """Prompts the sft_short model always solves: the 400 it was SFT'd on (recipes/sft_tiny_short.yaml
    takes the first 400 rows of sft_train.jsonl and drives their loss to ~0.005). Sampled at temperature
    0.5 every group of 8 is all-correct (pre-flight: pass rate 1.0, mixed groups 0.0; at temperature 1.0
    one sample in ~70 slips, so ~12% of groups would be mixed)."""
    rows = [json.loads(line) for line in (DATA / "arith/sft_train.jsonl").read_text().splitlines()[:400]]
    path = tmp_path_factory.mktemp("solved") / "solved.jsonl"
    return write_jsonl(path, [{"prompt": r["prompt"], "answer": r["completion"].strip()} for r in rows])


def grpo_on_solved(cli, out, prompts, model, *extra):
    return cli("grpo", "--prompts", prompts, "--verifier", "math", "--model", model, "-o", out, "--no-preflight",
               "--batch-size", "32", "--set", "grpo.num_generations=8", "--set", "grpo.temperature=0.5",
               "--set", "grpo.max_completion_length=6", "--lr", "1e-4", *extra)


def test_zero_signal_alarm_on_prompts_the_model_always_solves(cli, tmp_path, solved_prompts, sft_short):
    out = tmp_path / "grpo-solved"
    r = grpo_on_solved(cli, out, solved_prompts, sft_short, "--max-steps", "8", "--set", "train.logging_steps=2")
    assert r.code == 0, r.text
    assert "ALARM zero_signal" in r.err and "harder prompts" in r.err
    alarms = read_jsonl(out / "alarms.jsonl")
    assert [a["name"] for a in alarms] == ["zero_signal"]
    alarm = alarms[0]
    assert alarm["step"] == 6 and alarm["action"] == "warn"  # logs at 2, 4, 6: the third in a row fires
    assert alarm["evidence"]["steps"] == [2, 4, 6] and min(alarm["evidence"]["frac_reward_zero_std"]) >= 0.8
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["global_step"] == 8  # warn: the run goes on
    assert summary["alarms"] == ["zero_signal"]
    report = (out / "report/report.md").read_text()
    assert "ALARM zero_signal" in report and "harder prompts" in report
    assert (out / "report/zero_signal.png").stat().st_size > 10_000
    assert f"report: {out / 'report/report.md'}" in r.err.replace("\n", "")


def test_on_alarm_stop_saves_a_checkpoint_and_stops(cli, tmp_path, solved_prompts, sft_short):
    out = tmp_path / "grpo-stop"
    r = grpo_on_solved(cli, out, solved_prompts, sft_short, "--max-steps", "50", "--on-alarm", "stop",
                       "--set", "train.logging_steps=2", "--set", "watch.zero_signal_logs=1")
    assert r.code == 4, r.text
    assert "stopped" in r.err and "zero_signal" in r.err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["global_step"] == 2
    assert summary["stopped_by"]["name"] == "zero_signal" and summary["checkpoint"].endswith("checkpoint-2")
    assert (out / "checkpoint-2" / "model.safetensors").exists()
    assert not (out / "model.safetensors").exists()  # no final model from a stopped run
    assert read_jsonl(out / "alarms.jsonl")[0]["action"] == "stop"
    assert "stopped by the **zero_signal** alarm" in (out / "report/report.md").read_text()


def test_math_verifier_run_raises_no_alarm_and_logs_heldout_and_samples(cli, tmp_path, sft_short):
    out = tmp_path / "grpo-math"
    r = cli("grpo", "--recipe", RECIPE, "--model", sft_short, "-o", out, "--max-steps", "12",
            "--set", "train.logging_steps=4", "--set", "train.save_steps=6", "--set", "data.max_rows=200",
            "--holdout", HELDOUT, "--set", "watch.holdout_every=6", "--set", "watch.holdout_max_rows=50")
    assert r.code == 0, r.text
    assert "ALARM" not in r.err and not (out / "alarms.jsonl").exists()
    metrics = read_jsonl(out / "metrics.jsonl")
    heldout = [m for m in metrics if "heldout/pass_at_1" in m]
    assert [m["step"] for m in heldout] == [0, 6, 12]
    assert all(0.2 < m["heldout/pass_at_1"] < 0.9 and m["heldout/n"] == 50 for m in heldout)
    assert all("completions/repetition" in m for m in metrics if "reward" in m)
    samples = read_jsonl(out / "samples.jsonl")
    assert [s["step"] for s in samples] == [6, 12] and samples[0]["source"] == "rollouts"
    first = samples[0]["samples"][0]
    assert first["best"]["reward"] >= first["worst"]["reward"] and first["prompt"].endswith("=")
    assert "samples at step 6 (rollouts)" in r.err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["alarms"] == []
    report = (out / "report/report.md").read_text()
    assert "No alarm fired." in report and "heldout/pass_at_1" in report
    assert (out / "report/heldout.png").exists()


def test_bad_holdout_file_fails_before_anything_is_written(cli, tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "1+1=", "answer": "two"}])
    out = tmp_path / "o"
    r = cli("grpo", "--recipe", RECIPE, "--model", "tiny", "-o", out, "--holdout", bad)  # a model that loads
    assert r.code == 2 and f"{bad}:1: field 'answer'" in r.err
    assert not out.exists()


def test_unknown_alarm_in_watch_ignore_is_a_config_error(cli, tmp_path):
    r = cli("grpo", "--recipe", RECIPE, "--model", "tiny", "-o", tmp_path / "o", "--set", "watch.ignore=[zero_signals]")
    assert r.code == 2 and "did you mean 'zero_signal'" in r.err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_grpo_against_a_tiny_reward_model_raises_the_hacking_alarm(cli, tmp_path, sft_short):
    """The reward-hacking demo: a weak reward model (recipes/reward_tiny.yaml, held-out pair accuracy ~0.54)
    as the only GRPO reward, the math verifier on held-out rows as the check. Measured in two runs: the
    reward model's score rose 0.25 -> 0.54 (step 75) and 0.42 -> 0.65 (step 100) while held-out pass@1 fell
    0.55 -> 0.0 (completions became 8-token digit runs such as '19999999'); the alarm fired at that check."""
    rm = tmp_path / "rm"
    assert cli("reward", "--recipe", ROOT / "recipes/reward_tiny.yaml", "--model", sft_short, "-o", rm).code == 0
    out = tmp_path / "grpo-rm"
    r = cli("grpo", "--recipe", RECIPE, "--model", sft_short, "--reward-model", rm, "-o", out, "--max-steps", "100",
            "--holdout", HELDOUT, "--holdout-verifier", "math", "--set", "watch.holdout_every=25")
    assert r.code == 0, r.text
    assert "ALARM reward_hacking" in r.err
    alarm = next(a for a in read_jsonl(out / "alarms.jsonl") if a["name"] == "reward_hacking")
    (h0, h1), (r0, r1) = alarm["evidence"]["heldout/pass_at_1"], alarm["evidence"]["reward"]
    print(f"reward_hacking at step {alarm['step']}: reward {r0} -> {r1}, held-out {h0} -> {h1}")
    assert r1 > r0 and h1 < h0 - 0.2 and alarm["evidence"]["top_reward_sample"]["completion"]
    assert "ALARM reward_hacking" in (out / "report/report.md").read_text()


@pytest.mark.slow
def test_full_math_verifier_grpo_run_raises_no_alarm(cli, tmp_path, sft_short):
    """The counterpart: the whole recipe (600 steps) with the held-out check on; held-out pass@1 rises
    (measured 0.535 -> 0.795) and no rule fires (the closest, reward_hacking, peaked at 0.21 of its 0.4)."""
    out = tmp_path / "grpo-math-full"
    r = cli("grpo", "--recipe", RECIPE, "--model", sft_short, "-o", out, "--holdout", HELDOUT,
            "--set", "watch.holdout_max_rows=200")
    assert r.code == 0, r.text
    assert not (out / "alarms.jsonl").exists() and "ALARM" not in r.err
    heldout = [m["heldout/pass_at_1"] for m in read_jsonl(out / "metrics.jsonl") if "heldout/pass_at_1" in m]
    assert heldout[-1] > heldout[0] + 0.1, heldout


@pytest.mark.parametrize("section, holdout, marked", [
    ({"verifiers": ["math"]}, "math", True),
    ({"verifiers": ["label"]}, "label", True),
    ({"verifiers": ["math"]}, "label", False),  # another scorer
    ({"verifiers": ["math", "format"]}, "math", False),  # the reward has more in it
    ({"verifiers": ["math:0.5"]}, "math:0.5", False),  # only the plain spec
    ({"verifiers": ["math"], "reward_model": "rm"}, "math", False),
    ({"verifiers": ["math"], "env": "envs.py:Shop"}, "math", False),  # an environment adds its reward
    ({"verifiers": ["math"], "tools": ["calc.py:add"]}, "math", False),
    ({"verifiers": ["label_partial"]}, "label_partial", False),  # partial credit can rise with pass@1 flat
    ({"verifiers": ["format"]}, "format", False),  # format only
    ({"verifiers": ["v.py:score"]}, "v.py:score", False),  # a plugin: nothing known about it
    ({"verifiers": []}, "math", False),
])
def test_the_reward_scores_the_heldout_only_for_one_builtin_task_verifier(section, holdout, marked):
    from types import SimpleNamespace

    from rlft.alarms import Thresholds
    from rlft.watch.setup import Holdout, WatchSetup, mark_reward_scored_heldout

    setup = WatchSetup(Thresholds())
    setup.holdout = Holdout([], None, holdout, None, 8)
    assert mark_reward_scored_heldout(SimpleNamespace(method="grpo", values={"grpo": section}), setup) is marked
    assert setup.thresholds.reward_scores_heldout is marked
