"""The reference of a LoRA run: TRL's "ref" adapter copy is dropped when the adapter is fresh (rlft.models).

TRL's preference and group trainers, handed a model that already holds an adapter, compute the reference through
a copy of it; for a fresh adapter that is the base model, which TRL computes with the adapters disabled once the
copy is gone, without the copy's products. The run must train exactly as before, only with less work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import DATA


def _peft_with_ref(tiny_dir):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_dir),
                           LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    model._rlft_fresh_adapter = True  # as rlft.models.apply_lora marks the adapters it makes
    model.add_adapter("ref", model.peft_config["default"])  # what TRL does with a model that holds an adapter
    for name, param in model.named_parameters():
        if ".default." in name:
            model.get_parameter(name.replace(".default.", ".ref.")).data.copy_(param.data)
    return model


def test_a_fresh_adapter_loses_its_ref_copy_and_the_reference_is_unchanged(tiny_dir):
    import torch
    from trl.trainer.utils import use_adapter  # TRL's own switch for its reference pass

    from rlft.models import drop_fresh_ref_adapter

    model = _peft_with_ref(tiny_dir).eval()
    ids = torch.tensor([[5, 9, 13, 2, 7, 11]])
    with torch.no_grad(), use_adapter(model, adapter_name="ref"):
        through_copy = model(ids).logits
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    assert drop_fresh_ref_adapter(model) is True
    assert "ref" not in model.peft_config and model.active_adapter == "default"
    assert sorted(n for n, p in model.named_parameters() if p.requires_grad) == trainable
    with torch.no_grad(), use_adapter(model, adapter_name=None):
        disabled = model(ids).logits
    assert torch.equal(disabled, through_copy)
    assert drop_fresh_ref_adapter(model) is False  # nothing left to drop


def test_an_adapter_rlft_did_not_make_fresh_keeps_its_ref_copy(tiny_dir):
    import torch

    from rlft.models import drop_fresh_ref_adapter

    model = _peft_with_ref(tiny_dir)
    with torch.no_grad():
        next(p for n, p in model.named_parameters() if ".lora_B.default." in n).fill_(0.01)
    assert drop_fresh_ref_adapter(model) is False and "ref" in model.peft_config  # a trained lora_B
    model = _peft_with_ref(tiny_dir)
    model._rlft_fresh_adapter = False  # not made by rlft.models.apply_lora
    assert drop_fresh_ref_adapter(model) is False and "ref" in model.peft_config


_GROUP = ["--prompts", DATA / "arith/grpo_prompts.jsonl", "--verifier", "math", "--no-preflight",
          "--set", "data.max_rows=32", "--set", "watch.auto_holdout=false"]
RUNS = {  # the methods rlft drops the copy for (each method's build): their data
    "dpo": ["--pairs", DATA / "arith/pairs_train.jsonl", "--set", "dpo.max_length=32"],
    "kto": ["--feedback", DATA / "arith/thumbs_train.jsonl", "--set", "kto.max_length=32"],
    # beta > 0: a reference at all (and TRL's copy); once the seed was set before GRPO's load the KL logged with
    # and without the copy is the same (before, LoRA's A came unseeded and the two runs differed)
    "grpo": [*_GROUP, "--num-generations", "4", "--set", "grpo.beta=0.04", "--set", "grpo.max_completion_length=8"],
    "rloo": [*_GROUP, "--num-generations", "4", "--set", "rloo.beta=0.04", "--set", "rloo.max_completion_length=8"],
}


@pytest.mark.parametrize("method", list(RUNS))
def test_lora_runs_train_exactly_as_with_the_ref_copy(cli, tmp_path, monkeypatch, sft_model, method):
    import rlft.models

    start = sft_model
    args = [method, *RUNS[method], "--model", start, "--lora", "--max-steps", "3", "--batch-size", "8",
            "--set", "train.logging_steps=1", "--set", "model.lora.dropout=0.0"]

    def logged(out: Path) -> list[dict]:
        rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if k in ("loss", "kl", "reward") or k.startswith(("rewards/", "logps/"))}
                for r in rows if "loss" in r]

    dropped = []
    real = rlft.models.drop_fresh_ref_adapter
    monkeypatch.setattr(rlft.models, "drop_fresh_ref_adapter", lambda m: dropped.append(real(m)) or dropped[-1])
    r = cli(*args, "-o", tmp_path / "lean")
    assert r.code == 0, r.text
    monkeypatch.setattr(rlft.models, "drop_fresh_ref_adapter", lambda m: False)  # TRL's ref copy kept
    assert cli(*args, "-o", tmp_path / "copy").code == 0
    assert dropped == [True]
    lean, copy = logged(tmp_path / "lean"), logged(tmp_path / "copy")
    assert len(lean) == 3 and lean[0]["loss"] == pytest.approx(copy[0]["loss"], abs=1e-6)
    for a, b in zip(lean, copy):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-6), k
