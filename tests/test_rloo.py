"""RLOO (rlft rloo): GRPO's shared checks (pre-flight, gold), a 2-step run's metrics, and the gain (slow)."""

from __future__ import annotations

import json

import pytest
from helpers import DATA, ROOT, write_jsonl

PROMPTS = DATA / "arith/grpo_prompts.jsonl"
HELDOUT = DATA / "arith/test.jsonl"
RECIPE = ROOT / "recipes/rloo_math_tiny.yaml"


def test_rloo_is_refused_on_a_random_model_and_writes_nothing(cli, tmp_path, tiny_dir):
    out = tmp_path / "rloo"
    r = cli("rloo", "--prompts", PROMPTS, "--verifier", "math", "--model", "tiny", "-o", out,
            "--set", "rloo.max_completion_length=4", "--set", "rloo.preflight_prompts=8")
    assert r.code == 3, r.text
    assert "pre-flight refused" in r.err and "SFT it first" in r.err
    assert not out.exists()


def test_rloo_rejects_gold_the_verifier_cannot_parse(cli, tmp_path):
    data = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "1+1=", "answer": "2"}, {"prompt": "2+2=", "answer": "four"}])
    r = cli("rloo", "--prompts", data, "--verifier", "math", "-o", tmp_path / "rloo")
    assert r.code == 2 and f"{data}:2" in r.err, r.text
    assert not (tmp_path / "rloo").exists()


def test_rloo_config_errors_exit_2(cli, tmp_path):
    r = cli("rloo", "--prompts", PROMPTS, "--num-generations", "1", "-o", tmp_path / "rloo")
    assert r.code == 2 and "rloo.num_generations" in r.err, r.text
    r = cli("rloo", "--prompts", PROMPTS, "--set", "rloo.epsilon_hgih=0.3", "-o", tmp_path / "rloo")
    assert r.code == 2 and "did you mean 'epsilon_high'" in r.err, r.text


def test_rloo_two_steps_write_metrics_and_heldout(cli, tmp_path, sft_model):
    out = tmp_path / "rloo"
    r = cli("rloo", "--recipe", RECIPE, "--model", sft_model, "-o", out, "--max-steps", "2", "--no-preflight",
            "--batch-size", "16", "--set", "train.logging_steps=1", "--eval-data", HELDOUT,
            "--set", "data.max_rows=64")
    assert r.code == 0, r.text
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in logged if "reward" in m]
    assert [m["step"] for m in steps] == [1, 2]
    assert all(0.0 <= m["frac_reward_zero_std"] <= 1.0 and 0.0 <= m["reward"] <= 1.0 for m in steps)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["global_step"] == 2
    assert 0.0 <= summary["final_metrics"]["heldout_pass_at_1"] <= 1.0


@pytest.mark.slow
def test_rloo_raises_heldout_pass_at_1_by_10_points(cli, tmp_path, sft_short):
    import time

    before = json.loads(cli("eval", "--model", sft_short, "--data", HELDOUT, "--verifier", "math", "--json").out)
    start = time.time()
    out = tmp_path / "rloo-full"
    r = cli("rloo", "--recipe", RECIPE, "--prompts", PROMPTS, "--model", sft_short, "-o", out)
    assert r.code == 0, r.text
    elapsed = time.time() - start
    after = json.loads(cli("eval", "--model", out, "--data", HELDOUT, "--verifier", "math", "--json").out)
    print(f"RLOO: held-out pass@1 {before['pass_at_1']:.3f} -> {after['pass_at_1']:.3f} in {elapsed:.0f}s")
    assert after["pass_at_1"] >= before["pass_at_1"] + 0.10


def test_rloo_batch_must_split_into_whole_groups_before_anything_is_written(cli, tmp_path):
    """TRL's RLOOConfig has GRPO's rule; rlft checks it with the config, before the run folder exists."""
    out = tmp_path / "rloo"
    r = cli("rloo", "--prompts", PROMPTS, "--num-generations", "3", "--batch-size", "4", "-o", out)
    assert r.code == 2, r.text
    assert "rloo.num_generations = 3 does not divide the 4 completions" in r.err
    assert not out.exists()


def test_preflight_advice_names_the_runs_own_section():
    from rlft.preflight import verdict_for

    _, advice = verdict_for(0.3, 0.0, 0.5, min_mixed=0.1, num_generations=4, section="rloo")
    assert any("--set rloo.num_generations=8" in a for a in advice)
    assert any("--set rloo.max_completion_length" in a for a in advice)
    assert not any("grpo." in a for a in advice)


def test_skipping_the_old_logps_pass_gives_trls_update(tiny_dir, tmp_path, monkeypatch):
    """rlft.methods.rloo.with_current_old_logps: on-policy (one iteration, beta 0) the trainer skips TRL's
    no-grad pass and the update is TRL's own, to float rounding; with beta > 0 the pass runs."""
    torch = pytest.importorskip("torch")
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import RLOOConfig, RLOOTrainer

    from rlft.methods.rloo import with_current_old_logps

    def reward(completions, **_):  # varied rewards, so every group has advantages and the step has a gradient
        return [float(len(c) % 7) for c in completions]

    passes = []  # TRL's own log-prob passes (the method every subclass ends in): with or without gradient
    trls = RLOOTrainer._get_per_token_logps_and_entropies

    def counted(*a, **k):
        passes.append(torch.is_grad_enabled())
        return trls(*a, **k)

    monkeypatch.setattr(RLOOTrainer, "_get_per_token_logps_and_entropies", counted)

    def run(cls, beta=0.0, lora_dropout=0.0):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(tiny_dir)
        args = RLOOConfig(output_dir=str(tmp_path / cls.__name__), per_device_train_batch_size=4, num_generations=2,
                          max_completion_length=8, max_steps=2, learning_rate=1e-2, beta=beta, use_cpu=True,
                          report_to=[], save_strategy="no", seed=3, logging_steps=1, disable_tqdm=True)
        trainer = cls(model=model, reward_funcs=[reward], args=args,
                      train_dataset=Dataset.from_list([{"prompt": f"{i} + {i} ="} for i in range(8)]),
                      processing_class=AutoTokenizer.from_pretrained(tiny_dir),
                      peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                             lora_dropout=lora_dropout))
        passes.clear()
        trainer.train()
        return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}, list(passes)

    want, trl_passes = run(RLOOTrainer)
    got, rlft_passes = run(with_current_old_logps(RLOOTrainer))
    assert trl_passes.count(False) == 2 and rlft_passes.count(False) == 0  # TRL's no-grad pass, once a step
    assert want.keys() == got.keys() and any(not torch.allclose(p, torch.zeros_like(p)) for n, p in want.items()
                                             if "lora_B" in n)  # the steps moved the adapter
    for name, p in want.items():
        assert torch.allclose(got[name], p, atol=1e-6, rtol=1e-5), name
    _, kl_passes = run(with_current_old_logps(RLOOTrainer), beta=0.05)
    assert kl_passes.count(False) >= 2  # with a KL term TRL's old (and reference) passes run
    _, dropout_passes = run(with_current_old_logps(RLOOTrainer), lora_dropout=0.1)
    assert dropout_passes.count(False) == 2  # dropout: two passes draw two masks, TRL's ratio is not 1
