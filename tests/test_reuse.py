"""rlft.run.reuse: an implicit reward model is the same training as rlft dpo with the same start, pairs and settings,
so `rlft reward` takes a completed DPO run's model instead of training it again. Tiny model with LoRA, a few steps."""

from __future__ import annotations

import json

from helpers import DATA

PAIRS = ("--pairs", DATA / "arith/pairs_train.jsonl", "--eval-data", DATA / "arith/pairs_eval.jsonl")


def _adapter(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def _same(a, b) -> bool:
    return a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)


def test_an_implicit_reward_model_takes_the_dpo_runs_model_only_for_the_same_training(cli, tmp_path, tiny_dir):
    common = ("--model", tiny_dir, *PAIRS, "--max-steps", "6", "--batch-size", "4", "--lr", "1e-3", "--set",
              "data.max_rows=24", "--set", "model.lora.enabled=true")
    dpo, trained, taken = tmp_path / "dpo", tmp_path / "rm-trained", tmp_path / "rm-taken"
    r = cli("dpo", *common, "--set", "dpo.loss_type=[sigmoid,sft]", "--set", "dpo.loss_weights=[1,3]", "--set",
            "dpo.max_length=32", "--holdout", DATA / "arith/test.jsonl", "--set", "watch.holdout_every=2", "--set",
            "watch.holdout_max_rows=10", "--set", "train.eval_steps=3", "-o", dpo)
    assert r.code == 0, r.text
    last = dpo / "last" if (dpo / "last").is_dir() else dpo
    implicit = (*common, "--set", "reward.objective=implicit", "--set", "reward.loss_type=[sigmoid,sft]", "--set",
                "reward.loss_weights=[1,3]", "--set", "reward.max_length=32", "--set", "watch.holdout_every=3",
                "--set", "train.eval_steps=6")
    # trained anyway: the same weights, bit for bit, whatever checks and evals either run did
    r = cli("reward", *implicit, "--set", "reward.reuse_dpo=false", "-o", trained)
    assert r.code == 0 and "already trained" not in r.text, r.text
    assert _same(_adapter(trained), _adapter(last))
    # taken: one line says so, the folder holds that model and reports on it as a trained run does
    r = cli("reward", *implicit, "-o", taken)
    assert r.code == 0 and "rlft dpo already trained this model" in r.text, r.text
    assert _same(_adapter(taken), _adapter(last))
    summary = json.loads((taken / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["global_step"] == 6, summary
    assert summary["reused_training"]["run"] == str(dpo.resolve()), summary
    assert summary["final_metrics"]["heldout_pair_accuracy"] == json.loads(
        (trained / "summary.json").read_text())["final_metrics"]["heldout_pair_accuracy"]
    # another learning rate is another training: trained
    r = cli("reward", *implicit, "--lr", "5e-4", "-o", tmp_path / "rm-lr")
    assert r.code == 0 and "already trained" not in r.text, r.text
    # the DPO folder trained again (other weights): its record no longer holds, so the reward model trains
    state = _adapter(last)
    first = sorted(state)[0]
    state[first] = state[first] + 1e-3
    from safetensors.torch import save_file

    save_file(state, str(last / "adapter_model.safetensors"), metadata={"format": "pt"})
    r = cli("reward", *implicit, "-o", tmp_path / "rm-after")
    assert r.code == 0 and "already trained" not in r.text, r.text


def test_a_dpo_run_that_precomputed_its_reference_is_the_same_training(cli, tmp_path, tiny_dir):
    """recipes/dpo_smollm2.yaml precomputes the reference's log-probs (dpo.precompute_ref_log_probs); the reward
    recipe does not. The two trainings agree to float noise, so the reward run takes the DPO run's model."""
    import torch

    common = ("--model", tiny_dir, *PAIRS, "--max-steps", "6", "--batch-size", "4", "--lr", "1e-3", "--set",
              "data.max_rows=24", "--set", "model.lora.enabled=true")
    pre, plain, taken = tmp_path / "dpo-pre", tmp_path / "dpo-plain", tmp_path / "rm"
    r = cli("dpo", *common, "--set", "dpo.max_length=32", "--set", "dpo.precompute_ref_log_probs=true", "-o", pre)
    assert r.code == 0, r.text
    r = cli("reward", *common, "--set", "reward.objective=implicit", "--set", "reward.max_length=32", "-o", taken)
    assert r.code == 0 and "rlft dpo already trained this model" in r.text, r.text
    assert json.loads((taken / "summary.json").read_text())["reused_training"]["run"] == str(pre.resolve())
    # the same training with the reference computed at each step: the same adapter to float noise, far from its
    # start (lora_B starts at zero)
    r = cli("dpo", *common, "--set", "dpo.max_length=32", "-o", plain)
    assert r.code == 0, r.text
    a, b = _adapter(pre), _adapter(plain)
    assert a.keys() == b.keys()
    assert all(torch.allclose(a[k], b[k], atol=1e-5, rtol=1e-3) for k in a), \
        max(float((a[k] - b[k]).abs().max()) for k in a)
    assert max(float(b[k].abs().max()) for k in b if "lora_B" in k) > 1e-3  # 100 times the tolerance


def test_with_dropout_on_a_precomputed_reference_is_another_training(cli, tmp_path, tiny_dir):
    """The precompute pass draws from torch's global generator, so with dropout on every later dropout mask differs
    (the adapters differ by more than their size): the reward run must train, not take the DPO run's model."""
    common = ("--model", tiny_dir, *PAIRS, "--max-steps", "6", "--batch-size", "4", "--lr", "1e-3", "--set",
              "data.max_rows=24", "--set", "model.lora.enabled=true", "--set", "model.lora.dropout=0.3")
    r = cli("dpo", *common, "--set", "dpo.max_length=32", "--set", "dpo.disable_dropout=false", "--set",
            "dpo.precompute_ref_log_probs=true", "-o", tmp_path / "dpo")
    assert r.code == 0, r.text
    r = cli("reward", *common, "--set", "reward.objective=implicit", "--set", "reward.max_length=32", "--set",
            "reward.disable_dropout=false", "-o", tmp_path / "rm")
    assert r.code == 0 and "already trained" not in r.text, r.text
    assert "reused_training" not in json.loads((tmp_path / "rm" / "summary.json").read_text())


def test_the_shipped_dpo_and_reward_recipes_are_one_training():
    """make demo-prefs trains DPO once: recipes/reward_smollm2.yaml must train exactly what recipes/dpo_smollm2.yaml
    does (the settings rlft.run.reuse's key reads), or the reward stage trains it again (~25 minutes)."""
    from helpers import ROOT

    from rlft.config import resolve
    from rlft.run.reuse import IGNORED, PRECOMPUTE

    dpo = resolve("dpo", ROOT / "recipes/dpo_smollm2.yaml").values
    rm = resolve("reward", ROOT / "recipes/reward_smollm2.yaml").values
    assert rm["reward"]["objective"] == "implicit" and rm["reward"].get("reuse_dpo", True)
    assert {k: v for k, v in dpo["train"].items() if k not in IGNORED} == \
        {k: v for k, v in rm["train"].items() if k not in IGNORED}
    for key in ("model", "data"):
        assert dpo[key] == rm[key], key
    # every DPO-loss setting either recipe sets (beyond the defaults) is the other's, but the precompute: it is the
    # same training only with dropout disabled (TRL's default; rlft.run.reuse.PRECOMPUTE)
    reward_only = {"objective", "reuse_dpo"}
    keys = (set(dpo["dpo"]) - PRECOMPUTE) | {k for k in rm["reward"] if k not in reward_only and
                                             not k.startswith("truth_")}
    assert {"beta", "loss_type", "loss_weights", "max_length"} <= keys
    for key in keys:
        assert dpo["dpo"].get(key) == rm["reward"].get(key), key
    assert dpo["dpo"].get("disable_dropout", True) and rm["reward"].get("disable_dropout", True)
