"""rlft bootstrap (rejection-sampling fine-tuning) and the rollout prices of rlft choose, on the tiny model."""

from __future__ import annotations

import json

import pytest
from helpers import DATA, ROOT, write_jsonl

from rlft.methods.bootstrap_sampling import Sampled, bands, judge, keep_accepted, template_share

PROMPTS = DATA / "arith/grpo_prompts.jsonl"
HELDOUT = DATA / "arith/test.jsonl"
RECIPE = ROOT / "recipes/bootstrap_tiny.yaml"


# --------------------------------------------------------------------------- what a round keeps


def test_a_round_keeps_only_accepted_distinct_finished_completions_best_first():
    samples = [("12", True), (" 12 ", True), ("13", True), ("12", False), ("99", True), ("", True), ("14", True)]
    rewards = [1.0, 1.0, 0.0, 1.0, 0.6, 1.0, 0.8]
    kept = keep_accepted(samples, rewards, threshold=0.5, keep=5)
    # 13 was rejected (0.0), the cut-off "12" and the empty text are not kept, " 12 " is "12" again
    assert kept == [("12", 1.0), ("14", 0.8), ("99", 0.6)]
    assert keep_accepted(samples, rewards, threshold=1.0, keep=5) == [("12", 1.0)]
    assert keep_accepted(samples, rewards, threshold=0.5, keep=2) == [("12", 1.0), ("14", 0.8)]
    assert keep_accepted(samples, [0.0] * len(samples), threshold=1.0, keep=5) == []


def test_a_round_samples_for_its_share_of_the_time_left():
    from rlft.methods.bootstrap import SAMPLING_SHARE, sampling_deadline

    # the start's check took 3 of 19.5 minutes: round 1 of 3 gets a third of the 16.5 left, 60% of it sampling
    assert sampling_deadline(180.0, 0.0, 19.5, 1, 3) - 180.0 == pytest.approx(SAMPLING_SHARE * 16.5 * 60 / 3)
    # the last round gets its share of all that is left; past the limit, nothing
    assert sampling_deadline(900.0, 0.0, 20.0, 3, 3) - 900.0 == pytest.approx(SAMPLING_SHARE * 300.0)
    assert sampling_deadline(1300.0, 0.0, 20.0, 2, 3) == 1300.0


def test_another_round_starts_only_when_its_fine_tune_and_check_fit():
    from rlft.methods.bootstrap import round_fits

    # 10 minutes left: 4 after the sampling share, for a fine-tune + check that took 3 (fits) or 5 (does not)
    assert round_fits(600.0, 0.0, 20.0, 180.0) and not round_fits(600.0, 0.0, 20.0, 300.0)
    assert not round_fits(1260.0, 0.0, 20.0, 0.0)  # past the limit


def test_bands_template_share_and_the_preflight_verdict():
    assert bands([0.0, 0.0, 0.25, 0.5, 0.75, 1.0]) == {"band/none": 2, "band/some": 1, "band/most": 2, "band/all": 1}
    share, text, n = template_share([["The answer is 0."], ["the answer is 0."], ["7"], ["The answer is 0."]])
    assert (round(share, 2), text, n) == (0.75, "the answer is 0.", 3)
    sec = {"samples": 2, "temperature": 0.7, "threshold": 1.0}
    none = [Sampled({"prompt": "a"}, [("x", True), ("y", False)], [0.0, 1.0])]  # the pass was cut off
    refused = judge(none, sec)
    assert refused.verdict == "refuse" and refused.pass_rate == 0.5 and refused.accepted_rate == 0.0
    assert any("rlft sft" in a for a in refused.advice)
    assert judge([Sampled({"prompt": "a"}, [("x", True)], [1.0])], {**sec, "samples": 1}).verdict == "go"


def test_accepted_rows_train_their_log_prob_rises(tmp_path, sft_short):
    """One round's fine-tune (SFTTrainer on the same model object) raises the kept completions' log-probs."""
    from rlft.config import resolve
    from rlft.methods.bootstrap import _fine_tune
    from rlft.methods.common import load_run_tokenizer
    from rlft.models import load_model
    from rlft.watch.heldout import completion_logprobs

    cfg = resolve("bootstrap", RECIPE, {"model.name_or_path": (str(sft_short), "--model"),
                                        "train.output_dir": (str(tmp_path / "run"), "-o")})
    tok, model = load_run_tokenizer(cfg), load_model(cfg.model)
    rows = [{"prompt": "23+45=", "completion": "68"}, {"prompt": "81+17=", "completion": "98"},
            {"prompt": "34+59=", "completion": "93"}]
    pairs = [(r["prompt"], r["completion"]) for r in rows]
    before = [lp for lp, _ in completion_logprobs(model, tok, pairs)]
    loss, tokens = _fine_tune(cfg, tmp_path / "round-1", model, tok, rows)
    after = [lp for lp, _ in completion_logprobs(model, tok, pairs)]
    assert tokens >= 6 and loss > 0
    # the kept completions more likely in all, and at least half the way to certainty (log-prob 0) closed: the SFT
    # start usually gives them -0.6 in all, so a fixed rise is a CPU's precision away from its ceiling. Not every
    # row need rise: when the start leaves one far behind (seen once on a bf16 CPU: -0.10, -0.03, -4.62), the
    # step that lifts it to -0.14 may cost a near-certain row a tenth of a nat
    assert sum(after) > sum(before), (before, after)
    assert min(after) > min(before), (before, after)  # the least likely completion rose
    assert sum(after) > sum(before) / 2, (before, after)
    assert not (tmp_path / "round-1").exists()  # a round's folder keeps no checkpoint


