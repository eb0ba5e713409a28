"""`rlft ppo` end to end on the tiny model, through the CLI: run, metrics, saved model, resume, refusals."""

from __future__ import annotations

import json
import signal

import pytest
from helpers import DATA, ROOT, signalled_at_once, write_jsonl

PROMPTS = DATA / "arith/grpo_prompts.jsonl"
HELDOUT = DATA / "arith/test.jsonl"
RECIPE = ROOT / "recipes/ppo_tiny.yaml"
LOGGED = ("reward", "reward_std", "kl", "entropy", "non_score_reward", "policy/clipfrac", "policy/approxkl",
          "loss/policy", "loss/value", "val/clipfrac", "val/explained_variance", "eos_missing",
          "completions/mean_length", "learning_rate", "episodes")


@pytest.fixture(scope="module")
def small_heldout(tmp_path_factory):
    rows = [json.loads(line) for line in HELDOUT.read_text().splitlines()][:40]
    return write_jsonl(tmp_path_factory.mktemp("ppo-data") / "heldout.jsonl", rows)


def short(*extra):
    """A few PPO steps on 16 prompts a batch: enough to exercise everything, seconds on 2 cores."""
    return ("--prompts", PROMPTS, "--verifier", "math", "--batch-size", "16", "--lr", "1e-4",
            "--set", "ppo.response_length=8", "--set", "train.logging_steps=1", "--set", "data.max_rows=200",
            "--set", "train.lr_scheduler_type=constant", *extra)


def read_metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_ppo_with_a_verifier_logs_saves_and_reports_heldout(cli, tmp_path, sft_short, small_heldout):
    out = tmp_path / "ppo"
    r = cli("ppo", *short("--model", sft_short, "--eval-data", small_heldout, "-o", out, "--max-steps", "3"))
    assert r.code == 0, r.text
    assert "estimated memory of the PPO networks" in r.err and "reference:" in r.err
    logged = [m for m in read_metrics(out) if "reward" in m]
    assert [m["step"] for m in logged] == [1, 2, 3]
    for m in logged:
        missing = [k for k in LOGGED if k not in m]
        assert not missing, missing
        assert 0.0 <= m["reward"] <= 1.0 and 0.0 <= m["policy/clipfrac"] <= 1.0 and m["entropy"] > 0
    assert logged[0]["kl"] == pytest.approx(0.0, abs=1e-4)  # first rollout: policy == reference
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["global_step"] == 3
    final = summary["final_metrics"]
    assert 0.2 < final["heldout_pass_at_1_before"] < 0.9
    assert logged[-1]["kl"] > logged[0]["kl"]  # the policy left the reference after the first update
    assert final["episodes"] == 48
    # the saved policy is a plain transformers model that `rlft eval` loads
    r = cli("eval", "--model", out, "--data", small_heldout, "--verifier", "math", "--max-new-tokens", "8", "--json")
    assert r.code == 0, r.text
    assert json.loads(r.out)["pass_at_1"] == pytest.approx(final["heldout_pass_at_1"])


def test_ppo_keeps_its_start_unless_a_trained_check_beats_it(cli, tmp_path, sft_short, small_heldout):
    """PPO keeps a model the way the TRL methods do (rlft.methods.keep, rlft.watch.overfit.kept_check): 3 steps at a
    learning rate that breaks the policy cannot beat the start on the held-out rows, so the run folder holds the
    starting weights, the last model is in last/, summary.json says step 0 was kept, and the end-of-run alarm
    says no trained check beat the start."""
    from safetensors.torch import load_file

    out = tmp_path / "ppo-keep"
    r = cli("ppo", *short("--model", sft_short, "--eval-data", small_heldout, "-o", out, "--max-steps", "3",
                          "--lr", "3e-3", "--set", "train.eval_steps=1"))
    assert r.code == 0, r.text
    summary = json.loads((out / "summary.json").read_text())
    assert [c["step"] for c in summary["heldout"]["curve"]] == [0, 1, 2, 3]
    assert summary["kept"]["step"] == 0, summary["kept"]
    assert {"no_gain", "overfitting"} & set(summary["alarms"]), summary["alarms"]
    start, kept, last = (load_file(str(p / "model.safetensors")) for p in (sft_short, out, out / "last"))
    assert all(torch_equal(kept[k], start[k]) for k in kept), "the run folder must hold the starting weights"
    assert not all(torch_equal(last[k], start[k]) for k in last), "last/ must hold the trained weights"
    assert not (out / "start").exists() and not (out / "best").exists()
    final = summary["final_metrics"]  # the last model's, as for the TRL methods
    r = cli("eval", "--model", out, "--data", small_heldout, "--verifier", "math", "--max-new-tokens", "8", "--json")
    assert json.loads(r.out)["pass_at_1"] == pytest.approx(final["heldout_pass_at_1_before"])
    r = cli("eval", "--model", out / "last", "--data", small_heldout, "--verifier", "math", "--max-new-tokens", "8",
            "--json")
    assert json.loads(r.out)["pass_at_1"] == pytest.approx(final["heldout_pass_at_1"])


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))


