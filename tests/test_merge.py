"""`rlft merge`: a LoRA run folded into its base gives the adapter's logits from a plain model folder."""

from __future__ import annotations

import json

import pytest
from helpers import write_jsonl


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    from rlft.cli import main

    tmp = tmp_path_factory.mktemp("merge")
    chats = [{"messages": [{"role": "user", "content": f"{a}+{a}="}, {"role": "assistant", "content": str(2 * a)}]}
             for a in range(10, 30)]
    data = write_jsonl(tmp / "chats.jsonl", chats)
    out = tmp / "lora"
    try:  # a few steps at a high rate, so the adapter moves the logits well past the 1e-3 tolerance
        main(["sft", "--data", str(data), "-o", str(out), "--max-steps", "3", "--lora", "--lr", "1e-2",
              "--batch-size", "4", "--set", "sft.max_length=64"])
    except SystemExit as exc:
        assert exc.code == 0, f"LoRA SFT failed with exit code {exc.code}"
    return out


def _logits(model, ids):
    import torch

    with torch.no_grad():
        return model(input_ids=ids).logits


def test_merged_model_matches_the_adapter(cli, lora_run, tmp_path, tiny_dir):
    import torch
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "merged"
    r = cli("merge", lora_run, "-o", out)
    assert r.code == 0, r.text
    assert not (out / "adapter_config.json").exists() and (out / "model.safetensors").exists()
    ids = torch.randint(4, 99, (2, 24))
    merged = _logits(AutoModelForCausalLM.from_pretrained(out), ids)
    adapter = _logits(AutoPeftModelForCausalLM.from_pretrained(lora_run), ids)
    base = _logits(AutoModelForCausalLM.from_pretrained(tiny_dir), ids)
    assert (adapter - base).abs().max() > 1e-2  # the adapter changed something...
    assert (merged - adapter).abs().max() < 1e-3  # ...and the merged folder carries it
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.chat_template and "{% generation %}" in tok.chat_template
    assert json.loads((out / "merged_from.json").read_text())["dtype"] == "float32"
    half = tmp_path / "merged-bf16"
    assert cli("merge", lora_run, "-o", half, "--dtype", "bfloat16").code == 0
    assert AutoModelForCausalLM.from_pretrained(half).dtype == torch.bfloat16
    # A busy output folder is refused without --overwrite, and the folder is left as it was.
    before = (out / "model.safetensors").stat().st_mtime_ns
    r = cli("merge", lora_run, "-o", out)
    assert r.code == 2 and "is not empty" in r.err
    assert (out / "model.safetensors").stat().st_mtime_ns == before


def test_run_without_adapter_is_a_one_line_error(cli, tmp_path, tiny_dir):
    out = tmp_path / "m"
    r = cli("merge", tiny_dir, "-o", out)
    assert r.code == 2 and "has no LoRA adapter to merge" in r.err and "full fine-tune" in r.err
    assert len(r.err.strip().splitlines()) == 2 and not out.exists()  # error + fix lines
    r = cli("merge", tmp_path, "-o", out, "--dtype", "int8")
    assert r.code == 2 and "--dtype int8" in r.err