def test_the_best_round_is_kept_and_the_last_goes_to_last(tmp_path):
    from rich.console import Console

    from rlft.methods.bootstrap import _keep
    from rlft.watch.overfit import Check

    out = tmp_path / "run"
    (out / "best").mkdir(parents=True)
    (out / "best" / "weights.bin").write_text("round 1")
    saved = []

    def save(path):
        saved.append(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "weights.bin").write_text("round 3")

    ones = lambda k, n=40: [1.0] * k + [0.0] * (n - k)  # noqa: E731
    checks = [Check(0, 0.25, ones(10), "pass_at_1", 0.07), Check(1, 0.75, ones(30), "pass_at_1", 0.07),
              Check(2, 0.5, ones(20), "pass_at_1", 0.08), Check(3, 0.25, ones(10), "pass_at_1", 0.07)]
    info = _keep(out, checks, best_step=1, last_step=3, save=save, console=Console(quiet=True), enabled=True)
    assert (out / "weights.bin").read_text() == "round 1"
    assert (out / "last" / "weights.bin").read_text() == "round 3"
    assert info["kept"]["step"] == 1 and not (out / "best").exists()


# --------------------------------------------------------------------------- the command


def test_bootstrap_refuses_when_nothing_is_accepted_and_writes_nothing(cli, tmp_path, tiny_dir):
    out = tmp_path / "boot"
    r = cli("bootstrap", "--prompts", PROMPTS, "--verifier", "math", "--model", "tiny", "-o", out,
            "--max-new-tokens", "4", "--samples", "4", "--set", "bootstrap.preflight_prompts=8")
    assert r.code == 3, r.text
    assert "pre-flight refused" in r.err and "rlft sft" in r.err
    assert not out.exists()


@pytest.mark.parametrize("args, says", [
    (["--samples", "0"], "--samples"),
    (["--set", "bootstrap.temperature=0"], "greedy decoding gives every sample the same answer"),
    (["--set", "bootstrap.keep_per_promt=2"], "did you mean"),
    (["--rounds", "two"], "--rounds"),
])
def test_bad_flags_exit_2_with_one_line(cli, tmp_path, args, says):
    out = tmp_path / "boot"
    r = cli("bootstrap", "--prompts", PROMPTS, "--verifier", "math", "-o", out, *args)
    assert r.code == 2, r.text
    assert says in r.err
    assert not out.exists()


def test_tools_are_refused_with_one_line(cli, tmp_path, sft_short):
    tools = tmp_path / "tools.py"
    tools.write_text('def add(a: int, b: int) -> int:\n    """Add two numbers.\n\n    Args:\n        a: one\n'
                     '        b: two\n    """\n    return a + b\n')
    r = cli("bootstrap", "--prompts", PROMPTS, "--verifier", "math", "--model", sft_short, "-o", tmp_path / "b",
            "--tools", tools)
    assert r.code == 2, r.text
    assert "tool episodes" in r.err and len(r.err.strip().splitlines()) <= 4


def test_dry_run_prints_the_rollout_plan(cli, tmp_path):
    r = cli("bootstrap", "--prompts", PROMPTS, "--verifier", "math", "--samples", "4", "--rounds", "3",
            "--set", "bootstrap.prompts_per_round=100", "--dry-run", "-o", tmp_path / "b")
    assert r.code == 0, r.text
    assert "3 rounds x 100 prompts x N=4 = 1,200 sampled completions" in r.out