def test_interrupt_then_resume_continues_where_it_stopped(cli, tmp_path, sft_short, monkeypatch):
    import rlft.run.folder

    straight, out = tmp_path / "straight", tmp_path / "resumed"
    r = cli("ppo", *short("--model", sft_short, "-o", straight, "--max-steps", "3"))
    assert r.code == 0, r.text

    with monkeypatch.context() as m:  # as if SIGTERM arrived during the first step: it finishes, saves, stops
        m.setattr(rlft.run.folder, "Interrupt", signalled_at_once())
        r = cli("ppo", *short("--model", sft_short, "-o", out, "--max-steps", "3"))
    assert r.code == 128 + signal.SIGTERM, r.text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["global_step"] == 1
    assert (out / "checkpoint-1" / "trainer_state.json").exists()

    r = cli("ppo", *short("--model", sft_short, "-o", out, "--max-steps", "3", "--resume"))
    assert r.code == 0, r.text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["global_step"] == 3
    assert summary["resumed_from"].endswith("checkpoint-1")
    steps = [m["step"] for m in read_metrics(out) if "reward" in m]
    assert steps == [1, 2, 3]
    # same data order, RNG and optimizer state: the resumed run is the uninterrupted one
    a, b = (read_metrics(p)[-1] for p in (straight, out))
    assert a["reward"] == b["reward"] and a["loss/value"] == pytest.approx(b["loss/value"], rel=1e-5)


def test_lora_run_saves_an_adapter(cli, tmp_path, sft_short):
    out = tmp_path / "ppo-lora"
    r = cli("ppo", *short("--model", sft_short, "-o", out, "--max-steps", "2", "--lora", "--set", "model.lora.r=4"))
    assert r.code == 0, r.text
    assert "reference: 0 (LoRA" in r.err
    assert (out / "adapter_config.json").exists()
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"


def test_max_memory_refuses_before_loading_anything(cli, tmp_path):
    out = tmp_path / "big"
    r = cli("ppo", "--prompts", PROMPTS, "--verifier", "math", "--model", "tiny", "-o", out, "--max-memory", "0.001")
    assert r.code == 2, r.text
    assert "exceeds --max-memory 0.001 GB" in r.err and "--lora" in r.err
    assert "policy:" in r.err and "value:" in r.err
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (("--prompts", PROMPTS, "--model", "tiny"), "PPO needs a reward"),
    (("--prompts", PROMPTS, "--verifier", "math", "--batch-size", "10", "--set", "ppo.num_mini_batches=4"),
     "not a multiple"),
    (("--prompts", PROMPTS, "--verifier", "math", "--set", "ppo.temperature=0"), "must be > 0"),
    (("--prompts", PROMPTS, "--verifier", "math", "--set", "ppo.kl_coeff=0.1"), "did you mean 'kl_coef'"),
    (("--prompts", PROMPTS, "--verifier", "math", "--set", "ppo.cliprange=-1"), "must be >= 0.0"),
    (("--verifier", "math"), "no training data"),
])
def test_bad_input_is_one_line_with_exit_2(cli, tmp_path, args, message):
    out = tmp_path / "o"
    r = cli("ppo", *args, "-o", out)
    assert r.code == 2, r.text
    assert message in r.err
    assert not out.exists()


