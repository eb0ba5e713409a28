"""A damaged merged-parent cache (chained LoRA) is detected from the sizes merged_from.json records and rebuilt,
instead of a safetensors header error that names neither the cache nor its fix."""

from __future__ import annotations

import json


def test_a_truncated_merged_parent_is_rebuilt(tmp_path, tiny_dir, capsys):
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
    assert weights.stat().st_size == files[weights.name]
    good = weights.read_bytes()
    weights.write_bytes(good[: len(good) // 2])  # truncated, as a full disk or a killed copy leaves it
    again = merged_parent(str(adapter), str(tiny_dir))
    assert again == out and weights.read_bytes() == good
    assert "damaged" in capsys.readouterr().err
    AutoModelForCausalLM.from_pretrained(again)  # loads
