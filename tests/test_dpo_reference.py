"""DPO's reference on the built trainer (no training, seconds): a distinct frozen copy of the starting model
on a full model, the policy with its adapter disabled under LoRA, and never one TRL reloads by itself.

The ln 2 first-loss check (tests/test_train.py) holds for any reference equal to the start, so it catches
neither `ref_model=None` on a full model (TRL then reloads `config._name_or_path`, wrong for a model built in
memory or moved) nor a second full copy loaded under LoRA; these assertions do."""

from __future__ import annotations

from helpers import DATA

from rlft.config import resolve
from rlft.data import read_rows


def no_reload_by_trl(monkeypatch):
    """TRL loading a model from a path inside DPOTrainer means rlft left ref_model=None on a full model."""
    import trl.trainer.dpo_trainer as dpo_trainer

    def refuse(path, **_):
        raise AssertionError(f"DPOTrainer loaded a reference itself from {path!r}")

    monkeypatch.setattr(dpo_trainer, "create_model_from_path", refuse)


def build_dpo(tmp_path, *sets: str):
    from rich.console import Console

    from rlft.methods.dpo import build, prepare

    rows = read_rows(str(DATA / "arith/pairs_train.jsonl"))[:8]
    cfg = resolve("dpo", None, {}, [f"train.output_dir={tmp_path}", "dpo.max_length=32", "model.dtype=float32",
                                    "model.lora.dropout=0.0", *sets], check_trl=False)
    return build(cfg, tmp_path, prepare(cfg, rows, [], Console(quiet=True)))


def test_full_model_reference_is_a_distinct_frozen_copy_of_the_start(tmp_path, tiny_dir, monkeypatch):
    import torch

    no_reload_by_trl(monkeypatch)
    trainer = build_dpo(tmp_path)
    policy, ref = trainer.model, trainer.ref_model
    assert ref is not None and ref is not policy
    storage = {p.data_ptr() for p in policy.parameters()}
    assert not any(p.data_ptr() in storage for p in ref.parameters())  # its own weights, not the policy's
    assert not any(p.requires_grad for p in ref.parameters()) and not ref.training
    assert all(p.requires_grad for p in policy.parameters())
    ref_state = ref.state_dict()
    assert all(torch.equal(v, ref_state[k]) for k, v in policy.state_dict().items())  # == the starting model
    with torch.no_grad():  # and stays put when the policy moves
        next(policy.parameters()).add_(1.0)
    assert not torch.equal(next(policy.parameters()), next(ref.parameters()))


def test_lora_reference_is_the_adapter_disabled_policy_not_a_second_copy(tmp_path, tiny_dir, monkeypatch):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    no_reload_by_trl(monkeypatch)
    trainer = build_dpo(tmp_path, "model.lora.enabled=true", "model.lora.r=4")
    assert trainer.ref_model is None  # TRL then disables the adapter for the reference pass
    policy = trainer.model
    assert isinstance(policy, PeftModel)
    start = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    n_base = sum(p.numel() for p in start.parameters())
    assert n_base < sum(p.numel() for p in policy.parameters()) < 1.2 * n_base  # one base model in memory
    # the reference TRL computes (adapter disabled) is the starting model, even once the adapter has moved
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    ids = torch.tensor([[5, 20, 30, 40, 50, 60]])
    with torch.no_grad():
        base_logits = start(input_ids=ids).logits
        with policy.disable_adapter():
            ref_logits = policy(input_ids=ids).logits
        policy_logits = policy(input_ids=ids).logits
    assert torch.allclose(ref_logits, base_logits, atol=1e-5)
    assert not torch.allclose(policy_logits, base_logits, atol=1e-3)