def test_rows_without_gold_are_reported_by_line(cli, tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "1+1=", "answer": "2"}, {"prompt": "2+2="}])
    r = cli("ppo", "--prompts", bad, "--verifier", "math", "-o", tmp_path / "o")
    assert r.code == 2, r.text
    assert "bad.jsonl:2" in r.err and "answer" in r.err


def test_print_config_shows_the_ppo_section(cli):
    r = cli("ppo", "--prompts", PROMPTS, "--verifier", "math", "--max-memory", "40", "--print-config")
    assert r.code == 0, r.text
    assert "method: ppo" in r.out and "kl_coef: 0.05" in r.out and "max_memory_gb: 40" in r.out
    assert "verifiers:\n  - math" in r.out


# --------------------------------------------------------------------------- slow: does it learn?


@pytest.mark.slow
def test_ppo_with_the_math_verifier_raises_heldout_pass_at_1(cli, tmp_path, sft_short):
    out = tmp_path / "ppo-math"
    r = cli("ppo", "--recipe", RECIPE, "--model", sft_short, "-o", out)
    assert r.code == 0, r.text
    final = json.loads((out / "summary.json").read_text())["final_metrics"]
    print(f"held-out pass@1 {final['heldout_pass_at_1_before']:.3f} -> {final['heldout_pass_at_1']:.3f}")
    assert final["heldout_pass_at_1"] >= final["heldout_pass_at_1_before"] + 0.08, final


@pytest.mark.slow
def test_reward_model_then_ppo_raises_the_score_and_reports_accuracy(cli, tmp_path, sft_short):
    rm = tmp_path / "rm"
    r = cli("reward", "--recipe", ROOT / "recipes/reward_tiny.yaml", "--model", sft_short, "-o", rm)
    assert r.code == 0, r.text
    out = tmp_path / "ppo-rm"
    r = cli("ppo", "--recipe", RECIPE, "--model", sft_short, "--reward-model", rm, "-o", out)
    assert r.code == 0, r.text
    final = json.loads((out / "summary.json").read_text())["final_metrics"]
    print("reward model score {:.3f} -> {:.3f}, held-out pass@1 {:.3f} -> {:.3f}".format(
        final["heldout_train_reward_before"], final["heldout_train_reward"], final["heldout_pass_at_1_before"],
        final["heldout_pass_at_1"]))
    assert final["heldout_train_reward"] > final["heldout_train_reward_before"], final
    rewards = [m["reward"] for m in read_metrics(out) if "reward" in m]
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3, rewards
    # held-out accuracy is reported whichever way it went; a real fall must be named by the alarm
    fell = final["heldout_pass_at_1"] < final["heldout_pass_at_1_before"] - 0.1
    summary = json.loads((out / "summary.json").read_text())
    assert not fell or "reward_hacking" in summary["alarms"], (final, summary["alarms"])


@pytest.mark.slow
def test_too_high_learning_rate_raises_kl_and_entropy_alarms_on_a_real_run(cli, tmp_path, sft_short):
    """30x the recipe's lr: the policy leaves the reference within 10 updates (KL ~10 nats/token, measured)
    and collapses onto one answer; kl_blowup and entropy_collapse name it, and --on-alarm stop ends it."""
    out = tmp_path / "ppo-hot"
    r = cli("ppo", "--recipe", RECIPE, "--model", sft_short, "--lr", "3e-3", "--max-steps", "40", "-o", out)
    assert r.code == 0, r.text
    fired = {a["name"]: a for a in map(json.loads, (out / "alarms.jsonl").read_text().splitlines())}
    assert fired["kl_blowup"]["step"] == 10 and fired["kl_blowup"]["evidence"]["kl"][0] > 1.0
    assert "entropy_collapse" in fired
    out = tmp_path / "ppo-hot-stop"
    r = cli("ppo", "--recipe", RECIPE, "--model", sft_short, "--lr", "3e-3", "--max-steps", "40",
            "--on-alarm", "stop", "-o", out)
    assert r.code == 4, r.text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["stopped_by"]["name"] == "kl_blowup"
    assert summary["global_step"] == 10
