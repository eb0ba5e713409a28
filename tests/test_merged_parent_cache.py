"""A damaged merged-parent cache (chained LoRA) is detected from the sizes and SHA-256 merged_from.json records and
rebuilt,
instead of a safetensors header error that names neither the cache nor its fix."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("damage", ["truncated", "same_size_corrupted"])
def test_a_damaged_merged_parent_is_rebuilt(tmp_path, tiny_dir, capsys, damage):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rlft.models import load_tokenizer, merged_parent

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_dir),
                           LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False))
    adapter = tmp_path / "adapter"
    model.save_pretrained(adapter)
    load_tokenizer(str(tiny_dir)).save_pretrained(adapter)
    out = merged_parent(str(adapter), str(tiny_dir))
    files = json.loads((out / "merged_from.json").read_text())["files"]
    weights = out / next(iter(files))
    assert weights.stat().st_size == files[weights.name]["size"]
    good = weights.read_bytes()
    if damage == "truncated":  # as a full disk or a killed copy leaves it
        weights.write_bytes(good[: len(good) // 2])
    else:  # bit rot or an overwrite: the size is right, the bytes are not (past the header: it still parses)
        bad = bytearray(good)
        bad[-64:] = bytes(64)
        weights.write_bytes(bytes(bad))
    again = merged_parent(str(adapter), str(tiny_dir))
    assert again == out and weights.read_bytes() == good
    assert "damaged" in capsys.readouterr().err
    AutoModelForCausalLM.from_pretrained(again)  # loads


def test_a_causal_lm_adapter_merges_into_a_score_head_body(tmp_path, tiny_dir):
    """A reward model started from a LoRA SFT run: the SFT adapter (task_type CAUSAL_LM) is merged into a
    sequence-classification body (transformers 5 gave PeftModelForCausalLM an AttributeError there); the body's
    weights are the merged causal LM's."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from rlft.models import load_tokenizer, merged_parent

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_dir),
                           LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False,
                                      task_type="CAUSAL_LM"))
    adapter = tmp_path / "adapter"
    model.save_pretrained(adapter)
    load_tokenizer(str(tiny_dir)).save_pretrained(adapter)
    lm_body = model.merge_and_unload().base_model.state_dict()
    scored = AutoModelForSequenceClassification.from_pretrained(merged_parent(str(adapter), str(tiny_dir), "score"),
                                                                num_labels=1)
    body = scored.base_model.state_dict()
    assert body.keys() == lm_body.keys()
    assert all(torch.equal(body[k], lm_body[k]) for k in body)
    assert not torch.equal(body["layers.0.self_attn.q_proj.weight"],
                           AutoModelForCausalLM.from_pretrained(tiny_dir).base_model.state_dict()[
                               "layers.0.self_attn.q_proj.weight"])  # the adapter is in it