def test_a_lora_run_writes_rounds_unsolved_and_a_model_the_next_stage_loads(cli, tmp_path, sft_short):
    out = tmp_path / "boot"
    prompts = write_jsonl(tmp_path / "p.jsonl", [json.loads(x) for x in PROMPTS.read_text().splitlines()[:120]])
    r = cli("bootstrap", "--prompts", prompts, "--verifier", "math", "--model", sft_short, "-o", out, "--lora",
            "--samples", "4", "--rounds", "2", "--max-new-tokens", "8", "--temperature", "1.0", "--lr", "1e-3",
            "--batch-size", "16", "--set", "bootstrap.max_length=32", "--eval-data", HELDOUT,
            "--set", "watch.holdout_max_rows=40", "--set", "data.max_rows=120")
    assert r.code == 0, r.text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds"] == 2
    assert summary["rollouts"] == 2 * 4 * len(prompts.read_text().splitlines())
    rounds = [m for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "bootstrap/sampled" in m]
    assert [m["round"] for m in rounds] == [1, 2]
    for m in rounds:
        assert 0 < m["bootstrap/accepted"] <= m["bootstrap/sampled"]
        assert m["bootstrap/kept_rows"] <= m["bootstrap/prompts_solved"] * 2
        assert sum(m[f"band/{b}"] for b in ("none", "some", "most", "all")) == m["bootstrap/prompts"]
        assert m["bootstrap/tokens_trained"] > 0 and m["loss"] > 0
    unsolved = [json.loads(x) for x in (out / "unsolved.jsonl").read_text().splitlines()]
    assert summary["unsolved_prompts"] == len(unsolved) and all("answer" in u for u in unsolved)
    assert "need demonstrations (rlft sft) or GRPO" in " ".join(r.err.split())
    assert json.loads((out / "preflight.json").read_text())["verdict"] == "go"
    assert (out / "adapter_config.json").exists() and "kept" in summary
    # the chain: eval loads it (adapter + base), a next LoRA stage starts from it
    e = cli("eval", "--model", out, "--data", HELDOUT, "--verifier", "math", "--max-new-tokens", "8", "--json")
    assert e.code == 0, e.text
    base = json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base and "sft" in base  # the SFT stage's weights, not the bare tiny model


# --------------------------------------------------------------------------- rlft choose prices rollouts


def test_choose_recommends_bootstrap_for_a_pass_fail_verifier_and_prices_both():
    from rlft.choose.pricing import price
    from rlft.choose.rules import Signal, recommend

    s = Signal(kind="verifier", rows=500, verifier="math", paths=["p.jsonl"], model="tiny",
               seconds_per_rollout=0.1)
    r = recommend(s, pass_rate=0.3, mixed_fraction=0.5)
    assert r.method == "bootstrap" and r.ready
    assert r.next_command.startswith("rlft bootstrap --prompts p.jsonl --verifier math")
    e = r.as_dict()["rollout_estimate"]
    assert e == price(500, 0.3, 0.1)
    assert {"bootstrap_rollouts", "bootstrap_minutes", "grpo_rollouts", "grpo_minutes"} <= set(e)
    assert e["bootstrap_rollouts"] == 500 * 8 * 2 and e["grpo_rollouts"] == int(500 * 8 * 2.5)
    assert e["bootstrap_minutes"] < e["grpo_minutes"]


@pytest.mark.parametrize("kwargs, method", [
    ({"partial_credit": True}, "grpo"),       # partial credit: GRPO learns from the gradations
    ({"format_only": True}, "grpo"),          # a format-only check: bootstrap would keep wrong answers
    ({}, "bootstrap"),
])
def test_choose_rule_bootstrap_or_grpo(kwargs, method):
    from rlft.choose.rules import Signal, recommend

    s = Signal(kind="verifier", rows=300, verifier="math", **kwargs)
    assert recommend(s, pass_rate=0.3, mixed_fraction=0.5).method == method
    assert recommend(s, pass_rate=0.95, mixed_fraction=0.2).method == "grpo"  # too easy: bootstrap keeps little new
    assert recommend(s, pass_rate=0.0, mixed_fraction=0.0).method == "sft"


def test_choose_json_names_both_estimates(cli):
    r = cli("choose", "--signal", "verifier", "--rows", "800", "--verifier", "math", "--pass-rate", "0.3",
            "--mixed-fraction", "0.5", "--json")
    assert r.code == 0, r.text
    rec = json.loads(r.out)
    assert rec["method"] == "bootstrap" and rec["next_command"].startswith("rlft bootstrap")
    assert rec["rollout_estimate"]["bootstrap_rollouts"] == 800 * 16
    assert rec["rollout_estimate"]["grpo_minutes"] is None  # no pre-flight ran: no measured time per rollout


def test_choose_with_a_model_measures_and_its_next_command_runs(cli, tmp_path, sft_short):
    prompts = write_jsonl(tmp_path / "p.jsonl", [json.loads(x) for x in PROMPTS.read_text().splitlines()[:200]])
    r = cli("choose", "--data", prompts, "--model", sft_short, "--max-prompts", "16")
    assert r.code == 0, r.text
    assert "method: BOOTSTRAP" in r.out and "rollouts for 200 prompts" in r.out and "min on this machine" in r.out
    nxt = next(line.strip() for line in r.out.splitlines() if line.strip().startswith("rlft bootstrap"))
    args = nxt.split()[1:] + ["-o", str(tmp_path / "next"), "--rounds", "1", "--samples", "2",
                              "--max-new-tokens", "8", "--set", "watch.auto_holdout=false"]
    run = cli(*args)
    assert run.code == 0, run.text


@pytest.mark.slow
def test_bootstrap_raises_heldout_pass_at_1_by_10_points(cli, tmp_path, sft_short):
    out = tmp_path / "boot"
    r = cli("bootstrap", "--recipe", RECIPE, "--model", sft_short, "-o", out, "--eval-data", HELDOUT)
    assert r.code == 0, r.text
    s = json.loads((out / "summary.json").read_text())
    curve = s["heldout"]["curve"]
    assert s["kept"]["score"] - curve[0]["score"] >= 0.10, curve
